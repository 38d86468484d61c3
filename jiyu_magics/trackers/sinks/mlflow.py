"""A run into an MLflow tracking store, through ``MlflowClient`` (any URI MLflow takes: an
SQLite file, a tracking server, Databricks).

One MLflow run per tracker run, found by its tag ``jiyu.run_id`` (the resume chain's first
jiyu run): a resumed run logs on into the same MLflow run and sets it RUNNING again. Each
write is one ``log_batch`` per 1000 metrics, and the last one carries the tag
``mlflow.jiyu.offset.<run id>``: how far that jiyu run's event log is in MLflow, written in the
same request as the metrics it covers, so an export or a second follower goes on from there and
never logs a point twice (bookkeeping: MLflow's UI hides the ``mlflow.`` tags; one written as
``jiyu.offset.`` by an earlier version is read, then removed).

A training run, as MLflow 3 files one: the experiment says ``mlflow.experimentKind`` =
``custom_model_development``, and the run has the model it trains as an output (an external
logged model: its weights are jiyu's checkpoints), so MLflow's UI lists it under "Training
runs", not as a GenAI evaluation. A run logging faster than ``MAX_RATE`` points a second per metric is
thinned for MLflow (``_thinned``). Parameters: the run record's (``-p`` values, a kernel run's ``fit``
options) and the first call's resolved settings (``fit.*``); MLflow refuses to change a
parameter, so a resumed run adds only new ones.
"""

from __future__ import annotations

import fcntl
import logging
import math
import re
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

from ...core.runs.model import RunStatus
from ..destinations import experiment_name
from ..identity import RunIdentity
from ..translate import MLFLOW_STATUS, Point, Translation, as_text, record_params
from ..where import Place, mlflow_place

ROOT_TAG = "jiyu.run_id"
MAX_RATE = 50.0  # points a second per metric, at most (``_thinned``)
MAX_PER_WRITE = 50  # points of a metric a write takes as they are
OFFSET_TAG = "mlflow.jiyu.offset."  # hidden by MLflow's UI, as its own bookkeeping is
OLD_OFFSET_TAG = "jiyu.offset."  # an earlier version's, shown among the user's tags
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # training, not GenAI
_UNSAFE = re.compile(r"[^\w./\- :]")
SOURCE_TYPES = {"job": "JOB"}  # mlflow.source.type; a notebook's runs are NOTEBOOK, the rest LOCAL

for _noisy in ("alembic", "mlflow.store.db.utils"):  # an SQLite store's first use logs its migrations
    logging.getLogger(_noisy).setLevel(logging.WARNING)


