"""The one-line messages for how a run ended, and the input-bound advice.

Each message names the step, the checkpoint to continue from, and the concrete options that
fix the problem; the user should never need the traceback of the engine to act.
"""

from __future__ import annotations

import os
import shlex

INPUT_BOUND_SHARE = 0.20


def resume_command(name: str | None, epochs: int | None, max_steps: int | None) -> str:
    """The line that continues this call, as typed in the notebook: ``--resume last`` finds the
    checkpoint by the run's name, so a name the user gave must be in it (without one, the name
    is the default again), and the length makes it train to the same end."""
    parts = ["%train --resume last"]
    if name:
        parts.append(f"--name {shlex.quote(name)}")
    if epochs:
        parts.append(f"--epochs {epochs}")
    if max_steps:
        parts.append(f"--max-steps {max_steps}")
    return " ".join(parts)


def resume_hint(checkpoint: str | None, command: str = "%train --resume last") -> str:
    if not checkpoint:
        return "No checkpoint was saved."
    return f"Checkpoint: {checkpoint}. Continue with {command} (or fit(..., resume=path))."


def stopped_message(
    step: int,
    total: int | None,
    epoch: int,
    reason: str | None,
    checkpoint: str | None,
    command: str = "%train --resume last",
) -> str:
    of = f"/{total}" if total else ""
    return f"Stopped at step {step}{of} (epoch {epoch}) by {reason or 'request'}. {resume_hint(checkpoint, command)}"


def succeeded_message(
    step: int, start_step: int, epochs: int, elapsed: float, loss: float | None, val_acc: float | None
) -> str:
    minutes, seconds = divmod(int(elapsed), 60)
    span = f"{epochs} epoch{'s' if epochs != 1 else ''}"
    done = (
        f"Trained {step - start_step} more steps, to step {step} ({span}),"
        if start_step
        else f"Trained {step} steps ({span})"
    )
    parts = [f"{done} in {minutes}:{seconds:02d}"]
    if loss is not None:
        parts.append(f"loss {loss:.4g}")
    if val_acc is not None:
        parts.append(f"val acc {val_acc:.1%}")
    return " · ".join(parts) + "."


def nonfinite_message(
    step: int,
    value: float,
    checkpoint: str | None,
    checkpoint_step: int | None,
    amp: str,
    clipping: bool,
    what: str = "loss",
) -> str:
    last = (
        f"last good checkpoint: {checkpoint} (step {checkpoint_step})"
        if checkpoint
        else "no checkpoint was saved before it"
    )
    fixes = ["lower the learning rate"]
    if not clipping:
        fixes.append("clip gradients (--clip 1.0)")
    if amp == "fp16":
        fixes.append("use --amp bf16")
    went_bad = (
        f"Loss became {value} at step {step}"
        if what == "loss"
        else f"The weights became NaN/Inf by step {step} while the loss was still finite"
    )
    return f"{went_bad}; training stopped, {last}. Try: {', '.join(fixes)}."


def oom_message(step: int, peak: int | None, total: int | None, batch_size: int | None, accum: int, amp: str) -> str:
    used = f"peak {_gib(peak)}" + (f" of {_gib(total)}" if total else "") if peak else "peak n/a"
    options = []
    if batch_size and batch_size > 1:
        half = batch_size // 2
        options.append(f"a smaller batch (batch size {half})")
        options.append(f"the same effective batch with --accum {accum * 2} and batch size {half}")
    if amp == "off":
        options.append("--amp bf16 (half the activation memory)")
    options.append("a smaller model or sequence length")
    return (
        f"CUDA out of memory at step {step} ({used}); cached memory was released and the kernel "
        f"is usable. Options: {'; '.join(options)}."
    )


def input_bound_advice(
    data_wait: float | None, device_type: str, loader: object, cpu_count: int | None = None, local_world_size: int = 1
) -> str | None:
    """Advice for a CUDA run that waits on its data loader more than 20% of the time, with
    settings sized for this machine; None when the run is not input-bound."""
    if device_type != "cuda" or data_wait is None or data_wait <= INPUT_BOUND_SHARE:
        return None
    cpus = cpu_count or os.cpu_count() or 1
    workers = max(1, min(8, cpus // max(1, local_world_size) - 1))
    current = getattr(loader, "num_workers", None)
    now = f" (now num_workers={current})" if current is not None else ""
    return (
        f"The GPU waits for data {data_wait:.0%} of the time{now}. Give the DataLoader "
        f"num_workers={workers}, pin_memory=True, persistent_workers=True, prefetch_factor=4, "
        f"or keep in-memory data as tensors (TensorDataset) for the engine's fast path."
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
