#!/usr/bin/env python3
"""A background-leader replica written to the spec, in Python with psycopg 3: replica contract
level 2 (a process, its lock row, /metrics with the gauge, /readyz, and a row in leader_work
for each pass of its leader-only work).

It follows ../shared/spec/background-leader.md as the Rust elector does, without the Rust
crate's opt-in features:

- a standby tries pg_try_advisory_lock(1886156915, 1) every T on a pooled connection and gives
  the connection back unchanged when refused; a grant takes the connection out of the pool;
- idle_session_timeout = 4T is set on the lock session as soon as the lock is granted (in the
  granting statement);
- beyond the spec, as the Rust elector does by default: a check answered by another server
  session than the lock's, or a grant on a session that already carries the lock (both behind a
  transaction-mode pooler), is refused as shared;
- the leader runs SELECT 1 on the lock session every T; an error, or no answer within T,
  demotes it: the term ends (gauge 0), the connection is closed, a WARN line says why;
- a lease: a leader whose last answered check was sent more than 4T ago (the server may have
  ended its session) stops leading before anything else, as after a freeze;
- SIGTERM unlocks under a 2 s deadline, closes the connection, ends the term and exits 0;
- leader-only work: every T, while it leads, one pass inserts a row into leader_work (the
  contract's level 2) on a pooled connection, under a deadline of T; a pass begins only while
  the replica leads, lease included, and the rows are written in the term's name.

Run it as the harness does: REPLICA_NAME, REPLICA_HTTP, REPLICA_CHECK_INTERVAL_MS and
PLEXSPHERE_DSN in the environment. `--objid N` takes the lock on (1886156915, N) instead of the
spec's (1886156915, 1): a build that disagrees with the others on the key, the rolling-upgrade
incident the harness must catch (both builds lead at once).

`--flaw NAME` breaks one clause on purpose, the way a team's own elector might: the harness's
gallery (scenarios/tests/gallery.rs, docs/gallery.md) runs each and asserts that the harness
fails it by those clauses and no other. `--flaw help` lists them (`--flaw json` as data).
"""

import argparse

import asyncio
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import psycopg  # noqa: E402
from prometheus_client import Gauge  # noqa: E402

