"""Every option of ``fit`` (and so of ``%%train``), declared once, with its validation.

Each field is an ``OptionSpec`` (``core.options``) carrying what a user reads about it (help,
choices, metavar, flags): ``%%train`` builds its ``@argument``s from these fields and the training
guide's option list is generated from them, so ``%%train?``, ``fit(**options)`` and the docs
cannot disagree. ``--name``, ``--device`` and ``--stall-timeout`` are declared once for every door
(``core.options.run_options``) and only say here what their default means in ``fit``. The
module imports neither torch nor IPython: the magic reads it at ``%load_ext`` time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..core.events.stall_clock import BadStallTimeout, check_stall_timeout
from ..core.options.option_spec import OptionSpec, option, specs_of
from ..core.options.run_options import DEVICE, NAME, STALL_TIMEOUT
from ..core.runs.names import BadRunName, check_run_name
from ..trackers.destinations import OFF, SYNTAX, TrackSpecError, as_strings, default_track, parse_track
from ..trackers.extras import check_installed
from .train_errors import TrainConfigError

AMP_MODES = ("auto", "bf16", "fp16", "off")
STRATEGIES = ("auto", "ddp", "fsdp")
SCHEDULER_INTERVALS = ("step", "epoch")
DEFAULT_LOG_INTERVAL_S = 0.5
MAX_LOG_INTERVAL_S = 86400.0  # a day: longer than any loss read is worth waiting for, and finite
MAX_SEED = 2**63 - 1  # torch's generators take a 64-bit seed (the data order adds the epoch to it)


@dataclass
class FitOptions:
    epochs: int | None = option(
        None, "Passes over the training data.", default_text="1, or as many as --max-steps needs"
    )
    max_steps: int | None = option(
        None, "Stop after this many optimizer steps (whichever of epochs and steps ends first).", metavar="STEPS"
    )
    batch_size: int | None = option(
        None, "Batch size when the training data is a Dataset or tensors, not a DataLoader.", metavar="N"
    )
    shuffle: bool = option(
        True, "Keep the data order (only when the engine builds the batches).", flags=("--no-shuffle",)
    )
    drop_last: bool = option(
        False, "Drop each epoch's last incomplete batch (only when the engine builds the batches)."
    )
    amp: str = option(
        "auto",
        "Mixed precision. auto: bf16 on CUDA that supports it, fp16 with a GradScaler on older CUDA, off on CPU.",
        choices=AMP_MODES,
    )
    accum: int = option(1, "Gradient accumulation: micro-batches per optimizer step.", metavar="N")
    clip: float | None = option(None, "Clip the gradient norm to NORM (unscaled first under fp16).", metavar="NORM")
    compile: bool = option(False, "torch.compile the model (the first steps are slow while it compiles).")
    device: str | None = DEVICE.field(default_text="cuda:LOCAL_RANK when CUDA is available, else cpu")
    seed: int | None = option(None, "Seed python, numpy and torch; also fixes the data order.")
    log_every: int | None = option(
        None,
        "Read the loss every STEPS optimizer steps (reading it is the only device sync of the loop).",
        metavar="STEPS",
        default_text="about every --log-interval seconds",
    )
    log_interval_s: float = option(
        DEFAULT_LOG_INTERVAL_S,
        "Seconds between loss reads when --log-every is not given.",
        metavar="SECONDS",
        flags=("--log-interval",),
    )
    val_every: int | None = option(
        None, "Validate every STEPS optimizer steps.", metavar="STEPS", default_text="each epoch end"
    )
    ckpt_every: int | None = option(
        None, "Checkpoint every STEPS optimizer steps.", metavar="STEPS", default_text="each epoch end"
    )
    ckpt_dir: str | None = option(
        None, "Where checkpoints go.", metavar="DIR", default_text="the run's folder under JIYU_HOME"
    )
    keep_ckpts: int = option(3, "Keep the newest N checkpoints of this call.", metavar="N")
    save_ckpts: bool = option(True, "Save no checkpoints.", flags=("--no-ckpt",))
    resume: str | None = option(
        None,
        "Continue from a checkpoint: a path; 'last': the newest checkpoint of the last run with the same "
        "name in this notebook, wherever it was written (refused when that run left none, e.g. it ran "
        "with --no-ckpt); 'last-checkpoint': the newest checkpoint of any earlier run of that name.",
        metavar="PATH|last|last-checkpoint",
    )
    strategy: str = option("auto", "Under torchrun: ddp or fsdp (auto: ddp).", choices=STRATEGIES)
    fast_data: bool = option(
        True,
        "Iterate a TensorDataset DataLoader as it is instead of the engine's batched gather.",
        flags=("--no-fast-data",),
    )
    scheduler_interval: str = option(
        "step", "When the scheduler steps: after each optimizer step or each epoch.", choices=SCHEDULER_INTERVALS
    )
    name: str | None = NAME.field(default_text="notebook:ModelClass")
    stall_timeout: float | None = STALL_TIMEOUT.field(
        default_text="the job's --stall-timeout, else the larger of 10x the median step time and 300"
    )
    track: str | None = option(
        None,
        f"Follow the run live in TensorBoard or MLflow: {SYNTAX}, a comma list or the flag repeated for "
        "both; none: neither. A follower outside the training loop writes what the run logs (scalars, "
        "parameters, status); tensorboard writes under $JIYU_HOME/tensorboard, mlflow to "
        "$MLFLOW_TRACKING_URI or sqlite:///$JIYU_HOME/mlflow.db.",
        metavar="TRACKER[:WHERE]",
        default_text="$JIYU_TRACK, else track: in $JIYU_HOME/config.yaml, else none",
        repeatable=True,
    )

    @classmethod
    def from_kwargs(cls, options: dict) -> FitOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TrainConfigError(f"unknown option {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return cls(**options).validate()

    def validate(self) -> FitOptions:
        _at_least(
            1,
            epochs=self.epochs,
            max_steps=self.max_steps,
            batch_size=self.batch_size,
            accum=self.accum,
            log_every=self.log_every,
            val_every=self.val_every,
            ckpt_every=self.ckpt_every,
            keep_ckpts=self.keep_ckpts,
        )
        _one_of(
            amp=(self.amp, AMP_MODES),
            strategy=(self.strategy, STRATEGIES),
            scheduler_interval=(self.scheduler_interval, SCHEDULER_INTERVALS),
        )
        if self.clip is not None and not self.clip > 0:
            raise TrainConfigError(f"clip must be a positive gradient norm, got {self.clip:g}")
        try:  # the one rule for stall timeouts, as for jobs
            self.stall_timeout = check_stall_timeout(self.stall_timeout)
        except BadStallTimeout as error:
            raise TrainConfigError(f"stall_timeout must be {error}, got {self.stall_timeout!r}") from None
        if isinstance(self.log_interval_s, bool) or not isinstance(self.log_interval_s, (int, float)):
            raise TrainConfigError(f"log_interval_s must be a number of seconds, got {self.log_interval_s!r}")
        if not 0 < self.log_interval_s <= MAX_LOG_INTERVAL_S:
            raise TrainConfigError(
                f"log_interval_s must be seconds above 0 and at most {MAX_LOG_INTERVAL_S:g}, "
                f"got {self.log_interval_s:g}"
            )
        if self.seed is not None:
            whole = isinstance(self.seed, int) and not isinstance(self.seed, bool)
            if not whole or not -MAX_SEED - 1 <= self.seed <= MAX_SEED:
                raise TrainConfigError(f"seed must be a whole number from -2**63 to 2**63-1, got {self.seed!r}")
        self.track = _tracking(self.track)
        try:  # the one rule for run names: they end up in tables, terminals and batch scripts
            self.name = check_run_name(self.name)
        except BadRunName as error:
            raise TrainConfigError(f"name: {error}") from None
        return self


def option_specs() -> list[OptionSpec]:
    """The options of ``fit`` in declaration order, for adapters that parse them (``%%train``)
    and for the docs' option list."""
    return specs_of(FitOptions)


