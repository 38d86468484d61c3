"""A small, real background training run for the browser tests.

It registers itself in the run store as a running ``job`` with its own pid and process group
(as a jobs supervisor would), writes its stdout log, and trains an MLP on scikit-learn's digits
with torch, appending ``start``/``step``/``val``/``end`` events in the engine's format at a
steady pace so the panel's progress bar and sparkline visibly move. SIGTERM stops it at the
next step boundary and records it as ``stopped``.

    python tests/tiny_job.py --name NAME [--steps 200] [--pace 0.2]

prints the run id on its first stdout line, then only writes to the run's log.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from jiyu_magics.core.events import EventLog
from jiyu_magics.core.paths import RunFiles
from jiyu_magics.core.store import RunStore, process_start_time


def register(store: RunStore, name: str):
    pid = os.getpid()
    run = store.create("job", name, status="running", pid=pid, pid_started=process_start_time(pid),
                       pgid=os.getpgid(0), nproc=1, notebook="tiny_job.py")
    print(run.id, flush=True)
    return run, RunFiles.of(run.id).create()


def digits():
    import torch
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)


def batches(x, y, batch: int):
    import torch

    while True:
        order = torch.randperm(len(x))
        for i in range(0, len(x) - batch + 1, batch):
            yield x[order[i:i + batch]], y[order[i:i + batch]]


def train(args, log, events, stop) -> str:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    events.append("start", total_steps=args.steps, epochs=1, nproc=1)
    x_all, y_all = digits()
    stream = batches(x_all, y_all, 64)
    for step in range(1, args.steps + 1):
        began = time.perf_counter()
        x, y = next(stream)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps:
            value = loss.item()
            events.append("step", step=step, epoch=0, loss=value, lr=3e-3,
                          samples_per_s=64 / max(time.perf_counter() - began, 1e-6))
            print(f"step {step}/{args.steps} loss {value:.4f}", file=log, flush=True)
        if stop["requested"]:
            print(f"SIGTERM: stopping at step {step}", file=log, flush=True)
            return "stopped"
        time.sleep(args.pace)
    with torch.no_grad():
        logits = model(x_all)
        val_loss = torch.nn.functional.cross_entropy(logits, y_all).item()
        accuracy = (logits.argmax(1) == y_all).float().mean().item()
    events.append("val", step=args.steps, loss=val_loss, accuracy=accuracy)
    print(f"val loss {val_loss:.4f} accuracy {accuracy:.3f}", file=log, flush=True)
    return "succeeded"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pace", type=float, default=0.2, help="seconds of sleep after each step")
    parser.add_argument("--log-every", type=int, default=5)
    args = parser.parse_args()
    store = RunStore()
    run, files = register(store, args.name)
    stop = {"requested": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    with open(files.log, "a", buffering=1) as log, EventLog(files.events) as events:
        print(f"run {run.id} ({args.name}): {args.steps} steps on scikit-learn digits", file=log)
        try:
            status = train(args, log, events, stop)
        except BaseException as error:
            events.append("error", message=str(error))
            store.finish(run.id, "failed", exit_code=1, error=str(error))
            raise
        events.append("end", status=status)
        print(f"run {status}", file=log)
    store.finish(run.id, status, exit_code=0 if status == "succeeded" else -signal.SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
