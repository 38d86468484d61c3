"""``%gpu_status`` and ``%gpu_doctor``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import HTML, display

from .frontend import in_notebook

if TYPE_CHECKING:
    from ..core.runs.launch_context import LaunchContext
from .magic_line import parse_line

# NVML, the CUDA checks and their views are imported by the magic that uses them: %load_ext
# stays quick (issue 17: ≤ 50 ms), and a notebook that never asks about GPUs never loads them.


def positive_seconds(value: float | None, flag: str = "--watch") -> float | None:
    if value is not None and not value > 0:
        raise UsageError(f"{flag} takes a positive number of seconds, got {value:g}")
    return value


@magics_class
class GpuMagics(Magics):
    watch = None  # the live --watch table; a new one replaces (and stops) the previous

    @magic_arguments()
    @argument("--json", action="store_true", help="Return the snapshot as a dict instead of showing a table.")
    @argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="Refresh every SECONDS in place: a live widget with a Stop button in notebooks "
        "(the kernel stays free), in-place text in a terminal until Ctrl-C.",
    )
    @line_magic
    def gpu_status(self, line: str = ""):
        """Show the NVIDIA GPUs: utilisation, memory, temperature, power, clocks, MIG mode, who
        holds each GPU (the run leasing it: name, id, kind, notebook, since; else free, or busy
        with foreign processes above JIYU_GPU_BUSY_MIB), the processes holding GPU memory with
        their owners (a jiyu run, a Jupyter kernel and its notebook, other, or a pid outside this
        container; this kernel's marked), and driver/CUDA/torch versions.

        Reads NVML only: it never imports torch or creates a CUDA context, so it is safe to run
        before forking DataLoader workers or launching DDP. Without a driver it answers in one
        line; run %gpu_doctor to learn why.

        Examples::

            %gpu_status
            %gpu_status --watch 2
            snap = %gpu_status --json
        """
        from ..core.gpu.status import owned_snapshot
        from ..core.runs.launch_context import LaunchContext
        from ..views import gpu_table as gpu_view

        args = parse_line(self.gpu_status, line)
        context = LaunchContext.from_environ()  # read once, where the call enters jiyu
        positive_seconds(args.watch)
        if args.json and args.watch:
            raise UsageError("--json and --watch cannot be combined")
        if args.json:
            return owned_snapshot().to_dict()
        if args.watch:
            return self._watch(args.watch, context)
        snap = owned_snapshot()
        if in_notebook(self.shell, context):
            display(HTML(gpu_view.render_html(snap)))
        else:
            print(gpu_view.render_text(snap))

    def _watch(self, seconds: float, context: LaunchContext):
        if in_notebook(self.shell, context):
            from ..widgets.gpu_watch import GpuWatch

            if self.watch is not None:
                self.watch.stop()
            self.watch = GpuWatch(seconds)
            display(self.watch.widget)
            self.watch.start()
            return None
        from ..core.gpu.status import owned_snapshot
        from ..views import gpu_table as gpu_view
        from ..widgets.terminal_redraw import watch_text

        watch_text(lambda: gpu_view.render_text(owned_snapshot()), seconds)

    @magic_arguments()
    @argument("--json", action="store_true", help="Return the findings as a list of dicts.")
    @line_magic
    def gpu_doctor(self, line: str = ""):
        """Explain why torch.cuda.is_available() is False (or what will bite later), with a fix
        for each finding: CPU-only torch, no driver/NVML, missing /dev/nvidia*, nouveau,
        CUDA_VISIBLE_DEVICES empty/invalid/hiding GPUs, driver older than torch's CUDA, no
        cuDNN/NCCL, small /dev/shm, CUDA already initialised in this kernel, MIG mode.
        """
        from ..core.gpu import doctor
        from ..core.runs.launch_context import LaunchContext
        from ..views import doctor_report as doctor_view

        args = parse_line(self.gpu_doctor, line)
        context = LaunchContext.from_environ()  # read once, where the call enters jiyu
        findings = doctor.diagnose()
        if args.json:
            return [f.to_dict() for f in findings]
        if in_notebook(self.shell, context):
            display(HTML(doctor_view.render_html(findings)))
        else:
            print(doctor_view.render_text(findings))


MAGICS = [GpuMagics]
