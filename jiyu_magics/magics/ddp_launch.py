"""``%%train --nproc N``: the cell as a DDP job under real ``torchrun``, from a live kernel.

The kernel is never forked (fork-based launchers break once anything touched CUDA). The cell
body runs here first, as in single-process training, so bad objects fail before any process
starts; then what this kernel executed plus this cell is exported to a script, the model's
current weights are saved for every rank to start from, and torchrun runs the script as a
child process group. The dashboard follows rank 0's event log and each rank's status; Stop or
a kernel interrupt sends SIGTERM to every process (the ranks agree on a step, checkpoint and
exit), a second interrupt kills them. At the end rank 0's final weights are loaded into the
kernel's ``model`` and the result is bound as after single-process training.
"""

from __future__ import annotations

import os
import threading
from argparse import Namespace

from IPython.core.error import UsageError

from .. import jobs
from ..core.event_log import read_events
from ..core.run_files import RunFiles
from ..core.run_store import RunStore
from ..jobs.process import process_tree as processes
from ..jobs.launch_spec import check_fits_devices
from ..jobs.export.kernel_replay import relaunch_history
from .frontend import in_notebook
from .cell_history import CellHistory

STOP_GRACE_S = 10.0


def check_devices(nproc: int, device: str | None) -> None:
    """One GPU per rank (the jobs' own check, through NVML: the kernel's CUDA state is never
    touched). Ranks on the CPU use gloo, any number of them."""
    if device and device.startswith("cpu"):
        return
    try:
        check_fits_devices(nproc)
    except jobs.JobError as error:
        raise UsageError(str(error)) from None


