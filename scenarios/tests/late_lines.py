"""Runs a program with its stdout held back: each line it writes goes on 0.1 s after it came.

For `scenarios.rs`'s test of a wait step whose event comes late: SIGTERM and SIGINT go on to the
program, this exits with its status once its stdout closes, and it dies with the harness that
started it (the program, the harness's replica, then dies with it: it is told this is its
parent)."""

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time

HOLD = 0.1


PR_SET_PDEATHSIG = 1


def main():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    env = dict(os.environ, ELECTOR_REPLICA_PARENT=str(os.getpid()))
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, env=env)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda n, _frame: child.send_signal(n))
    lines = queue.Queue()

    def read():
        for line in child.stdout:
            lines.put((time.monotonic() + HOLD, line))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    out = sys.stdout.buffer
    while (item := lines.get()) is not None:
        due, line = item
        time.sleep(max(0.0, due - time.monotonic()))
        out.write(line)
        out.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
