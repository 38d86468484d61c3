"""What one ``fit`` call costs beyond its steps: call → first step and last step → return, with
the time of each phase of the engine's set-up and end.

A notebook runs many short ``%%train`` cells, so the fixed cost of a call is what people feel.
The first step is stamped when the engine first calls ``train_step`` (user code starts there),
the last step by an optimizer post-step hook; both exclude user code. Torch's own first-call
work (autograd and AdamW set-up, lazy imports) is paid by warm-up calls that are not measured;
each measured call trains a fresh copy of the model, as a re-run cell does. Each phase of the
engine (``Trainer`` methods and the helpers they call, patched with timers here, nothing in the
engine changes) is timed per call; the breakdown prints medians over the calls, nested phases
indented under their parent. Two configurations run interleaved: the defaults of a
``%%train`` cell (a checkpoint at the end) and ``save_ckpts=False``.
Goal (issue 17): call → first step + last step → return ≤ 20 ms here, without the checkpoint.

    python benchmarks/fit_fixed_cost.py [--repeat 15] [--steps 20] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("JIYU_HOME", tempfile.mkdtemp(prefix="jiyu-bench-fixed-"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from jiyu_magics.train import engine, fit, trainer_checkpoints, trainer_end, trainer_reports  # noqa: E402
from jiyu_magics.train import reporter as reporter_module  # noqa: E402
from jiyu_magics.train import run_binding as binding_module  # noqa: E402

# (label, owner, attribute, depth): what the engine does outside its steps, in call order; the owner
# is the class that defines the method (Trainer's base classes hold its reports, checkpoints and end)
PHASES = [
    ("join_process_group", engine, "join_process_group", 0),
    ("Trainer._prepare (model.to, data, plan, precision)", engine.Trainer, "_prepare", 0),
    ("Trainer._open_run", engine.Trainer, "_open_run", 0),
    ("RunBinding.open (run registered, event log)", binding_module.RunBinding, "open", 1),
    ("RunStore.create", binding_module.RunStore, "create", 2),
    ("RunBinding.hold_device", binding_module.RunBinding, "hold_device", 1),
    ("Trainer._start", engine.Trainer, "_start", 0),
    ("Trainer._step_runner (wrap model)", engine.Trainer, "_step_runner", 1),
    ("Trainer._resume", trainer_checkpoints.TrainerCheckpoints, "_resume", 1),
    ("Trainer._emit_start", trainer_reports.TrainerReports, "_emit_start", 1),
    ("Trainer._log_pending (last log)", trainer_reports.TrainerReports, "_log_pending", 0),
    ("Trainer._checkpoint", trainer_checkpoints.TrainerCheckpoints, "_checkpoint", 0),
    ("Trainer._end", trainer_end.TrainerEnd, "_end", 0),
    ("Reporter.end (end event, run finished)", reporter_module.Reporter, "end", 1),
    ("RunStore.finish (status, stored summary)", binding_module.RunStore, "finish", 2),
    ("RunBinding.close", binding_module.RunBinding, "close", 0),
]


class Clock:
    """One call's phase times and the two stamps that bound its steps."""

    def __init__(self):
        self.phases: dict[str, float] = defaultdict(float)
        self.first_step: float | None = None
        self.last_step: float | None = None


CLOCK = Clock()  # the current call's; the timers read this module global


def install_timers() -> None:
    """Wraps each phase so its time adds to the current call's clock."""
    for label, owner, name, _ in PHASES:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        func = original.__func__ if isinstance(original, classmethod) else original

        @functools.wraps(func)
        def timed(*args, _func=func, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _func(*args, **kwargs)
            finally:
                CLOCK.phases[_label] += time.perf_counter() - start

        setattr(owner, name, classmethod(timed) if isinstance(original, classmethod) else timed)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def one_call(base: nn.Module, data, steps: int, device: str, save_ckpts: bool) -> dict[str, float]:
    """One measured ``fit``: the call's total, its fixed parts, and each phase."""
    global CLOCK
    clock = CLOCK = Clock()
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    optimizer.register_step_post_hook(lambda *_: setattr(clock, "last_step", time.perf_counter()))
    loss_fn = nn.CrossEntropyLoss()

    def train_step(model, batch):
        if clock.first_step is None:
            clock.first_step = time.perf_counter()
        x, y = batch
        return loss_fn(model(x), y)

    start = time.perf_counter()
    fit(
        model,
        optimizer,
        data,
        train_step=train_step,
        batch_size=64,
        max_steps=steps,
        device=device,
        amp="off",
        save_ckpts=save_ckpts,
        name="fixed-cost",
    )
    end = time.perf_counter()
    return {
        "call → first step": clock.first_step - start,
        "last step → return": end - clock.last_step,
        "fixed (both)": clock.first_step - start + end - clock.last_step,
        "whole call": end - start,
        **clock.phases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    data = (torch.randn(4096, 64, generator=generator), torch.randint(0, 10, (4096,), generator=generator))
    base = make_model()
    install_timers()
    configs = {"defaults (checkpoint at the end)": True, "save_ckpts=False": False}
    for save in configs.values():  # warm-up: torch's first-call work, not measured
        for _ in range(3):
            one_call(base, data, args.steps, args.device, save)
    results = {name: [] for name in configs}
    for _ in range(args.repeat):
        for name, save in configs.items():
            results[name].append(one_call(base, data, args.steps, args.device, save))
    print(
        f"fit fixed cost on {args.device}: {args.steps} steps of a 64-256-10 MLP, median of {args.repeat} "
        f"calls per configuration (interleaved), torch {torch.__version__}"
    )
    for name, calls in results.items():
        print(f"\n{name}")
        for key in ("call → first step", "last step → return", "fixed (both)", "whole call"):
            print(f"  {key:<54} {statistics.median(c[key] for c in calls) * 1000:8.2f} ms")
        print("  phases:")
        for label, _, _, depth in PHASES:
            values = [c.get(label, 0.0) for c in calls]
            print(f"    {'  ' * depth}{label:<{52 - 2 * depth}} {statistics.median(values) * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