class DdpLaunch:
    def __init__(self, shell, line: str, args: Namespace, cell: str | None):
        self.shell, self.line, self.args, self.cell = shell, line, args, cell or ""
        self.store = RunStore()
        self.stop_sent = threading.Event()
        self.stop_wanted = False

    def run(self):
        from .train_magic import fit_kwargs

        check_devices(self.args.nproc, self.args.device)
        if self.cell.strip() and not self.shell.run_cell(self.cell, store_history=False).success:
            raise UsageError("the cell body failed (traceback above); nothing was launched")
        self.model = fit_kwargs(self.args, self.shell.user_ns)["model"]
        self._prepare()
        self.launch = jobs.Launch.start(self.files.script, nproc=self.args.nproc, run_id=self.run_id,
                                        cwd=os.getcwd(), env=self._environment())
        self.store.mark_running(self.run_id, pid=self.launch.pid, pgid=self.launch.pgid)
        try:
            self._follow()
        except BaseException as error:  # never leave ranks behind, nor a run "running"
            self.launch.stop(grace=0)
            self.store.finish(self.run_id, "failed", exit_code=self.launch.returncode, error=str(error) or repr(error))
            raise
        finally:
            self._leave_nothing_running()
        return self._finish()

    # -- before --------------------------------------------------------------------------------
    def _prepare(self) -> None:
        from ..train.weight_handoff import save_weights
        from ..train.run_binding import NOTEBOOK_ENV, default_name

        name = self.args.name or default_name(self.model)
        run = self.store.create("ddp", name, nproc=self.args.nproc, notebook=os.environ.get(NOTEBOOK_ENV),
                                params={"train": self.line})
        self.run_id, self.files = run.id, RunFiles.of(run.id).create()
        history = relaunch_history(CellHistory.of(self.shell).cells())
        try:
            export = jobs.export_history(history, current=f"%%train {self.line}\n{self.cell}", best_effort=True)
        except jobs.JobError as error:  # e.g. a syntax error the exporter found in a replayed cell
            self.store.finish(self.run_id, "failed", error=str(error))
            raise UsageError(str(error)) from None
        export.write(self.files.script)
        self.init_weights, self.final_weights = self.files.root / "init.pt", self.files.root / "final.pt"
        save_weights(self.model, self.init_weights)

    def _environment(self) -> dict:
        """What the ranks need beyond this kernel's environment: the weights to start from and
        to hand back, and the notebook's name (runs are named and resumed by it)."""
        from ..train.weight_handoff import FINAL_WEIGHTS_ENV, INIT_WEIGHTS_ENV
        from ..train.run_binding import NOTEBOOK_ENV

        extra = {INIT_WEIGHTS_ENV: str(self.init_weights), FINAL_WEIGHTS_ENV: str(self.final_weights)}
        if os.environ.get(NOTEBOOK_ENV):
            extra[NOTEBOOK_ENV] = os.environ[NOTEBOOK_ENV]
        return extra

    # -- during --------------------------------------------------------------------------------
    def _monitor(self):
        if in_notebook(self.shell):
            from ..widgets.ddp_dashboard import DdpDashboard

            return DdpDashboard(self.launch, refresh=self.args.refresh or 1.0, on_stop=self._request_stop).show()
        from ..views.train_text import TEXT_INTERVAL_S
        from ..widgets.text_progress import TextProgress

        return TextProgress(interval=self.args.refresh or TEXT_INTERVAL_S)

    def _follow(self) -> None:
        from ..widgets.event_follow import follow
        from .train_magic import TrainMagics

        self.monitor = TrainMagics.dashboard = self._monitor()
        offset, path = 0, self.files.events
        while True:
            try:
                offset = follow(self.monitor, path, offset, until=self._should_return, stop_at_end=False)
                if self.launch.poll() is not None:
                    return
                self._send_stop()
            except KeyboardInterrupt:
                if self.stop_sent.is_set():  # a second interrupt: no more waiting
                    self.launch.stop(grace=0)
                    return
                self._send_stop()

    def _should_return(self) -> bool:
        return self.launch.poll() is not None or (self.stop_wanted and not self.stop_sent.is_set())

    def _request_stop(self) -> None:
        self.stop_wanted = True

    def _send_stop(self) -> None:
        """SIGTERM to every process, SIGKILL after the grace period, on a thread: the dashboard
        keeps showing the ranks checkpoint and exit meanwhile."""
        if self.stop_sent.is_set():
            return
        self.stop_sent.set()
        self.store.request_stop(self.run_id)
        threading.Thread(target=self.launch.stop, args=(STOP_GRACE_S,), daemon=True).start()

    def _leave_nothing_running(self) -> None:
        if self.launch.poll() is None or processes.tagged(self.run_id):
            self.launch.stop(grace=STOP_GRACE_S if not self.stop_sent.is_set() else 0)

    # -- after ---------------------------------------------------------------------------------
    def _finish(self):
        from ..train.weight_handoff import load_weights
        from ..train.fit_result import FitResult

        code = self.launch.wait()
        events, _ = read_events(self.files.events)
        status = outcome(code, self.stop_sent.is_set(), events)
        error = self.launch.error_line() if status == "failed" else None
        self.store.finish(self.run_id, status, exit_code=code, error=error)
        if hasattr(self.monitor, "close"):
            self.monitor.close()
        if status == "failed":
            raise RankFailure(f"%%train --nproc {self.args.nproc} failed: {error}")
        result = FitResult.from_events(self.run_id, events, status)
        if self.final_weights.exists():
            load_weights(self.model, self.final_weights)
        elif status == "stopped":
            result.message += " (stopped before the ranks could hand back their weights: the kernel's model is unchanged)"
        self.shell.user_ns[self.args.result] = result
        return None


def outcome(exit_code: int, stop_sent: bool, events: list[dict]) -> str:
    """How the launch ended: as rank 0's engine said when torchrun exited cleanly (a stop that
    crossed the last step still succeeded), stopped when we stopped it, else failed."""
    ended = [e.get("status") for e in events if e.get("kind") == "end"]
    if exit_code == 0:
        return ended[-1] if ended and ended[-1] in ("succeeded", "stopped") else "succeeded"
    return "stopped" if stop_sent else "failed"


class RankFailure(RuntimeError):
    """A rank of ``%%train --nproc`` failed; shown as one line (the first failing rank's error)."""

    def _render_traceback_(self) -> list[str]:
        return [f"RankFailure: {self}"]


def launch_ddp(shell, line: str, args: Namespace, cell: str | None):
    return DdpLaunch(shell, line, args, cell).run()

