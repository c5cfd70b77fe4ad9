#!/usr/bin/env python3
"""A deliberately naive background-leader replica: the mistakes users of PostgreSQL-lock
electors make, each one on purpose, so the harness shows that it catches them by name.
Replica contract level 1. Do not copy it: ../python/replica.py is written to the spec.

The mistakes:

1. The lock is taken on a pooled connection, which goes back to the pool: the leader's checks
   run on whichever connection the pool lends, and the pool retires connections after a
   lifetime (10 check intervals here), lock session included. The lock then goes with it while
   the replica, whose SELECT 1 still succeeds on another connection, keeps believing it leads.
2. No idle_session_timeout: a frozen or cut-off leader's session keeps the lock until TCP
   gives up (hours with Linux's defaults), and nobody else can lead.
3. The leader's check has no deadline: a SELECT 1 into a silent partition waits for minutes.
4. The gauge is set to 1 on acquisition and never reset.
5. SIGTERM exits without unlocking: the lock goes only when the process's sockets close.

It still says which replica it is (application_name) and serves /metrics and /readyz.
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

import psycopg  # noqa: E402

LIFETIME_CHECKS = 10


class Pool:
    """Lends its connections round-robin and retires each after its lifetime."""

    def __init__(self, settings, size=2):
        self.settings, self.size = settings, size
        self.conns = []  # (connection, when it was opened)

    async def get(self):
        now = time.monotonic()
        for conn, born in self.conns:
            if now - born > LIFETIME_CHECKS * self.settings.t:
                await conn.close()  # Mistake 1: this may be the lock's session.
        self.conns = [(c, born) for c, born in self.conns if not c.closed]
        if len(self.conns) < self.size:
            conn = await psycopg.AsyncConnection.connect(
                self.settings.dsn, application_name=self.settings.name,
                autocommit=True, prepare_threshold=None, client_encoding="utf8")
            self.conns.append((conn, now))
        lent = self.conns.pop(0)
        self.conns.append(lent)
        return lent[0]


async def main():
    replica = common.Replica()
    settings, log, gauge = replica.settings, replica.log, replica.gauge
    if settings.dsn is None:
        await replica.without_database()
        replica.server.shutdown()
        return
    pool = Pool(settings)
    leading = False

    async def check():
        nonlocal leading
        try:
            conn = await pool.get()
            if leading:
                await conn.execute("SELECT 1")  # Mistake 3: no deadline.
            else:
                cur = await conn.execute("SELECT pg_try_advisory_lock(1886156915, 1)")
                if (await cur.fetchone())[0]:
                    leading = True
                    gauge.set(1)
                    log.info("background leader lock acquired")
                # Mistake 2: no idle_session_timeout on the session that got the lock.
        except Exception as e:  # noqa: BLE001
            if leading:
                leading = False  # Mistake 4: the gauge keeps saying 1.
                log.warning("background leader lock lost: %s", e)
            else:
                log.warning("leader: acquire lock connection: %s", e)

    await common.every(settings.t, replica.stop, check)
    replica.server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