# One deliberate violation each (`--flaw NAME`): the clauses it breaks, the scenarios that decide
# them, and what it does. The harness's gallery (scenarios/tests/gallery.rs, which checks this
# table against its own) asserts that each fails exactly those clauses on those scenarios.
FLAWS = {
    "fresh-backend": ("RUN-2", "steady-election", "a standby opens a new connection for each "
                      "check and closes it when refused"),
    "set-before-outcome": ("RUN-2", "steady-election", "a standby sets idle_session_timeout on "
                           "its pooled connection before it knows whether the lock is granted"),
    "lock-on-pool": ("RUN-3, SESS-1", "steady-election", "the lock's connection goes back to the "
                     "pool, so the leader-only work runs on the lock session"),
    "moving-lock": ("SESS-2", "steady-election", "every fourth check the leader moves the lock to "
                    "another session: unlock on one, lock on the other"),
    "timeout-4.1T": ("ORPH-1", "steady-election", "idle_session_timeout of 4.1T on the lock "
                     "session"),
    "no-timeout": ("ORPH-1, ORPH-2", "steady-election, frozen-leader", "no idle_session_timeout "
                   "on the lock session"),
    "slow-poll": ("RUN-1", "steady-election", "a standby checks every 1.2T"),
    "fast-poll": ("RUN-1", "steady-election", "a standby checks every T/20"),
    "queue": ("RUN-1", "steady-election", "a standby queues in pg_advisory_lock instead of "
              "trying every T"),
    "keep-open": ("DEM-1", "leader-partition, leader-partition-answers", "a demoted leader keeps "
                  "its lock connection open"),
    "bigint-key": ("ISL-1, LOCK-1, LOCK-3, RUN-3", "steady-election", "the lock taken in the "
                   "single-bigint form ((1886156915 << 32) | 1)"),
    "xact-lock": ("LOCK-1, ORPH-1", "steady-election", "a transaction-scoped lock held in an open "
                  "transaction, bounded by idle_in_transaction_session_timeout"),
    "half-deadline": ("RUN-5", "slow-leader", "the leader's check gives up after T/2 instead of "
                      "T"),
    "late-deadline": ("RUN-5", "late-answers", "the leader's check gives up after 1.5T instead "
                      "of T"),
    "no-deadline": ("DEM-1, DEM-2", "leader-partition", "the leader's check waits for its answer "
                    "however long it takes"),
    "gauge-zero": ("ISL-1, LOOP-1, MET-1", "steady-election", "the gauge is never set to 1"),
    "late-work": ("LOOP-1", "backend-kill", "the leader-only work goes on for 3T after a "
                  "demotion"),
    "shared-lock": ("DEM-3, ISL-1, LOCK-1, LOCK-3, MET-1", "steady-election", "the key taken in the "
                    "shared form (pg_try_advisory_lock_shared), which every replica is granted"),
    "no-exit": ("RUN-6", "graceful-handover", "on SIGTERM the leader unlocks and closes, then "
                "never exits"),
    "quiet-acquire": ("RUN-4", "server-restart", "a failed acquire is logged at INFO, not WARN"),
    "quiet-demotion": ("DEM-1", "backend-kill", "a demotion is logged at INFO, not WARN"),
    "pool-forever": ("SESS-1", "pool-lifetime", "ignores REPLICA_POOL_MAX_LIFETIME_MS: its pool "
                     "never retires a connection"),
    "zero-interval": ("CFG-2", "default-interval", "told a CheckInterval of 0, it checks every "
                      "second instead of the page's default of 5 s"),
    "silent-acquire": ("CFG-3", "backend-kill", "an acquisition writes no line"),
    "blind-verify": ("ISL-1, X-VERIFY", "stray-unlock", "with REPLICA_VERIFY_LOCK=1, the "
                     "leader's check still asks only for an answer, not whether its session "
                     "holds the lock"),
    "fence-counter": ("X-FENCE", "fenced-write", "with REPLICA_FENCE=1, each term's token is the "
                      "replica's own count of its terms, not drawn from the fence's sequence"),
    "relock-check": ("RUN-5", "steady-election", "the leader's check takes the lock again "
                     "(pg_try_advisory_lock on its lock session): each check stacks one more "
                     "hold, which the single unlock at shutdown does not release"),
    "relock-wait": ("RUN-5", "steady-election", "the leader's check is pg_advisory_lock on its "
                    "lock session, granted at once to the holder: each check stacks one more "
                    "hold"),
    "forgive-error": ("RUN-5", "backend-kill", "a leader's check that fails with an error is "
                      "given one more chance: it demotes at the second failed check in a row"),
    "forgive-silence": ("DEM-1, DEM-2, RUN-5", "late-answers, leader-partition", "a leader's "
                        "check left unanswered for T is given one more chance: it demotes at "
                        "the second in a row"),
    "unlock-no-deadline": ("ISL-1, RUN-6", "shutdown-partition", "on SIGTERM the leader waits "
                           "for its unlock's answer however long it takes"),
    "unlock-5s": ("ISL-1, RUN-6", "shutdown-partition", "on SIGTERM the leader's unlock has a "
                  "deadline of 5 s instead of 2 s"),
    "exit-on-error": ("RUN-4", "server-restart", "a failed acquire ends the program (Run "
                      "returns its error) instead of retrying at the next check"),
    "labelled-gauge": ("MET-1", "steady-election", "the gauge carries a label, "
                       "plexsphere_background_leader{replica=\"r1\"}: the page's has none"),
    "late-first": ("RUN-1", "default-interval", "the first check comes one interval after the "
                   "start (a ticker that fires first after T)"),
    "warm-up": ("RUN-1", "default-interval", "it waits 1.5 intervals after the start, for its "
                "pool to warm up, before its first check"),
    "gauge-late": ("DEM-1, DEM-2", "leader-partition", "on a failed check the leader closes its "
                   "lock connection first and ends its term (the gauge to 0) one interval "
                   "later"),
    "warn-first": ("DEM-1, DEM-2", "leader-partition", "on a failed check the leader logs its "
                   "WARN line first, then ends its term and closes one interval later"),
}