def flag_of(name: str) -> str:
    """``save_ckpts`` -> ``--no-ckpt``: an option named as the user types it."""
    return next((spec.flag for spec in option_specs() if spec.name == name), "--" + name.replace("_", "-"))


def _tracking(value: str | list[str] | None) -> str | None:
    """``track`` as its canonical comma list (absolute folders and URIs: a job's ranks and
    followers read it elsewhere), ``none`` for nothing; None (not given) stays None: the
    default is the launch's (``tracked``)."""
    if value is None:
        return None
    try:
        destinations = parse_track(value)
        check_installed(destinations)
    except TrackSpecError as error:
        raise TrainConfigError(str(error)) from None
    return ",".join(as_strings(destinations)) or OFF[0]


def tracked(track: str | None, default: str | None = None) -> list[str]:
    """The destinations of a validated ``track``; when it was not given, the default:
    ``default`` (``$JIYU_TRACK``, as the process's entry point read it), else ``track:`` in
    ``$JIYU_HOME/config.yaml``. A bad default raises ``TrainConfigError`` in one line."""
    if track is not None:
        return [] if track in OFF else track.split(",")
    try:
        destinations = default_track(default)
        check_installed(destinations)
    except TrackSpecError as error:
        raise TrainConfigError(f"the default tracker: {error}") from None
    return as_strings(destinations)


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
