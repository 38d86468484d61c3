"""``%%train``: run the cell as set-up, then train what it defined, with a live dashboard.

The magic only parses, looks objects up and renders: :func:`fit_kwargs` turns the parsed
options plus the user's namespace into ``fit`` keyword arguments (the ``--nproc`` launcher
reuses it), and the engine (``jiyu_magics.train``, imported on first use: ``%load_ext`` stays
free of torch) does the training.
"""

from __future__ import annotations

import os
import re
from argparse import Namespace

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .frontend import in_notebook

# option name -> (default variable name, required)
OBJECTS = {
    "model": ("model", True),
    "optimizer": ("optimizer", True),
    "train_loader": ("train_loader", True),
    "loss_fn": ("loss_fn", False),
    "val_loader": ("val_loader", False),
    "scheduler": ("scheduler", False),
    "train_step": ("train_step", False),
}
FIT_ARGUMENT = {"train_loader": "train_data", "val_loader": "val_data"}
PASSED_OPTIONS = ("epochs", "max_steps", "batch_size", "amp", "accum", "clip", "compile", "device", "seed",
                  "log_every", "val_every", "ckpt_every", "ckpt_dir", "keep_ckpts", "resume", "strategy", "name")


def under_torchrun() -> bool:
    """In a torchrun rank (a ``%%train --nproc`` export replaying this cell): train here."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def parse_options(line: str) -> Namespace:
    """``%%train`` options parsed as the magic parses them (for the ``--nproc`` launcher)."""
    return parse_argstring(TrainMagics.train, line)


def fit_kwargs(args: Namespace, namespace: dict) -> dict:
    """``fit`` keyword arguments from parsed ``%%train`` options and the user's variables.
    Raises a one-line ``UsageError`` for a missing object or conflicting options."""
    kwargs = _objects(args, namespace)
    for name in PASSED_OPTIONS:
        value = getattr(args, name)
        if value is not None and value is not False:
            kwargs[name] = value
    kwargs["save_ckpts"] = not args.no_ckpt
    kwargs["fast_data"] = not args.no_fast_data
    if args.no_ckpt and args.ckpt_every:
        raise UsageError("--no-ckpt and --ckpt-every conflict: choose one")
    _check_options(kwargs)
    return kwargs


def _objects(args: Namespace, namespace: dict) -> dict:
    kwargs = {}
    for option, (default, required) in OBJECTS.items():
        given = getattr(args, option)
        name = given or default
        if name in namespace and namespace[name] is not None:
            kwargs[FIT_ARGUMENT.get(option, option)] = namespace[name]
        elif given or required:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"no {option} named {name!r} in the notebook: define it in the cell or pass {flag} NAME")
    if "loss_fn" in kwargs and "train_step" in kwargs:
        if args.loss_fn and args.train_step:
            raise UsageError("--loss-fn and --train-step conflict: train_step computes the loss itself")
        if not (args.loss_fn or args.train_step):
            raise UsageError("both loss_fn and train_step are defined: pass --loss-fn or --train-step to choose")
        kwargs.pop("train_step" if args.loss_fn else "loss_fn")
    return kwargs


def _check_options(kwargs: dict) -> None:
    from ..train import FitOptions, TrainConfigError

    try:
        FitOptions.from_kwargs({k: v for k, v in kwargs.items() if k in FitOptions.__dataclass_fields__})
    except TrainConfigError as error:
        raise UsageError(as_flag_message(str(error))) from None


def as_flag_message(message: str) -> str:
    """``epochs must be >= 1`` -> ``--epochs must be >= 1``: say it as the user typed it."""
    return re.sub(r"^([a-z_]+)(?= must)", lambda m: "--" + m.group(1).replace("_", "-"), message)


def is_rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"


@magics_class
class TrainMagics(Magics):
    dashboard = None  # the latest monitor (dashboard or text progress), for inspection

    @magic_arguments()
    @argument("--epochs", type=int, help="Passes over the training data (default 1, or as many as --max-steps needs).")
    @argument("--max-steps", type=int, help="Stop after this many optimizer steps (whichever of epochs/steps ends first).")
    @argument("--amp", choices=("auto", "bf16", "fp16", "off"), help="Mixed precision. auto (default): bf16 on CUDA "
              "that supports it, fp16 with a GradScaler on older CUDA, off on CPU.")
    @argument("--accum", type=int, help="Gradient accumulation: micro-batches per optimizer step (default 1).")
    @argument("--clip", type=float, metavar="NORM", help="Clip the gradient norm to NORM (unscaled first under fp16).")
    @argument("--compile", action="store_true", help="torch.compile the model (first steps are slow while it compiles).")
    @argument("--device", help="cuda, cuda:1, cpu ... (default: the GPU if there is one, else cpu).")
    @argument("--seed", type=int, help="Seed python, numpy and torch; also fixes the data order.")
    @argument("--batch-size", type=int, help="Batch size when train_loader is a Dataset or tensors, not a DataLoader.")
    @argument("--log-every", type=int, metavar="STEPS", help="Read the loss every STEPS steps "
              "(default: about every 0.5 s; reading it is the only device sync of the loop).")
    @argument("--val-every", type=int, metavar="STEPS", help="Validate every STEPS steps (default: each epoch end).")
    @argument("--ckpt-every", type=int, metavar="STEPS", help="Checkpoint every STEPS steps (default: each epoch end).")
    @argument("--ckpt-dir", help="Where checkpoints go (default: the run's folder under JIYU_HOME).")
    @argument("--keep-ckpts", type=int, metavar="N", help="Keep the newest N checkpoints of this run (default 3).")
    @argument("--no-ckpt", action="store_true", help="Save no checkpoints.")
    @argument("--resume", metavar="PATH|last", help="Continue from a checkpoint: a path, or 'last' (the newest "
              "checkpoint of the last run with the same name in this notebook).")
    @argument("--strategy", choices=("auto", "ddp", "fsdp"), help="Under torchrun: ddp (default) or fsdp.")
    @argument("--nproc", type=int, metavar="N", help="Train with DDP in N processes (one GPU each, or gloo on the "
              "CPU) under torchrun, started from what this notebook executed; the kernel's model starts them and "
              "gets rank 0's final weights back. Without it: in this kernel.")
    @argument("--no-fast-data", action="store_true", help="Iterate a TensorDataset DataLoader as it is instead of the "
              "engine's batched gather.")
    @argument("--refresh", type=float, metavar="SECONDS", help="Dashboard refresh interval (default 1 s; "
              "text progress every 10 s).")
    @argument("--name", help="Run name in %%jobs and the lab panel (default: notebook:ModelClass).")
    @argument("--model", metavar="VAR", help="Variable holding the model (default: model).")
    @argument("--optimizer", metavar="VAR", help="Variable holding the optimizer (default: optimizer).")
    @argument("--train-loader", metavar="VAR", help="Variable holding the training data (default: train_loader).")
    @argument("--val-loader", metavar="VAR", help="Variable holding validation data (default: val_loader, optional).")
    @argument("--loss-fn", metavar="VAR", help="Variable holding loss_fn(outputs, targets) (default: loss_fn).")
    @argument("--scheduler", metavar="VAR", help="Variable holding an LR scheduler, stepped every optimizer step "
              "(default: scheduler, optional).")
    @argument("--train-step", metavar="VAR", help="Variable holding train_step(model, batch) -> loss, for batches "
              "that are not (inputs, targets) or dicts (default: train_step, optional).")
    @argument("--result", metavar="VAR", default="train_result", help="Variable the result is stored in "
              "(default: train_result).")
    @line_cell_magic
    def train(self, line: str, cell: str | None = None):
        """Run the cell, then train the model it defines, with a live dashboard.

        The cell body runs once in the notebook's namespace; then training takes ``model``,
        ``optimizer``, ``train_loader`` and, when present, ``loss_fn``, ``val_loader``,
        ``scheduler``, ``train_step`` from it (rename with --model etc.). The dashboard shows
        the loss curve, progress and ETA, samples/s, LR, GPU memory and a Stop button; Stop
        or a kernel interrupt ends at the next step with a checkpoint. The trained model stays
        in the notebook and the result (history, run id, checkpoints) goes to ``train_result``.

        Examples::

            %%train --epochs 3 --amp bf16
            model = Net(); optimizer = torch.optim.AdamW(model.parameters(), 3e-4)
            train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
            loss_fn = torch.nn.CrossEntropyLoss()

            %train --resume last --epochs 6     # line form: no set-up code, same options
        """
        args = parse_argstring(self.train, line)
        if args.nproc is not None and args.nproc < 1:
            raise UsageError(f"--nproc must be >= 1, got {args.nproc}")
        if args.refresh is not None and not args.refresh > 0:
            raise UsageError(f"--refresh takes a positive number of seconds, got {args.refresh:g}")
        launching = args.nproc is not None and not under_torchrun()
        if launching:
            from .ddp_launch import check_devices

            check_devices(args.nproc, args.device)
        if cell and cell.strip() and not self.shell.run_cell(cell, store_history=False).success:
            raise UsageError(f"the cell body failed (traceback above); nothing was {'launched' if launching else 'trained'}")
        kwargs = fit_kwargs(args, self.shell.user_ns)
        if launching:
            return self._launch(line, args, cell, kwargs["model"])
        self._train(args, kwargs)

    def _launch(self, line: str, args: Namespace, cell: str | None, model) -> None:
        """``--nproc``: the same cell under torchrun, from this kernel's model and history."""
        from .ddp_launch import launch_ddp

        launch_ddp(self.shell, line, args, cell, model, on_monitor=lambda m: setattr(TrainMagics, "dashboard", m))

    def _train(self, args: Namespace, kwargs: dict) -> None:
        from ..train import StopSignal, TrainConfigError, TrainingFailed, fit

        stop = StopSignal()
        monitor = self._monitor(args, stop)
        try:
            result = fit(**kwargs, monitor=monitor, stop=stop)
        except TrainingFailed as failure:
            self.shell.user_ns[args.result] = failure.result
            raise
        except TrainConfigError as error:
            raise UsageError(str(error)) from None
        finally:
            if monitor is not None:
                monitor.close()
        self.shell.user_ns[args.result] = result

    def _monitor(self, args: Namespace, stop):
        if not is_rank_zero():
            return None
        if in_notebook(self.shell):
            from ..widgets.train_dashboard import TrainingDashboard

            monitor = TrainingDashboard(refresh=args.refresh or 1.0, stop=stop).show()
        else:
            from ..views.train_text import TEXT_INTERVAL_S
            from ..widgets.text_progress import TextProgress

            monitor = TextProgress(interval=args.refresh or TEXT_INTERVAL_S)
        TrainMagics.dashboard = monitor
        return monitor


MAGICS = [TrainMagics]
