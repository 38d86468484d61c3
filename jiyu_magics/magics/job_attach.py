"""``%job attach``: the live training dashboard of a run trained by another process.

The dashboard is fed from the run's ``events.jsonl`` alone, so attaching after a browser
reload or a kernel restart shows the whole history. In a notebook the log is followed on a
background thread: the kernel stays free while a three-day job trains, and the Stop button
(which stops the job) is handled like any click. In a terminal the cell follows in the
foreground, printing progress lines, until the run ends or Ctrl-C detaches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .. import jobs
from ..core.events.log import read_events
from ..core.runs.files import RunFiles
from ..core.runs.model import EventKind
from ..core.store.run_row import Run
from ..views.training_view import TrainingView

FOLLOW_REFRESH_S = 1.0


def still_active(run_id: str) -> bool:
    return jobs.resolve(run_id).active


def describe(view: TrainingView, run: Run) -> TrainingView:
    """What the store knows, for logs whose writer never sent a ``start`` event (or not yet);
    a ``start`` event in the log overrides it."""
    view.run_id, view.name, view.nproc = run.id, run.name, run.nproc
    return view


class FitSequence:
    """A job whose notebook trains in several cells writes one ``start`` per ``fit`` call into
    one event log. Each call gets its own dashboard, in order, titled with the job's name and
    which call it is ("fit 2 of the job: digits-cnn"), so one call's curve never sits under
    another's numbers. The monitor ``follow`` feeds; attribute reads go to the latest dashboard."""

    def __init__(self, run: Run, make: Callable[[], object]):
        self.run, self.make = run, make
        self.dashboards: list = []

    @property
    def current(self):
        return self.dashboards[-1] if self.dashboards else None

    @property
    def interval(self) -> float:
        return self.current.interval if self.current else FOLLOW_REFRESH_S

    def feed(self, events: list[dict]) -> None:
        batch: list[dict] = []
        for event in events:
            if event.get("kind") == EventKind.START and (
                self.current is None
                or self.current.view.version
                or any(e.get("kind") == EventKind.START for e in batch)
            ):
                self._flush(batch)
                batch = []
                previous = self.current
                self.dashboards.append(self.make())
                if previous is not None:  # the finished call's static summary stays above the next
                    self._title(previous.view, len(self.dashboards) - 1, None)
                    previous.close()
            batch.append(event)
        self._flush(batch)

    def _flush(self, batch: list[dict]) -> None:
        if not batch:
            return
        if self.current is None:
            self.dashboards.append(self.make())
        fit_name = next((e.get("name") for e in batch if e.get("kind") == EventKind.START), None)
        self.current.feed(batch)
        self._title(self.current.view, len(self.dashboards), fit_name)
        if self.current.widget is not None:
            self.current.render()  # drawn with the job's title, not the call's own name

    def _title(self, view: TrainingView, index: int, fit_name: str | None) -> None:
        """The job's name, and the call's own (its cell's run name) where the job has several."""
        if fit_name is not None:
            view.fit_name = fit_name
        several = len(self.dashboards) > 1 or not self.run.active and self._starts() > 1
        call = view.fit_name
        view.name = self.run.name + (
            f" · fit {index}" + (f": {call}" if call and call != self.run.name else "") if several else ""
        )
        view.run_id = self.run.id

    def _starts(self) -> int:
        if not hasattr(self, "_start_count"):
            events, _ = read_events(RunFiles.of(self.run.id).events)
            self._start_count: int = sum(e.get("kind") == EventKind.START for e in events)
        return self._start_count

    def poll(self) -> None:
        if self.current is not None:
            self.current.poll()

    def close(self) -> None:
        if self.current is not None:
            self.current.close()

    def __getattr__(self, name: str):  # view, renders, stop_button... of the latest call
        if name.startswith("_") or self.current is None:
            raise AttributeError(name)
        return getattr(self.current, name)


def attach_dashboard(run: Run, wait: bool = False, stop_grace: float = 10.0):
    """Shows the run's dashboards (one per fit call, in order); follows the run while it is
    active. Returns them (as a ``FitSequence``) and, when it follows in the background, the
    thread doing so."""
    from ..widgets.event_follow import follow
    from ..widgets.rank_output import RankOutput
    from ..widgets.train_dashboard import TrainingDashboard

    def stop_job() -> None:  # off the kernel's thread: SIGTERM, grace, SIGKILL can take seconds
        threading.Thread(target=jobs.stop, args=(run.id, stop_grace), daemon=True).start()

    def make() -> TrainingDashboard:
        dashboard = TrainingDashboard(refresh=FOLLOW_REFRESH_S, on_stop=stop_job if run.active else None)
        describe(dashboard.view, run)
        return dashboard.show()

    path = RunFiles.of(run.id).events
    sequence = FitSequence(run, make)
    events, offset = read_events(path)
    sequence.feed(events)
    if sequence.current is None:  # nothing logged yet: the store's view of it, waiting
        sequence.dashboards.append(make())
    output = RankOutput(
        RunFiles.of(run.id).log, ready=lambda: sequence.current is not None and sequence.current.handle is not None
    )
    if not run.active:
        sequence.close()
        output.finish()
        return sequence, None
    output.poll()
    follow_it = lambda: _follow(sequence, output, path, offset, run.id, follow)  # noqa: E731
    if wait:
        follow_it()
        return sequence, None
    thread = threading.Thread(target=follow_it, name=f"jiyu-attach-{run.id}", daemon=True)
    thread.start()
    return sequence, thread


def _follow(sequence: FitSequence, output, path, offset: int, run_id: str, follow) -> None:
    def ended() -> bool:
        output.poll()  # the ranks' new lines, at the dashboard's pace
        return not still_active(run_id)

    try:
        follow(sequence, path, offset, until=ended, stop_at_end=False)
    finally:
        sequence.close()
        output.finish()


def attach_text(run: Run, interval: float) -> int:
    """Progress lines from the run's log until it ends (or Ctrl-C); returns lines printed."""
    from ..widgets.event_follow import follow
    from ..widgets.rank_output import RankEcho
    from ..widgets.text_progress import TextProgress

    monitor = TextProgress(interval=interval)
    describe(monitor.view, run)
    path = RunFiles.of(run.id).events
    echo = RankEcho(RunFiles.of(run.id).log)

    def ended() -> bool:
        echo.poll()  # what the ranks printed since the last look
        return not still_active(run.id)

    try:
        follow(monitor, path, until=ended, stop_at_end=False)
    except KeyboardInterrupt:
        print(f"(detached; run {run.id} goes on)")
    monitor.close()
    return monitor.lines
