"""Where a run's tracker data went, in the words a user needs to open it: the TensorBoard
folder and its ``tensorboard --logdir`` command, the MLflow run, its experiment and tracking URI
(with the run's page where the URI is a server).

Each sink says where it writes (``Place``) when its follower opens it, and the follower keeps
that in the run's folder (``trackers.json``); the dashboard and the end summary read it, and
before a follower has said (its first write comes a moment after the run's start), they name
the destination as ``--track`` resolved it. Reading is a small file; nothing here imports a
tracker.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..core.runs.files import RunFiles
from .destinations import Destination, TrackSpecError, experiment_name, parse_track


@dataclass(frozen=True)
class Place:
    text: str  # one line: what, where and how to open it
    url: str | None = None  # a page to open, where the tracker serves one


def record(files: RunFiles, destination: Destination, place: Place) -> None:
    """Keeps ``place`` for ``destination`` in the run's folder (the follower, once per sink)."""
    path = files.trackers
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known[str(destination)] = asdict(place)
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(known, indent=1))
    os.replace(temp, path)


def places(run_id: str | None, track: str | None, name: str | None = None) -> list[Place]:
    """Where the run's trackers hold it, one per destination its call named (``track``, the
    start event's): as the follower recorded it, else as the destination says."""
    try:
        destinations = parse_track(track or None)
    except TrackSpecError:
        return []
    known: dict = {}
    if run_id and destinations:
        try:
            known = json.loads(RunFiles.of(run_id).trackers.read_text())
        except (OSError, ValueError):
            known = {}
    found = []
    for destination in destinations:
        said = known.get(str(destination))
        found.append(Place(**said) if isinstance(said, dict) else expected(destination, name))
    return found


def expected(destination: Destination, name: str | None) -> Place:
    """Where a destination will hold the run, before its follower said."""
    if destination.kind == "tensorboard":
        return Place(f"TensorBoard: {destination.target} (tensorboard --logdir {destination.target})")
    run = f"run {name} " if name else "the run "
    return Place(f"MLflow: {run}in experiment {experiment_name()} at {destination.target}")


def tensorboard_place(logdir: str, folder: str) -> Place:
    return Place(f"TensorBoard: {folder} (tensorboard --logdir {logdir})")


def mlflow_place(uri: str, experiment: str, experiment_id: str, name: str, run_id: str) -> Place:
    """The run's page, where the URI is a server: in MLflow's model-training view (its UI opens
    in its GenAI view, which lists a run without a logged model as an evaluation)."""
    url = None
    if uri.startswith(("http://", "https://")):
        url = f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"
    where = url or f"{uri} (mlflow ui --backend-store-uri {uri})"
    return Place(f"MLflow: run {name} ({run_id}) in experiment {experiment} at {where}", url)
