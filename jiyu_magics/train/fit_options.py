"""Every option of ``fit`` (and so of ``%%train``), with its validation in one place.

The magic maps its flags one to one onto these fields, so a bad value gets the same one-line
message whichever entry point the user came through.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .train_errors import TrainConfigError

AMP_MODES = ("auto", "bf16", "fp16", "off")
STRATEGIES = ("auto", "ddp", "fsdp")
SCHEDULER_INTERVALS = ("step", "epoch")
DEFAULT_LOG_INTERVAL_S = 0.5


@dataclass
class FitOptions:
    epochs: int | None = None          # None: 1, or as many as max_steps needs
    max_steps: int | None = None       # optimizer steps; training ends at whichever comes first
    batch_size: int | None = None      # only when training data is a Dataset or tensors
    shuffle: bool = True               # only when the engine builds the batches
    drop_last: bool = False            # likewise
    amp: str = "auto"                  # auto: bf16 on CUDA that supports it, fp16 on older CUDA, off on CPU
    accum: int = 1                     # micro-batches per optimizer step
    clip: float | None = None          # max gradient norm
    compile: bool = False              # torch.compile the model
    device: str | None = None          # default: cuda:LOCAL_RANK when CUDA is available, else cpu
    seed: int | None = None
    log_every: int | None = None       # optimizer steps between logs; None: about every log_interval_s
    log_interval_s: float = DEFAULT_LOG_INTERVAL_S
    val_every: int | None = None       # optimizer steps; None: at each epoch end
    ckpt_every: int | None = None      # optimizer steps; None: at each epoch end
    ckpt_dir: str | None = None        # default: the run's ckpt/ folder
    keep_ckpts: int = 3                # checkpoints of this call kept on disk (the newest)
    save_ckpts: bool = True
    resume: str | None = None          # a checkpoint path, or "last"
    strategy: str = "auto"             # under torchrun: ddp (default) or fsdp
    fast_data: bool = True             # in-memory tensor data: batched gather instead of per-sample collate
    scheduler_interval: str = "step"   # call scheduler.step() after each optimizer step or each epoch
    name: str | None = None            # the run's name in the store

    @classmethod
    def from_kwargs(cls, options: dict) -> "FitOptions":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TrainConfigError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return cls(**options).validate()

    def validate(self) -> "FitOptions":
        _at_least(1, epochs=self.epochs, max_steps=self.max_steps, batch_size=self.batch_size,
                  accum=self.accum, log_every=self.log_every, val_every=self.val_every,
                  ckpt_every=self.ckpt_every, keep_ckpts=self.keep_ckpts)
        _one_of(amp=(self.amp, AMP_MODES), strategy=(self.strategy, STRATEGIES),
                scheduler_interval=(self.scheduler_interval, SCHEDULER_INTERVALS))
        if self.clip is not None and not self.clip > 0:
            raise TrainConfigError(f"clip must be a positive gradient norm, got {self.clip:g}")
        if not self.log_interval_s > 0:
            raise TrainConfigError(f"log_interval_s must be positive, got {self.log_interval_s:g}")
        return self


def _at_least(low: int, **values: int | None) -> None:
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TrainConfigError(f"{name} must be an integer, got {value!r}")
        if value < low:
            raise TrainConfigError(f"{name} must be >= {low}, got {value}")


def _one_of(**choices: tuple[str, tuple[str, ...]]) -> None:
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            raise TrainConfigError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
