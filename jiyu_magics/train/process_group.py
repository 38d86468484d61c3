"""The process group the engine runs in: one process, or one rank of a torchrun job.

Under torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` set: ``LaunchContext.torchrun_world``)
``fit`` joins the process group (NCCL on CUDA, gloo on CPU) unless the user already did, pins
the rank to its local device, and leaves the group at the end only if it created it. Everything
the loop needs from the group goes through :class:`DistContext`, which is free of collectives
when there is one process."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from traceback import format_exception
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from ..core.processes import rank_error
from ..core.runs.launch_context import LaunchContext
from .lasting_group import backend_of
from .train_errors import TrainConfigError

GLOO_DRAIN_S = 0.05
TRAINABLE_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def resolve_device(requested: str | None, local_rank: int = 0) -> torch.device:
    if requested:
        device = _parse_device(requested)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", local_rank)
        _check_available(device)
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _parse_device(requested: str) -> torch.device:
    try:
        return torch.device(requested)
    except (RuntimeError, ValueError, TypeError):
        raise TrainConfigError(
            f"device {requested!r} is not a device torch knows; use cpu, cuda, cuda:N or mps"
        ) from None


def _check_available(device: torch.device) -> None:
    """A device this process cannot use, said in one line before anything moves to it (torch's
    own answer is an assertion from deep inside ``Module.to``)."""
    if device.type not in TRAINABLE_DEVICE_TYPES:  # meta holds no data: the model would be emptied
        raise TrainConfigError(f"device {device}: cannot train there; use cpu, cuda, cuda:N or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        why = "this torch is a CPU-only build" if torch.version.cuda is None else "no CUDA device is visible"
        raise TrainConfigError(f"device {device}: {why}; run %gpu_doctor (jiyu doctor) to see why, or use --device cpu")
    if device.type == "cuda" and device.index >= torch.cuda.device_count():
        raise TrainConfigError(
            f"device {device}: only {torch.cuda.device_count()} CUDA device(s) are visible "
            "(numbered from 0, under CUDA_VISIBLE_DEVICES)"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise TrainConfigError(f"device {device}: MPS is not available on this machine; use --device cpu")


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    created_group: bool = False

    @property
    def distributed(self) -> bool:
        """In a process group (started by torchrun, even with one process): DDP and collectives."""
        return self.backend is not None

    @property
    def is_writer(self) -> bool:
        """Only rank 0 writes events and checkpoints."""
        return self.rank == 0

    def reduce(self, values: list[float], op: str, device: torch.device) -> list[float]:
        """Sums or maxima of ``values`` across ranks: one small collective, used at log time only."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device(device))
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return tensor.tolist()

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self, failed: bool = False) -> None:
        """Leaves the process group if ``fit`` created it (``leave_process_group``).

        After a failure the group is left alone: a barrier with a dead peer would hang, and
        the process is on its way out.

        The group's store goes with it, at once: a job script fits once per ``%%train`` cell,
        and the next ``fit`` creates a group of the same name ("0": torch restarts the count)
        on rank 0's multi-tenant TCPStore. Left to the cycle collector, the old store server
        still runs then, with the old group's keys: a rank reads the old gloo addresses and
        fails with "Connection reset by peer", or both hang (40 create/destroy cycles under a
        2-rank torchrun: 0 of 5 runs passed without the collection, 5 of 5 with it)."""
        if self.created_group and dist.is_initialized() and not failed:
            leave_process_group()
            self.created_group = False

    def _collective_device(self, device: torch.device) -> torch.device:
        return device if self.backend == "nccl" else torch.device("cpu")


def leave_process_group() -> None:
    """Destroys this process's default group once every rank is done with it: what a script
    that made the group itself calls last, as ``fit`` does for a group it made.

    Gloo's worker threads free a finished collective's tensors under the GIL, after the
    collective has returned. Destroying the group right then can deadlock (its destructor
    joins those threads holding the GIL: seen on rank 1 in about one run in ten), and a worker
    still freeing when the interpreter ends aborts the process ("terminate called without an
    active exception": a thread that wants the GIL during finalization is ended, through
    C++ code that may not be unwound). The second needs no explicit destroy: after an FSDP2
    ``fully_shard`` the group outlives ``destroy_process_group`` (torch's DTensor caches hold
    its mesh) and ends with the interpreter, whatever the script does (seen in 4 of 67
    launches of a 2-rank script under load). A barrier (every prior collective done) and a
    short GIL-free sleep let the workers go idle first; the collection then ends the group
    and its store while the interpreter is whole, where nothing else holds them."""
    dist.barrier()
    time.sleep(GLOO_DRAIN_S)
    dist.destroy_process_group()
    gc.collect()


def join_process_group(device_request: str | None, context: LaunchContext) -> tuple[DistContext, torch.device]:
    """The rank's context and device; a single-process context outside torchrun."""
    world = context.torchrun_world
    if world is None:
        return DistContext(), resolve_device(device_request)
    rank, size, local_rank = world
    device = resolve_device(device_request, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    created = False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
        created = True
    return DistContext(rank, size, local_rank, backend_of(), created), device


def record_rank_error(error: BaseException, error_file: str | None) -> None:
    """Writes the error to torchrun's per-rank error file (``LaunchContext.error_file``), as
    torch elastic's ``@record`` does, so torchrun and the launcher report the first failing
    rank's message instead of "a child process failed". Call it inside the ``except`` block.

    Written at once, so that its time (torchrun names the earliest failure the root cause) is
    when the rank failed, not when it exits. The script may catch the error and go on
    (``core.processes.rank_error``): under a bare torchrun, an exception that later ends the
    rank and did not arise from this one takes its place (``_RecordTheEndingError``)."""
    if not error_file or not isinstance(error, Exception):
        return
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    handler = get_error_handler()
    handler.initialize()
    handler.record_exception(error)
    rank_error.note_recorded(error)
    if not isinstance(sys.excepthook, _RecordTheEndingError):
        sys.excepthook = _RecordTheEndingError(sys.excepthook, error_file)


class _RecordTheEndingError:
    """``sys.excepthook`` once ``fit`` recorded an error (the rank's entry point, when there is
    one, catches everything first and decides the same itself)."""

    def __init__(self, previous: Callable[..., Any], error_file: str):
        self.previous, self.error_file = previous, error_file

    def __call__(self, kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        if isinstance(value, Exception) and not rank_error.arose_from_recorded(value):
            stack = "".join(format_exception(kind, value, traceback))
            rank_error.write_error_file(self.error_file, value, stack)
        self.previous(kind, value, traceback)
