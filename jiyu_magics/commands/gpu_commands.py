"""``jiyu gpu`` and ``jiyu doctor``."""

from __future__ import annotations


def add_commands(commands) -> None:
    from . import positive_float

    p = commands.add_parser(
        "gpu",
        help="show GPUs, who holds each (lease, process owners), memory/utilisation, versions",
        description="GPU status read through NVML (no CUDA context is created): each GPU's "
        "lease (run, id, kind, notebook, since) or free/busy, and each process's "
        "owner (a jiyu run, a Jupyter kernel and its notebook, other).",
    )
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    p.add_argument(
        "--watch", type=positive_float, metavar="SECONDS", help="refresh in place every SECONDS until Ctrl-C"
    )
    p.set_defaults(handler=run_gpu)

    p = commands.add_parser(
        "doctor",
        help="explain why CUDA is unavailable, with fixes (exit 1 on a problem)",
        description="Checklist of CUDA set-up problems with a concrete fix for each.",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--store", action="store_true", help="check the run store (jiyu.sqlite) instead of CUDA")
    p.set_defaults(handler=run_doctor)


def run_gpu(args) -> int:
    from ..core.gpu.status import owned_snapshot
    from ..views import gpu_table as view
    from . import CliError, print_json

    if args.json and args.watch:
        raise CliError("--json and --watch cannot be combined")
    if args.json:
        print_json(owned_snapshot().to_dict())
        return 0
    if args.watch:
        from ..widgets.terminal_redraw import watch_text

        watch_text(lambda: view.render_text(owned_snapshot(), "jiyu doctor"), args.watch)
        return 0
    print(view.render_text(owned_snapshot(), "jiyu doctor"))
    return 0


def run_doctor(args) -> int:
    if args.store:
        from .store_commands import run_store_check

        return run_store_check(args)
    from ..core.gpu import doctor
    from ..views import doctor_report as view
    from . import print_json

    findings = doctor.diagnose()
    if args.json:
        print_json([f.to_dict() for f in findings])
    else:
        print(view.render_text(findings))
    return 1 if doctor.has_problem(findings) else 0
