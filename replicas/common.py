"""What both example replicas share that is not the election: the contract's environment, the
import path of the project's vendored packages, logging, and the HTTP server (/metrics, /readyz).

Replica contract: docs/replica-contract.md. Nothing here decides who leads.
"""

import asyncio
import json
import logging
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENDORED = os.path.join(_REPO, "target", "ci-tools", "replicas-py")
if os.path.isdir(_VENDORED):
    sys.path.insert(0, _VENDORED)

from prometheus_client import CollectorRegistry, Gauge, generate_latest  # noqa: E402

GAUGE = "plexsphere_background_leader"


class Settings:
    """The contract's environment: PLEXSPHERE_DSN (optional), REPLICA_NAME, REPLICA_HTTP and
    REPLICA_CHECK_INTERVAL_MS, and the contract variables a scenario may set:
    REPLICA_POOL_MAX_LIFETIME_MS (the pool retires a connection older than this),
    REPLICA_SHARED_SESSION_GUARD=0 (POOL-1's guard off, for the pooler's hazard) and
    REPLICA_FENCE=1 (X-FENCE: each term draws a token; leader-only work writes a fenced twin) and
    REPLICA_VERIFY_LOCK=1 (X-VERIFY: the leader's check also asks pg_locks whether its session
    still holds the lock); and REPLICA_LOG_FORMAT (plain, logfmt, json or pino: see logger)."""

    def __init__(self):
        self.dsn = os.environ.get("PLEXSPHERE_DSN") or None
        self.name = os.environ.get("REPLICA_NAME", "replica")
        listen = os.environ.get("REPLICA_HTTP", "127.0.0.1:8080")
        host, _, port = listen.rpartition(":")
        self.listen = (host or "127.0.0.1", int(port))
        ms = int(os.environ.get("REPLICA_CHECK_INTERVAL_MS", "5000"))
        self.t = (ms if ms > 0 else 5000) / 1000.0
        lifetime = int(os.environ.get("REPLICA_POOL_MAX_LIFETIME_MS", "0"))
        self.pool_max_lifetime = lifetime / 1000.0 if lifetime > 0 else None
        self.guard = os.environ.get("REPLICA_SHARED_SESSION_GUARD", "1") != "0"
        self.fence = os.environ.get("REPLICA_FENCE", "0").lower() in ("1", "true", "on", "yes")
        self.verify = os.environ.get("REPLICA_VERIFY_LOCK", "0").lower() in ("1", "true", "on",
                                                                              "yes")


class _Formatter(logging.Formatter):
    """A line in one of the formats services log in (REPLICA_LOG_FORMAT), as the harness must
    read them all (docs/replica-contract.md, log levels): `plain` (the default: `<time> <LEVEL>
    <name>: <message>`, WARNING written WARN as the spec writes it), `logfmt` (as Go's logrus:
    `level=warning`), `json` (as Go's zap: `"level":"warn"`) and `pino` (as Node's pino:
    `"level":40`)."""

    LOGRUS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning",
              logging.ERROR: "error", logging.CRITICAL: "fatal"}
    ZAP = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
           logging.ERROR: "error", logging.CRITICAL: "fatal"}
    PINO = {logging.DEBUG: 20, logging.INFO: 30, logging.WARNING: 40, logging.ERROR: 50,
            logging.CRITICAL: 60}

    def __init__(self, name, style):
        super().__init__()
        self.name, self.style = name, style

    def format(self, record):
        message = f"{self.name}: {record.getMessage()}"
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        when = self.formatTime(record)
        if self.style == "logfmt":
            level = self.LOGRUS.get(record.levelno, "info")
            return f"time={json.dumps(when)} level={level} msg={json.dumps(message)}"
        if self.style == "json":
            return json.dumps({"level": self.ZAP.get(record.levelno, "info"), "ts": record.created,
                               "logger": self.name, "msg": message})
        if self.style == "pino":
            return json.dumps({"level": self.PINO.get(record.levelno, 30),
                               "time": int(record.created * 1000), "name": self.name,
                               "msg": message})
        level = "WARN" if record.levelno == logging.WARNING else record.levelname
        return f"{when} {level} {message}"


LOG_FORMATS = ("plain", "logfmt", "json", "pino")


def logger(name):
    """Lines on stderr in the format REPLICA_LOG_FORMAT names (`plain` by default; see
    _Formatter)."""
    style = os.environ.get("REPLICA_LOG_FORMAT", "plain")
    if style not in LOG_FORMATS:
        sys.exit(f"REPLICA_LOG_FORMAT={style!r}: expected one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(name, style))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    return logging.getLogger(name)


def leader_gauge():
    """A registry of its own with the spec's gauge, at 0; returns both."""
    registry = CollectorRegistry()
    gauge = Gauge(GAUGE, "1 while this replica leads, 0 otherwise", registry=registry)
    gauge.set(0)
    return registry, gauge


async def every(period, stop, step):
    """Runs `step` at once, then every `period` on a fixed schedule (missed beats are skipped,
    not run back to back), until `stop` is set."""
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while not stop.is_set():
        await step()
        next_at += period
        now = loop.time()
        if next_at < now:
            next_at = now + period - (now - next_at) % period
        try:
            await asyncio.wait_for(stop.wait(), next_at - now)
        except asyncio.TimeoutError:
            pass


def serve(settings, registry):
    """Serves /metrics (the registry, Prometheus text) and /readyz (200 once serving) on a
    thread; returns the server."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            if self.path == "/metrics":
                body, kind = generate_latest(registry), "text/plain; version=0.0.4"
            elif self.path == "/readyz":
                body, kind = json.dumps({"ready": True, "checks": []}).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(settings.listen, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Replica:
    """What every example replica starts with: its settings, its log, the gauge on a registry
    of its own served over HTTP, and an event that SIGTERM and SIGINT set (call in the event
    loop)."""

    def __init__(self):
        self.settings = Settings()
        self.log = logger(self.settings.name)
        self.registry, self.gauge = leader_gauge()
        self.server = serve(self.settings, self.registry)
        self.stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)

    async def without_database(self):
        """LOOP-4: no DSN, no elector, no background loop; serves until stopped."""
        self.log.info("no PLEXSPHERE_DSN: no elector, no background loop")
        await self.stop.wait()
