"""``%%train``: run the cell as set-up, then train what it defined, with a live dashboard.

The magic only parses, looks objects up and renders: :func:`fit_kwargs` turns the parsed
options plus the user's namespace into ``fit`` keyword arguments (the ``--nproc`` launcher
reuses it), and the engine (``jiyu_magics.train``, imported on first use: ``%load_ext`` stays
free of torch) does the training.
"""

from __future__ import annotations

import keyword
import re
from argparse import Namespace
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..core.options.option_spec import BadOptionValue, OptionSpec
from ..core.options.run_options import NPROC
from ..train.fit_options import FitOptions, flag_of, option_specs
from ..train.train_errors import TrainConfigError
from .cell_history import CellHistory
from .defining_cell import defining_cells
from .frontend import in_notebook
from .magic_line import check_braced, parse_line, raw_magic_line
from .train_objects import NONE, OBJECTS, choose, identities, rebound, watched
from .user_traceback import raise_without_jiyu_frames

if TYPE_CHECKING:  # imported when a cell trains: loading the extension stays light
    from IPython.core.interactiveshell import InteractiveShell

    from ..core.runs.launch_context import LaunchContext
    from ..widgets.text_progress import TextProgress
    from ..widgets.train_dashboard import TrainingDashboard

FIT_OPTIONS = option_specs()
# --nproc as a submission declares it (bounds, --nproc-per-node); absent, the cell trains in the kernel
NPROC_OPTION = NPROC.but(
    default=None,
    help="Train with DDP in N processes (one GPU each, or gloo on the CPU) under torchrun, started from "
    "what this notebook executed (since its last %reset); the kernel's model starts them and gets rank 0's "
    "final weights back. Without it: in this kernel.",
)

# Options of the magic itself (fit's options come from FitOptions), declared once.
MAGIC_OPTIONS: list[tuple[tuple[str, ...], dict]] = [
    (
        NPROC_OPTION.flags,
        NPROC_OPTION.argparse_kwargs(unset=True),
    ),
    (
        ("--refresh",),
        dict(
            type=float,
            metavar="SECONDS",
            help="Dashboard refresh interval. Default: 1 s "
            "(text progress: 10 s in a log, about 1 s redrawn in place on a terminal).",
        ),
    ),
    (
        ("--scale",),
        dict(
            choices=("auto", "log", "linear"),
            default="auto",
            help="The loss chart's y axis (live "
            "and in the end-of-run summary): log, linear, or auto (log when the losses span more "
            "than 30x). The smoothed line is averaged in the space shown. Default: auto.",
        ),
    ),
    *(
        (
            ("--" + name.replace("_", "-"),),
            dict(
                metavar="VAR",
                help=f"Variable holding {what}. Default: {default}"
                + (
                    "."
                    if required
                    else f", from this cell, or from the notebook"
                    f"{' when it steps this optimizer' if name == 'scheduler' else ''} "
                    f"(then named in the run's header); {NONE}: none."
                ),
            ),
        )
        for name, (default, required, what) in OBJECTS.items()
    ),
    (
        ("--no-val",),
        dict(
            action="store_true",
            help=f"Validate nothing, even when the notebook has a val_loader (as --val-loader {NONE}).",
        ),
    ),
    (
        ("--result",),
        dict(metavar="VAR", default="train_result", help="Variable the result is stored in. Default: train_result."),
    ),
]


def fit_argument(spec: OptionSpec) -> tuple[tuple[str, ...], dict]:
    """A ``fit`` option as an ``@argument``. Its argparse default is None ("not given"), so a
    value the user did not type comes from the declaration's own default in ``fit_kwargs``."""
    return spec.flags, spec.argparse_kwargs(unset=True)


def with_train_options(func):
    """``@argument`` for every ``fit`` option, then the magic's own (in this order in ``%%train?``)."""
    for flags, options in reversed([*map(fit_argument, FIT_OPTIONS), *MAGIC_OPTIONS]):
        func = argument(*flags, **options)(func)
    return magic_arguments()(func)


def parse_options(line: str) -> Namespace:
    """``%%train`` options parsed as the magic parses them (for the ``--nproc`` launcher)."""
    return parse_line(TrainMagics.train, line)


