"""The one fold of an event stream into run state (core.run_state), and what derives from it:
the list summary, FitResult.from_events and the training views."""

from __future__ import annotations

from jiyu_magics.core.events.fold import RunState, RunSummary
from jiyu_magics.core.events.log import EventLog, read_events, summarize
from jiyu_magics.core.runs.model import RunStatus
from jiyu_magics.train.fit_result import FitResult
from jiyu_magics.views.training_view import TrainingView


def first_call() -> list[dict]:
    return [
        {"t": 1.0, "kind": "start", "run_id": "r1", "name": "net", "total_steps": 10, "nproc": 2, "start_step": 0},
        {"t": 2.0, "kind": "step", "step": 4, "epoch": 1, "loss": 2.0, "lr": 0.1, "elapsed": 2.0},
        {"t": 2.5, "kind": "ckpt", "step": 4, "path": "/ckpt/step-4.pt"},
        {"t": 3.0, "kind": "val", "step": 4, "epoch": 1, "loss": 1.5, "accuracy": 0.5},
        {"t": 4.0, "kind": "end", "status": "stopped", "step": 4, "message": "Stopped at step 4/10.", "elapsed": 3.0},
    ]


def second_call() -> list[dict]:
    """Resumed at step 4 with two ranks: rank 1 fails first, rank 0 follows (its line comes
    first in the log, its time later), and rank 0's engine writes the end."""
    return [
        {"t": 10.0, "kind": "start", "total_steps": 10, "nproc": 2, "start_step": 4, "resumed_from": "/ckpt/step-4.pt"},
        {"t": 11.0, "kind": "step", "step": 6, "epoch": 1, "loss": 1.0},
        {"t": 12.5, "kind": "error", "rank": 0, "step": 6, "message": "RuntimeError: connection closed by peer"},
        {"t": 12.0, "kind": "error", "rank": 1, "step": 6, "message": "ValueError: boom"},
        {"t": 13.0, "kind": "end", "status": "failed", "step": 6, "message": "rank 1: ValueError: boom"},
    ]


def test_a_call_folds_progress_checkpoints_and_how_it_ended():
    state = RunState.of(first_call())
    progress = (state.run_id, state.total_steps, state.step, state.epoch, state.loss, state.lr)
    assert progress == ("r1", 10, 4, 1, 2.0, 0.1)
    assert (state.val_loss, state.val_acc, state.checkpoint, state.progress) == (1.5, 0.5, "/ckpt/step-4.pt", 0.4)
    assert (state.status, state.end_status, state.finished) == ("stopped", "stopped", True)
    assert state.message == "Stopped at step 4/10."
    assert isinstance(state.end_status, RunStatus) and state.first_error is None and state.version == 5


def test_a_new_start_begins_a_new_call_and_the_first_error_is_by_time_across_ranks():
    state = RunState.of(first_call())
    state.feed(second_call()[:2])
    assert (state.status, state.end_status, state.checkpoints, state.losses) == ("running", None, [], [(6, 1.0)])
    assert (state.run_id, state.name, state.start_step, state.val_loss) == ("r1", "net", 4, None)  # identity kept
    state.feed(second_call()[2:])
    assert state.first_error == "rank 1: ValueError: boom" and state.end_status == RunStatus.FAILED


def test_a_single_process_error_is_not_named_by_rank():
    state = RunState.of([{"kind": "start", "nproc": 1}, {"kind": "error", "rank": 0, "message": "ValueError: x"}])
    assert state.first_error == "ValueError: x"


def test_the_last_end_of_the_call_wins_and_an_end_before_any_start_counts():
    supervisor_after_engine = first_call() + [
        {"t": 5.0, "kind": "end", "status": "failed", "exit_code": 1, "source": "supervisor"}
    ]
    state = RunState.of(supervisor_after_engine)
    assert (state.end_status, state.fit_end_status) == (RunStatus.FAILED, RunStatus.STOPPED)
    state.feed(second_call()[:1])
    assert state.end_status is None and state.fit_end_status is None  # a new call has not ended
    never_started = [{"kind": "error", "message": "no GPU"}, {"kind": "end", "status": "failed"}]
    assert RunState.of(never_started).end_status == "failed"
    assert RunState().status is None and RunState().end_status is None


def test_what_is_not_an_event_is_counted_and_changes_nothing():
    state = RunState()
    assert not state.feed([42, None, ["step"], {"kind": "nope"}, {"kind": "gpu"}, {"kind": "stall"}])
    assert state.skipped == 4 and state.version == 0 and state.status is None


def test_a_readers_skipped_lines_add_to_the_count(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=3)
    with open(path, "ab") as f:
        f.write(b'42\n{"kind": "nope"}\n')
    events, _ = read_events(path)
    state = RunState.of(events)
    assert state.skipped == 2 and state.status == RunStatus.RUNNING


def test_the_summary_has_the_keys_of_its_typed_shape_and_follows_the_current_call(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        for event in first_call() + second_call():
            fields = {k: v for k, v in event.items() if k not in ("t", "kind")}
            log.append(event["kind"], **fields)
    summary = summarize(path)
    assert list(summary) == list(RunSummary.__annotations__)
    assert (summary["step"], summary["losses"], summary["val_acc"], summary["progress"]) == (6, [1.0], None, 0.6)
    assert (summary["end_status"], summary["error"]) == ("failed", "rank 0: RuntimeError: connection closed by peer")


def test_fit_result_and_training_view_read_the_same_fold():
    events = (
        first_call()
        + second_call()[:2]
        + [
            {"t": 11.5, "kind": "val", "step": 6, "loss": 0.9, "accuracy": 0.8},
            {"t": 12.0, "kind": "end", "status": "succeeded", "step": 6},
        ]
    )
    result = FitResult.from_events("r1", events, "succeeded")
    assert (result.status, result.step, result.total_steps, result.checkpoints) == ("succeeded", 6, 10, [])
    assert result.history == [
        {"step": 6, "epoch": 1, "loss": 1.0, "val_loss": 0.9, "val_acc": 0.8, "lr": None, "samples_per_s": None}
    ]
    view = TrainingView()
    assert view.status_text == "waiting"
    view.feed(events)
    assert (view.step, view.losses, view.status_text, view.history) == (6, [(6, 1.0)], "succeeded", None)
