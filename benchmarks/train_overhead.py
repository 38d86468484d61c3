"""Engine overhead against a hand-written loop (and Lightning / Accelerate where installed).

Every variant trains the same model on the same in-memory data with AdamW; each repetition
times the steady state: steps ``WARMUP`` to ``WARMUP + STEPS``, timestamped right after the
log of those steps (the hand loop reads its loss there with ``.item()``, the engine logs with
``log_every=WARMUP``), so set-up, the first slow steps and the end are outside the window.
``STEPS`` is scaled per case from a measured probe so that each window lasts at least
``--window`` seconds (1 s by default, on a GPU as on the CPU): a 25 ms window on a GPU times
launch jitter and set-up, not the loop. The steady-state overhead is printed in µs per step
against the hand-written loop, and the per-call fixed cost (call → first forward, last logged
step → return) separately, in ms: the two add up differently for long and short runs.
Variants run interleaved (A B C D, A B C D, ...) so machine drift hits all alike; we print
medians and, per variant, the median of per-repetition ratios to the hand-written loop with a
bootstrap 90% interval. Two data paths are compared as users write them: a DataLoader over a
TensorDataset (per-sample collate), and the batched gather of the engine's fast path.

    python benchmarks/train_overhead.py [--repeat 9] [--only tiny|medium] [--window 1.0] [--device cuda]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jiyu_magics.train import fit
from jiyu_magics.train.batch_source import TensorBatches

DEVICE = torch.device("cpu")
CASES = {
    "tiny": dict(sizes=(64, 256, 10), batch=64, samples=8192, warmup=100, steps=600),
    "medium": dict(sizes=(784, 1024, 1024, 10), batch=256, samples=4096, warmup=5, steps=20),
}


def make_model(sizes) -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for a, b in zip(sizes, sizes[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def make_data(case) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(case["samples"], case["sizes"][0], generator=generator)
    return TensorDataset(x, torch.randint(0, case["sizes"][-1], (case["samples"],), generator=generator))


def endless(batches_per_epoch: Callable[[int], object]):
    epoch = 0
    while True:
        epoch += 1
        yield from batches_per_epoch(epoch)


class Window:
    """Wall and CPU timestamps taken at the logged steps WARMUP and WARMUP + STEPS. On a shared
    machine the CPU time of this (single-threaded) process is far less disturbed by other
    processes than wall time, so ratios are computed from both. Also the call's bounds: when
    the variant was called, its first forward (a one-shot hook), and when it returned."""

    def __init__(self, first: int, last: int):
        self.first, self.last, self.marks = first, last, {}
        self.called = time.perf_counter()
        self.first_forward = self.returned = None

    def watch(self, model: nn.Module) -> None:
        """Stamps the first forward, then removes itself (no cost in the timed steps)."""

        def stamp(*_):
            self.first_forward = time.perf_counter()
            handle.remove()

        handle = model.register_forward_pre_hook(stamp)

    def mark(self, step: int) -> None:
        if step in (self.first, self.last):
            self.marks[step] = (time.perf_counter(), time.process_time())

    def rate(self) -> tuple[float, float, float | None]:
        """Steps/s by wall and by CPU time, and the fixed cost of the call (s) when known."""
        self.returned = self.returned or time.perf_counter()
        (wall0, cpu0), (wall1, cpu1) = self.marks[self.first], self.marks[self.last]
        steps = self.last - self.first
        fixed = (self.first_forward - self.called + self.returned - wall1) if self.first_forward else None
        return steps / (wall1 - wall0), steps / (cpu1 - cpu0), fixed


def hand_loop(case, data: TensorDataset, fast: bool) -> float:
    device = DEVICE
    model, loss_fn = make_model(case["sizes"]).to(device), nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    if fast:
        gather = TensorBatches(data.tensors, case["batch"], seed=0).place(device)
        batches = endless(gather.epoch)
    else:
        batches = endless(
            lambda _: DataLoader(data, batch_size=case["batch"], shuffle=True, pin_memory=device.type == "cuda")
        )
    window = Window(case["warmup"], case["warmup"] + case["steps"])
    window.watch(model)
    for step in range(1, window.last + 1):
        x, y = next(batches)
        if device.type != "cpu":
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % case["warmup"] == 0:
            loss.item()
            window.mark(step)
    return window.rate()


class StepClock:
    """A monitor for fit: stamps the time when the engine logs the window's steps."""

    interval = float("inf")

    def __init__(self, window: Window):
        self.window = window

    def feed(self, events):
        for event in events:
            if event["kind"] == "step":
                self.window.mark(event["step"])

    def poll(self):
        pass


