"""The jupyter_server extension: REST for the JupyterLab panel and ``/jiyu/metrics``.

Enabled by the ``jupyter-config`` file the wheel installs; configure it like any Jupyter
app, e.g. ``jupyter lab --JiyuApp.refresh_interval=5`` or ``c.JiyuApp.metrics_token = ...`` in
``jupyter_server_config.py``. It never imports torch and reads GPUs through NVML only, on a
worker thread.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Float, Int, TraitError, Unicode, default, validate

from ..core.gpu.owners import DEFAULT_BUSY_MIB, check_busy_mib
from ..core.gpu.status import peak_memory
from ..core.runs.files import private_folder
from ..core.settings import GPU_BUSY_ENV as BUSY_ENV
from ..core.settings import HOME_ENV
from . import box_kernels
from . import jobs_bridge as bridge
from .gpu_sampler import GpuSampler, GpuStatus, Holders
from .handlers import ROUTES
from .kernel_owners import kernel_infos
from .kernel_status import untrack_control_messages
from .metrics_gpu import NAME_SETS
from .run_views import RunViews

CPU_LIMIT_ENV = "JIYU_MAX_CPU_JOBS"  # read by the jobs layer's queue
TOKEN_ENV = "JIYU_METRICS_TOKEN"


class JiyuApp(ExtensionApp):
    name = "jiyu_magics"
    description = "GPUs and training runs of JiyuTrainer for the JupyterLab panel and Prometheus."
    load_other_extensions = True

    refresh_interval = Float(
        2.0,
        config=True,
        help=(
            "Seconds a GPU snapshot is reused before NVML is read again. However many panels are "
            "open and however often Prometheus scrapes, NVML is read at most once per interval. "
            "(How often each panel polls is its own 'Refresh interval' setting.)"
        ),
    )
    jiyu_home = Unicode(
        "",
        config=True,
        help=(
            f"The run store folder (jiyu.sqlite and runs/). Empty: ${HOME_ENV}, else ~/.jiyu. When "
            f"set, it is also exported as ${HOME_ENV} so the jobs this server submits use it."
        ),
    )
    runs_limit = Int(50, config=True, help="How many of the most recent runs GET /jiyu/api/runs returns.")
    chunk_bytes = Int(
        256 * 1024,
        config=True,
        help=(
            "The most bytes of log or event text one request returns; a follower asks again from the returned offset."
        ),
    )
    stop_grace = Float(
        10.0,
        config=True,
        help=(
            "Seconds a run stopped from the panel gets between SIGTERM to its ranks (checkpoint, end "
            "the job) and SIGKILL."
        ),
    )
    metrics_token = Unicode(
        config=True,
        help=(
            "A secret that lets a Prometheus scraper read /jiyu/metrics without a Jupyter login: "
            "configure the scrape job with 'authorization: {credentials: <token>}' (an "
            f"'Authorization: Bearer <token>' header). Empty (the default, unless ${TOKEN_ENV} is "
            "set): /jiyu/metrics needs Jupyter's own authentication like every other route."
        ),
    )

    metrics_gpu_names = Unicode(
        "jiyu",
        config=True,
        help=(
            "The names GPU readings have in /jiyu/metrics: 'jiyu' (jiyu_gpu_utilization_ratio, "
            "jiyu_gpu_memory_used_bytes, ...: Prometheus' base units), 'dcgm' (NVIDIA dcgm-exporter's "
            "DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, ... with its units and labels gpu, UUID, device, "
            "modelName, Hostname, so the DCGM Grafana dashboards work unchanged) or 'both'."
        ),
    )

    @validate("metrics_gpu_names")
    def _known_names(self, proposal: dict[str, str]) -> str:
        if proposal["value"] not in NAME_SETS:
            raise TraitError(f"metrics_gpu_names must be one of {', '.join(NAME_SETS)}; got {proposal['value']!r}")
        return proposal["value"]

    gpu_busy_mib = Float(
        config=True,
        help=(
            "MiB of GPU memory that processes outside jiyu (other users' programs, notebooks holding "
            f"memory) may hold on a GPU before it counts as busy: queued runs never lease a busy GPU. "
            f"Default: ${BUSY_ENV}, else {DEFAULT_BUSY_MIB}. Exported as ${BUSY_ENV} for the jobs this "
            "server submits."
        ),
    )
    max_cpu_jobs = Int(
        0,
        config=True,
        help=(
            "How many runs that want no GPU (--gpus 0) may run at once; more wait queued. 0: no "
            f"limit (the default, unless ${CPU_LIMIT_ENV} is set). Exported as ${CPU_LIMIT_ENV}."
        ),
    )
    kernel_idle_warning = Float(
        30.0,
        config=True,
        help=(
            "Minutes a kernel may hold GPU memory while idle before the panel warns about it (with "
            "its 'Shut down kernel' action)."
        ),
    )
    usage_sample_interval = Float(
        10.0,
        config=True,
        help=(
            "Seconds between the server's background upkeep: a GPU sample for `jiyu usage` (idle GPU "
            "time, and GPU time of kernels that hold a GPU without a run), runs whose processes are "
            "gone recorded lost, and the scheduler follower kept running. Requests never write. 0 "
            "turns it off."
        ),
    )

    @default("gpu_busy_mib")
    def _busy_from_env(self) -> float:
        try:
            return float(check_busy_mib(os.environ.get(BUSY_ENV, "") or DEFAULT_BUSY_MIB))
        except ValueError:
            return float(DEFAULT_BUSY_MIB)

    @default("max_cpu_jobs")
    def _cpu_jobs_from_env(self) -> int:
        raw = os.environ.get(CPU_LIMIT_ENV, "")
        return int(raw) if raw.isdigit() else 0

    @validate("gpu_busy_mib", "kernel_idle_warning", "usage_sample_interval", "max_cpu_jobs")
    def _not_negative(self, proposal):
        if not proposal["value"] >= 0:
            raise TraitError(f"{proposal['trait'].name} must be >= 0")
        return proposal["value"]

    @default("metrics_token")
    def _metrics_token_from_env(self) -> str:
        return os.environ.get(TOKEN_ENV, "")

    @validate("refresh_interval", "stop_grace")
    def _positive(self, proposal):
        if not proposal["value"] > 0:
            raise TraitError(f"{proposal['trait'].name} must be a positive number of seconds")
        return proposal["value"]

    @validate("runs_limit", "chunk_bytes")
    def _positive_int(self, proposal):
        if proposal["value"] < 1:
            raise TraitError(f"{proposal['trait'].name} must be at least 1")
        return proposal["value"]

    def initialize_settings(self) -> None:
        home = Path(self.jiyu_home).expanduser() if self.jiyu_home else None
        if home is not None:
            private_folder(home, above=True)
            os.environ[HOME_ENV] = str(home)
        os.environ[BUSY_ENV] = f"{self.gpu_busy_mib:g}"
        if self.max_cpu_jobs:
            os.environ[CPU_LIMIT_ENV] = str(self.max_cpu_jobs)
        self.runs = RunViews(home, limit=self.runs_limit)
        self.box_idle_s: float | None = None  # a shared box's policy overrides kernel_idle_warning
        self.sampler = GpuSampler(self.refresh_interval, holders=self._holders)
        self.usage_sampling = None
        if self.usage_sample_interval:
            self.usage_sampling = PeriodicCallback(self.upkeep, self.usage_sample_interval * 1000)
            self.usage_sampling.start()
        untrack_control_messages(self.serverapp)  # the status bar stays "Busy" under %%train
        self.log.info("jiyu_magics: run store %s", self.runs.store.path)

    def _holders(self) -> Holders:
        return Holders(
            store=self.runs.store,
            reported=lambda run_id: peak_memory(self.runs.summary(run_id)),
            idle_warning_s=self.box_idle_s if self.box_idle_s is not None else self.kernel_idle_warning * 60,
        )

    async def sample_gpus(self) -> GpuStatus:
        """The GPU snapshot with the server's kernels as owners (every request and the
        background sampler go through here, so the shared snapshot always names them)."""
        return await self.sampler.snapshot(await kernel_infos(self.serverapp))

    async def upkeep(self) -> None:
        """The server's background step, the one that writes: GPU time credited from a fresh
        sample, lost runs recorded and the scheduler follower kept running (``jobs.upkeep``);
        on a shared box, this user's kernels on GPUs reported and an admin's reclaims done."""
        data = await self.sampler.snapshot(await kernel_infos(self.serverapp), accrue=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, bridge.upkeep)
        reclaim, self.box_idle_s = await loop.run_in_executor(None, box_kernels.report, data["kernels"])
        for kernel_id in await box_kernels.carry_out(self.serverapp, reclaim):
            await loop.run_in_executor(None, box_kernels.reclaimed, kernel_id)

    def initialize_handlers(self) -> None:
        self.handlers.extend(ROUTES)

    async def stop_extension(self) -> None:
        if self.usage_sampling is not None:
            self.usage_sampling.stop()
        self.sampler.close()