def fit_kwargs(
    args: Namespace, namespace: dict, fresh: frozenset[str] = frozenset(), defined_in=lambda name: None
) -> dict:
    """``fit`` keyword arguments from parsed ``%%train`` options and the user's variables: every
    ``fit`` option, as typed or else its declared default, and the objects (``train_objects``:
    ``fresh`` are the variables the cell body bound, ``defined_in`` finds an earlier cell).
    Raises a one-line ``UsageError`` for a missing object or conflicting options."""
    chosen = choose(args, namespace, fresh, defined_in)
    kwargs = {**chosen.fit_arguments(), "from_notebook": chosen.note()}
    for spec in FIT_OPTIONS:
        given = getattr(args, spec.name)
        kwargs[spec.name] = spec.default if given is None else given
    if args.save_ckpts is False and args.ckpt_every:
        raise UsageError("--no-ckpt and --ckpt-every conflict: choose one")
    _check_options(kwargs)
    return kwargs


def _check_options(kwargs: dict) -> None:
    try:
        FitOptions.from_kwargs({spec.name: kwargs[spec.name] for spec in FIT_OPTIONS})
    except TrainConfigError as error:
        raise UsageError(as_flag_message(str(error))) from None


def as_flag_message(message: str) -> str:
    """``epochs must be >= 1`` -> ``--epochs must be >= 1``: say it as the user typed it."""
    return re.sub(r"^([a-z_]+)(?= must)", lambda m: flag_of(m.group(1)), message)