def engine(case, data: TensorDataset, fast: bool) -> float:
    model = make_model(case["sizes"])
    window = Window(case["warmup"], case["warmup"] + case["steps"])
    window.watch(model)
    loader = DataLoader(data, batch_size=case["batch"], shuffle=True, pin_memory=DEVICE.type == "cuda")
    fit(
        model,
        torch.optim.AdamW(model.parameters(), 1e-3),
        loader,
        loss_fn=nn.CrossEntropyLoss(),
        max_steps=window.last,
        log_every=case["warmup"],
        save_ckpts=False,
        fast_data=fast,
        device=str(DEVICE),
        amp="off",
        monitor=StepClock(window),
    )
    return window.rate()


def lightning(case, data: TensorDataset, fast: bool) -> float:
    import lightning as L

    window = Window(case["warmup"], case["warmup"] + case["steps"])

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model, self.loss_fn = make_model(case["sizes"]), nn.CrossEntropyLoss()

        def training_step(self, batch, _):
            return self.loss_fn(self.model(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), 1e-3)

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, *_):
            if trainer.global_step % case["warmup"] == 0:
                window.mark(trainer.global_step)

    trainer = L.Trainer(
        max_steps=window.last,
        accelerator=DEVICE.type.replace("cuda", "gpu"),
        devices=1,
        logger=False,
        callbacks=[Clock()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), DataLoader(data, batch_size=case["batch"], shuffle=True))
    return window.rate()


def accelerate(case, data: TensorDataset, fast: bool) -> float:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=DEVICE.type == "cpu")
    model = make_model(case["sizes"])
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(data, batch_size=case["batch"], shuffle=True)
    )
    batches, loss_fn = endless(lambda _: loader), nn.CrossEntropyLoss()
    window = Window(case["warmup"], case["warmup"] + case["steps"])
    for step in range(1, window.last + 1):
        x, y = next(batches)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()
        if step % case["warmup"] == 0:
            loss.item()
            window.mark(step)
    return window.rate()


