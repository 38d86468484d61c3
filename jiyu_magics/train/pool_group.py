"""A ranks pool's process groups, in generations: joined once per generation, aborted from
another thread while the main thread may be blocked in a collective, and rebuilt in place, under
the same Python objects.

A pool keeps its ranks' Python state through a failure inside a collective: a rank that raised
leaves its peers waiting in ``all_reduce``, and an interrupt cannot reach a thread blocked in
C++. So the group is aborted from outside that thread (the rank's control thread, told by its
kernel), the blocked call returns with an error, and every rank joins a fresh generation in the
same process. Each generation has its own store connection and key prefix (``jiyu/gen<N>/``),
so nothing of an aborted generation (a collective left half done, an address of its rendezvous)
can pair with one of the next: a peer that "recovered" by reusing the group could reduce two
different tensors together.

What is rebuilt is the communicator, not the group: every group of the pool, the default one
and each ``dist.new_group`` (a ``DeviceMesh``'s too), is a ``LastingGroup`` (``lasting_group``),
whose real group is replaced at each generation, so a DDP or FSDP2 model built on it in an
earlier cell trains on. A subgroup that holds a replaced rank is retired (the new process never
made it); its next use says so.

Aborting, per backend:

- NCCL: the backend's ``abort()`` (``ncclCommAbort``), made for a call from another thread.
- gloo: torch 2.13's ``abort()`` on a gloo group returns at once and leaves a blocked collective
  blocked (checked here: it waited for the peer's exit). What ends it is its TCP connections
  closing, as when a peer dies: the generation's connected sockets (its gloo pairs and its store
  connection, told apart as the sockets it opened) are shut down, never the listening ones (gloo
  aborts the process when its listener fails), and the blocked call raises "Connection closed".

The flight recorder (``TORCH_FR_BUFFER_SIZE``, which covers gloo in torch 2.13) says which
collectives each rank made: operation, sequence number, shapes and the cell line that called
it, for the pool's stall report.
"""

from __future__ import annotations

import os
import pickle
import socket
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from ..core.runs.launch_context import LaunchContext
from .lasting_group import BACKEND, LastingGroup

STORE_PREFIX = "jiyu/gen{}"
STORE_TIMEOUT = timedelta(seconds=120)  # a generation's rendezvous: every live rank joins it
COLLECTIVE_TIMEOUT = timedelta(minutes=30)  # torch's default for gloo and NCCL groups
FLIGHT_ENTRIES = 8  # the newest collectives a rank reports
WORLD_KEY = "world"


