"""Submit → first training step, against torchrun's own start-up for the same script.

A: ``jobs.submit(notebook)`` (export, run row, detached supervisor, torchrun, worker entry
point, headless IPython shell) until rank 0 logs its first step.
B: ``torchrun --standalone --nproc-per-node N job.py`` on the very script A exported, started
directly, until rank 0 logs its first step.
Both read the time of the first ``step`` event in the run's event log. Interleaved A B A B,
medians, and the ratio A/B: what the supervision costs on top of torchrun itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jiyu_magics import jobs  # noqa: E402
from jiyu_magics.core.event_log import read_events  # noqa: E402
from jiyu_magics.core.run_files import RunFiles  # noqa: E402
from jiyu_magics.core.run_store import RunStore  # noqa: E402
from tests.jobs_workload import write_notebook  # noqa: E402

PARAMS = {"steps": 3, "step_seconds": 0.0}


def first_step_time(run_id: str, timeout: float = 300) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "step"]
        if steps:
            return steps[0]["t"]
        time.sleep(0.02)
    raise TimeoutError(f"run {run_id} logged no step")


def via_submit(notebook: Path, nproc: int) -> tuple[float, float, str]:
    start = time.time()
    run = jobs.submit(notebook, nproc=nproc, params=PARAMS)
    returned = time.time() - start
    latency = first_step_time(run.id) - start
    while RunStore().get(run.id).active:
        time.sleep(0.1)
    return latency, returned, run.id


def via_torchrun(script: Path, nproc: int, cwd: Path) -> float:
    run = RunStore().create("ddp", "bench-torchrun", status="running")
    RunFiles.of(run.id).create()
    env = {**os.environ, "JIYU_RUN_ID": run.id, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                             str(nproc), str(script)], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    latency = first_step_time(run.id) - start
    proc.wait(300)
    RunStore().finish(run.id, "succeeded", proc.returncode)
    return latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.setdefault("JIYU_HOME", str(tmp / "home"))
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ["TMPDIR"] = str(tmp)
        notebook = write_notebook(tmp / "bench.ipynb")
        ours, returned, theirs = [], [], []
        for _ in range(args.repeat):
            latency, back, run_id = via_submit(notebook, args.nproc)
            ours.append(latency)
            returned.append(back)
            theirs.append(via_torchrun(RunFiles.of(run_id).script, args.nproc, tmp))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{args.nproc} rank(s), {args.repeat} interleaved repetitions")
    print(f"jobs.submit returned after: median {statistics.median(returned) * 1e3:.0f} ms")
    print(f"A submit -> first step:             median {a:.2f} s  (all: {', '.join(f'{x:.2f}' for x in ours)})")
    print(f"B torchrun (same script) -> step:   median {b:.2f} s  (all: {', '.join(f'{x:.2f}' for x in theirs)})")
    print(f"ratio A/B: {a / b:.2f}  (supervision overhead {a - b:+.2f} s)")


if __name__ == "__main__":
    main()