# The spec's lock in one statement that also, on a grant, marks the session as the lock's and
# sets the orphan bound (idle_session_timeout = 4T) before anything else can run on it; it
# refuses a session that already carries the mark (a transaction-mode pooler lent this standby
# the leader's server session, where a second grant would stack), unless the guard is off
# (REPLICA_SHARED_SESSION_GUARD=0: the page's plain attempt). With the server session's pid
# (behind PgBouncer the client-side pid is the pooler's). A flaw may change the call
# (`pg_advisory_lock`, a bigint key, the transaction-scoped form) or the bound (none).
def try_lock(objid, flaw=None, guard=True):
    call = {
        "queue": f"pg_advisory_lock(1886156915, {objid:d}) IS NOT NULL",
        "bigint-key": f"pg_try_advisory_lock((1886156915::bigint << 32) | {objid:d})",
        "xact-lock": f"pg_try_advisory_xact_lock(1886156915, {objid:d})",
        "shared-lock": f"pg_try_advisory_lock_shared(1886156915, {objid:d})",
    }.get(flaw, f"pg_try_advisory_lock(1886156915, {objid:d})")
    setting = {
        "no-timeout": "%s::text",
        "xact-lock": "set_config('idle_in_transaction_session_timeout', %s, false)",
    }.get(flaw, "set_config('idle_session_timeout', %s, false)")
    shared = ("WHEN current_setting('plexsphere.background_leader', true) = 'held' "
              "THEN 'shared'" if guard else "")
    return f"""SELECT (CASE {shared}
  WHEN {call} THEN CASE
    WHEN set_config('plexsphere.background_leader', 'held', false) IS NULL THEN NULL
    WHEN {setting} IS NOT NULL THEN 'granted' END
  ELSE 'refused' END)::text, pg_backend_pid()"""


# X-FENCE (REPLICA_FENCE=1): the attempt with a third column, the term's token, drawn from the
# sequence the harness creates ahead, on a grant only, in the same statement (so the token is the
# lock session's, and a grant whose answer is lost still uses one up). The flaw fence-counter
# draws none: it counts its own terms.
FENCE_SEQUENCE = "public.plexsphere_background_leader_fence"


def fenced(attempt, flaw=None):
    if flaw == "fence-counter":
        return attempt
    return f"""SELECT a.answer, a.pid, CASE WHEN a.answer = 'granted'
  THEN nextval('{FENCE_SEQUENCE}') END
  FROM ({attempt} OFFSET 0) AS a(answer, pid)"""


def unlock(objid, flaw=None):
    call = {
        "bigint-key": f"pg_advisory_unlock((1886156915::bigint << 32) | {objid:d})",
        "shared-lock": f"pg_advisory_unlock_shared(1886156915, {objid:d})",
    }.get(flaw, f"pg_advisory_unlock(1886156915, {objid:d})")
    return f"""SELECT {call}
  FROM set_config('plexsphere.background_leader', '', false)"""



# One pass of leader-only work, made visible (the contract's level 2).
WORK = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', %s, %s)"

# X-FENCE: the pass as twins in one statement, the plain row and one carrying the term's token,
# which lands only while that token is the sequence's newest (a pass held in transit until a
# newer term began lands as its plain row alone).
WORK_FENCED = f"""INSERT INTO leader_work (loop_name, replica, term, fence)
  SELECT 'sweep', %s, %s, twin.fence FROM (VALUES (NULL::bigint), (%s::bigint)) AS twin(fence)
  WHERE twin.fence IS NULL OR twin.fence = (SELECT last_value FROM {FENCE_SEQUENCE})"""

