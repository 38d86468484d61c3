"""Ranks that stay, measured: jiyu's ranks pool beside nbdistributed 0.1.0 (PyPI), in one run on
this machine (CPU, gloo, 2 ranks).

Both are driven the same way, from an IPython shell in this process (the kernel's side of a cell:
what a notebook waits for between pressing run and the cell's end). Printed, for each: the start
(to every rank ready) against a plain torchrun of a script that imports torch and joins a gloo
group; a no-op cell's latency (p50 and p99 of ``--cells``), then again once every rank holds 80 MB;
a 200-step MLP training cell (wall time of the cell against the loop's own time inside rank 0, the
overhead); an error on rank 1 (time until the cell ends with it). jiyu only: a second ``%%train
--nproc 2`` on the running pool (cell start to its first logged step) and an interrupt of a long
``%%train`` on the pool (to the cell's end). nbdistributed's workers are ended by pid (its own
shutdown kills by a broad ``pkill -f`` pattern).

    pip install nbdistributed==0.1.0   # optional: without it, jiyu's figures alone
    python benchmarks/ranks_dispatch.py [--cells 200]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TRAIN_200 = """
import time, torch
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(net.parameters(), 0.01)
xs, ys = torch.randn(64, 64), torch.randint(0, 10, (64,))
began = time.perf_counter()
for _ in range(200):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(xs), ys)
    loss.backward()
    for p in net.parameters():
        torch.distributed.all_reduce(p.grad)
    opt.step()
loop_s = time.perf_counter() - began
print(f"LOOP {loop_s:.4f}")
"""
HOLD_80MB = "import torch\nballast = torch.ones(20 * 2**20)"  # 80 MB of float32 per rank
PLAIN = """
import time, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print("READY", time.time(), flush=True)
dist.destroy_process_group()
"""


def quiet_shell():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


def run_cell(shell, magic: str, line: str, body: str) -> tuple[float, str]:
    out = io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out):
        shell.run_cell_magic(magic, line, body)
    return time.perf_counter() - began, out.getvalue()


def run_line(shell, magic: str, line: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic(magic, line)


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


def plain_torchrun_start(tmp: Path) -> float:
    script = tmp / "plain.py"
    script.write_text(PLAIN)
    began = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    ready = [float(line.split()[-1]) for line in done.stdout.splitlines() if "READY" in line]
    return max(ready) - began


def measure_jiyu(cells: int) -> dict[str, str]:
    shell = quiet_shell()
    shell.run_line_magic("load_ext", "jiyu_magics")
    results: dict[str, str] = {}
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic("ranks", "start 2 --device cpu --name bench")
    results["start"] = f"{time.perf_counter() - began:.2f} s"
    noop = [run_cell(shell, "ranks", "", "pass")[0] for _ in range(cells)]
    results["no-op cell"] = percentiles(noop)
    run_cell(shell, "ranks", "", HOLD_80MB)
    held = [run_cell(shell, "ranks", "", "pass")[0] for _ in range(cells)]
    results["no-op cell, 80 MB held"] = percentiles(held)
    for label in ("training cell (200 steps), first", "training cell (200 steps), second"):
        wall, out = run_cell(shell, "ranks", "", TRAIN_200)
        loop = float(out.split("LOOP")[1].split()[0])
        results[label] = f"{wall:.3f} s, loop {loop:.3f} s, overhead {wall - loop:.3f} s"
    wall, _ = run_cell_error(
        shell, "ranks", "", "import torch.distributed as d\nif d.get_rank() == 1:\n    raise ValueError('x')"
    )
    results["error on rank 1 to the cell's end"] = f"{wall * 1000:.0f} ms"
    results.update(measure_train_on_pool(shell))
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic("ranks", "stop")
    return results


def run_cell_error(shell, magic: str, line: str, body: str) -> tuple[float, str]:
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = shell.run_cell(f"%%{magic} {line}\n{body}")
    assert not result.success, "the cell was meant to fail"
    return time.perf_counter() - began, ""


def measure_train_on_pool(shell) -> dict[str, str]:
    """The second %%train --nproc 2 on the pool: the cell's start to its first step event."""
    from jiyu_magics.core.events.log import read_events
    from jiyu_magics.core.runs.files import jiyu_home

    setup = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "X = torch.randn(4096, 32); y = (X.sum(1) > 0).long()\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))\n"
        "optimizer = torch.optim.SGD(model.parameters(), 0.05)\nloss_fn = torch.nn.CrossEntropyLoss()\n"
        "train_loader = DataLoader(TensorDataset(X, y), batch_size=32)"
    )
    run_cell(shell, "ranks", "", setup)
    run_line(shell, "train", "--nproc 2 --max-steps 20 --no-ckpt --name warm")
    seen = {p.parent.name for p in (jiyu_home() / "runs").glob("*/events.jsonl")}
    began = time.time()
    run_line(shell, "train", "--nproc 2 --max-steps 20 --no-ckpt --name second")
    new = [p for p in (jiyu_home() / "runs").glob("*/events.jsonl") if p.parent.name not in seen]
    first = min(e["t"] for p in new for e in read_events(p)[0] if e["kind"] == "step")
    results = {"second %%train --nproc 2 on the pool: cell to first step": f"{first - began:.3f} s"}
    results["stop of a %%train on the pool"] = measure_interrupt(shell)
    return results


