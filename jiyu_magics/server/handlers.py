"""REST handlers under ``/jiyu/``: parse, delegate to ``RunViews``/``GpuSampler``/the jobs
bridge on a worker thread, reply JSON.

Every verb is ``@web.authenticated`` on ``APIHandler`` (XSRF is checked on writes by Jupyter's
``prepare``) and wrapped by ``answers_errors``. ``ROUTES`` is the complete list; a test walks
the server's routing table to check that each one refuses a request without credentials.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Callable
from typing import Any, Protocol, cast

from jupyter_server.auth import User
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from ..core.runs.model import RunStatus
from . import jobs_bridge as bridge
from . import metrics, validation
from .gpu_sampler import GpuStatus
from .http_errors import answers_errors
from .log_chunks import read_chunk
from .run_views import RunList, RunViews


class ServingApp(Protocol):
    """What the handlers use of their extension app (``app.JiyuApp``, which lists them in its
    routes: the handlers name only this, so the two modules do not import each other)."""

    runs: RunViews
    chunk_bytes: int
    stop_grace: float
    metrics_token: str
    metrics_gpu_names: str

    async def sample_gpus(self) -> GpuStatus: ...


class JiyuHandler(ExtensionHandlerMixin, APIHandler):
    @property
    def app(self) -> ServingApp:
        return cast(ServingApp, self.extensionapp)  # jupyter_server types it as any ExtensionApp: ours is JiyuApp

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a worker thread: SQLite, log files and process signals never block
        the event loop that serves every kernel's websocket."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def reply(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data, default=str))


class GpusHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self) -> None:
        """The ``%gpu_status --json`` snapshot with each GPU's ``leases``, ``free`` and
        ``foreign_memory``, each process's ``owner`` (a run, or a kernel with its notebook and
        idle time), the ``kernels`` holding GPU memory, and ``doctor`` (the first finding) when
        no GPU is visible. Shared by every request for ``JiyuApp.refresh_interval`` seconds."""
        self.reply(await self.app.sample_gpus())


class RunsHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self) -> None:
        """The newest runs (``?limit=N``, default ``JiyuApp.runs_limit``; ``?since=T``: created
        at or after unix time T), each with its params in short form."""
        limit = validation.list_limit(self.get_query_argument("limit", None))
        since = validation.since(self.get_query_argument("since", None))
        self.reply(RunList(runs=await self.blocking(self.app.runs.list, limit, since)))

    @web.authenticated
    @answers_errors
    async def post(self) -> None:
        """Submits a notebook under the server root as a background job."""
        body = validation.json_object(self.request.body)
        fields = await self.blocking(bridge.submit_option_fields)
        submission = validation.submission(body, self.settings["server_root_dir"], fields)
        run = await self.blocking(bridge.submit, submission)
        record = await self.blocking(self.app.runs.record, run, run.params)
        self.set_header("Location", self.request.path.rstrip("/") + f"/{run.id}")
        self.reply(record, status=201)


class RunHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """One run (an id or a unique prefix): its record with ``params`` whole and its
        ``summary`` (step, loss, progress...; a finished run's as stored when it ended)."""
        self.reply(await self.blocking(self.app.runs.get, run_id))


class RunEventsHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """The run's events after byte ``?offset=N`` of its event log, and the offset to ask
        from next (at most ``JiyuApp.chunk_bytes`` a request)."""
        offset = validation.offset(self.get_query_argument("offset", None))
        self.reply(await self.blocking(self.app.runs.events, run_id, offset, self.app.chunk_bytes))


class RunLogHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """The run's stdout/stderr from ``offset``; ``active`` false means no more will come."""
        offset = validation.offset(self.get_query_argument("offset", None))
        status = (await self.blocking(self.app.runs.row, run_id)).status
        path = self.app.runs.files(run_id).log
        chunk = await self.blocking(read_chunk, path, offset, self.app.chunk_bytes, not status.active)
        self.reply(chunk.reply(status))


class RunStacksHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """The run's newest stack dump, grouped by identical stacks (``jiyu stacks``);
        ``dumped`` null and no groups when it never stalled."""
        self.reply(await self.blocking(self.app.runs.stacks, run_id))


class RunCheckpointsHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """The run's checkpoints on disk (step, path, bytes), oldest first, and ``rotated``:
        how many it recorded that are gone."""
        self.reply(await self.blocking(self.app.runs.checkpoints, run_id))


class RunRanksHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def get(self, run_id: str) -> None:
        """Each rank's record: pid, state (running | exited | killed), exit code, error."""
        await self.blocking(self.app.runs.row, run_id)  # an unknown run is a 404
        self.reply(bridge.RankList(ranks=await self.blocking(bridge.ranks, run_id)))


class RunStopHandler(JiyuHandler):
    @web.authenticated
    @answers_errors
    async def post(self, run_id: str) -> None:
        """Stops a background run: SIGTERM to its ranks (training checkpoints, the job ends),
        SIGKILL after the grace period. Stopping a finished run returns it unchanged."""
        run = await self.blocking(self.app.runs.get, run_id)
        if _active(run):  # jobs.stop refuses in-kernel runs (JobError → 409)
            await self.blocking(bridge.stop, run_id, self.app.stop_grace)
            run = await self.blocking(self.app.runs.get, run_id)
        self.reply(run)


class MetricsHandler(JiyuHandler):
    """Prometheus text. A scraper may authenticate with ``Authorization: Bearer <metrics_token>``
    instead of a Jupyter token, when the server sets ``JiyuApp.metrics_token``."""

    _track_activity = False  # a scraper must not keep an idle server from being culled

    # jupyter_server's APIHandler narrows JupyterHandler.prepare's signature itself (under its own ignore)
    async def prepare(self) -> None:  # type: ignore[override]
        if self._scraper_token_matches():
            self.current_user = self._jupyter_current_user = User(username="prometheus-scraper")
            return
        await super().prepare()

    def _scraper_token_matches(self) -> bool:
        expected = self.app.metrics_token
        scheme, _, given = self.request.headers.get("Authorization", "").partition(" ")
        # bytes: compare_digest refuses non-ASCII str (a header may hold any latin-1 text)
        return (
            bool(expected)
            and scheme.lower() == "bearer"
            and hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), expected.encode("utf-8"))
        )

    @web.authenticated
    @answers_errors
    async def get(self) -> None:
        gpus = await self.app.sample_gpus()
        runs = await self.blocking(self.app.runs.list)
        counts = await self.blocking(self.app.runs.status_counts)
        usage = await self.blocking(self.app.runs.gpu_seconds)
        self.set_status(200)
        text = metrics.render(gpus, runs, counts, usage=usage, gpu_names=self.app.metrics_gpu_names)
        self.finish(text, set_content_type=metrics.content_type())


def _active(run: dict) -> bool:
    return RunStatus(run["status"]).active


RUN = r"/jiyu/api/runs/(?P<run_id>[^/]+)"
ROUTES = [
    (r"/jiyu/api/gpus", GpusHandler),
    (r"/jiyu/api/runs", RunsHandler),
    (RUN, RunHandler),
    (RUN + r"/events", RunEventsHandler),
    (RUN + r"/log", RunLogHandler),
    (RUN + r"/stacks", RunStacksHandler),
    (RUN + r"/ranks", RunRanksHandler),
    (RUN + r"/checkpoints", RunCheckpointsHandler),
    (RUN + r"/stop", RunStopHandler),
    (r"/jiyu/metrics", MetricsHandler),
]