class MlflowSink:
    def __init__(self, uri: str, identity: RunIdentity):
        self.identity = identity
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        with _first_use(uri), _unreachable_said(uri):
            self.experiment_id = _experiment(self.client, experiment_name())
        self.run = self._find() or self._create()
        self.run_id = self.run.info.run_id
        self.params = dict(self.run.data.params)
        self.running = self.run.info.status == "RUNNING"
        self.last_t: float | None = None
        self.kept_at: dict[str, float] = {}  # per metric, the time of the last point written

    def place(self) -> Place:
        return mlflow_place(self.uri, experiment_name(), self.experiment_id, self.run.info.run_name, self.run_id)

    def synced_offset(self) -> int:
        tags = self.run.data.tags
        value = tags.get(OFFSET_TAG + self.identity.run_id) or tags.get(OLD_OFFSET_TAG + self.identity.run_id, "0")
        return int(value) if value.isdigit() else 0

    def write(self, translation: Translation, offset: int) -> None:
        """One stretch of the log into MLflow. What the sink remembers of what MLflow holds (the
        points kept per metric, the parameters logged) changes only once every request went
        through: after a failure (a server down) the follower writes the same stretch again, and
        none of it may count as written."""
        if translation.started and not self.running:
            self.client.update_run(self.run_id, status="RUNNING")
            self.running = True
        kept_at = dict(self.kept_at)
        points = self._thinned(translation.scalars, kept_at)
        metrics = [Metric(_key(p.key), p.value, int(p.t * 1000), p.step) for p in points]
        params = self._new_params({**record_params(self.identity.params), **translation.params})
        tags = [RunTag(OFFSET_TAG + self.identity.run_id, str(offset))]
        for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start : start + MAX_PARAMS_TAGS_PER_BATCH])
        self.params.update((param.key, param.value) for param in params)
        for start in range(0, max(len(metrics), 1), MAX_METRICS_PER_BATCH):
            last = start + MAX_METRICS_PER_BATCH >= len(metrics)
            self.client.log_batch(
                self.run_id, metrics=metrics[start : start + MAX_METRICS_PER_BATCH], tags=tags if last else ()
            )
        self.kept_at = kept_at
        old = OLD_OFFSET_TAG + self.identity.run_id
        if old in self.run.data.tags:  # moved to the hidden tag just written
            self.client.delete_tag(self.run_id, old)
            del self.run.data.tags[old]
        if translation.scalars:
            self.last_t = translation.scalars[-1].t
        if translation.end_time:
            self.last_t = translation.end_time

    def _thinned(self, points: list[Point], kept_at: dict[str, float]) -> list[Point]:
        """At most ``MAX_RATE`` points a second per metric, by the run's own clock: MLflow's SQL
        store spends about 0.15 ms of CPU a point, so a run logging every step at 1 kHz would
        leave its follower ever further behind. The newest point of each metric in a write is
        always kept (the run's latest value stays current), and so is a write of at most
        ``MAX_PER_WRITE`` points of a metric (a follower that keeps up writes every half second)
        and the engine's default logging (every 0.5 s). TensorBoard gets every point."""
        newest = {point.key: index for index, point in enumerate(points)}
        counts = Counter(point.key for point in points)
        kept = []
        for index, point in enumerate(points):
            due = point.t - kept_at.get(point.key, -math.inf) >= 1 / MAX_RATE
            if counts[point.key] <= MAX_PER_WRITE or due or newest[point.key] == index:
                kept_at[point.key] = point.t
                kept.append(point)
        return kept

    def finish(self, status: RunStatus | None) -> None:
        """Ends the MLflow run with the jiyu run's status; not again where it already ended so
        (a second export: its end time stays the run's)."""
        if status is None or status == RunStatus.RUNNING:
            return
        if not self.running and self.run.info.status == MLFLOW_STATUS[status]:
            return
        end = int((self.last_t or 0) * 1000) or None
        self.client.set_terminated(self.run_id, MLFLOW_STATUS[status], end_time=end)
        self.client.set_tag(self.run_id, "jiyu.status", str(status))
        self.running = False

    def close(self) -> None:
        pass

    def _find(self):
        found = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROOT_TAG}` = '{self.identity.root}'", max_results=1
        )
        return found[0] if found else None

    def _create(self):
        identity = self.identity
        tags = dict(identity.tags)
        if identity.notebook:
            tags["mlflow.source.name"] = identity.notebook
        tags["mlflow.source.type"] = SOURCE_TYPES.get(identity.kind or "", "NOTEBOOK" if identity.notebook else "LOCAL")
        started = int(identity.started * 1000) if identity.started else None
        run = self.client.create_run(self.experiment_id, start_time=started, tags=tags, run_name=identity.name)
        self._file_as_training(run.info.run_id)
        return run

    def _file_as_training(self, run_id: str) -> None:
        """The model the run trains, as its output: an external logged model (its weights are
        the jiyu run's checkpoints), which is what MLflow's UI lists a training run by. A store
        without logged models (before MLflow 3) keeps the run as it is."""
        identity = self.identity
        try:
            model = self.client.create_logged_model(
                self.experiment_id,
                name=_key(identity.name).replace(" ", "-") or "model",
                source_run_id=run_id,
                tags={"jiyu.run_id": identity.root, "mlflow.model.isExternal": "true"},
                model_type="jiyu",
            )
            self.client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
            self.client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])
        except (MlflowException, AttributeError, NotImplementedError):
            pass

    def _new_params(self, params: dict) -> list[Param]:
        """Only parameters the MLflow run does not have yet: MLflow refuses to change one."""
        fresh: dict[str, Param] = {}
        for key, value in params.items():
            key = _key(key)
            if key not in self.params and key not in fresh:
                fresh[key] = Param(key, as_text(value)[:MAX_PARAM_VAL_LENGTH])
        return list(fresh.values())


class Unreachable(ConnectionError):
    """The tracking server cannot be reached; ``str()`` says so without MLflow's request dump."""


@contextmanager
def _unreachable_said(uri: str):
    """MLflow's error for a server that is not there quotes the request, urllib3's pool and
    the socket's error in one long line: a refused connection is said plainly instead."""
    try:
        yield
    except MlflowException as error:
        if "Connection refused" in str(error):
            raise Unreachable(f"nothing listens at {uri} (connection refused)") from None
        raise


@contextmanager
def _first_use(uri: str):
    """An SQLite store's first use creates its tables with alembic migrations, which two
    processes opening a new store at once break ("expected to match one row"): followers of
    several runs take turns at it, under a lock beside the file."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".jiyu-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _artifacts(uri: str) -> str | None:
    """Beside an SQLite store, its experiment's artifact folder (MLflow's default is ``./mlruns``
    of whichever process made the experiment); a server decides its own."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).parent / "mlflow-artifacts").as_uri()


def _key(name: str) -> str:
    """A metric or parameter name MLflow accepts (letters, digits, ``_ - . / :`` and spaces)."""
    return _UNSAFE.sub("_", name)


def _experiment(client: MlflowClient, name: str) -> str:
    """The experiment's id, made a training experiment (``EXPERIMENT_KIND``) where it is new or
    says no kind; one its owner made a GenAI one stays so."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        if "mlflow.experimentKind" not in found.tags:
            client.set_experiment_tag(found.experiment_id, *next(iter(EXPERIMENT_KIND.items())))
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=_artifacts(client.tracking_uri), tags=EXPERIMENT_KIND)
    except MlflowException:  # made by another follower meanwhile
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id
