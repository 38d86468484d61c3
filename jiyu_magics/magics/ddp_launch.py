"""``%%train --nproc N``: the cell as a DDP job under real ``torchrun``, from a live kernel.

The kernel is never forked (fork-based launchers break once anything touched CUDA). The
``%%train`` magic has already run the cell body here, as in single-process training, so bad
objects failed before any process started. This adapter exports what the kernel executed plus
this cell to a script, saves the model's current weights for every rank to start from, and hands
the run to its lifecycle owner (``jobs.lifecycle``, in this thread), which waits in the GPU
queue while the GPUs it needs are leased by others (a kernel interrupt leaves the queue), starts
torchrun as a child process group on its leased GPUs and decides and records how it ended.
Meanwhile the dashboard follows rank 0's event log and each rank's state; Stop or a kernel
interrupt asks the owner to stop (the ranks agree on a step, checkpoint and exit), a second
interrupt kills them. At the end rank 0's final weights are loaded into the kernel's ``model``
and the result is bound as after single-process training."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

from IPython.core.error import UsageError

from .. import jobs
from ..core.events.log import read_events
from ..core.runs.launch_context import FINAL_WEIGHTS_ENV, INIT_WEIGHTS_ENV, NOTEBOOK_ENV, LaunchContext
from ..core.runs.model import RunKind, RunStatus
from ..jobs.export.kernel_replay import relaunch_history
from ..jobs.launch_spec import LaunchSpec, visible_gpus
from ..jobs.lifecycle import RunLifecycle
from ..jobs.submit_options import SubmitOptions
from ..ranks.placement import PULL_HINT, PoolPlacement, PoolTraining
from ..train.monitor import Monitor
from .cell_history import CellHistory
from .frontend import in_notebook


def check_devices(nproc: int, device: str | None) -> None:
    """One GPU per rank (the jobs' own check, through NVML: the kernel's CUDA state is never
    touched). Ranks on the CPU use gloo, any number of them."""
    launch_spec(nproc, device)


def launch_spec(nproc: int, device: str | None) -> LaunchSpec:
    """The launch, with the GPUs it will lease: one per rank where GPUs are visible, none for
    ``--device cpu`` (or on a machine without GPUs)."""
    on_cpu = bool(device and device.startswith("cpu"))
    try:
        options = SubmitOptions(nproc=nproc, gpus=0 if on_cpu else None).validated()
        return options.launch_spec().with_gpus(visible_gpus())
    except jobs.JobError as error:
        raise UsageError(str(error)) from None


class DdpLaunch:
    def __init__(
        self,
        shell,
        line: str,
        args: Namespace,
        cell: str | None,
        model,
        on_monitor: Callable[[object], None] | None = None,
        pool=None,
        config: dict | None = None,
        *,
        context: LaunchContext,
    ):
        self.shell, self.line, self.args, self.cell = shell, line, args, cell or ""
        self.context = context  # the kernel's, read where %%train was called
        self.model, self.on_monitor, self.pool = model, on_monitor, pool
        # the run's parameters: the notebook's values (``run_config``), as a kernel run records
        # them; never the magic line itself, which Compare took for a differing parameter
        from ..train.run_facts import plain

        self.config = {str(k): plain(v) for k, v in (config or {}).items()}
        self.offset = 0  # how far the dashboard has read the event log
        self.final_weights: Path | None = None  # where rank 0 hands its weights back (not on a pool)

    def run(self) -> None:
        from ..train.run_binding import default_name

        if self.pool is not None:
            return self._run_on_pool()
        spec = launch_spec(self.args.nproc, self.args.device)
        notebook = self.context.notebook
        self.lifecycle = RunLifecycle.register(
            RunKind.DDP,
            self.args.name or default_name(self.model, notebook),
            spec,
            owner="kernel",
            notebook=notebook,
            params=self.config,
            track=self._track(),  # this kernel follows them (trackers.owner)
        )
        with self.lifecycle:
            # said at once: exporting and torchrun's start take seconds before the dashboard shows
            print(f"jiyu: exporting the notebook for run {self.lifecycle.run_id}…", flush=True)
            self._prepare()
            print(f"jiyu: starting torchrun ({spec.nproc} process{'es' if spec.nproc != 1 else ''})…", flush=True)
            self.lifecycle.start(env=self._environment(), on_wait=lambda line: print(f"jiyu: {line}", flush=True))
            self.monitor = self._monitor()
            self.rank_output = self._rank_output()
            self._follow()
            outcome = self.lifecycle.end()
        self._show_end(outcome)
        self._bind(outcome)

    def _run_on_pool(self) -> None:
        """The cell on the ranks of this kernel's pool: they train on the objects they hold
        (no export, no replay, no torchrun start); the dashboard, Stop, the stall watch and
        the ranks' output as on a fresh launch. The trained model stays in the ranks."""
        from ..jobs.launch_spec import LaunchSpec

        notebook = self.context.notebook
        self.placement = PoolPlacement(self.pool, self._current_cell(), notebook)
        self.lifecycle = RunLifecycle.register(
            RunKind.DDP,
            self.args.name or f"{self.pool.name}-train",
            LaunchSpec(nproc=self.pool.nproc),
            owner="kernel",
            notebook=notebook,
            params={**self.config, "pool": self.pool.run_id},
            placement=self.placement,
            track=self._track(),  # this kernel follows them (trackers.owner)
        )
        with self.lifecycle:
            print(f"jiyu: training run {self.lifecycle.run_id} on ranks pool {self.pool.run_id}…", flush=True)
            self.lifecycle.start()
            self.monitor = self._monitor()
            self.rank_output = self._rank_output()
            self._follow()
            outcome = self.lifecycle.end()
        self._show_end(outcome)
        self._bind(outcome)

    def _track(self) -> list[str]:
        """The trackers this run names (``%%train --track``, checked by the magic), else the default."""
        from ..train.fit_options import FitOptions, tracked

        return tracked(FitOptions(track=self.args.track).validate().track, self.context.track)

    # -- before --------------------------------------------------------------------------------
    def _prepare(self) -> None:
        """The script and the weights the ranks start from, in the run's folder."""
        from ..train.weight_handoff import save_weights

        files = self.lifecycle.files
        history = relaunch_history(CellHistory.of(self.shell).cells())
        try:
            export = jobs.export_history(history, current=self._current_cell(), best_effort=True)
        except jobs.JobError as error:  # e.g. a syntax error the exporter found in a replayed cell
            self.lifecycle.end(error=str(error))
            raise UsageError(str(error)) from None
        export.write(files.script)
        self.init_weights, self.final_weights = files.root / "init.pt", files.root / "final.pt"
        save_weights(self.model, self.init_weights)

    def _current_cell(self) -> str:
        """This call as the ranks run it: ``%train`` (no set-up body) stays a line magic, since
        IPython refuses a ``%%train`` cell whose body is empty."""
        if not self.cell.strip():
            return f"%train {self.line}"
        return f"%%train {self.line}\n{self.cell}"

    def _environment(self) -> dict:
        """What the ranks need beyond this kernel's environment: the weights to start from and
        to hand back, and the notebook's name (runs are named and resumed by it)."""

        extra = {INIT_WEIGHTS_ENV: str(self.init_weights), FINAL_WEIGHTS_ENV: str(self.final_weights)}
        if self.context.notebook:
            extra[NOTEBOOK_ENV] = self.context.notebook
        return extra

    # -- during --------------------------------------------------------------------------------
    def _monitor(self) -> Monitor:
        monitor: Monitor  # the notebook's dashboard, else text progress
        if in_notebook(self.shell, self.context):
            from ..widgets.ddp_dashboard import DdpDashboard

            monitor = DdpDashboard(
                self.lifecycle,
                refresh=self.args.refresh or 1.0,
                scale=self.args.scale,
                on_stop=self.lifecycle.request_stop,
            ).show()
        else:
            from ..widgets.text_progress import TextProgress

            monitor = TextProgress(interval=self.args.refresh)  # 1 s in place on a terminal, 10 s lines elsewhere
        if self.on_monitor is not None:
            self.on_monitor(monitor)
        return monitor

    def _rank_output(self):
        """The ranks' lines under the dashboard (printed in a terminal), rank 0's by default."""
        log = self.lifecycle.files.log
        if in_notebook(self.shell, self.context):
            from ..widgets.rank_output import RankOutput

            return RankOutput(log, ready=lambda: getattr(self.monitor, "handle", None) is not None)
        from ..widgets.rank_output import RankEcho

        return RankEcho(log)

    def _tick(self) -> bool:
        """Once per dashboard poll: the ranks' new lines; True when the ranks ended."""
        self.rank_output.poll()
        return not self.lifecycle.running()

    def _follow(self) -> None:
        """The event log into the dashboard while the ranks run. The first interrupt asks the
        owner to stop (the dashboard shows the ranks checkpoint and exit), a second kills."""
        from ..widgets.event_follow import follow

        while True:
            try:
                self.offset = follow(
                    self.monitor, self.lifecycle.files.events, self.offset, until=self._tick, stop_at_end=False
                )
                return
            except KeyboardInterrupt:
                if self.lifecycle.stop_requested:
                    self.lifecycle.kill()
                    return
                self.lifecycle.request_stop()

    # -- after ---------------------------------------------------------------------------------
    def _show_end(self, outcome) -> None:
        """The events the owner added at the end (a failure's line, its end) reach the
        dashboard before it closes; a stop by request leaves out torchrun's report of the
        ranks it killed (``RankOutput.finish``)."""
        events, self.offset = read_events(self.lifecycle.files.events, self.offset)
        self.monitor.feed(events)
        self.monitor.poll()
        if hasattr(self.monitor, "close"):
            self.monitor.close()
        self.rank_output.finish(stopped=outcome.status is RunStatus.STOPPED)

    def _bind(self, outcome) -> None:
        from ..train.fit_result import FitResult
        from ..train.weight_handoff import load_weights

        if outcome.status is RunStatus.FAILED:
            raise RankFailure(f"%%train --nproc {self.args.nproc} failed: {outcome.error}", self._first_traceback())
        events, _ = read_events(self.lifecycle.files.events)
        result = FitResult.from_events(self.lifecycle.run_id, events, outcome.status.value)
        if self.final_weights is None:
            result.message += PULL_HINT
            self.pool.trained = result
        elif self.final_weights.exists():
            load_weights(self.model, self.final_weights)
        elif outcome.status is RunStatus.STOPPED:
            result.message += (
                " (stopped before the ranks could hand back their weights: the kernel's model is unchanged)"
            )
        self.shell.user_ns[self.args.result] = result

    def _first_traceback(self) -> str | None:
        """The first failing rank's traceback from the log, trimmed of jiyu's and torch elastic's frames."""
        from ..core.runs.rank_output import first_traceback
        from ..jobs.process.rank_records import first_failure

        failed = first_failure(self.lifecycle.ranks())
        if failed is None:
            return None
        if self.pool is not None:  # the rank's own formatted traceback, as its shell showed it
            handle = self.lifecycle.handle
            tracebacks = handle.tracebacks if isinstance(handle, PoolTraining) else {}
            return "\n".join(tracebacks.get(failed.rank, [])) or None
        return first_traceback(self.lifecycle.files.log, failed.rank)


class RankFailure(RuntimeError):
    """A rank of ``%%train --nproc`` failed: one line (the first failing rank's error), then
    that rank's traceback in full, without the launcher's frames."""

    def __init__(self, message: str, traceback: str | None = None):
        super().__init__(message)
        self.traceback = traceback

    def _render_traceback_(self) -> list[str]:
        details = [""] + self.traceback.splitlines() if self.traceback else []
        return [f"RankFailure: {self}", *details]


def launch_ddp(
    shell,
    line: str,
    args: Namespace,
    cell: str | None,
    model,
    on_monitor: Callable[[object], None] | None = None,
    pool=None,
    config: dict | None = None,
    *,
    context: LaunchContext,
) -> None:
    """Trains ``model`` (the kernel's, after the cell body ran) as ``%%train --nproc``; on a
    ranks ``pool`` instead, the ranks' objects (the cell's body runs there, not here).
    ``config``: the notebook's parameters, recorded as the run's; ``context``: the kernel's,
    read where the magic was called."""
    DdpLaunch(shell, line, args, cell, model, on_monitor, pool, config, context=context).run()