POOL_SIZE = 4


class Pool:
    """A small connection pool: idle connections are lent and given back; a connection that
    holds the lock is taken out of it for good (the spec's hijack)."""

    def __init__(self, settings):
        self.settings, self.idle = settings, []
        self.born = {}  # id(conn) -> when it was opened, for the max lifetime

    async def get(self):
        while self.idle:
            conn = self.idle.pop()
            if not self.expired(conn):
                return conn
            self.retire(conn)
        return await self.connect()

    def expired(self, conn):
        lifetime = self.settings.pool_max_lifetime
        return lifetime is not None and time.monotonic() - self.born.get(id(conn), 0) > lifetime

    def retire(self, conn):
        self.born.pop(id(conn), None)
        close(conn)

    async def connect(self):
        """A new connection, outside the pool until it is given back."""
        conn = await psycopg.AsyncConnection.connect(
            self.settings.dsn,
            application_name=self.settings.name,
            autocommit=True,
            prepare_threshold=None,
            client_encoding="utf8",  # text as str even where the database is SQL_ASCII
            connect_timeout=max(1, int(self.settings.t)),
        )
        self.born[id(conn)] = time.monotonic()
        return conn

    def put(self, conn):
        if len(self.idle) < POOL_SIZE and not conn.closed and not self.expired(conn):
            self.idle.append(conn)
        else:
            self.retire(conn)

    def close(self):
        for conn in self.idle:
            close(conn)
        self.idle = []


def close(conn):
    """Closes a connection at once, without a word to a peer that may never answer (a query
    still waiting on it fails)."""
    conn.pgconn.finish()


async def bounded(query, seconds):
    """The result of `query`, or TimeoutError after `seconds`. The query is not cancelled: a
    cancelled psycopg query sends the server a cancel request, which waits on the same dead
    network; the caller closes the connection instead, which ends the query."""
    task = asyncio.ensure_future(query)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise asyncio.TimeoutError
    return task.result()


