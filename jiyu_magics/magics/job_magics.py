"""``%submit``, ``%jobs`` and ``%job logs|stop|attach``: background torchrun jobs from a notebook."""

from __future__ import annotations

import time
from argparse import ArgumentTypeError
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import HTML, display

from .. import jobs
from ..core.runs.launch_context import LaunchContext
from ..core.time_spans import since_time
from ..jobs.submit_options import SubmitOptions, argument_specs
from .frontend import in_notebook
from .magic_line import parse_line


def with_submit_options(func):
    for flags, options in reversed(argument_specs()):
        func = argument(*flags, **options)(func)
    func = argument("notebook", nargs="?", help="the notebook to run (default: this notebook, as saved)")(func)
    return magic_arguments()(func)


def current_notebook(shell, context: LaunchContext) -> Path | None:
    """The notebook this kernel runs, from what the front-end tells the kernel: Jupyter's
    ``JPY_SESSION_NAME`` (``context.notebook``; also ``__session__``), or VS Code's
    ``__vsc_ipynb_file__``."""
    ns = shell.user_ns
    for candidate in (ns.get("__vsc_ipynb_file__"), ns.get("__session__"), context.notebook):
        path = _existing_notebook(candidate)
        if path is not None:
            return path
    return None


def _existing_notebook(candidate) -> Path | None:
    if not isinstance(candidate, str) or not candidate.endswith(".ipynb"):
        return None
    path = Path(candidate).expanduser()
    for option in [path] if path.is_absolute() else [Path.cwd() / path, Path.cwd() / path.name]:
        if option.is_file():
            return option.resolve()
    return None


TEXT_FOLLOW_S = 10.0


def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _since(text: str) -> float:
    try:
        return since_time(text)
    except ValueError as error:
        raise ArgumentTypeError(str(error)) from None


class SubmittedRunId(str):
    """What ``%submit`` returns: the run id, for ``run = %submit ...`` then
    ``%job attach {run}``. The message is already printed, so it displays as nothing."""

    def _ipython_display_(self) -> None:
        pass