def available(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:
        return False


def bootstrap_interval(ratios: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return medians[int(rounds * 0.05)], medians[int(rounds * 0.95)]


def scaled(case, data: TensorDataset, window_s: float) -> dict:
    """The case with enough timed steps for a window of ``window_s`` seconds, from a probe of
    the hand-written loop (a multiple of WARMUP: both loops stamp at their logs)."""
    probe_wall = hand_loop(case, data, True)[0]
    warmup = case["warmup"]
    steps = math.ceil(probe_wall * window_s / warmup) * warmup
    return dict(case, steps=max(case["steps"], steps))


def run_case(name: str, repeat: int, window_s: float) -> None:
    data = make_data(CASES[name])
    case = scaled(CASES[name], data, window_s)
    variants = {
        "hand-written, DataLoader": (hand_loop, False),
        "engine, DataLoader (fast_data=False)": (engine, False),
        "hand-written, batched gather": (hand_loop, True),
        "engine, default (fast path)": (engine, True),
    }
    if available("lightning"):
        variants["Lightning Trainer, DataLoader"] = (lightning, False)
    if available("accelerate"):
        variants["Accelerate, DataLoader"] = (accelerate, False)
    rates = {v: [] for v in variants}
    for _ in range(repeat):
        for label, (fn, fast) in variants.items():
            rates[label].append(fn(case, data, fast))
    baselines = {False: "hand-written, DataLoader", True: "hand-written, batched gather"}
    print(
        f"\n{name} MLP {'-'.join(map(str, case['sizes']))}, batch {case['batch']}, AdamW, "
        f"{case['steps']} timed steps (windows of >= {window_s:g} s) x {repeat} interleaved repetitions, {DEVICE}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    print(
        f"{'variant':38s} {'steps/s':>8s} {'spread':>7s} {'steps/CPU-s':>11s} {'spread':>7s}  ratio to hand-written "
        f"(same data path): by CPU time [90% CI] | by wall time | overhead us/step (CPU | wall) | fixed ms/call"
    )
    for label, (_fn, fast) in variants.items():
        base = rates[baselines[fast]]
        wall, cpu = ([r[i] for r in rates[label]] for i in (0, 1))
        by_cpu = [a[1] / b[1] for a, b in zip(rates[label], base, strict=False)]
        by_wall = [a[0] / b[0] for a, b in zip(rates[label], base, strict=False)]
        low, high = bootstrap_interval(by_cpu)
        over_cpu = statistics.median(1e6 / a[1] - 1e6 / b[1] for a, b in zip(rates[label], base, strict=False))
        over_wall = statistics.median(1e6 / a[0] - 1e6 / b[0] for a, b in zip(rates[label], base, strict=False))
        fixed = [r[2] for r in rates[label] if r[2] is not None]
        print(
            f"{label:38s} {statistics.median(wall):8.1f} {_spread(wall):7.0%} {statistics.median(cpu):11.1f} "
            f"{_spread(cpu):7.0%}  {statistics.median(by_cpu):.3f} [{low:.3f}, {high:.3f}] | "
            f"{statistics.median(by_wall):.3f} | {over_cpu:+7.1f} | {over_wall:+7.1f} | "
            f"{statistics.median(fixed) * 1e3 if fixed else float('nan'):7.1f}"
        )
    fast, slow = (
        statistics.median(r[1] for r in rates[v]) for v in ("engine, default (fast path)", "hand-written, DataLoader")
    )
    print(f"engine fast path vs hand-written DataLoader loop (CPU time): {fast / slow:.2f}x")
    engine_fixed = statistics.median(r[2] for r in rates["engine, default (fast path)"])
    hand_fixed = statistics.median(r[2] for r in rates["hand-written, batched gather"])
    print(
        f"per-call fixed cost (call → first forward + last logged step → return): engine {engine_fixed * 1e3:.1f} ms, "
        f"hand-written {hand_fixed * 1e3:.1f} ms: fit's own {(engine_fixed - hand_fixed) * 1e3:.1f} ms a call"
    )


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def data_path(repeat: int = 5, batches: int = 200) -> None:
    """Per-batch cost of the two data paths alone (what the fast path saves)."""
    data = make_data(CASES["tiny"])
    loader_times, gather_times = [], []
    gather = TensorBatches(data.tensors, 64, seed=0)
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in zip(range(batches), DataLoader(data, batch_size=64, shuffle=True), strict=False):
            pass
        loader_times.append((time.perf_counter() - start) / batches)
        start = time.perf_counter()
        for _ in zip(range(batches), gather.epoch(1), strict=False):
            pass
        gather_times.append((time.perf_counter() - start) / batches)
    a, b = statistics.median(loader_times), statistics.median(gather_times)
    print(
        f"\ndata path, batch of 64 x 64 floats: DataLoader(TensorDataset, shuffle=True) {a * 1e6:.0f} us/batch, "
        f"fast path gather {b * 1e6:.0f} us/batch ({a / b:.1f}x)"
    )


def chart_cost(repeat: int = 20) -> None:
    """The live curve: our SVG string vs a matplotlib redraw of a reused figure to PNG."""
    import io

    from matplotlib.figure import Figure

    from jiyu_magics.views.loss_chart import loss_svg
    from jiyu_magics.views.training_view import TrainingView

    view = TrainingView()
    view.feed(
        [{"kind": "start", "total_steps": 1000}]
        + [{"kind": "step", "step": s, "loss": 2.0 / s**0.5} for s in range(1, 1001)]
        + [{"kind": "val", "step": s, "loss": 2.1 / s**0.5} for s in range(100, 1001, 100)]
    )
    fig = Figure(figsize=(4.4, 2.0), dpi=100)
    ax = fig.subplots()
    (raw,) = ax.plot([], [])
    (smooth,) = ax.plot([], [])
    steps = [s for s, _ in view.losses]
    svg, png = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        loss_svg(view)
        svg.append(time.perf_counter() - start)
        start = time.perf_counter()
        raw.set_data(steps, [v for _, v in view.losses])
        smooth.set_data(steps, view.smoothed())
        ax.relim()
        ax.autoscale_view()
        fig.savefig(io.BytesIO(), format="png")
        png.append(time.perf_counter() - start)
    a, b = statistics.median(svg), statistics.median(png)
    print(
        f"live chart, 1000 points + smoothing + 10 val points: SVG string {a * 1e3:.2f} ms, "
        f"matplotlib reused-figure PNG {b * 1e3:.1f} ms ({b / a:.0f}x); at a 1 s refresh: {a:.2%} vs {b:.1%}"
    )


def main() -> None:
    os.environ.setdefault("JIYU_HOME", tempfile.mkdtemp(prefix="jiyu-bench-"))  # benchmark runs stay out of ~/.jiyu
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--window", type=float, default=1.0, help="seconds each timed window lasts at least")
    parser.add_argument("--only", choices=sorted(CASES))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the GPU machine's gpu_checks.sh uses cuda)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    for name in [args.only] if args.only else list(CASES):
        run_case(name, args.repeat, args.window)
    if DEVICE.type == "cpu":
        data_path()
        chart_cost()


if __name__ == "__main__":
    main()