class Elector:
    def __init__(self, settings, gauge, log, objid=1, flaw=None):
        self.settings, self.log, self.flaw = settings, log, flaw
        self.try_lock = try_lock(objid, flaw, settings.guard)
        if settings.fence:
            self.try_lock = fenced(self.try_lock, flaw)
        self.token = None
        self.unlock = unlock(objid, flaw)
        # X-VERIFY (REPLICA_VERIFY_LOCK=1): the check asks pg_locks whether this session still
        # holds the key (the two-int4 form shows as classid, objid and objsubid 2); flaw
        # blind-verify declares it and asks nothing.
        self.check_sql = {
            "relock-check": f"SELECT pg_backend_pid(), pg_try_advisory_lock(1886156915, {objid:d})",
            "relock-wait": f"SELECT pg_backend_pid(), pg_advisory_lock(1886156915, {objid:d}) "
                           "IS NOT NULL",
        }.get(flaw, "SELECT pg_backend_pid(), true")
        self.forgiven = False  # flaws forgive-error and forgive-silence: one failure let pass
        self.cleaning_up = False  # flaws gauge-late and warn-first: a demotion under way
        if settings.verify and flaw != "blind-verify":
            self.check_sql = ("SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM pg_locks WHERE "
                              "locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND "
                              f"classid = 1886156915 AND objid = {objid:d} AND objsubid = 2)")
        self.checks = 0
        self.kept = []  # flaw keep-open: demoted lock connections never closed
        self.pool = Pool(settings)
        self.lock_conn = None
        self.term = 0
        self.lock_pid = None
        self.last_answered_sent = 0.0
        self.demoted_at = None  # flaw late-work: when the last term ended
        # The gauge reads the same answer as every other caller, lease included, so a replica
        # that wakes from a freeze never shows 1 for a term that has run out.
        if flaw == "gauge-zero":
            gauge.set_function(lambda: 0)
        else:
            gauge.set_function(lambda: 1 if self.leads() else 0)

    @property
    def t(self):
        return self.settings.t

    def period(self):
        """How long to wait between checks: T (a flaw may poll otherwise as a standby)."""
        if self.lock_conn is None and self.flaw == "slow-poll":
            return 1.2 * self.t
        if self.lock_conn is None and self.flaw == "fast-poll":
            return self.t / 20
        return self.t

    def leads(self):
        """Whether this replica leads: it holds a lock session whose last answered check was
        sent less than 4T ago (the server may have ended an older one)."""
        return (self.lock_conn is not None
                and time.monotonic() - self.last_answered_sent <= 4 * self.t)

    async def check(self):
        if self.lock_conn is None:
            await self.standby_check()
        elif time.monotonic() - self.last_answered_sent > 4 * self.t:
            await self.demote("lease ran out: no check answered for 4 check intervals")
        else:
            await self.leader_check()

    def bound(self):
        """The orphaned-session bound: 4T (a flaw may say otherwise)."""
        intervals = 4.1 if self.flaw == "timeout-4.1T" else 4
        return f"{int(intervals * self.t * 1000)}ms"

    async def standby_check(self):
        conn = None
        try:
            if self.flaw == "fresh-backend":
                conn = await asyncio.wait_for(self.pool.connect(), self.t)
            else:
                conn = await asyncio.wait_for(self.pool.get(), self.t)
            if self.flaw == "set-before-outcome":
                await bounded(conn.execute(f"SET idle_session_timeout = '{self.bound()}'"), self.t)
            if self.flaw == "xact-lock":
                await bounded(conn.execute("BEGIN"), self.t)
            sent = time.monotonic()
            # A queue waits until the holder lets go (given up and queued again every 5T, so
            # that a SIGTERM is heard).
            deadline = 5 * self.t if self.flaw == "queue" else self.t
            cur = await bounded(conn.execute(self.try_lock, [self.bound()]), deadline)
            outcome, pid, *token = await cur.fetchone()
        except Exception as e:  # noqa: BLE001 (every failure is logged and retried)
            level = logging.INFO if self.flaw == "quiet-acquire" else logging.WARNING
            self.log.log(level, "leader: acquire lock connection: %s", e or type(e).__name__)
            if conn is not None:
                close(conn)
            if self.flaw == "exit-on-error":
                raise SystemExit(1)
            return
        if outcome == "shared":
            self.log.warning("leader: the lock session is shared with another client (a "
                             "transaction-mode pooler?): refusing to lead on it")
        if outcome != "granted":
            if self.flaw == "xact-lock":
                await bounded(conn.execute("ROLLBACK"), self.t)
            if self.flaw == "fresh-backend":
                close(conn)
            else:
                self.pool.put(conn)
            return
        # Granted: the connection leaves the pool for good.
        self.lock_conn, self.last_answered_sent = conn, sent
        self.lock_pid = pid
        self.term += 1
        self.token = token[0] if token else self.term
        if self.flaw != "silent-acquire":
            self.log.info("background leader lock acquired term=%d backend_pid=%d", self.term,
                          pid)
        if self.flaw == "lock-on-pool":
            self.pool.put(conn)

    async def move_lock(self):
        """Flaw moving-lock: the lock moves to another session, the gauge staying at 1."""
        new = await asyncio.wait_for(self.pool.connect(), self.t)
        await bounded(self.lock_conn.execute(self.unlock), self.t)
        cur = await bounded(new.execute(self.try_lock, [self.bound()]), self.t)
        outcome, pid, *_ = await cur.fetchone()
        if outcome != "granted":
            # Another replica took the key between the unlock and this call: the new connection
            # goes to the pool, as a refused check's does (closing it would break RUN-2 too).
            self.pool.put(new)
            await self.demote("the lock moved away")
            return
        old, self.lock_conn, self.lock_pid = self.lock_conn, new, pid
        self.pool.put(old)

    async def leader_check(self):
        # The spec's SELECT 1, answered with the backend's pid: a check that a transaction-mode
        # pooler answered from another server session than the lock's demotes (as the Rust
        # elector's shared-session guard does; the spec only warns against such poolers).
        sent = time.monotonic()
        deadline = {"half-deadline": self.t / 2, "late-deadline": 1.5 * self.t,
                    "no-deadline": None}.get(self.flaw, self.t)
        try:
            query = self.lock_conn.execute(self.check_sql)
            cur = await (query if deadline is None else bounded(query, deadline))
            pid, held = await cur.fetchone()
        except asyncio.TimeoutError:
            if not self.forgive("forgive-silence", "no answer within T"):
                await self.demote(f"no answer to SELECT 1 within {self.t:.3f}s")
            return
        except Exception as e:  # noqa: BLE001
            if not self.forgive("forgive-error", str(e) or type(e).__name__):
                await self.demote(str(e) or type(e).__name__)
            return
        self.forgiven = False
        if pid != self.lock_pid and self.flaw != "lock-on-pool":
            await self.demote(f"the lock session is shared with another client: the check ran on "
                              f"backend {pid}, the lock is on backend {self.lock_pid}")
            return
        if not held:
            await self.demote("the lock session no longer holds the lock")
            return
        self.last_answered_sent = sent
        self.checks += 1
        if self.flaw == "moving-lock" and self.checks % 4 == 0:
            try:
                await self.move_lock()
            except Exception as e:  # noqa: BLE001
                await self.demote(str(e) or type(e).__name__)

    def forgive(self, flaw, why):
        """Flaws forgive-error and forgive-silence: whether this failed check is let pass (the
        first of a row, as a retry would)."""
        if self.flaw != flaw or self.forgiven:
            return False
        self.forgiven = True
        self.log.info("leader check failed (%s); trying once more before giving up", why)
        return True

    def works(self):
        """Whether a pass of leader-only work runs now: while this replica leads (flaw
        late-work: and for 3T after a demotion)."""
        late = (self.flaw == "late-work" and self.demoted_at is not None
                and time.monotonic() - self.demoted_at < 3 * self.t)
        return (self.leads() and not self.cleaning_up) or late

    async def work(self):
        """One pass of leader-only work while this replica leads: a row in leader_work."""
        if not self.works():
            return
        term, conn = self.term, None
        try:
            conn = await asyncio.wait_for(self.pool.get(), self.t)
            # The term may have ended while a connection was opened (a slow link: the pass
            # began before a release or a demotion): a pass is of its term, or of none.
            if not self.works() or self.term != term:
                self.pool.put(conn)
                return
            if self.settings.fence:
                work = conn.execute(WORK_FENCED, [self.settings.name, self.term, self.token])
            else:
                work = conn.execute(WORK, [self.settings.name, self.term])
            await bounded(work, self.t)
        except Exception as e:  # noqa: BLE001 (a pass that fails is logged; the next one runs)
            self.log.warning("leader work: %s", e or type(e).__name__)
            if conn is not None:
                close(conn)
            return
        self.pool.put(conn)

    async def demote(self, cause):
        level = logging.INFO if self.flaw == "quiet-demotion" else logging.WARNING
        if self.flaw == "gauge-late":
            # The connection closes while the term still runs: the gauge reads 1 for one more
            # interval of clean-up (no work is started in it).
            self.cleaning_up = True
            close(self.lock_conn)
            await asyncio.sleep(self.t)
            self.cleaning_up = False
        elif self.flaw == "warn-first":
            # The WARN line first, then one interval of clean-up, then the term and the close.
            self.log.log(level, "background leader lock lost: %s", cause)
            self.cleaning_up = True
            await asyncio.sleep(self.t)
            self.cleaning_up = False
        conn, self.lock_conn = self.lock_conn, None
        self.demoted_at = time.monotonic()
        if self.flaw == "gauge-late":
            pass
        elif self.flaw == "keep-open":
            self.kept.append(conn)
        else:
            close(conn)
        if self.flaw != "warn-first":
            self.log.log(level, "background leader lock lost: %s", cause)

    async def release(self):
        conn, self.lock_conn = self.lock_conn, None
        if conn is not None:
            try:
                deadline = {"unlock-no-deadline": None, "unlock-5s": 5.0}.get(self.flaw, 2.0)
                query = conn.execute(self.unlock)
                await (query if deadline is None else bounded(query, deadline))
                outcome = "released"
            except Exception as e:  # noqa: BLE001
                outcome = f"not unlocked ({e or type(e).__name__}); the close ends the session"
            close(conn)
            self.log.info("background leader lock %s term=%d", outcome, self.term)
        self.pool.close()


