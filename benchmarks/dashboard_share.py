"""The live dashboard's share of training wall time, in a real kernel (nbclient + ipykernel).

A notebook trains a small MLP with ``%%train`` (dashboard on, default 1 s refresh, and a 0.25 s
stress setting) and with ``fit()`` and no monitor, interleaved in one kernel. We report the
dashboard's own accounting (time inside its ``feed``/``poll``: event folding, click handling,
SVG and widget updates, comm sends) over the run's wall time, and the wall-time ratio of runs
with and without it (noisier: it includes machine drift). Target: <= 1% at the default refresh.

    python benchmarks/dashboard_share.py [--repeat 3] [--epochs 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

SETUP = """%load_ext jiyu_magics
import json, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from jiyu_magics.train import fit
torch.manual_seed(0)
X = torch.randn(8192, 64); y = (X[:, :10].sum(1) > 0).long()
def objects():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
    return model, torch.optim.AdamW(model.parameters(), 1e-3), loader
rows = []
"""

WITH_DASHBOARD = """%%train --epochs {epochs} --refresh {refresh} --no-ckpt
model, optimizer, train_loader = objects(); loss_fn = nn.CrossEntropyLoss()"""

RECORD = """d = get_ipython().magics_manager.registry['TrainMagics'].dashboard
rows.append({{"variant": "dashboard {refresh} s", "wall": train_result.elapsed, "busy": d.busy_s, "renders": d.renders,
             "steps": train_result.step}})"""

WITHOUT = """model, optimizer, train_loader = objects()
r = fit(model, optimizer, train_loader, loss_fn=nn.CrossEntropyLoss(), epochs={epochs}, save_ckpts=False)
rows.append({{"variant": "no dashboard", "wall": r.elapsed, "busy": 0.0, "renders": 0, "steps": r.step}})"""


def build(repeat: int, epochs: int) -> nbformat.NotebookNode:
    cells = [SETUP]
    for _ in range(repeat):
        for refresh in (1.0, 0.25):
            cells += [WITH_DASHBOARD.format(epochs=epochs, refresh=refresh), RECORD.format(refresh=refresh)]
        cells.append(WITHOUT.format(epochs=epochs))
    cells.append("print(json.dumps(rows))")
    return new_notebook(
        cells=[new_code_cell(c) for c in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--epochs",
        type=int,
        default=60,
        help="epochs of 128 steps; runs of a few seconds at least, "
        "or the first render (a fixed ~15 ms) dominates the share",
    )
    args = parser.parse_args()
    os.environ.setdefault("JIYU_HOME", tempfile.mkdtemp(prefix="jiyu-bench-"))
    nb = build(args.repeat, args.epochs)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    rows = json.loads(nb.cells[-1].outputs[0]["text"])
    print(
        f"real kernel (nbclient + ipykernel), {args.repeat} interleaved repetitions, "
        f"{rows[0]['steps']} steps each, {time.perf_counter() - started:.0f} s in all"
    )
    plain = statistics.median(r["wall"] for r in rows if r["variant"] == "no dashboard")
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        wall = statistics.median(r["wall"] for r in mine)
        share = statistics.median(r["busy"] / r["wall"] for r in mine)
        renders = statistics.median(r["renders"] for r in mine)
        print(
            f"{variant:18s} wall {wall:6.2f} s (x{wall / plain:.3f} of no dashboard)  dashboard share "
            f"{share:.3%}  renders {renders:.0f}"
        )


if __name__ == "__main__":
    main()
