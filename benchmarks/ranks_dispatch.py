"""Ranks that stay, measured side by side in one run on this machine (CPU, gloo): jiyu's pool,
ipyparallel 9 (``%%px`` on engines in a gloo group) and nbdistributed 0.1.0.

Each is driven the way a notebook drives it, from an IPython shell in this process (the kernel's
side of a cell: what a notebook waits for between pressing run and the cell's end). Printed per
peer and size: the start (to every rank ready and in a gloo group), a no-op cell's latency (p50
and p99 of ``--cells``), a 40 MB tensor pushed to every rank and pulled back from one, an error on
rank 1 while the others wait in ``all_reduce`` (time to the cell's end, and whether every rank's
state survived: a variable set before is still there and the next ``all_reduce`` sums right), and
the stop. A peer that does not end the failing cell within ``--give-up`` seconds is recorded so,
and its engines are ended by pid (nbdistributed's own shutdown kills by a broad ``pkill -f``).

    pip install -e '.[bench]'          # ipyparallel, nbdistributed
    python benchmarks/ranks_dispatch.py [--ranks 2 8 16] [--cells 200] [--peers jiyu ipyparallel nbdistributed]
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETUP = "import torch, torch.distributed as dist\nrank = dist.get_rank()\nstate = torch.full((2,), float(rank))"
FAIL_IN_COLLECTIVE = "if rank == 1:\n    raise ValueError('bad batch')\ndist.all_reduce(torch.ones(4))"
CHECK = "z = torch.ones(1) * (rank + 1)\ndist.all_reduce(z)\nok = bool(z.item() == {total} and state[0] == rank)"
PAYLOAD_MB = 40


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


def quiet(call: Callable[[], object]) -> tuple[float, object]:
    """``call``'s wall time and result, its printing swallowed."""
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        result = call()
    return time.perf_counter() - began, result


def shell():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


# -- jiyu ------------------------------------------------------------------------------------------
def measure_jiyu(n: int, cells: int, give_up: float) -> dict[str, str]:
    import torch

    ip = shell()
    ip.run_line_magic("load_ext", "jiyu_magics")
    out: dict[str, str] = {}
    took, _ = quiet(lambda: ip.run_line_magic("ranks", f"start {n} --device cpu --name bench{n}"))
    out["start"] = f"{took:.2f} s"
    quiet(lambda: ip.run_cell(f"%%ranks\n{SETUP}"))
    noop = [quiet(lambda: ip.run_cell("%%ranks\npass"))[0] for _ in range(cells)]
    out["no-op cell"] = percentiles(noop)
    ip.user_ns["payload"] = torch.ones(PAYLOAD_MB * 2**18)
    pushes = [quiet(lambda: ip.run_line_magic("ranks", "push payload"))[0] for _ in range(5)]
    out[f"push {PAYLOAD_MB} MB to every rank"] = f"{statistics.median(pushes):.3f} s (median of 5)"
    pulls = [quiet(lambda: ip.run_line_magic("ranks", "pull payload --from 1 --as back"))[0] for _ in range(5)]
    out[f"pull {PAYLOAD_MB} MB from rank 1"] = f"{statistics.median(pulls):.3f} s (median of 5)"
    took, result = quiet(lambda: ip.run_cell(f"%%ranks\n{FAIL_IN_COLLECTIVE}"))
    assert not result.success, "the cell was meant to fail"
    quiet(lambda: ip.run_cell("%%ranks\n" + CHECK.format(total=n * (n + 1) / 2) + "\noks = [ok]"))
    quiet(lambda: ip.run_line_magic("ranks", "gather oks"))
    ok = ip.user_ns.get("oks") == [True] * n
    out["error on rank 1 inside all_reduce"] = f"cell ended in {took:.2f} s; state kept and next all_reduce right: {ok}"
    took, _ = quiet(lambda: ip.run_line_magic("ranks", "stop"))
    out["stop"] = f"{took:.2f} s"
    return out


