"""Ranks that survive, counted: trials of every failure a pool is meant to outlive, at several
pool sizes, each followed by a cell whose ``all_reduce`` must be right and whose ranks must still
hold what they held before (one run on this machine: CPU, gloo).

Per size: ``--trials`` errors on a rank while the others wait in ``all_reduce`` or ``barrier``
(the failing rank and the collective change from trial to trial); interrupts (the kernel's SIGINT,
as the stop button sends it) while one rank sleeps and the others wait in a barrier; hangs (one
rank skips an ``all_reduce`` the others make) ended by an interrupt; and a rank killed with
SIGKILL inside a collective, then ``%ranks restart`` with a join hook. Printed: how many trials
kept every rank's state with a right collective after, and the time from the failure's start (or
the interrupt) to the cell's end, median and worst.

    python benchmarks/ranks_survival.py [--ranks 2 4 8] [--trials 20]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETUP = "import os, torch, torch.distributed as dist\nrank = dist.get_rank()\nheld = torch.full((2,), float(rank))"
CHECK = "z = torch.ones(1) * (rank + 1)\ndist.all_reduce(z)\nfine = [bool(z.item() == {total} and held[0] == rank)]"
HOOK = "import os, torch, torch.distributed as dist\nrank = dist.get_rank()\nheld = torch.full((2,), float(rank))"


def cell(ip, code: str):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return ip.run_cell(code)


def line(ip, text: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        ip.run_line_magic("ranks", text)


def survived(ip, n: int) -> bool:
    """Every rank still holds its state, and a fresh all_reduce sums each rank's own value."""
    if not cell(ip, "%%ranks\n" + CHECK.format(total=n * (n + 1) / 2)).success:
        return False
    line(ip, "gather fine --as fine_all")
    return ip.user_ns.get("fine_all") == [True] * n


def interrupt_after(seconds: float) -> list[float]:
    """SIGINT to this process (a kernel's stop button) ``seconds`` from now; when it was sent."""
    sent: list[float] = []

    def fire() -> None:
        time.sleep(seconds)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=fire, daemon=True).start()
    return sent


def errors(ip, n: int, trials: int) -> tuple[int, list[float]]:
    kept, times = 0, []
    for trial in range(trials):
        failing = (trial * 5 + 1) % n
        collective = "dist.barrier()" if trial % 2 else "dist.all_reduce(torch.ones(8))"
        began = time.perf_counter()
        result = cell(ip, f"%%ranks\nif rank == {failing}:\n    raise ValueError('bad batch')\n{collective}")
        times.append(time.perf_counter() - began)
        kept += (not result.success) and survived(ip, n)
    return kept, times


def interrupts(ip, n: int, trials: int, hang: bool) -> tuple[int, list[float]]:
    """The stop button while rank 1 sleeps and the others wait in a barrier, or (``hang``) while
    rank 1 waits in an all_reduce the others never make."""
    body = (
        "if rank == 1:\n    dist.all_reduce(torch.ones(3))"
        if hang
        else "import time\nif rank == 1:\n    time.sleep(120)\ndist.barrier()"
    )
    kept, times = 0, []
    for _ in range(trials):
        sent = interrupt_after(2.0)
        result = cell(ip, f"%%ranks --stall-timeout 600\n{body}")
        times.append(time.perf_counter() - sent[0] if sent else float("nan"))
        kept += (not result.success) and survived(ip, n)
    return kept, times


def deaths(ip, n: int, trials: int) -> tuple[int, list[float], list[float]]:
    """A rank killed with SIGKILL inside all_reduce, then ``%ranks restart`` of it."""
    kept, ends, joins = 0, [], []
    for trial in range(trials):
        victim = (trial * 3 + 1) % n
        began = time.perf_counter()
        died = cell(ip, f"%%ranks\nif rank == {victim}:\n    os.kill(os.getpid(), 9)\ndist.all_reduce(torch.ones(2))")
        ends.append(time.perf_counter() - began)
        began = time.perf_counter()
        line(ip, f"restart {victim}")
        joins.append(time.perf_counter() - began)
        kept += (not died.success) and survived(ip, n)
    return kept, ends, joins


def spread(times: list[float]) -> str:
    return f"median {statistics.median(times):.2f} s, worst {max(times):.2f} s"


def measure(n: int, trials: int) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    if "ranks" not in ip.magics_manager.magics["line"]:
        ip.run_line_magic("load_ext", "jiyu_magics")
    began = time.perf_counter()
    line(ip, f"start {n} --device cpu --name survival{n}")
    print(f"\n{n} ranks (started in {time.perf_counter() - began:.1f} s):", flush=True)
    cell(ip, f"%%ranks\n{SETUP}")
    cell(ip, f"%%ranks --on-join\n{HOOK}")
    kept, times = errors(ip, n, trials)
    print(f"  error on a rank while the others wait in a collective: {kept}/{trials} kept; cell end {spread(times)}")
    few = max(3, trials // 4)
    kept, times = interrupts(ip, n, few, hang=False)
    print(f"  stop button inside a barrier: {kept}/{few} kept; interrupt to cell end {spread(times)}")
    kept, times = interrupts(ip, n, few, hang=True)
    print(f"  stop button on a hang (a rank missing from all_reduce): {kept}/{few} kept; {spread(times)}")
    kept, ends, joins = deaths(ip, n, few)
    print(
        f"  a rank killed (SIGKILL) in all_reduce: {kept}/{few} kept after restart; cell end {spread(ends)}, ", end=""
    )
    print(f"restart {spread(joins)}", flush=True)
    line(ip, "stop")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="jiyu-survival-") as tmp:
        os.environ["JIYU_HOME"] = str(Path(tmp) / "home")
        os.environ["TMPDIR"] = tmp
        for n in args.ranks:
            measure(n, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
