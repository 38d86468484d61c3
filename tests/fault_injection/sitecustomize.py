"""Faults a test injects into the processes it starts, by putting this folder on their
PYTHONPATH: every interpreter imports ``sitecustomize`` as it starts.

``JIYU_TEST_HANG_RANK=K``: the K-th rank a local pool's fork server forks (counted from 0) hangs
before it runs anything, as a rank stuck before it joins its process group (as one forked beside
a thread once hung in a lock it inherited held). Only children of the fork server: the kernel and
the supervisor fork as they always do.
"""

import os
import time

FORK_SERVER_NAME = "jiyu-pool-forks"  # jiyu_magics.ranks.fork_server's process name
HANG_RANK = os.environ.get("JIYU_TEST_HANG_RANK")


def _is_fork_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() == FORK_SERVER_NAME
    except OSError:
        return False


if HANG_RANK is not None:
    forked = [0]  # in the fork server: ranks forked so far (a child sees the count before it)

    def _count() -> None:
        if _is_fork_server(os.getpid()):
            forked[0] += 1

    def _hang_the_chosen_rank() -> None:
        if forked[0] == int(HANG_RANK) and _is_fork_server(os.getppid()):
            while True:
                time.sleep(3600)

    os.register_at_fork(after_in_parent=_count, after_in_child=_hang_the_chosen_rank)