@magics_class
class TrainMagics(Magics):
    dashboard: TrainingDashboard | TextProgress | None = None  # the latest monitor, for inspection
    # what a launcher says, where it is not this process's environment: a ranks pool's worker
    # sets it for the %%train its kernel sends (its run); None: each call reads the environment
    launch_context: LaunchContext | None = None

    @property
    def ipython(self) -> InteractiveShell:
        """The shell IPython registered the magics with (``Magics.shell``: None only for an
        instance made outside one)."""
        if self.shell is None:
            raise UsageError("%%train runs in an IPython shell")
        return self.shell

    @with_train_options
    @line_cell_magic
    def train(self, line: str, cell: str | None = None):
        """Run the cell, then train the model it defines, with a live dashboard.

        The cell body runs once in the notebook's namespace; then training takes ``model``,
        ``optimizer``, ``train_loader`` and, when present, ``loss_fn``, ``val_loader``,
        ``scheduler``, ``train_step`` from it (rename with --model etc.). Those optional objects
        come from this cell, or else from the notebook, and the run's header then names them
        with the cell that made them ("from the notebook: val_loader (In [7])"); a scheduler
        of another optimizer is left out when it is a leftover, refused when this cell or
        --scheduler names it; --loss-fn NONE, --no-val etc. leave one out. The dashboard shows
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
        __tracebackhide__ = True  # noqa: F841 (IPython hides this frame: an error shows the user's)
        raw = raw_magic_line(self.shell, "train", line)
        check_braced("train", line, raw, self.ipython.user_ns)
        args = parse_line(self.train, line)
        self._raw_line = raw
        context = self._launch_context()
        launching = self._check(args, context)
        pool = self._pool(args) if launching else None
        if pool is not None:
            return self._launch(line, args, cell, None, context, pool)
        if launching:
            kwargs = self._run_body(args, cell, launching, context)
            return self._launch(line, args, cell, kwargs["model"], context, config=kwargs["config"])
        from .cell_log import cell_log

        # a launcher writes the log itself: a job, --nproc's ranks (JIYU_RUN_ID), a pool's rank
        with cell_log(context.run_id is not None) as log:  # a kernel run's Logs show what the cell printed
            self._train(args, self._run_body(args, cell, launching, context), log, context)

    def _launch_context(self) -> LaunchContext:
        """What launched this kernel or rank, read once per call (the magic is the kernel's
        entry point for it; a test or ``%env`` may change the environment between calls)."""
        from ..core.runs.launch_context import LaunchContext

        return self.launch_context or LaunchContext.from_environ()

    @staticmethod
    def _check(args: Namespace, context: LaunchContext) -> bool:
        """The magic's own options; True when this call launches ranks (``--nproc``)."""
        try:
            NPROC_OPTION.check(args.nproc, "--nproc")
        except BadOptionValue as error:
            raise UsageError(str(error)) from None
        if args.refresh is not None and not args.refresh > 0:
            raise UsageError(f"--refresh takes a positive number of seconds, got {args.refresh:g}")
        if not args.result.isidentifier() or keyword.iskeyword(args.result):
            raise UsageError(f"--result {args.result!r}: expected a variable name (a Python identifier)")
        # in a torchrun rank (a ``%%train --nproc`` export replaying this cell): train here
        launching = args.nproc is not None and context.torchrun_world is None
        if launching:
            from .ddp_launch import check_devices

            check_devices(args.nproc, args.device)
        return launching

    def _run_body(self, args: Namespace, cell: str | None, launching: bool, context: LaunchContext) -> dict:
        """Runs the cell body, then ``fit``'s arguments, knowing which variables the body bound."""
        namespace = self.ipython.user_ns
        before = identities(namespace, watched(args))
        body = bool(cell and cell.strip())
        ran = self.ipython.run_cell(cell, store_history=False) if body else None
        if ran is not None and not ran.success:
            error = ran.error_before_exec or ran.error_in_exec
            if context.torchrun_world is not None and error is not None:
                raise error  # a rank: the body's own error is the failure the cell and the run name
            raise UsageError(
                f"the cell body failed (traceback above); nothing was {'launched' if launching else 'trained'}"
            )
        if body:  # whatever fails next, the kernel keeps what the body bound: --nproc replays it
            CellHistory.of(self.shell).setup_ran = True
        kwargs = fit_kwargs(
            args, namespace, rebound(namespace, before) if body else frozenset(), defining_cells(self.shell)
        )
        return {**kwargs, "config": self._config(namespace, cell, context)}

    def _config(self, namespace: dict, body: str | None, context: LaunchContext) -> dict:
        """The notebook's parameters as the run records them (``run_config``)."""
        from .run_config import call_config

        return call_config(namespace, context.notebook, context.run_id, getattr(self, "_raw_line", None), body)

    def _pool(self, args: Namespace):
        """The kernel's ranks pool, when one runs: ``--nproc N`` trains there (N must be its size)."""
        from .ranks_magic import pool_of

        pool = pool_of(self.shell)
        if pool is not None and pool.nproc != args.nproc:
            raise UsageError(
                f"--nproc {args.nproc}: this kernel's ranks pool has {pool.nproc} rank(s); use --nproc "
                f"{pool.nproc}, or %ranks stop first"
            )
        return pool

    def _launch(
        self, line: str, args: Namespace, cell: str | None, model, context: LaunchContext, pool=None, config=None
    ) -> None:
        """``--nproc``: the same cell under torchrun, from this kernel's model and history, or
        on the kernel's ranks pool with the objects its ranks hold."""
        from .ddp_launch import launch_ddp

        launch_ddp(
            self.shell,
            line,
            args,
            cell,
            model,
            on_monitor=lambda m: setattr(TrainMagics, "dashboard", m),
            pool=pool,
            config=config,
            context=context,
        )

    def _train(self, args: Namespace, kwargs: dict, log, context: LaunchContext) -> None:
        from ..train import StopSignal, TrainConfigError, TrainingFailed, fit
        from ..train.monitor import NullMonitor
        from .cell_log import LoggedMonitor

        __tracebackhide__ = True  # noqa: F841
        stop = StopSignal()
        monitor = self._monitor(args, stop, context)
        try:
            result = fit(**kwargs, monitor=LoggedMonitor(monitor or NullMonitor(), log), stop=stop, context=context)
        except TrainingFailed as failure:
            self.ipython.user_ns[args.result] = failure.result
            raise
        except TrainConfigError as error:
            raise UsageError(str(error)) from None
        except Exception as error:
            raise_without_jiyu_frames(error)
            raise
        finally:
            if monitor is not None:
                monitor.close()
        self.ipython.user_ns[args.result] = result

    def _monitor(self, args: Namespace, stop, context: LaunchContext) -> TrainingDashboard | TextProgress | None:
        if not context.rank_zero:
            return None
        monitor: TrainingDashboard | TextProgress
        if in_notebook(self.shell, context):
            from ..widgets.train_dashboard import TrainingDashboard

            monitor = TrainingDashboard(refresh=args.refresh or 1.0, stop=stop, scale=args.scale).show()
        else:
            from ..widgets.text_progress import TextProgress

            monitor = TextProgress(interval=args.refresh)  # 1 s in place on a terminal, 10 s lines elsewhere
        TrainMagics.dashboard = monitor
        return monitor


MAGICS = [TrainMagics]
