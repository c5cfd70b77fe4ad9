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
"""

import argparse

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import psycopg  # noqa: E402

# The spec's lock in one statement that also, on a grant, marks the session as the lock's and
# sets the orphan bound (idle_session_timeout = 4T) before anything else can run on it; it
# refuses a session that already carries the mark (a transaction-mode pooler lent this standby
# the leader's server session, where a second grant would stack). With the server session's pid
# (behind PgBouncer the client-side pid is the pooler's).
def try_lock(objid):
    return f"""SELECT (CASE
  WHEN current_setting('plexsphere.background_leader', true) = 'held' THEN 'shared'
  WHEN pg_try_advisory_lock(1886156915, {objid:d}) THEN CASE
    WHEN set_config('plexsphere.background_leader', 'held', false) IS NULL THEN NULL
    WHEN set_config('idle_session_timeout', %s, false) IS NOT NULL THEN 'granted' END
  ELSE 'refused' END)::text, pg_backend_pid()"""


def unlock(objid):
    return f"""SELECT pg_advisory_unlock(1886156915, {objid:d})
  FROM set_config('plexsphere.background_leader', '', false)"""



# One pass of leader-only work, made visible (the contract's level 2).
WORK = "INSERT INTO leader_work (loop_name, replica, term) VALUES ('sweep', %s, %s)"

POOL_SIZE = 4


class Pool:
    """A small connection pool: idle connections are lent and given back; a connection that
    holds the lock is taken out of it for good (the spec's hijack)."""

    def __init__(self, settings):
        self.settings, self.idle = settings, []

    async def get(self):
        if self.idle:
            return self.idle.pop()
        return await psycopg.AsyncConnection.connect(
            self.settings.dsn,
            application_name=self.settings.name,
            autocommit=True,
            prepare_threshold=None,
            client_encoding="utf8",  # text as str even where the database is SQL_ASCII
            connect_timeout=max(1, int(self.settings.t)),
        )

    def put(self, conn):
        if len(self.idle) < POOL_SIZE and not conn.closed:
            self.idle.append(conn)
        else:
            close(conn)

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
    def __init__(self, settings, gauge, log, objid=1):
        self.settings, self.log = settings, log
        self.try_lock, self.unlock = try_lock(objid), unlock(objid)
        self.pool = Pool(settings)
        self.lock_conn = None
        self.term = 0
        self.lock_pid = None
        self.last_answered_sent = 0.0
        # The gauge reads the same answer as every other caller, lease included, so a replica
        # that wakes from a freeze never shows 1 for a term that has run out.
        gauge.set_function(lambda: 1 if self.leads() else 0)

    @property
    def t(self):
        return self.settings.t

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

    async def standby_check(self):
        conn = None
        try:
            conn = await asyncio.wait_for(self.pool.get(), self.t)
            sent = time.monotonic()
            bound = f"{int(4 * self.t * 1000)}ms"
            cur = await bounded(conn.execute(self.try_lock, [bound]), self.t)
            outcome, pid = await cur.fetchone()
        except Exception as e:  # noqa: BLE001 (every failure is logged and retried)
            self.log.warning("leader: acquire lock connection: %s", e or type(e).__name__)
            if conn is not None:
                close(conn)
            return
        if outcome == "shared":
            self.log.warning("leader: the lock session is shared with another client (a "
                             "transaction-mode pooler?): refusing to lead on it")
        if outcome != "granted":
            self.pool.put(conn)
            return
        # Granted: the connection leaves the pool for good.
        self.lock_conn, self.last_answered_sent = conn, sent
        self.lock_pid = pid
        self.term += 1
        self.log.info("background leader lock acquired term=%d backend_pid=%d", self.term, pid)

    async def leader_check(self):
        # The spec's SELECT 1, answered with the backend's pid: a check that a transaction-mode
        # pooler answered from another server session than the lock's demotes (as the Rust
        # elector's shared-session guard does; the spec only warns against such poolers).
        sent = time.monotonic()
        try:
            cur = await bounded(self.lock_conn.execute("SELECT pg_backend_pid()"), self.t)
            pid = (await cur.fetchone())[0]
        except asyncio.TimeoutError:
            await self.demote(f"no answer to SELECT 1 within {self.t:.3f}s")
            return
        except Exception as e:  # noqa: BLE001
            await self.demote(str(e) or type(e).__name__)
            return
        if pid != self.lock_pid:
            await self.demote(f"the lock session is shared with another client: the check ran on "
                              f"backend {pid}, the lock is on backend {self.lock_pid}")
            return
        self.last_answered_sent = sent

    async def work(self):
        """One pass of leader-only work while this replica leads: a row in leader_work."""
        if not self.leads():
            return
        conn = None
        try:
            conn = await asyncio.wait_for(self.pool.get(), self.t)
            await bounded(conn.execute(WORK, [self.settings.name, self.term]), self.t)
        except Exception as e:  # noqa: BLE001 (a pass that fails is logged; the next one runs)
            self.log.warning("leader work: %s", e or type(e).__name__)
            if conn is not None:
                close(conn)
            return
        self.pool.put(conn)

    async def demote(self, cause):
        conn, self.lock_conn = self.lock_conn, None
        close(conn)
        self.log.warning("background leader lock lost: %s", cause)

    async def release(self):
        conn, self.lock_conn = self.lock_conn, None
        if conn is not None:
            try:
                await bounded(conn.execute(self.unlock), 2.0)
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


def args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objid", type=int4, default=1, metavar="N",
                        help="the key's second half (the spec's is 1)")
    return parser.parse_args()


async def main(objid):
    replica = common.Replica()
    if replica.settings.dsn is None:
        await replica.without_database()
    else:
        elector = Elector(replica.settings, replica.gauge, replica.log, objid)
        # The leader-only work runs beside the checks; on SIGTERM the release does not wait
        # for a pass in flight (the term ends first, so no new pass begins).
        work = asyncio.ensure_future(common.every(replica.settings.t, replica.stop, elector.work))
        await common.every(replica.settings.t, replica.stop, elector.check)
        await elector.release()
        await work
        elector.pool.close()
    replica.server.shutdown()
    replica.log.info("shut down")


if __name__ == "__main__":
    asyncio.run(main(args().objid))
