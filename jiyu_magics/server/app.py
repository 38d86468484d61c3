"""The jupyter_server extension: REST for the JupyterLab panel and ``/jiyu/metrics``.

Enabled by the ``jupyter-config`` file the wheel installs; configure it like any Jupyter
app, e.g. ``jupyter lab --JiyuApp.refresh_interval=5`` or ``c.JiyuApp.metrics_token = ...`` in
``jupyter_server_config.py``. It never imports torch and reads GPUs through NVML only, on a
worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Int, TraitError, Unicode, default, validate

from ..core.run_files import HOME_ENV
from .handlers import ROUTES
from .run_views import RunViews
from .gpu_sampler import GpuSampler

TOKEN_ENV = "JIYU_METRICS_TOKEN"


class JiyuApp(ExtensionApp):
    name = "jiyu_magics"
    description = "GPUs and training runs of JiyuTrainer for the JupyterLab panel and Prometheus."
    load_other_extensions = True

    refresh_interval = Float(2.0, config=True, help=(
        "Seconds a GPU snapshot is reused before NVML is read again. However many panels are "
        "open and however often Prometheus scrapes, NVML is read at most once per interval. "
        "(How often each panel polls is its own 'Refresh interval' setting.)"))
    jiyu_home = Unicode("", config=True, help=(
        f"The run store folder (jiyu.sqlite and runs/). Empty: ${HOME_ENV}, else ~/.jiyu. When "
        f"set, it is also exported as ${HOME_ENV} so the jobs this server submits use it."))
    runs_limit = Int(50, config=True, help="How many of the most recent runs GET /jiyu/api/runs returns.")
    chunk_bytes = Int(256 * 1024, config=True, help=(
        "The most bytes of log or event text one request returns; a follower asks again "
        "from the returned offset."))
    stop_grace = Float(10.0, config=True, help=(
        "Seconds a run stopped from the panel gets between SIGTERM to its ranks (checkpoint, end "
        "the job) and SIGKILL."))
    metrics_token = Unicode(config=True, help=(
        "A secret that lets a Prometheus scraper read /jiyu/metrics without a Jupyter login: "
        "configure the scrape job with 'authorization: {credentials: <token>}' (an "
        f"'Authorization: Bearer <token>' header). Empty (the default, unless ${TOKEN_ENV} is "
        "set): /jiyu/metrics needs Jupyter's own authentication like every other route."))

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
            home.mkdir(parents=True, exist_ok=True)
            os.environ[HOME_ENV] = str(home)
        self.runs = RunViews(home, limit=self.runs_limit)
        self.sampler = GpuSampler(self.refresh_interval)
        self.log.info("jiyu_magics: run store %s", self.runs.store.path)

    def initialize_handlers(self) -> None:
        self.handlers.extend(ROUTES)

    async def stop_extension(self) -> None:
        self.sampler.close()