@magics_class
class JobMagics(Magics):
    attached = None  # the dashboard of the latest %job attach, for inspection

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        if shell is not None:
            from .cell_history import CellHistory

            self.history = CellHistory.of(shell)  # what %%train --nproc will export

    @with_submit_options
    @line_magic
    def submit(self, line: str = ""):
        """Run a notebook as a background torchrun job that outlives this kernel and the browser.

        The notebook (this one when no path is given, as last saved) is exported to a script:
        shell commands, %pip and display-only magics are left out unless the cell is tagged
        jiyu:keep, cells tagged jiyu:skip are dropped, and parameters (-f files, then -y YAML,
        then -p pairs) are injected after the cell tagged "parameters". A -p VALUE is a Python
        literal, other text a string: more than papermill's -p (see -p below); -y and -f read
        YAML as papermill does. The job runs under a detached supervisor in the notebook's
        folder; its run id prints at once and is returned (``run = %submit ...``, then
        ``%job attach {run}``). It leases --gpus GPUs (default: one per process where GPUs are
        visible) and waits queued until they are free (first by --priority, then in order).
        With --backend slurm it is a Slurm batch job (sbatch; requeued from a checkpoint when
        its --time runs out), with --backend kubernetes a Kubeflow TrainJob (kubectl apply);
        %jobs, %job logs and %job stop follow and cancel it there.

        Examples::

            %submit --nproc 2 -p lr 3e-4 -p arch resnet50
            %submit --nproc 4 --gpus 4 --priority 5
            %submit -y "{lr: 3e-4, layers: [64, 128]}" -f base.yaml
            %submit train.ipynb --nproc 8 --max-restarts 3 --notify "notify-send"
            %submit train.ipynb --backend slurm --nnodes 4 --nproc 8 --time 12:00:00 --partition gpu
        """
        from ..views import run_table as view

        args = parse_line(self.submit, line)
        notebook = args.notebook or current_notebook(self.shell, LaunchContext.from_environ())
        if notebook is None:
            raise UsageError(
                "%submit cannot tell which notebook this kernel runs; pass its path: %submit path/to/notebook.ipynb"
            )
        try:
            run = jobs.submit(notebook, SubmitOptions.from_args(args))
        except jobs.JobError as error:
            raise UsageError(str(error)) from None
        print(view.submitted_message(run, control="%job {action} {id}", notes=jobs.submit_notes(run)))
        if not args.notebook:
            self._warn_if_unsaved(Path(notebook))
        return SubmittedRunId(run.id)

    def _warn_if_unsaved(self, notebook: Path) -> None:
        """The job runs the notebook as saved; edits run here since the last save are not in it."""
        last_run = self.history.last_run
        try:
            saved = notebook.stat().st_mtime
        except OSError:
            return
        if last_run is not None and saved < last_run:
            print(
                f"Warning: {notebook.name} was last saved at {time.strftime('%H:%M:%S', time.localtime(saved))}, "
                f"before the last cell you ran here: the job runs the notebook as saved (save first to include "
                "your latest edits)."
            )

    @magic_arguments()
    @argument("--all", action="store_true", help="include finished runs")
    @argument(
        "--limit",
        type=_positive_int,
        metavar="N",
        help="the N newest runs (default with --all: 100; the listing says how many it left out)",
    )
    @argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="only runs created since WHEN: 30m, 12h, 7d, 2w, or a date (2026-11-01)",
    )
    @line_magic
    def jobs(self, line: str = ""):
        """List runs: id, name, kind, status, processes, GPUs, progress, last loss, start,
        duration. A queued run shows its place ("queued #1") and how many GPUs it waits for, a
        running one the indices of its GPUs. A run whose process vanished (reboot, kill -9)
        shows as lost, at its last step. A finished run's progress is stored when it ends, so
        ``%jobs --all`` stays quick over thousands of runs: it shows the 100 newest and says how
        many it left out; --limit and --since page it."""
        from ..views import run_table as view

        args = parse_line(self.jobs, line)
        page = jobs.list_page(include_finished=args.all, limit=args.limit, since=args.since)
        note = view.page_note(len(page.runs), page.total)
        if in_notebook(self.shell, LaunchContext.from_environ()):
            display(HTML(view.render_html(page.runs, args.all) + (f"<p>{note}</p>" if note else "")))
        else:
            print(view.render_text(page.runs, args.all) + (f"\n{note}" if note else ""))

    @line_magic
    def job(self, line: str = ""):
        """Control one run by its id (or a unique prefix of it):

        %job logs ID [-f] [--tail N]   the run's log; -f follows it until the run ends
        %job stop ID [--grace S]       SIGTERM every rank: training stops at a step with a
                                       checkpoint and the job ends (no further cell runs);
                                       SIGKILL after S s (default 10); a Slurm/Kubernetes
                                       job is cancelled there. Of an ended run: stops any
                                       process still carrying its id
        %job attach ID [--wait]        the run's live training dashboard, from its whole
                                       event log (works after a reload or kernel restart);
                                       its Stop button stops the job
        """
        command, _, rest = line.strip().partition(" ")
        handlers = {"logs": self._logs, "stop": self._stop, "attach": self._attach}
        if command not in handlers:
            raise UsageError("%job: expected logs, stop or attach, as in: %job logs ID -f")
        try:
            return handlers[command](rest)
        except jobs.JobError as error:
            raise UsageError(str(error)) from None

    @magic_arguments(name="job logs")
    @argument("id", help="run id or unique prefix")
    @argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    @argument("--tail", type=int, metavar="N", help="only the last N lines")
    def _logs(self, rest: str):
        from ..jobs import run_logs as job_logs

        args = parse_line(self._logs, rest)
        run = jobs.resolve(args.id)
        text, offset = job_logs.tail(run.id, args.tail, job_logs.derived_end(run))
        print(text, end="")
        if args.follow:
            try:
                for chunk in job_logs.follow(run.id, offset):
                    print(chunk, end="", flush=True)
            except KeyboardInterrupt:
                print(f"\n(stopped following; run {run.id} goes on)")

    @magic_arguments(name="job stop")
    @argument("id", help="run id or unique prefix")
    @argument("--grace", type=float, default=10.0, metavar="S", help="seconds between SIGTERM and SIGKILL")
    def _stop(self, rest: str):
        args = parse_line(self._stop, rest)
        print(jobs.stop_report(args.id, grace=args.grace).describe())

    @magic_arguments(name="job attach")
    @argument("id", help="run id or unique prefix")
    @argument(
        "--wait",
        action="store_true",
        help="in a notebook, keep the cell busy until the run ends "
        "(default: follow in the background, the kernel stays free)",
    )
    def _attach(self, rest: str):
        args = parse_line(self._attach, rest)
        run = jobs.resolve(args.id)
        if not in_notebook(self.shell, LaunchContext.from_environ()):
            from ..views import run_table as view
            from .job_attach import attach_text

            print(view.render_summary_text(run))
            if run.active:
                attach_text(run, interval=TEXT_FOLLOW_S)
            return
        from .job_attach import attach_dashboard

        JobMagics.attached, _ = attach_dashboard(run, wait=args.wait)


MAGICS = [JobMagics]
