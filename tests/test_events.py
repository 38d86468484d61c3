"""The JSONL event log: appends, tails by offset, torn lines, summaries."""

import json
import math

import pytest

from jiyu_magics.core.events.log import EventLog, read_events, summarize, tail_events


def test_append_and_read_by_offset(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=10)
        log.append("step", step=1, loss=2.0)
        events, offset = read_events(path)
        assert [e["kind"] for e in events] == ["start", "step"]
        log.append("step", step=2, loss=1.5)
    more, offset2 = read_events(path, offset)
    assert [e["step"] for e in more] == [2] and offset2 > offset
    assert read_events(path, offset2) == ([], offset2)


def test_a_partial_line_waits_for_the_next_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"t": 1, "kind": "step", "step": 1}\n{"t": 2, "kind": "st')
    events, offset = read_events(path)
    assert len(events) == 1 and offset == len(b'{"t": 1, "kind": "step", "step": 1}\n')
    with open(path, "ab") as f:
        f.write(b'ep", "step": 2}\n')
    assert [e["step"] for e in read_events(path, offset)[0]] == [2]


def test_non_finite_numbers_are_written_as_null(tmp_path):
    path = tmp_path / "e.jsonl"
    EventLog(path).append("error", step=3, loss=math.nan, message="loss is NaN")
    raw = path.read_text()
    assert ": NaN" not in raw and json.loads(raw)["message"] == "loss is NaN"
    assert json.loads(raw)["loss"] is None


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown event kind"):
        EventLog(tmp_path / "e.jsonl").append("tick")


def test_summary_reads_only_the_tail_of_a_long_log(tmp_path):
    path = tmp_path / "e.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=20000)
        for step in range(1, 20001):
            log.append("step", step=step, epoch=step // 1000, loss=1.0 / step, samples_per_s=100.0)
        log.append("val", step=20000, loss=0.2, accuracy=0.97)
        log.append("end", step=20000, status="succeeded")
    assert path.stat().st_size > 10 * 64 * 1024
    s = summarize(path)
    assert s["total_steps"] == 20000 and s["step"] == 20000 and s["progress"] == 1.0
    assert s["val_acc"] == 0.97 and s["end_status"] == "succeeded"
    assert len(s["losses"]) == 60 and s["losses"][-1] == pytest.approx(1 / 20000)
    assert len(tail_events(path)) < 2000


def test_summary_of_a_missing_log_is_empty(tmp_path):
    s = summarize(tmp_path / "none.jsonl")
    assert s["step"] is None and s["progress"] is None and s["losses"] == []


def test_summary_follows_the_latest_fit_of_a_run(tmp_path):
    """A notebook job with two %%train cells: the second fit's start is far from both ends."""
    path = tmp_path / "e.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=100)
        for step in range(1, 101):
            log.append("step", step=step, loss=1.0)
        log.append("end", step=100, status="succeeded")
        log.append("start", total_steps=5000)
        for step in range(1, 4000):
            log.append("step", step=step, loss=0.5, samples_per_s=10.0, lr=1e-3, epoch=1)
    assert path.stat().st_size > 3 * 64 * 1024
    s = summarize(path)
    assert s["total_steps"] == 5000 and s["step"] == 3999 and s["progress"] == pytest.approx(3999 / 5000)
    assert set(s["losses"]) == {0.5} and s["end_status"] is None


def test_last_start_reads_across_chunk_boundaries(tmp_path):
    from jiyu_magics.core.events.log import last_start

    path = tmp_path / "e.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=7, note="x" * 300)
        for step in range(50):
            log.append("step", step=step, loss=0.1)
    assert last_start(path, chunk=64)["total_steps"] == 7  # every line spans several chunks
    assert last_start(tmp_path / "missing.jsonl") is None
