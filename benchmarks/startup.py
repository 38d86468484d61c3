"""Start-up as a shell user and a notebook user feel it: each ``jiyu`` command in a fresh
process, and ``%load_ext jiyu_magics`` in a fresh IPython shell.

Each command runs as ``python -m jiyu_magics ...`` with this tree on ``PYTHONPATH`` (and, with
``--baseline DIR``, a second tree such as a checkout of main, in the same interleaved rounds, for
a before/after in one run); ``python -c pass`` is the floor. ``%load_ext`` is timed inside a
process that has already imported IPython (as a kernel has). Medians of ``--repeat`` rounds.
Goals (issue 17): each command ≤ 0.3 s, ``%load_ext`` ≤ 50 ms.

    python benchmarks/startup.py [--repeat 7] [--baseline /path/to/other/tree]
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
LOAD_EXT = (
    "import time; from IPython.core.interactiveshell import InteractiveShell; "
    "shell = InteractiveShell.instance(); start = time.perf_counter(); "
    "shell.run_line_magic('load_ext', 'jiyu_magics'); print(time.perf_counter() - start)"
)


def commands(scratch: Path) -> dict[str, list[str]]:
    notebook = ROOT / "notebooks" / "01_quickstart.ipynb"
    return {
        "python -c pass (floor)": ["-c", "pass"],
        "jiyu --help": ["-m", "jiyu_magics", "--help"],
        "jiyu jobs": ["-m", "jiyu_magics", "jobs"],
        "jiyu gpu": ["-m", "jiyu_magics", "gpu"],
        "jiyu export NOTEBOOK": ["-m", "jiyu_magics", "export", str(notebook), "-o", str(scratch / "job.py")],
    }


def timed(argv: list[str], env: dict) -> float:
    """``python -m`` puts the working folder first on the path: run in the tree being timed."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *argv],
        env=env,
        cwd=env["PYTHONPATH"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def load_ext(env: dict) -> float:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_EXT], env=env, cwd=env["PYTHONPATH"], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="another source tree to time in the same rounds")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="jiyu-bench-startup-"))
    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    envs = {
        name: {
            **os.environ,
            "PYTHONPATH": str(tree),
            "JIYU_HOME": str(scratch / f"home-{name.replace(' ', '-')}"),
            "OMP_NUM_THREADS": "1",
        }
        for name, tree in trees.items()
    }
    variants = {
        (label, tree): (lambda argv=argv, env=envs[tree]: timed(argv, env))
        for label, argv in commands(scratch).items()
        for tree in trees
    }
    variants.update(
        {("%load_ext jiyu_magics (in IPython)", tree): (lambda env=envs[tree]: load_ext(env)) for tree in trees}
    )
    for fn in variants.values():  # warm the file cache
        fn()
    times = {key: [] for key in variants}
    for _ in range(args.repeat):
        for key, fn in variants.items():
            times[key].append(fn())
    print(
        f"fresh-process start-up, median of {args.repeat} interleaved rounds (goal: commands ≤ 300 ms, "
        f"%load_ext ≤ 50 ms)"
    )
    print(f"{'':40s}" + "".join(f"{name:>14s}" for name in trees))
    for label in dict.fromkeys(label for label, _ in variants):
        print(f"{label:40s}" + "".join(f"{statistics.median(times[(label, tree)]) * 1e3:11.0f} ms" for tree in trees))


if __name__ == "__main__":
    main()