# -- ipyparallel -----------------------------------------------------------------------------------
def measure_ipyparallel(n: int, cells: int, give_up: float) -> dict[str, str]:
    try:
        import ipyparallel as ipp
    except ImportError:
        return {"skipped": "ipyparallel is not installed (pip install -e '.[bench]')"}
    import torch

    from tests.ports import free_port

    ip = shell()
    out: dict[str, str] = {}
    began = time.perf_counter()
    cluster = ipp.Cluster(n=n, log_level=40)
    rc = quiet(lambda: cluster.start_and_connect_sync(activate=True))[1]
    view = rc[:]
    port = free_port()
    for engine, rank in zip(rc.ids, range(n), strict=True):
        rc[engine].push({"rank_": rank, "world_": n, "port_": port}, block=True)
    view.execute(
        "import os, torch, torch.distributed as dist\nos.environ['MASTER_ADDR']='127.0.0.1'\n"
        "os.environ['MASTER_PORT']=str(port_)\ndist.init_process_group('gloo', rank=rank_, world_size=world_)\n"
        "rank = dist.get_rank()\nstate = torch.full((2,), float(rank))",
        block=True,
    )
    out["start"] = f"{time.perf_counter() - began:.2f} s"
    engines = [pid for pid in view.apply_sync(os.getpid)]
    try:
        noop = [quiet(lambda: ip.run_cell("%%px\npass"))[0] for _ in range(cells)]
        out["no-op cell (%%px)"] = percentiles(noop)
        payload = torch.ones(PAYLOAD_MB * 2**18)
        pushes = [quiet(lambda: view.push({"payload": payload}, block=True))[0] for _ in range(5)]
        out[f"push {PAYLOAD_MB} MB to every engine"] = f"{statistics.median(pushes):.3f} s (median of 5)"
        pulls = [quiet(lambda: rc[rc.ids[1]].pull("payload", block=True))[0] for _ in range(5)]
        out[f"pull {PAYLOAD_MB} MB from engine 1"] = f"{statistics.median(pulls):.3f} s (median of 5)"
        began = time.perf_counter()
        failing = view.execute(FAIL_IN_COLLECTIVE, block=False)
        ended = failing.wait(give_up)
        took = time.perf_counter() - began
        if ended:
            check = view.execute(CHECK.format(total=n * (n + 1) / 2), block=False)
            fine = check.wait(give_up) and all(view["ok"])
            out["error on rank 1 inside all_reduce"] = (
                f"cell ended in {took:.2f} s; state kept and next all_reduce right: {fine}"
            )
        else:
            out["error on rank 1 inside all_reduce"] = (
                f"the cell had not ended after {give_up:.0f} s (the other engines wait in all_reduce for good; "
                "ipyparallel#435): only a restart frees them, their state lost"
            )
    finally:
        began = time.perf_counter()
        for pid in engines:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        quiet(lambda: cluster.stop_cluster_sync())
        out["stop"] = f"{time.perf_counter() - began:.2f} s (engines killed by pid, then the cluster stopped)"
    return out


# -- nbdistributed ---------------------------------------------------------------------------------
def measure_nbdistributed(n: int, cells: int, give_up: float) -> dict[str, str]:
    try:
        from nbdistributed.magic import DistributedMagic
    except ImportError:
        return {"skipped": "nbdistributed is not installed (pip install -e '.[bench]')"}
    import torch

    # its workers run the first `python` on PATH: this interpreter's, which has its dependencies
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    ip = shell()
    magic = DistributedMagic(ip)
    ip.register_magics(magic)
    out: dict[str, str] = {}
    began = time.perf_counter()
    quiet(lambda: ip.run_line_magic("dist_init", f"-n {n}"))
    quiet(lambda: ip.run_cell("%%distributed\npass"))  # it returns before its ranks are ready: the first cell waits
    out["start (to the first cell's end)"] = f"{time.perf_counter() - began:.2f} s"
    pids = [p.pid for p in magic._process_manager.processes]
    try:
        quiet(lambda: ip.run_cell("%%distributed\nimport torch\nstate = torch.full((2,), float(rank))"))
        noop = [quiet(lambda: ip.run_cell("%%distributed\npass"))[0] for _ in range(cells)]
        out["no-op cell"] = percentiles(noop)
        ip.user_ns["payload"] = torch.ones(PAYLOAD_MB * 2**18)
        took, _ = quiet(lambda: ip.run_cell("%%distributed\npayload = torch.ones(" + str(PAYLOAD_MB * 2**18) + ")"))
        out[f"make {PAYLOAD_MB} MB on every rank (it has no push)"] = f"{took:.3f} s"
        took, _ = quiet(lambda: _with_deadline(lambda: ip.run_cell(f"%%distributed\n{FAIL_IN_COLLECTIVE}"), give_up))
        after = quiet(lambda: _with_deadline(lambda: ip.run_cell("%%distributed\nprint(state)"), give_up))
        out["error on rank 1 inside all_reduce"] = f"cell ended in {took:.2f} s; the next cell: {_said(after[1])}"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        magic._comm_manager = None
        magic._process_manager = None
    return out


def _with_deadline(call: Callable[[], object], seconds: float) -> object:
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    return result[0] if result else None


def _said(result) -> str:
    if result is None:
        return "no answer"
    return "ran" if getattr(result, "success", False) else "failed"


PEERS = {"jiyu": measure_jiyu, "ipyparallel": measure_ipyparallel, "nbdistributed": measure_nbdistributed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument("--give-up", type=float, default=60.0, help="seconds a failing cell gets to end")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="jiyu-ranks-bench-") as tmp:
        os.environ["JIYU_HOME"] = str(Path(tmp) / "home")
        os.environ["TMPDIR"] = tmp
        for n in args.ranks:
            for name in args.peers:
                if name == "nbdistributed" and n > 2:
                    continue  # its start polls each worker in turn: 2 ranks say enough
                results = PEERS[name](n, args.cells, args.give_up)
                print(f"\n{name}, {n} ranks:", flush=True)
                for key, value in results.items():
                    print(f"  {key}: {value}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
