"""``%job attach``: the live training dashboard of a run trained by another process.

The dashboard is fed from the run's ``events.jsonl`` alone, so attaching after a browser
reload or a kernel restart shows the whole history. In a notebook the log is followed on a
background thread: the kernel stays free while a three-day job trains, and the Stop button
(which stops the job) is handled like any click. In a terminal the cell follows in the
foreground, printing progress lines, until the run ends or Ctrl-C detaches.
"""

from __future__ import annotations

import threading

from .. import jobs
from ..core.run_files import RunFiles
from ..core.run_store import Run
from ..views.training_view import TrainingView

FOLLOW_REFRESH_S = 1.0


def still_active(run_id: str) -> bool:
    return jobs.resolve(run_id).active


def describe(view: TrainingView, run: Run) -> TrainingView:
    """What the store knows, for logs whose writer never sent a ``start`` event (or not yet);
    a ``start`` event in the log overrides it."""
    view.run_id, view.name, view.nproc = run.id, run.name, run.nproc
    return view


def attach_dashboard(run: Run, wait: bool = False, stop_grace: float = 10.0):
    """Shows the run's dashboard; follows it while the run is active. Returns the dashboard
    and, when it follows in the background, the thread doing so."""
    from ..widgets.train_dashboard import TrainingDashboard

    def stop_job() -> None:  # off the kernel's thread: SIGTERM, grace, SIGKILL can take seconds
        threading.Thread(target=jobs.stop, args=(run.id, stop_grace), daemon=True).start()

    from ..widgets.rank_output import RankOutput

    path = RunFiles.of(run.id).events
    dashboard = TrainingDashboard.from_events(path, view=describe(TrainingView(), run), refresh=FOLLOW_REFRESH_S,
                                              on_stop=stop_job if run.active else None).show()
    output = RankOutput(RunFiles.of(run.id).log, ready=lambda: dashboard.handle is not None)
    if not run.active:
        dashboard.close()
        output.finish()
        return dashboard, None
    output.poll()
    follow = lambda: _follow(dashboard, output, path, run.id)  # noqa: E731
    if wait:
        follow()
        return dashboard, None
    thread = threading.Thread(target=follow, name=f"jiyu-attach-{run.id}", daemon=True)
    thread.start()
    return dashboard, thread


def _follow(dashboard, output, path, run_id: str) -> None:
    def ended() -> bool:
        output.poll()  # the ranks' new lines, at the dashboard's pace
        return not still_active(run_id)
    try:
        dashboard.follow(path, until=ended, stop_at_end=False)
    finally:
        dashboard.close()
        output.finish()


def attach_text(run: Run, interval: float) -> int:
    """Progress lines from the run's log until it ends (or Ctrl-C); returns lines printed."""
    from ..widgets.event_follow import follow
    from ..widgets.text_progress import TextProgress

    from ..widgets.rank_output import RankEcho

    monitor = TextProgress(interval=interval)
    describe(monitor.view, run)
    path = RunFiles.of(run.id).events
    echo = RankEcho(RunFiles.of(run.id).log)
    try:
        follow(monitor, path, until=lambda: (echo.poll(), not still_active(run.id))[1], stop_at_end=False)
    except KeyboardInterrupt:
        print(f"(detached; run {run.id} goes on)")
    monitor.close()
    return monitor.lines