def int4(text):
    value = int(text)
    if not -2**31 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{value} is not an int4")
    return value


def flaw(name):
    if name in FLAWS:
        return name
    raise argparse.ArgumentTypeError(f"no flaw {name!r}; known: {', '.join(FLAWS)}")


def args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objid", type=int4, default=1, metavar="N",
                        help="the key's second half (the spec's is 1)")
    parser.add_argument("--flaw", type=str, default=None, metavar="NAME",
                        help="break one clause on purpose (`help` lists them, `json` as data)")
    parsed = parser.parse_args()
    if parsed.flaw == "help":
        for name, (clauses, scenarios, what) in FLAWS.items():
            print(f"{name:20} {clauses:30} {scenarios:32} {what}")
        sys.exit(0)
    if parsed.flaw == "json":
        # The table as data, for the gallery's test and ci/gallery-rate.py.
        print(json.dumps({name: {"breaks": clauses.split(", "), "scenarios": scenarios.split(", "),
                                 "what": what}
                          for name, (clauses, scenarios, what) in FLAWS.items()}))
        sys.exit(0)
    if parsed.flaw is not None:
        try:
            flaw(parsed.flaw)
        except argparse.ArgumentTypeError as e:
            parser.error(str(e))
    return parsed


async def paced(period, stop, step):
    """Runs `step`, then waits `period()`, until `stop` is set (a flaw's own pace)."""
    while not stop.is_set():
        await step()
        try:
            await asyncio.wait_for(stop.wait(), period())
        except asyncio.TimeoutError:
            pass