@dataclass
class PoolGroup:
    """The process groups of one pool rank, generation after generation."""

    rank: int
    world_size: int
    master: tuple[str, int]  # the store the pool's supervisor (or rank 0 under torchrun) hosts
    device: torch.device
    spared_ports: frozenset[int] = frozenset()  # the kernel's channel: never cut (ZMQ may connect during a join)
    generation: int = -1
    hosted: dist.TCPStore | None = None  # the store, where this rank hosts it
    aborted: bool = False
    joining: bool = False
    groups: list[LastingGroup] = field(default_factory=list)  # in the order they were made, the world first
    _store: dist.TCPStore | None = None  # this generation's connection (an abort cuts it)
    _made: Counter[tuple[int, ...]] = field(default_factory=Counter)  # groups made this generation, by members
    _sockets: set[tuple[int, str]] = field(default_factory=set)  # (fd, socket inode) this generation opened
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def backend(self) -> str:
        return "nccl" if self.device.type == "cuda" else "gloo"

    def join(self, generation: int, replaced: Iterable[int] = ()) -> None:
        """Joins generation ``generation`` (every live rank of the pool joins the same one): the
        first time, as a new member (the default group is made); later, every group this rank
        holds gets that generation's communicator, but those holding a ``replaced`` rank, which
        are retired. An abort while it waits in the rendezvous (a peer died meanwhile) makes it
        raise."""
        with self._lock:
            self.generation, self.aborted, self.joining = generation, False, True
            self._sockets, self._made = set(), Counter()
        try:
            self._tracked(self._connect)
            if not dist.is_initialized():
                self.groups = []  # a first join (or the user destroyed the default group)
                _use_pool_backend(self)
                dist.init_process_group(
                    BACKEND,
                    store=dist.PrefixStore("jiyu/torch", self._lasting_store()),
                    rank=self.rank,
                    world_size=self.world_size,
                )
                return
            self._carry_over(set(replaced))
        finally:
            with self._lock:
                self.joining = False

    def _connect(self) -> None:
        self._store = dist.TCPStore(*self.master, is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False)

    def _lasting_store(self) -> dist.Store:
        """A connection to the pool's store that no abort cuts: torch keeps it as its default
        store (its own bookkeeping), while each generation's rendezvous has a connection of its
        own."""
        return dist.TCPStore(*self.master, is_master=False, timeout=STORE_TIMEOUT, wait_for_workers=False)

    def _carry_over(self, replaced: set[int]) -> None:
        store = self._store
        assert store is not None, "connected first"
        registered = distributed_c10d._world.pg_names
        for group in self.groups:
            if group.retired is not None or group not in registered:
                continue
            gone = sorted(replaced & set(group.members))
            if group.key != WORLD_KEY and gone:
                group.retire(_retired_line(group, gone, self.generation))
                continue
            self._tracked(lambda group=group: group.configure(self.generation, store, COLLECTIVE_TIMEOUT))

    def make_group(self, options: Any, _backend_options: Any = None) -> LastingGroup:
        """torch's backend creator for ``BACKEND``: the default group (``init_process_group``)
        and each ``new_group``, configured for the current generation."""
        members = tuple(options.global_ranks_in_group) or tuple(range(self.world_size))
        key = WORLD_KEY if not options.global_ranks_in_group else self._subgroup_key(members)
        group = LastingGroup(options.group_rank, options.group_size, members, key, self.device)
        store = self._store
        assert store is not None, "torch makes groups only once the generation is connected"
        self._tracked(lambda: group.configure(self.generation, store, options.timeout))
        self.groups.append(group)
        return group

    def _subgroup_key(self, members: tuple[int, ...]) -> str:
        """The same on every member: the generation it was made in, its members and how many
        groups of the same members were made before it in that generation (new_group is
        collective: every member makes them in the same order)."""
        made = self._made[members]
        self._made[members] += 1
        return f"made{self.generation}/{'-'.join(map(str, members))}#{made}"

    def _tracked(self, connect) -> None:
        """Runs ``connect``, taking the sockets it opened as this generation's (an abort cuts them)."""
        before = _socket_fds()
        try:
            connect()
        finally:
            with self._lock:
                self._sockets |= _socket_fds() - before

    def rebuild(self, generation: int, replaced: Iterable[int] = ()) -> None:
        """Leaves the current generation (aborted or not) and joins ``generation``."""
        self.abort()
        self.join(generation, replaced)  # its own store connection and prefix: nothing of the old one can be read

    def abort(self) -> bool:
        """Makes a collective blocked in any thread of this process return with an error; from
        any thread, at most once per generation. False when there was nothing to abort."""
        with self._lock:
            if self.aborted or not (self.joining or dist.is_initialized()):
                return False
            self.aborted = True
            sockets = self._sockets & _socket_fds()  # an fd closed and reused since is another socket
        for group in list(self.groups):
            group.abort_current()
        for fd, _ in sockets:
            _shut_down(fd, self.spared_ports)
        return True

    def sequence(self) -> int | None:
        """How many collectives this generation's default group made (torch's own count)."""
        if not dist.is_initialized():
            return None
        try:
            return int(dist.group.WORLD._get_sequence_number_for_group())  # type: ignore[union-attr]
        except (RuntimeError, AttributeError):
            return None


