"""The GPU snapshot every view shows (``%gpu_status``, ``jiyu gpu``, ``GET /jiyu/api/gpus``):
NVML's, with each GPU's leases and each process's owner filled in from the run store.

One shape for all of them. The server passes the kernels it knows (with sessions and idle
times) and a cached reader of what each run reports; the magic and the CLI recognise kernels
by their command line. A run store that cannot be read leaves the owners out, with the reason,
rather than hiding the GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..events.fold import RunSummary
from ..events.log import summarize
from ..runs.files import RunFiles
from ..store.database import StoreUnusable
from ..store.run_row import UnknownRun
from ..store.run_store import RunStore
from . import snapshot as gpu
from .owners import Attribution, KernelInfo


def owned_snapshot(
    store: RunStore | None = None,
    kernels: Mapping[int, KernelInfo] | None = None,
    reported: Callable[[str], int | None] | None = None,
    own_pids: Iterable[int] = (),
    snap: gpu.GpuSnapshot | None = None,
) -> gpu.GpuSnapshot:
    """The snapshot with owners (or, when the store cannot be read, without and saying why)."""
    snap = snap or gpu.snapshot()
    if not snap.available:
        return snap
    try:
        store = store or RunStore()
        runs = store.list(include_finished=False, annotate=False)
        active = [run for run in runs if run.active]
        gone = {run.id for run in runs if not run.active}  # shown lost: their leases are not held any more
        leases = [lease for lease in store.leases.live() if lease.run_id not in gone]
    except StoreUnusable as problem:
        snap.owners_note = f"owners unknown: {problem}"
        return snap
    Attribution(active, leases, kernels, own_pids, reported or reported_memory, lookup=_finder(store)).apply(snap)
    return snap


def _finder(store: RunStore) -> Callable[[str], object]:
    """The row of a run a leftover process names (an ended run's), read only when one does."""

    def find(run_id: str):
        try:
            return store.get(run_id)
        except (UnknownRun, StoreUnusable):
            return None

    return find


def reported_memory(run_id: str) -> int | None:
    """The GPU memory a run's rank 0 reports (torch's peak allocated, from its event log): what
    a view can say of a run whose processes NVML names by pids outside this container."""
    return peak_memory(summarize(RunFiles.of(run_id).events))


def peak_memory(summary: RunSummary) -> int | None:
    """A run summary's ``mem_peak`` in bytes (JSON may bring it as a float)."""
    value = summary.get("mem_peak")
    return int(value) if isinstance(value, (int, float)) else None
