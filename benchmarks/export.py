"""Export time of a 200-cell notebook (target: <= 50 ms), warm and in a fresh process.

Two notebooks of 200 cells (a parameters cell, markdown every sixth cell, code otherwise):
"typical", where one code cell in five uses IPython syntax (%%time, !pip, %matplotlib,
`x = !cmd`), and "magic-heavy", where three in five do. Cells without IPython syntax skip
IPython's transformer (it re-tokenizes a cell once per transform: most of the cost). Warm = the
exporter's imports (nbformat, IPython's transformer) already loaded, as in a kernel or the
server; cold = a new ``jiyu export`` process, imports included. Interleaved repetitions, medians.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from jiyu_magics.jobs import export_notebook

TARGET_S = 0.050
PLAIN = [
    "import numpy as np\nimport math\nvalues{i} = np.arange({i}) * 0.5\nprint(values{i}.sum())",
    "def step_{i}(x, lr=3e-4):\n    '''One update.'''\n    return x - lr * (x - {i})\n\nx{i} = step_{i}(1.0)",
    "class Model{i}:\n    def __init__(self, width={i}):\n        self.width = width\n\nm{i} = Model{i}()",
]
IPYTHON = [
    "%%time\ntotal{i} = 0\nfor k in range(10):\n    total{i} += k * {i}\nprint(total{i})",
    "!pip install some-package=={i}.0\n%matplotlib inline\nimport os\npath{i} = os.path.join('data', '{i}')",
    "files{i} = !ls\nfor j in range(3):\n    %time y = j * {i}\nprint(len(files{i}))",
]
MIXES = {
    "typical": [*PLAIN, PLAIN[0], IPYTHON[0], *PLAIN[1:], IPYTHON[1], *PLAIN, PLAIN[2], IPYTHON[2]],
    "magic-heavy": [*IPYTHON, *PLAIN[:2]],
}


def build_notebook(path: Path, bodies: list[str], cells: int = 200) -> Path:
    nb_cells = [new_code_cell("lr = 0.1\nepochs = 3\narch = 'resnet'")]
    nb_cells[0].metadata["tags"] = ["parameters"]
    for i in range(1, cells):
        nb_cells.append(
            new_markdown_cell(f"## Step {i}\nSome notes.")
            if i % 6 == 0
            else new_code_cell(bodies[i % len(bodies)].format(i=i))
        )
    nbformat.write(new_notebook(cells=nb_cells), path)
    return path


def once(path: Path) -> float:
    start = time.perf_counter()
    export_notebook(path, {"lr": 3e-4})
    return time.perf_counter() - start


def cold(path: Path, out: Path, repeat: int) -> list[float]:
    jiyu = Path(sys.executable).with_name("jiyu")
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([str(jiyu), "export", str(path), "-o", str(out)], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main(repeat: int = 40, cold_repeat: int = 5) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: build_notebook(Path(tmp) / f"{name}.ipynb", bodies) for name, bodies in MIXES.items()}
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for path in paths.values():
            once(path)  # imports and first-use caches
        for _ in range(repeat):  # interleaved: machine noise hits both alike
            for name, path in paths.items():
                samples[name].append(once(path))
        cold_samples = cold(paths["typical"], Path(tmp) / "job.py", cold_repeat)
        for name, path in paths.items():
            export = export_notebook(path)
            median = statistics.median(samples[name])
            print(
                f"{name}: {export.code_cells} code cells, {len(export.left_out)} commands left out; "
                f"warm median {median * 1e3:.1f} ms (min {min(samples[name]) * 1e3:.1f}) over {repeat}; "
                f"median/target({TARGET_S * 1e3:.0f} ms) = {median / TARGET_S:.2f}"
            )
    print(
        f"`jiyu export` typical notebook in a fresh process (imports included): "
        f"median {statistics.median(cold_samples) * 1e3:.0f} ms over {cold_repeat}"
    )


if __name__ == "__main__":
    main()
