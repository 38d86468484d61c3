"""The server's calls into ``jiyu_magics.jobs``, imported when a request needs them.

The jobs layer launches torchrun supervisors; the server only validates and delegates. A
``JobError`` (bad input the jobs layer found, e.g. a notebook it cannot export) becomes a 400;
an installation without the jobs layer answers 503 instead of failing at start-up.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from .http_errors import Conflict, RequestError, Unavailable
from .validation import Submission

if TYPE_CHECKING:  # the jobs layer is imported when a request needs it (``rest_schema`` names it for the schema)
    from ..jobs.process.rank_records import RankRecordJson


class RankList(TypedDict):
    """``GET /jiyu/api/runs/{id}/ranks``: each rank's own record, by rank."""

    ranks: list[RankRecordJson]


def jobs_module() -> ModuleType:
    try:
        return importlib.import_module("jiyu_magics.jobs")
    except ModuleNotFoundError as error:
        if error.name != "jiyu_magics.jobs":
            raise
        raise Unavailable("background jobs are not part of this installation (jiyu_magics.jobs is missing)") from None


def submit_option_fields() -> list[str]:
    """The fields of a submission that are options: the jobs layer's declarations name them
    (``SubmitOptions``' request options, then ``slurm``), so a new option is a field at once."""
    jobs_module()
    from ..jobs.submit_options import request_fields

    return request_fields()


def submit(submission: Submission) -> Run:
    """The options are the jobs layer's ``SubmitOptions``, checked there as for ``%submit``
    (errors name the JSON field); parameter lines are read by its ``-p`` grammar. A value it
    refuses, or a line it cannot read, is a 400 that names it."""
    jobs = jobs_module()
    from ..jobs.submit_options import SubmitOptions

    try:
        params = submission.params or jobs.parse_lines(submission.param_lines)
        options = SubmitOptions.from_request(submission.options, params)
        run: Run = jobs.submit(str(submission.notebook), options, cwd=str(submission.notebook.parent))
        return run
    except jobs.JobError as error:
        raise RequestError(str(error)) from None


def upkeep() -> None:
    """The server's share of run upkeep (``jobs.upkeep``), on its sampler's clock: lost runs
    recorded, the scheduler follower kept running. Without the jobs layer, only the former."""
    try:
        jobs = jobs_module()
    except Unavailable:
        RunStore().record_lost()
        return
    jobs.upkeep()


def stop(run_id: str, grace: float) -> Run:
    jobs = jobs_module()
    try:
        stopped: Run = jobs.stop(run_id, grace=grace)
        return stopped
    except jobs.JobError as error:
        raise Conflict(str(error)) from None


def ranks(run_id: str) -> list[RankRecordJson]:
    """Each rank's own record (pid, state, exit code, error, GPUs seen, whether it stopped on
    request, the signal that killed it as torchrun reported it), as the run page shows
    it; none for a run whose ranks write none (a kernel run), or without the jobs layer."""
    try:
        jobs_module()
    except Unavailable:
        return []
    records = importlib.import_module("jiyu_magics.jobs.process.rank_records")
    return [record.to_dict() for record in records.read_with_signals(run_id)]