def measure_interrupt(shell) -> str:
    """SIGINT to the kernel's own process while %%train --nproc 2 trains on the pool (a
    notebook's stop button): its arrival to the cell's end."""
    sent: list[float] = []

    def interrupt_later() -> None:
        time.sleep(3.0)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_later, daemon=True).start()
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_cell("%train --nproc 2 --epochs 100000 --log-every 10 --name interrupted")
    return f"{(time.perf_counter() - sent[0]) * 1000:.0f} ms"


def measure_nbdistributed(cells: int) -> dict[str, str]:
    try:
        from nbdistributed.magic import DistributedMagic
    except ImportError:
        return {"skipped": "nbdistributed is not installed (pip install nbdistributed==0.1.0)"}
    # its workers run the first `python` on PATH: this interpreter's, which has its dependencies
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    shell = quiet_shell()
    magic = DistributedMagic(shell)
    shell.register_magics(magic)
    results: dict[str, str] = {}
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic("dist_init", "-n 2")
    results["start (returns before its ranks are ready: no handshake)"] = f"{time.perf_counter() - began:.2f} s"
    pids = [p.pid for p in magic._process_manager.processes]
    try:
        first, _ = run_cell(shell, "distributed", "", "pass")
        results["first cell after start"] = f"{first * 1000:.0f} ms"
        noop = [run_cell(shell, "distributed", "", "pass")[0] for _ in range(cells)]
        results["no-op cell"] = percentiles(noop)
        run_cell(shell, "distributed", "", HOLD_80MB)
        held = [run_cell(shell, "distributed", "", "pass")[0] for _ in range(cells)]
        results["no-op cell, 80 MB held"] = percentiles(held)
        for label in ("training cell (200 steps), first", "training cell (200 steps), second"):
            wall, out = run_cell(shell, "distributed", "", TRAIN_200)
            loops = [float(part.split()[0]) for part in out.split("LOOP")[1:]]
            loop = max(loops) if loops else float("nan")
            results[label] = f"{wall:.3f} s, loop {loop:.3f} s, overhead {wall - loop:.3f} s"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        magic._comm_manager = None
        magic._process_manager = None
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="jiyu-ranks-bench-") as tmp:
        os.environ["JIYU_HOME"] = str(Path(tmp) / "home")
        os.environ["TMPDIR"] = tmp
        plain = plain_torchrun_start(Path(tmp))
        print(f"plain torchrun, 2 ranks joined a gloo group: {plain:.2f} s")
        for name, measure in (("jiyu %ranks", measure_jiyu), ("nbdistributed 0.1.0", measure_nbdistributed)):
            results = measure(args.cells)
            print(f"\n{name}:")
            for key, value in results.items():
                print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
