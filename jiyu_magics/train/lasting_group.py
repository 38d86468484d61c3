"""A process group whose Python object outlives the communicator under it, so that what a user
built on it in an earlier cell (a ``DistributedDataParallel`` model, an FSDP2 ``fully_shard``
module and its ``DeviceMesh``, a ``dist.new_group`` subgroup) trains on after the pool rebuilt
its process group.

Objects bind to the group they were built with: DDP's C++ reducer holds the group, FSDP2 holds
it and its mesh names it (functional collectives look it up by name). A rebuild that destroyed
the group and made another left them bound to a dead one ("Connection closed by peer", "not
initialized in the world group map"). So the pool's groups are made through a backend of its
own (``BACKEND``): each is a ``ProcessGroup`` subclass whose collectives go, in Python, to the
current generation's real group (gloo or NCCL), and a rebuild replaces that real group under
the same object, as torchft's reconfigurable groups do. torch's ``PyProcessGroup`` lets C++
callers reach these Python methods (allreduce, broadcast, allgather, reduce_scatter, barrier,
send/recv and the coalesced forms); the rest are Python calls (``dist.all_gather_into_tensor``
calls the group's ``all_gather_single``).

The first generation's backend is also registered on the object itself: what C++ asks of a
group's backend without running a collective (DDP's logger, the device types) finds it. A
collective never goes there: C++ reaches the group's collectives through the overridden methods.

A subgroup that holds a rank that was replaced cannot be carried over (the new process never
made it): it is retired, and its next use says so in one line, with what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

BACKEND = "jiyu"  # the name torch.distributed knows the pool's groups by (``dist.get_backend()``)

# What a caller may ask of a group that needs its communicator: each goes to the current
# generation's real group. Old and new torch names alike (2.13 renamed the base forms).
DELEGATED = (
    "allgather",
    "allgather_coalesced",
    "all_gather_single",
    "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced",
    "_allgather_base",
    "allreduce",
    "allreduce_coalesced",
    "alltoall",
    "alltoall_base",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "gather",
    "monitored_barrier",
    "recv",
    "recv_anysource",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced",
    "_reduce_scatter_base",
    "scatter",
    "send",
    "_start_coalescing",
    "_end_coalescing",
    "_get_sequence_number_for_group",
    "_get_backend",
    "_wait_for_pending_works",
)


class GroupRetired(RuntimeError):
    """A lasting group that could not be carried into the pool's current generation."""


class LastingGroup(ProcessGroup):
    """One process group of a pool rank, the same object generation after generation.

    ``members``: its global ranks (the world's for the default group); ``key``: the name its
    members give it in the pool's store, the same on each of them (torch's own group names count
    the groups a process made, and a replacement rank made fewer)."""

    def __init__(self, rank: int, size: int, members: tuple[int, ...], key: str, device: torch.device):
        super().__init__(rank, size)  # type: ignore[call-arg]  # the store-less constructor Python groups use
        self.members, self.key, self.device = members, key, device
        self.current: ProcessGroup | None = None  # this generation's real group
        self.generation = -1
        self.retired: str | None = None
        self._name, self._desc = "", ""

    @property
    def backend_name(self) -> str:
        return "nccl" if self.device.type == "cuda" else "gloo"

    # -- generations ---------------------------------------------------------------------------
    def configure(self, generation: int, store: dist.Store, timeout: timedelta) -> None:
        """Its real group for ``generation``: made with its members (each blocks until all came),
        under the store prefix of that generation and this group."""
        prefixed = dist.PrefixStore(f"jiyu/gen{generation}/{self.key}", store)
        group = ProcessGroup(prefixed, self.rank(), self.size())
        backend, backend_type = self._backend(prefixed, timeout)
        backend._set_sequence_number_for_group()
        group._register_backend(self.device, backend_type, backend)
        group._set_default_backend(backend_type)
        if self._name:
            group._set_group_name(self._name)  # type: ignore[arg-type]  # GroupName is a str
        if self.current is None:  # introspection without a collective (module docstring)
            self._register_backend(self.device, backend_type, backend)
            self._set_default_backend(backend_type)
        self.current, self.generation, self.retired = group, generation, None

    def _backend(self, store: dist.Store, timeout: timedelta) -> tuple[Any, ProcessGroup.BackendType]:
        if self.device.type == "cuda":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            return dist.ProcessGroupNCCL(store, self.rank(), self.size(), options), ProcessGroup.BackendType.NCCL
        return dist.ProcessGroupGloo(store, self.rank(), self.size(), timeout), ProcessGroup.BackendType.GLOO

    def retire(self, why: str) -> None:
        """Not carried into the next generation: its next use raises ``GroupRetired(why)``."""
        self.current, self.retired = None, why

    def abort_current(self) -> None:
        """NCCL's own abort of this generation's communicator, from any thread (gloo's is the
        pool's: its connections are shut down)."""
        if self.current is not None and self.device.type == "cuda":
            try:
                self.current._get_backend(self.device).abort()
            except RuntimeError:
                pass

    def real(self) -> ProcessGroup:
        """This generation's real group, or the one line that says why there is none."""
        if self.current is None:
            raise GroupRetired(self.retired or f"process group {self._name or self.key} is not configured")
        return self.current

    # -- what torch asks of a group (``PyProcessGroup`` calls these from C++) -------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's C++ name
        return self.backend_name

    def getGroupName(self) -> str:  # noqa: N802
        return self._name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name
        if self.current is not None:
            self.current._set_group_name(name)  # type: ignore[arg-type]  # GroupName is a str

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._desc = desc

    def abort(self) -> None:
        self.abort_current()

    def shutdown(self) -> None:
        """``destroy_process_group`` of this group: its communicator goes; the object stays retired."""
        self.retire(f"process group {self._name or self.key} was destroyed (dist.destroy_process_group)")

    def __repr__(self) -> str:
        state = f"generation {self.generation}" if self.retired is None else "retired"
        return f"LastingGroup({self.backend_name}, ranks {list(self.members)}, {state})"


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: LastingGroup, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.real(), name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


for _name in DELEGATED:
    setattr(LastingGroup, _name, _delegate(_name))


def backend_of(group: ProcessGroup | None = None) -> str:
    """The real backend of ``group`` (default: the default group): gloo or NCCL under a pool's
    lasting group, whose ``dist.get_backend()`` is the pool's own name."""
    group = group or dist.group.WORLD
    if isinstance(group, LastingGroup):
        return group.backend_name
    return str(dist.get_backend(group))
