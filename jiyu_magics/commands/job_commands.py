"""``jiyu submit``, ``jiyu jobs``, ``jiyu logs``, ``jiyu stacks``, ``jiyu stop`` and ``jiyu export``."""

from __future__ import annotations

import argparse
import sys

from .usage_commands import since_time


def add_commands(commands) -> None:
    from ..jobs.submit_options import PARAM_OPTIONS, argument_specs

    p = commands.add_parser(
        "submit",
        help="run a notebook as a detached torchrun job",
        description="Export NOTEBOOK to a script and run it under torchrun, detached from "
        "this shell, or as a Slurm batch job or a Kubeflow TrainJob (--backend); "
        "prints the run id at once.",
    )
    p.add_argument("notebook", help="the .ipynb to run")
    for flags, options in argument_specs():
        p.add_argument(*flags, **options)
    p.set_defaults(handler=run_submit)

    p = commands.add_parser("jobs", help="list runs (active ones; --all for every run)")
    p.add_argument("--all", action="store_true", help="include finished runs")
    p.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="the N newest runs (default with --all: 100; the listing says how many it left out)",
    )
    p.add_argument(
        "--since",
        type=since_time,
        metavar="WHEN",
        help="only runs created since WHEN: 30m, 12h, 7d, 2w, or a date (2026-11-01)",
    )
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.set_defaults(handler=run_jobs)

    p = commands.add_parser("logs", help="print a run's log; -f follows it until the run ends")
    p.add_argument("id", help="run id or unique prefix")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    p.set_defaults(handler=run_logs)

    p = commands.add_parser(
        "stacks",
        help="show every rank's stack, dumped when the run stalled, grouped by identical stacks",
        description="The newest stack dump of a run (runs/<id>/stacks/<time>/rank<N>.txt), "
        "taken by the run's owner when no step was logged for its stall timeout: "
        "one line per group of ranks with identical stacks, then each group's "
        "main-thread stack.",
    )
    p.add_argument("id", help="run id or unique prefix")
    p.add_argument("--full", action="store_true", help="every thread, and py-spy's native frames where taken")
    p.add_argument("--json", action="store_true", help="print the groups as JSON")
    p.set_defaults(handler=run_stacks)

    p = commands.add_parser(
        "stop",
        help="stop a run: SIGTERM every rank, SIGKILL after the grace period "
        "(a Slurm or Kubernetes job: cancelled there, SIGTERM first)",
        description="SIGTERM to every rank: training stops at a step with a checkpoint and "
        "the job ends there (no further cell runs); SIGKILL to what is left after "
        "the grace period. A Slurm or Kubernetes job is cancelled there. A run that "
        "already ended keeps its status, but any process still carrying its id is "
        "stopped, and named.",
    )
    p.add_argument("id", help="run id or unique prefix")
    p.add_argument("--grace", type=float, default=10.0, metavar="S", help="seconds before SIGKILL (default 10)")
    p.set_defaults(handler=run_stop)

    p = commands.add_parser(
        "export",
        help="write a notebook as a job script",
        description="The script jobs run: IPython syntax turned into Python, shell/install/"
        "display commands left out unless tagged jiyu:keep, -p injected.",
    )
    p.add_argument("notebook", help="the .ipynb to export")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the script ('-' for stdout)")
    p.add_argument(
        "--force", action="store_true", help="write through a symbolic link at FILE (to its target; refused otherwise)"
    )
    for flags, options in PARAM_OPTIONS:
        p.add_argument(*flags, **options)
    p.set_defaults(handler=run_export)


def positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _job_errors(func):
    """``JobError`` → ``CliError``: one line on stderr, exit code 2."""

    def wrapper(args):
        from ..jobs import JobError
        from . import CliError

        try:
            return func(args)
        except JobError as error:
            raise CliError(str(error)) from None

    return wrapper


@_job_errors
def run_submit(args: argparse.Namespace) -> int:
    from .. import jobs
    from ..jobs.submit_options import SubmitOptions
    from ..views.run_table import submitted_message

    run = jobs.submit(args.notebook, SubmitOptions.from_args(args))
    print(submitted_message(run, control="jiyu {action} {id}", notes=jobs.submit_notes(run)))
    return 0


@_job_errors
def run_jobs(args: argparse.Namespace) -> int:
    from .. import jobs
    from ..views import run_table as view
    from ..views.run_record import cli_record
    from . import print_json

    page = jobs.list_page(include_finished=args.all, limit=args.limit, since=args.since)
    if args.json:
        print_json([{**cli_record(r), "display": view.row(r)} for r in page.runs])
    else:
        print(view.render_text(page.runs, args.all))
        note = view.page_note(len(page.runs), page.total)
        if note:
            print(note)
    return 0


@_job_errors
def run_logs(args: argparse.Namespace) -> int:
    from .. import jobs
    from ..jobs import run_logs as logs

    run = jobs.resolve(args.id)
    text, offset = logs.tail(run.id, args.tail, logs.derived_end(run))
    sys.stdout.write(text)
    sys.stdout.flush()
    printed = bool(text)
    if args.follow:
        for chunk in logs.follow(run.id, offset):
            printed = printed or bool(chunk)
            sys.stdout.write(chunk)
            sys.stdout.flush()
    if not printed and offset == 0:
        print(logs.no_output_note(jobs.resolve(run.id)), file=sys.stderr)
    return 0


@_job_errors
def run_stacks(args: argparse.Namespace) -> int:
    from .. import jobs
    from ..core.runs import stack_groups as stacks
    from ..core.runs.files import RunFiles
    from ..core.runs.line_map import LineMap
    from ..views import stack_view as view
    from . import CliError, print_json

    run = jobs.resolve(args.id)
    folders = stacks.dump_folders(run.id)
    if not folders:
        raise CliError(f"run {run.id} has no stack dump (one is taken when it stalls)")
    groups = stacks.group(stacks.read_dump(folders[-1]))
    line_map = LineMap.read(RunFiles.of(run.id).line_map)
    if args.json:
        print_json({"run_id": run.id, "dumped": folders[-1].name, "groups": view.as_json(groups, line_map)})
    else:
        sys.stdout.write(view.render_text(run.id, folders[-1], groups, full=args.full, line_map=line_map))
    return 0


@_job_errors
def run_stop(args: argparse.Namespace) -> int:
    from .. import jobs

    print(jobs.stop_report(args.id, grace=args.grace).describe())
    return 0


@_job_errors
def run_export(args: argparse.Namespace) -> int:
    from ..core.text import shown
    from ..core.user_files import NotARegularFile, write_regular_file
    from ..jobs import JobError, export_notebook
    from ..jobs.submit_options import params_of

    export = export_notebook(args.notebook, params_of(args))
    if args.output == "-":
        sys.stdout.write(export.script)
        return 0
    try:
        write_regular_file(args.output, export.script, follow_links=args.force)
    except NotARegularFile as error:
        raise JobError(f"cannot write {shown(error)}") from None
    except OSError as error:
        raise JobError(f"cannot write {shown(args.output)}: {error.strerror or error}") from None
    print(f"Wrote {args.output}: {export.code_cells} code cell(s) from {export.origin}")
    for note in export.left_out:
        print(f"  left out {note}")
    return 0
