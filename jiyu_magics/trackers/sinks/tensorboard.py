"""A run into a TensorBoard log folder, with TensorBoard's own ``EventFileWriter`` and protos.

One TensorBoard run (a folder ``<DIR>/<name>-<root id>``) per tracker run: a run that resumes
another writes into the folder of the chain's first run, in an event file of its own
(``...tfevents...jiyu-<run id>``), starting with TensorBoard's ``SessionLog.START`` at the
step it resumed from, so the points the earlier attempt logged past its checkpoint are
dropped from the curves. Scalars logged at one step go as one ``Event`` (one record); the
parameters as an hparams session (the HPARAMS tab), the run's ids and status as text.

How far each jiyu run's log has been written here is kept beside the data
(``jiyu-sync.json``): remove the folder and a later export writes it all again.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.text import summary_v2 as text_summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from ...core.runs.model import RunStatus
from ..identity import RunIdentity
from ..translate import Param, Point, Resume, Translation, record_params
from ..where import Place, tensorboard_place

SYNC_FILE = "jiyu-sync.json"
QUEUE_SIZE = 4096  # events the writer's thread may hold between our flushes
FLUSH_S = 1  # its own clock too; the follower flushes after every write anyway
SESSION_STATUS = {
    RunStatus.SUCCEEDED: "STATUS_SUCCESS",
    RunStatus.FAILED: "STATUS_FAILURE",
    RunStatus.LOST: "STATUS_FAILURE",
    RunStatus.STOPPED: "STATUS_UNKNOWN",
    RunStatus.RUNNING: "STATUS_RUNNING",
}


class TensorBoardSink:
    def __init__(self, logdir: str, identity: RunIdentity):
        self.identity = identity
        self.folder = run_folder(Path(logdir), identity)
        self.writer: EventFileWriter | None = None
        synced = _read_sync(self.folder).get(identity.run_id, {})
        self.offset: int = synced.get("offset", 0)
        self.status = synced.get("status")
        self.step = synced.get("step", 0)
        self.end_time: float | None = None

    def place(self) -> Place:
        return tensorboard_place(str(self.folder.parent), str(self.folder))

    def synced_offset(self) -> int:
        return self.offset

    def write(self, translation: Translation, offset: int) -> None:
        writer = self._writer()
        if translation.started:
            self.status = str(RunStatus.RUNNING)
        if translation.started and not self.offset:
            writer.add_event(_text_event("jiyu/run", self._run_table(RunStatus.RUNNING), self.identity.started, 0))
        if translation.params:
            params = {**record_params(self.identity.params), **translation.params}
            writer.add_event(_summary_event(_hparams(params, self.identity), self.identity.started, 0))
        for item in _grouped(translation.points):
            writer.add_event(item)
        if translation.scalars:
            self.step = translation.scalars[-1].step
        self.end_time = translation.end_time or self.end_time
        writer.flush()
        self._record(offset)

    def finish(self, status: RunStatus | None) -> None:
        """The run's status as text and as the hparams session's end; once per status (a
        second export of an ended run writes nothing)."""
        if status is None or self.offset == 0 or str(status) == self.status:
            return
        writer = self._writer()
        now = self.end_time or time.time()
        writer.add_event(_text_event("jiyu/run", self._run_table(status), now, self.step))
        if status in SESSION_STATUS:
            writer.add_event(_summary_event(_session_end(SESSION_STATUS[status], now), now, self.step))
        writer.flush()
        self.status = str(status)
        self._record(self.offset)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _writer(self) -> EventFileWriter:
        if self.writer is None:
            suffix = f".jiyu-{self.identity.run_id}"  # which jiyu run a file holds, for people reading the folder
            self.writer = EventFileWriter(
                str(self.folder), max_queue_size=QUEUE_SIZE, flush_secs=FLUSH_S, filename_suffix=suffix
            )
        return self.writer

    def _record(self, offset: int) -> None:
        """The new offset, replaced atomically: a crash between the flush above and this line
        repeats at most one poll's points on the next export."""
        self.offset = offset
        synced = _read_sync(self.folder)
        synced[self.identity.run_id] = {"offset": offset, "status": self.status, "step": self.step}
        temp = self.folder / f".{SYNC_FILE}.{os.getpid()}"
        temp.write_text(json.dumps(synced, indent=1, sort_keys=True))
        os.replace(temp, self.folder / SYNC_FILE)

    def _run_table(self, status: RunStatus) -> str:
        identity = self.identity
        rows = [("run", identity.run_id), ("name", identity.name), ("status", str(status))]
        rows += [("continues", identity.root)] if identity.root != identity.run_id else []
        rows += [(key.removeprefix("jiyu."), value) for key, value in identity.tags.items() if key in _SHOWN_TAGS]
        return "| jiyu | |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows)


_SHOWN_TAGS = ("jiyu.kind", "jiyu.notebook")


def run_folder(logdir: Path, identity: RunIdentity) -> Path:
    """The chain's folder: found by its root id when it exists (a run renamed later keeps it)."""
    logdir.mkdir(parents=True, exist_ok=True)
    suffix = f"-{identity.root}"
    for found in sorted(logdir.iterdir()):
        if found.is_dir() and (found.name.endswith(suffix) or found.name == identity.root):
            return found
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", identity.name).strip("._-")[:60] or "run"
    folder = logdir / f"{slug}{suffix}"
    folder.mkdir(exist_ok=True)
    return folder


def _read_sync(folder: Path) -> dict[str, dict]:
    """``{run id: {"offset": bytes of its log written here, "status": as last written, "step"}}``."""
    try:
        found = json.loads((folder / SYNC_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def _grouped(points: list[Point | Resume]) -> list[event_pb2.Event]:
    """One ``Event`` per step and time (the scalars one step event logged), in log order."""
    events: list[event_pb2.Event] = []
    last: tuple[int, float] | None = None
    for point in points:
        if isinstance(point, Resume):
            restart = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            events.append(event_pb2.Event(wall_time=point.t, step=point.step, session_log=restart))
            last = None
            continue
        if last != (point.step, point.t):
            events.append(event_pb2.Event(wall_time=point.t, step=point.step, summary=summary_pb2.Summary()))
            last = (point.step, point.t)
        events[-1].summary.value.add(tag=point.key, simple_value=point.value)
    return events


def _summary_event(summary: summary_pb2.Summary, t: float | None, step: int) -> event_pb2.Event:
    return event_pb2.Event(wall_time=t or time.time(), step=step, summary=summary)


def _text_event(tag: str, markdown: str, t: float | None, step: int) -> event_pb2.Event:
    return _summary_event(text_summary.text_pb(tag, markdown), t, step)


def _hparams(params: dict[str, Param], identity: RunIdentity) -> summary_pb2.Summary:
    return hparams_summary.hparams_pb(params, trial_id=identity.root, start_time_secs=identity.started)


def _session_end(status: str, t: float) -> summary_pb2.Summary:
    """The hparams session's end (its status column), as TensorBoard's plugin reads it."""
    data = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=t)
    )
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=hparams_metadata.SESSION_END_INFO_TAG,
        metadata=hparams_metadata.create_summary_metadata(data),
        tensor=hparams_metadata.NULL_TENSOR,
    )
    return summary