_POOL: list[PoolGroup] = []  # the rank's pool group, for torch's backend creator


def _use_pool_backend(pool: PoolGroup) -> None:
    """Registers ``BACKEND`` with torch once per process; its groups are ``pool``'s."""
    if not _POOL:
        devices = ["cuda"] if pool.device.type == "cuda" else ["cpu"]
        dist.Backend.register_backend(
            BACKEND, lambda *args: _POOL[0].make_group(*args), extended_api=True, devices=devices
        )
    _POOL[:] = [pool]


def _retired_line(group: LastingGroup, gone: list[int], generation: int) -> str:
    desc = group.getGroupDesc()
    made = f" ({desc})" if desc and desc != "undefined" else ""
    return (
        f"the process group of ranks {', '.join(map(str, group.members))}{made}, made in an earlier cell, holds "
        f"rank {', '.join(map(str, gone))}, replaced since (generation {generation}): the new process never made it, "
        "so it could not be carried over; make it again on every rank (dist.new_group, init_device_mesh), e.g. in "
        "the %%ranks --on-join cell"
    )


def host_store(host: str = "127.0.0.1", port: int = 0) -> dist.TCPStore:
    """The pool's store, for the pool's whole life (its ranks may come and go; every
    generation's rendezvous goes through it): hosted by the supervisor on the kernel's machine,
    by rank 0 under torchrun (an allocation), as ``env://`` would."""
    return dist.TCPStore(host, port, is_master=True, timeout=STORE_TIMEOUT, wait_for_workers=False)


def rank_group(context: LaunchContext, spared_ports: frozenset[int], host_store_here: bool) -> PoolGroup:
    """This rank's group, not joined yet: NCCL on its GPU when the pool leased it one
    (``cuda:LOCAL_RANK``), gloo on the CPU otherwise. ``host_store_here``: rank 0 under torchrun
    hosts the store at ``MASTER_ADDR:MASTER_PORT``."""
    world = context.torchrun_world
    assert world is not None and context.master is not None, "a pool rank runs with RANK, WORLD_SIZE and MASTER_*"
    rank, size, local_rank = world
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    group = PoolGroup(rank, size, context.master, device, spared_ports)
    if host_store_here and rank == 0:
        group.hosted = host_store(*context.master)
    return group


def flight_record(limit: int = FLIGHT_ENTRIES) -> list[dict[str, Any]]:
    """This rank's newest collectives from torch's flight recorder: sequence number, operation,
    shapes, dtypes and whether it completed. Empty where the recorder is off. Without stack
    traces: symbolizing them took seconds (the stall view takes the line from the stack dump)."""
    try:
        dump = torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False)  # type: ignore[attr-defined]
        entries = pickle.loads(dump).get("entries", [])
    except (AttributeError, RuntimeError, pickle.UnpicklingError, EOFError, TypeError, ValueError):
        return []
    return [_entry(entry) for entry in entries[-limit:]]


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    name = str(entry.get("profiling_name", "")).split(":", 1)[-1]
    return {
        "seq": entry.get("collective_seq_id"),
        "op": name,
        "sizes": entry.get("input_sizes"),
        "dtypes": entry.get("input_dtypes"),
        "state": entry.get("state"),
        "done": bool(entry.get("retired")) or entry.get("state") == "completed",
        "frames": [(f.get("filename"), f.get("line"), f.get("name")) for f in entry.get("frames", [])],
    }


def _socket_fds() -> set[tuple[int, str]]:
    """This process's open sockets: (descriptor, ``socket:[inode]``)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add((int(name), target))
    return found


def _shut_down(fd: int, spared_ports: frozenset[int]) -> None:
    """Shuts down a connected TCP socket (both directions); leaves listening ones alone, and
    those connected to ``spared_ports``."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if sock.type == socket.SOCK_STREAM and not listening and sock.getpeername()[1] not in spared_ports:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (any more)
    finally:
        sock.close()
