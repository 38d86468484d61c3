"""The run a ``fit`` call writes into, and which checkpoint it resumes from.

Without a launcher's run (``LaunchContext.run_id``: ``JIYU_RUN_ID``) the call registers its own
run (``kind=kernel``, or ``ddp`` for a bare torchrun) and owns its final status. With it, a
launcher (``%submit``, ``%%train --nproc``) made the run and owns the status; the call only
writes events and checkpoints into it, as the run's first, second... call (``fit_calls``: after
a torchrun restart each call resumes from its own checkpoints, which the engine looks for
first), and resumes from the run's newest checkpoint when the launcher set ``JIYU_RESUME``."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.events.log import EventLog, read_events
from ..core.processes.info import process_start_time
from ..core.runs.files import RunFiles, jiyu_home
from ..core.runs.launch_context import LaunchContext
from ..core.runs.model import EventKind, RunStatus
from ..core.runs.names import name_from
from ..core.runs.states import TransitionRefused, ended_as
from ..core.store.database import StoreUnusable
from ..core.store.run_row import Run, new_run_id
from ..core.store.run_store import RunStore
from ..trackers.destinations import parse_track
from ..trackers.follow_process import OWNER_WAIT_S, FollowerProcess
from .checkpoint_files import complete_checkpoints, is_checkpoint, newest_first
from .fit_calls import FitCall
from .process_group import DistContext
from .train_errors import TrainConfigError

UNRECORDED_PREFIX = "unrecorded-"  # the id of a run trained while the store was unusable


@dataclass
class RunBinding:
    run_id: str
    files: RunFiles
    owned: bool  # this call created the run and sets its final status
    events: EventLog | None = None  # rank 0 only
    call: FitCall = FitCall(0, "")  # which call of the run this is (its first, unless launched)
    unrecorded: bool = False  # the run store was unusable: trained, but not in %jobs
    log_lost: bool = False  # its event log could not be written: progress is not recorded either
    context: LaunchContext = LaunchContext()  # what the process's launcher said
    follower: FollowerProcess | None = None  # the trackers' follower of a run this call owns

    @classmethod
    def open(
        cls, name: str, dist: DistContext, params: dict, context: LaunchContext, track: Sequence[str] = ()
    ) -> RunBinding:
        attached = context.run_id
        run_id = attached or dist.broadcast(_register(name, dist, params, context.notebook) if dist.is_writer else None)
        unrecorded = run_id.startswith(UNRECORDED_PREFIX)
        files = RunFiles.of(run_id)
        call = FitCall.next_in(run_id, name, context) if attached else FitCall(0, name)
        binding = cls(run_id, files, owned=not attached, call=call, unrecorded=unrecorded, context=context)
        if dist.is_writer:
            try:
                files.create()
                binding.events = EventLog(files.events)
            except OSError as error:
                binding.drop_log(error)
            if track and binding.owned and binding.events is not None:  # a launcher's run: its owner follows
                binding.follower = FollowerProcess.start(run_id, parse_track(track))
        return binding

    def drop_log(self, error: OSError) -> None:
        """The run's folder or event log cannot be written (a read-only home, a full disk):
        training goes on, unrecorded, and says so once."""
        if self.events is not None:
            try:
                self.events.close()
            except OSError:
                pass
            self.events = None
        if not self.log_lost:
            self.log_lost = True
            if self.unrecorded:
                return  # the store's warning said it: the home cannot take this run
            where = f"{error.strerror or error}: {error.filename or self.files.root}"
            print(
                f"jiyu: this run's event log cannot be written ({where}); training goes on, unrecorded", file=sys.stderr
            )

    def hold_device(self, device, distributed: bool) -> None:
        """A run this call registered in a kernel records a lease on the GPU it trains on
        (launched runs hold theirs from the queue); it says so when other runs hold it too."""
        if not self.owned or self.unrecorded or self.events is None or distributed:
            return
        from .device_lease import DeviceRefused, record_device_lease

        try:
            line = record_device_lease(self.run_id, device, self.context.visible_devices)
        except DeviceRefused as refused:  # another user's GPU on a shared box: nothing trains
            self.finish(RunStatus.FAILED, error=str(refused))
            self.close()
            raise TrainConfigError(str(refused)) from None
        if line:
            print(f"jiyu: {line}", file=sys.stderr)

    @property
    def checkpoint_label(self) -> str:
        return self.call.label

    def finish(self, status: RunStatus, error: str | None = None) -> None:
        """The end of a run this call owns, by the stop rule every owner follows: a run someone
        asked to stop (``jiyu stop`` of a bare torchrun's run) that did not succeed stopped."""
        if self.owned and self.events is not None and not self.unrecorded:
            try:
                store = RunStore()
                status = ended_as(RunStatus(status), store.stored(self.run_id).stop_requested)
                store.finish(self.run_id, status, exit_code=0 if status is RunStatus.SUCCEEDED else None, error=error)
            except TransitionRefused:
                pass  # an end was recorded first (its status stands)
            except StoreUnusable as problem:
                _warn_unrecorded(problem)

    def close(self) -> None:
        """After the ``end`` event: the follower reads the rest and ends the tracker run; ``fit``
        waits for it a little (``OWNER_WAIT_S``), so that a tracker that failed is said in the
        run's own cell, then leaves it to finish in the background."""
        if self.events is not None:
            try:
                self.events.close()
            except OSError:
                pass
        if self.follower is not None:
            self.follower.done(wait_s=OWNER_WAIT_S)


def _register(name: str, dist: DistContext, params: dict, notebook: str | None) -> str:
    """The new run's id. An unusable store (corrupt, deleted, full disk) must not stop training:
    the run gets a folder of its own, is said to be unrecorded, and trains. A home folder that
    cannot be made has room for no folder either: that ends the call, in one line."""
    pid, started = os.getpid(), process_start_time(os.getpid())
    jiyu_home()
    try:  # this process both trains and records the end: the recorded process and the owner
        store = RunStore()
        store.record_lost()  # a run owner's upkeep: runs whose processes are gone are recorded lost
        run = store.create(
            "ddp" if dist.distributed else "kernel",
            name,
            status=RunStatus.RUNNING,
            born_because="a fit call registered it",
            pid=pid,
            pid_started=started,
            owner_pid=pid,
            owner_started=started,
            pgid=os.getpgid(0),
            nproc=dist.world_size,
            notebook=notebook,
            params=params,
        )
    except StoreUnusable as problem:
        _warn_unrecorded(problem)
        return UNRECORDED_PREFIX + new_run_id()
    return run.id


def _warn_unrecorded(problem: StoreUnusable) -> None:
    print(f"jiyu: this run is not recorded in the run store, training goes on ({problem})", file=sys.stderr)


def default_name(model: object, notebook: str | None) -> str:
    """``notebook:ModelClass``, by the one name rule (a file named with a newline, a class
    named oddly, are made printable)."""
    stem = Path(notebook).stem if notebook else None
    return name_from(f"{stem}:{type(model).__name__}" if stem else type(model).__name__)


LAST, LAST_CHECKPOINT = "last", "last-checkpoint"  # --resume's words: see FitOptions.resume


def resume_candidates(requested: str | None, run: RunBinding, name: str) -> list[Path]:
    """The checkpoints to start from, the one to take first first. ``requested`` is a path (the
    only candidate), ``last`` (the newest earlier run of the same name, which must have left a
    checkpoint) or ``last-checkpoint`` (the newest checkpoint of any earlier run of that name):
    that run's checkpoints, newest first (``intact_checkpoint`` takes the newest intact one).
    Without it a launcher's ``JIYU_RESUME`` (``LaunchContext.resume``) means ``last``. (A
    torchrun restart resumes each call from its own checkpoints: ``fit_calls.own_checkpoints``,
    asked first.) Says which run and step a ``last`` resumes."""
    implicit = requested is None
    if implicit:
        requested = run.context.resume
    if requested is None:
        return []
    if requested not in (LAST, LAST_CHECKPOINT):
        path = Path(requested).expanduser()
        if not is_checkpoint(path):
            raise TrainConfigError(_missing(requested, path))
        return [path]
    # an attached run (a launcher's) first looks in its own folder: a torchrun restart continues
    # itself; an explicit ``last`` then falls back to the last run of the same name, as in a kernel
    found = complete_checkpoints(run.files.ckpt) if not run.owned else []
    if not found and not (implicit and not run.owned):
        past = _last_of_name(name, run.run_id, run.context.notebook, any_run=requested == LAST_CHECKPOINT)
        if past is not None:
            found = past[1]
            print(f"jiyu: --resume {requested}: {_described(past[0], found[0])}")  # a note, not a warning: plain output
    if not found and not implicit:
        raise TrainConfigError(
            f"--resume {requested}: no checkpoint of an earlier run named {name!r}; give a checkpoint path instead"
        )
    return found


def check_resume_request(requested: str | None, name: str, context: LaunchContext) -> None:
    """A call that owns its run (a kernel's, a script's: nothing of its own to fall back on)
    refuses a resume it cannot do before its run is registered, so a typo leaves no failed run
    behind and says so once."""
    if requested is None or context.run_id:
        return
    if requested not in (LAST, LAST_CHECKPOINT):
        path = Path(requested).expanduser()
        if not is_checkpoint(path):
            raise TrainConfigError(_missing(requested, path))
    elif _last_of_name(name, "", context.notebook, any_run=requested == LAST_CHECKPOINT) is None:
        raise TrainConfigError(
            f"--resume {requested}: no checkpoint of an earlier run named {name!r}; give a checkpoint path instead"
        )


def _last_of_name(name: str, current: str, notebook: str | None, any_run: bool) -> tuple[Run, list[Path]] | None:
    """The newest earlier run named ``name`` (from the same notebook) and its checkpoints,
    newest first. Unless ``any_run``, that run must have left one: resuming an older run behind
    the newest one's back (it ran with ``--no-ckpt``, or failed before its first checkpoint)
    would silently undo it, so it is refused, naming the run ``last-checkpoint`` would take."""
    try:
        runs = RunStore().list()
    except StoreUnusable as problem:
        raise TrainConfigError(f"--resume last needs the run store: {problem}") from None
    if notebook is None:  # a job's ranks run no notebook; their run records the one it was exported from
        notebook = next((run.notebook for run in runs if run.id == current), None)
    newest = None
    for past in runs:
        if past.id != current and past.name == name and past.notebook == notebook:
            newest = newest or past
            found = _checkpoints_of(RunFiles.of(past.id), name)
            if found:
                if past is not newest and not any_run:
                    raise TrainConfigError(
                        f"--resume last: the newest run named {name!r}, {newest.id} ({newest.status}), left no "
                        f"checkpoint (--no-ckpt, or it ended before its first); --resume last-checkpoint resumes "
                        f"the newest one there is, {_described(past, found[0])}"
                    )
                return past, found
    return None


def _described(run: Run, path: Path) -> str:
    """``run 3fa2c1d0 (succeeded), its checkpoint of step 40: /path``."""
    step = re.search(r"step-(\d+)\.(pt|dcp)$", path.name)
    at = f" of step {int(step.group(1))}" if step else ""
    return f"run {run.id} ({run.status}), its checkpoint{at}: {path}"


def _checkpoints_of(files: RunFiles, name: str) -> list[Path]:
    """The checkpoints a past run left, wherever it wrote them, newest first: its ``ckpt``
    events record each path (a ``--ckpt-dir`` outside the run folder included); its own folder
    covers runs whose events do not."""
    recorded = [Path(path) for path in _recorded_checkpoints(files.events, name)]
    return newest_first({*(path for path in recorded if is_checkpoint(path)), *complete_checkpoints(files.ckpt)})


def _missing(requested: str, path: Path) -> str:
    if path.is_dir():  # a sharded save cut short (renamed only when complete), or another folder
        return f"resume checkpoint {requested} is a folder but not a complete sharded checkpoint"
    return f"resume checkpoint {requested} does not exist"


def _recorded_checkpoints(events_path: Path, name: str) -> list[str]:
    """The checkpoint paths of the run's ``fit`` calls named ``name``, oldest first."""
    paths, calling = [], None
    for event in read_events(events_path)[0]:
        if event["kind"] == EventKind.START:
            calling = event.get("name")
        elif event["kind"] == EventKind.CKPT and event.get("path") and calling in (name, None):
            paths.append(event["path"])
    return paths
