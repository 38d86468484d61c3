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
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.first_step import submit_to_first_step, torchrun_to_first_step  # noqa: E402
from jiyu_magics.core.runs.files import RunFiles  # noqa: E402
from tests.jobs_workload import write_notebook  # noqa: E402

PARAMS = {"steps": 3, "step_seconds": 0.0}


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
            submitted = submit_to_first_step(notebook, nproc=args.nproc, params=PARAMS)
            ours.append(submitted.latency)
            returned.append(submitted.returned)
            theirs.append(torchrun_to_first_step(RunFiles.of(submitted.run_id).script, args.nproc, tmp))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{args.nproc} rank(s), {args.repeat} interleaved repetitions")
    print(f"jobs.submit returned after: median {statistics.median(returned) * 1e3:.0f} ms")
    print(f"A submit -> first step:             median {a:.2f} s  (all: {', '.join(f'{x:.2f}' for x in ours)})")
    print(f"B torchrun (same script) -> step:   median {b:.2f} s  (all: {', '.join(f'{x:.2f}' for x in theirs)})")
    print(f"ratio A/B: {a / b:.2f}  (supervision overhead {a - b:+.2f} s)")


if __name__ == "__main__":
    main()