async def main(objid, flaw_name):
    replica = common.Replica()
    if flaw_name == "labelled-gauge":
        replica.registry.unregister(replica.gauge)
        labelled = Gauge(common.GAUGE, "1 while this replica leads, 0 otherwise", ["replica"],
                         registry=replica.registry)
        replica.gauge = labelled.labels(replica=replica.settings.name)
    if flaw_name == "pool-forever":
        replica.settings.pool_max_lifetime = None
    if flaw_name == "zero-interval" and os.environ.get("REPLICA_CHECK_INTERVAL_MS") == "0":
        replica.settings.t = 1.0
    if replica.settings.dsn is None:
        await replica.without_database()
    else:
        elector = Elector(replica.settings, replica.gauge, replica.log, objid, flaw_name)
        # The leader-only work runs beside the checks; on SIGTERM the release does not wait
        # for a pass in flight (the term ends first, so no new pass begins).
        work = asyncio.ensure_future(common.every(replica.settings.t, replica.stop, elector.work))
        late = {"late-first": 1.0, "warm-up": 1.5}.get(flaw_name)
        if late is not None:
            try:
                await asyncio.wait_for(replica.stop.wait(), late * replica.settings.t)
            except asyncio.TimeoutError:
                pass
        if flaw_name in ("slow-poll", "fast-poll"):
            await paced(elector.period, replica.stop, elector.check)
        else:
            await common.every(replica.settings.t, replica.stop, elector.check)
        await elector.release()
        await work
        elector.pool.close()
        if flaw_name == "no-exit":
            replica.log.info("released; staying up")
            await asyncio.Event().wait()
    replica.server.shutdown()
    replica.log.info("shut down")


if __name__ == "__main__":
    parsed = args()
    asyncio.run(main(parsed.objid, parsed.flaw))
