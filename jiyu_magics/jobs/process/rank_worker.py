"""The entry point of every rank: ``python -m jiyu_magics.jobs.process.rank_worker SCRIPT [ARGS...]``.

It runs the script as ``__main__`` (as ``python SCRIPT`` would) and records the rank's start,
exit code and one-line error in the run folder (``jobs.ranks``). An uncaught error is also
written to torch elastic's error file (``TORCHELASTIC_ERROR_FILE``, the format of torch's
``@record``), so torchrun's own failure summary names the root cause.

A stop ends the job (``core.job_stop``): SIGTERM outside ``fit`` ends the script where it is,
inside ``fit`` the engine stops at a step with a checkpoint and the script ends before its next
cell; either way the rank exits with status 0 and records that it stopped, so torchrun reports
no failure and restarts nothing. A rank started after its run was asked to stop (a restart, a
slow start) runs nothing. The rank dies with its torchrun agent (``parent_death``), and ends
itself when it is stuck after a peer failed (``peer_failure``).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

from ...core.processes import job_stop, rank_error
from ...core.processes.info import process_start_time
from ...core.runs.files import store_path
from ...core.runs.launch_context import LaunchContext
from ...core.runs.line_map import LineMap, map_traceback
from ...core.store.database import StoreUnusable
from ...core.store.run_row import UnknownRun
from ...core.store.run_store import RunStore
from . import parent_death, peer_failure
from . import rank_records as ranks
from .error_line import one_line

SIGTERM_REASON = "a stop request (SIGTERM)"
TIME_LIMIT_OUTSIDE_FIT = "the scheduler's time limit (SIGUSR1) came outside training: ending for the requeue"


class Ending(NamedTuple):
    code: int
    error: str | None = None
    stopped: bool = False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m jiyu_magics.jobs.process.rank_worker SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = os.path.abspath(argv[0])

    def run_script() -> None:
        sys.argv = [script, *argv[1:]]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")

    return run_rank(run_script, LaunchContext.from_environ(), script)  # the rank's entry point: read once


def run_rank(
    target: Callable[[], object], context: LaunchContext, script: str | None = None, *, watch_peers: bool = True
) -> int:
    """Runs ``target`` as a rank: its start and end recorded, SIGTERM a stop, SIGUSR1 a time
    limit, dying with its parent. ``context``: what its launcher said, read at the rank's entry
    point. ``script``: the file whose frames start the user's traceback. ``watch_peers=False``:
    a peer's failure is not this rank's end (a ranks pool's rank, whose pool survives it)."""
    run_id = context.run_id
    job_stop.speak_as(context.rank)  # only rank 0 says a stop
    record = _start_record(context) if run_id else None  # a rank of a run reports itself
    if run_id and record:
        ranks.write(run_id, record)
    signal.signal(signal.SIGTERM, _stop_now)
    signal.signal(signal.SIGUSR1, partial(_time_limit_now, context.rank or 0))
    if watch_peers and run_id and record and (context.world_size or 1) > 1:
        peer_failure.watch(run_id, record)
    try:
        ending = _run(target, script, run_id, context.error_file)
    except job_stop.JobStopped:  # a second stop came while the first was being handled
        ending = Ending(0, None, True)
    # The script is over: a late stop (a second sender) must not cut the record short nor kill
    # the interpreter's exit midway, which torchrun would report as a failure. Ignored, not
    # handled: Python resets handlers, not SIG_IGN, while it finalizes.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if run_id and record:
        record.ended, record.exit_code, record.error, record.stopped = time.time(), *ending
        ranks.write(run_id, record)
    return ending.code


def _run(target: Callable[[], object], script: str | None, run_id: str | None, error_file: str | None) -> Ending:
    try:
        parent_death.die_with_parent()
        if _stop_requested(run_id):
            raise job_stop.not_started()
        target()
    except job_stop.JobStopped as stop:
        return _stopped(stop)
    except SystemExit as exit:
        _forget_a_handled_record(exit if exit.code not in (0, None) else None, error_file)  # exit 0 ends well
        return _exit_status(exit.code)
    except BaseException as error:  # noqa: BLE001 - every uncaught error ends the rank, recorded
        signal.signal(signal.SIGTERM, _note_stop)  # a SIGTERM still pending is noted, not raised
        if job_stop.noted():  # the error came from the stop (a peer that stopped first)
            return _stopped(job_stop.JobStopped())
        _print_user_traceback(error, script)
        _write_elastic_error_file(error, script, error_file)
        return Ending(130 if isinstance(error, KeyboardInterrupt) else 1, one_line(error))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    _forget_a_handled_record(None, error_file)
    return Ending(0, None, job_stop.noted() is not None)  # a fit that honoured a stop ended it


def _forget_a_handled_record(ending: BaseException | None, path: str | None) -> None:
    """Removes the error file ``fit`` wrote for an error the script caught and went past: the
    rank did not end by it, and torchrun would name it as the cause of any later death (a
    crash as the interpreter ends)."""
    if path and rank_error.recorded() is not None and not rank_error.arose_from_recorded(ending):
        Path(path).unlink(missing_ok=True)


def _stop_now(signum, frame) -> None:
    """SIGTERM outside ``fit``: the script ends where it is. Once a stop was noted (``fit``
    honoured it), another SIGTERM changes nothing: the job already ends at its next stop point,
    and the sender's SIGKILL bounds the wait."""
    if job_stop.noted() is None:
        raise job_stop.stop_now(SIGTERM_REASON)


def _time_limit_now(rank: int, signum, frame) -> None:
    """SIGUSR1 outside ``fit``: a scheduler's time limit came before training started (a slow
    start) or between training calls. Its default action would kill the rank (torchrun reports
    a failed worker, the rank's record never ends); the rank ends cleanly instead, and the
    requeued attempt resumes from the run's last checkpoint. Inside ``fit`` the engine's own
    handler checkpoints first."""
    print(f"[jiyu] rank {rank}: {TIME_LIMIT_OUTSIDE_FIT}", file=sys.stderr, flush=True)
    raise SystemExit(0)


def _note_stop(signum, frame) -> None:
    job_stop.note(SIGTERM_REASON)


def _stopped(stop: job_stop.JobStopped) -> Ending:
    if stop.message:
        print(stop.message, file=sys.stderr)
    return Ending(0, None, True)


def _stop_requested(run_id: str | None) -> bool:
    """Whether the run row already asks for a stop: read only where a store exists (a rank on
    a Slurm node may have no store; it must not create one)."""
    if not run_id or not store_path().exists():
        return False
    try:
        return RunStore().get(run_id).stop_requested
    except (StoreUnusable, UnknownRun, OSError):
        return False


def _exit_status(code) -> Ending:
    """``sys.exit`` semantics: None is 0, a number is itself, anything else is printed, 1."""
    if code is None:
        return Ending(0)
    if isinstance(code, int):
        return Ending(code, f"exited with code {code}" if code else None)
    print(code, file=sys.stderr)
    return Ending(1, str(code).splitlines()[0] if str(code) else "exited with code 1")


def _start_record(context: LaunchContext) -> ranks.RankRecord:
    rank = context.rank or 0
    world, local_world = context.world_size or 1, context.local_world_size
    return ranks.RankRecord(
        rank=rank,
        local_rank=context.local_rank,
        pid=os.getpid(),
        restart=context.restart,
        started=process_start_time(os.getpid()) or time.time(),
        cuda_visible_devices=context.visible_devices,
        host=socket.gethostname(),
        nnodes=max(1, -(-world // max(1, local_world))),  # torchrun gives every node the same nproc
    )


def _print_user_traceback(error: BaseException, script: str | None) -> None:
    """The traceback from the script's first frame on: runpy's and our frames are noise. The
    script's frames are named by their notebook cell where its export left a line map
    (``cell 3, line 9, in train_step``)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))
    line_map = LineMap.read(Path(script).with_suffix(".map.json")) if script else None
    print("\n".join(map_traceback(text.rstrip("\n").splitlines(), line_map)), file=sys.stderr)


def _write_elastic_error_file(error: BaseException, script: str | None, path: str | None) -> None:
    """torchrun's error file ``path`` (or the one ``fit`` wrote, when this error arose from the
    one it recorded: the script did not catch it, or failed handling it): the call stack
    torchrun prints at the end names the notebook's cells too."""
    if not path:
        return  # no torchrun
    line_map = LineMap.read(Path(script).with_suffix(".map.json")) if script else None
    if os.path.exists(path) and rank_error.arose_from_recorded(error):  # fit's own record holds
        _map_error_file(path, line_map)
        return
    stack = "\n".join(map_traceback(traceback.format_exc().splitlines(), line_map)) + "\n"
    rank_error.write_error_file(path, error, stack)


def _map_error_file(path: str, line_map: LineMap | None) -> None:
    if line_map is None:
        return
    try:
        with open(path) as f:
            data = json.load(f)
        info = data["message"]["extraInfo"]
        info["py_callstack"] = "\n".join(map_traceback(str(info["py_callstack"]).splitlines(), line_map)) + "\n"
        with open(path, "w") as f:
            json.dump(data, f)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not the layout torchrun writes: left as it is


if __name__ == "__main__":
    sys.exit(main())
