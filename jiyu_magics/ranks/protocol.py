"""The ranks pool's protocol: every message kind, every reply status, the typed reply.

Three parties talk over the pool's channel (``channel``): the kernel, each rank (its main thread
takes requests one at a time; its control thread takes what must reach it while the main thread
is blocked: an interrupt, an abort of its process group, a question about its collectives), and
the pool's supervisor (the parent of the ranks on the kernel's machine: it reports a rank's exit
and starts a replacement). A message is a kind, a JSON header and binary buffers (pickles).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Kind(str, enum.Enum):
    # kernel → rank, main thread: one request at a time, each ends with the rank's DONE
    EXECUTE = "execute"  # run a cell
    PUSH = "push"  # take objects (pickled buffers)
    PULL = "pull"  # hand an object back (a VALUE)
    SCATTER = "scatter"  # take this rank's slice of an array
    REBUILD = "rebuild"  # leave the process group and join its next generation
    SHUTDOWN = "shutdown"  # end (no reply)
    # kernel → rank, control thread
    INTERRUPT = "interrupt"  # a KeyboardInterrupt in the request named, if it still runs
    ABORT = "abort"  # abort the process group's generation named (a collective blocked in it returns)
    COLLECTIVES = "collectives"  # which collectives have you made? (a COLLECTIVES_STATE)
    # rank → kernel
    HELLO = "hello"  # joined the process group, ready
    STREAM = "stream"
    DISPLAY = "display"
    ERROR = "error"  # the request's error, with the cell's traceback
    VALUE = "value"  # a pulled object
    DONE = "done"  # the request ended: a ``Reply``
    COLLECTIVES_STATE = "collectives_state"
    # supervisor ↔ kernel
    SUPERVISOR = "supervisor"  # the supervisor's hello
    RANK_EXITED = "rank_exited"  # a rank's process ended (its exit code or signal)
    SPAWN = "spawn"  # start a new process for this rank (it joins the next generation)


REQUESTS = frozenset({Kind.EXECUTE, Kind.PUSH, Kind.PULL, Kind.SCATTER, Kind.REBUILD})


class Status(str, enum.Enum):
    """How a rank ended a request."""

    OK = "ok"
    ERROR = "error"  # the request's own error (the cell raised)
    INTERRUPTED = "interrupted"  # a KeyboardInterrupt (the kernel's interrupt, or a peer's failure)
    ABORTED = "aborted"  # its process group was aborted under it (a collective a peer never joined)
    REFUSED = "refused"  # it could not do what was asked (no such name, cannot unpickle)


@dataclass
class Message:
    kind: Kind
    fields: dict[str, Any] = field(default_factory=dict)
    buffers: list[Any] = field(default_factory=list)  # bytes-like: bytes, memoryviews of received frames

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


@dataclass(frozen=True)
class Reply:
    """A rank's word that a request ended: how, how long it took, and where its process group
    stands (the generation it is in and the collectives that generation made), so the kernel can
    tell a consistent group from one whose ranks made different collectives."""

    rank: int
    status: Status
    elapsed: float = 0.0
    refusal: str | None = None  # why, for REFUSED
    generation: int = 0
    sequence: int | None = None  # collectives made in this generation; None: no process group
    dropped: tuple[str, ...] = ()  # the DDP/FSDP models whose failed step it undid (``train.failed_step``)

    def message(self, request: str) -> Message:
        fields = {
            "request": request,
            "rank": self.rank,
            "status": self.status.value,
            "elapsed": self.elapsed,
            "refusal": self.refusal,
            "generation": self.generation,
            "sequence": self.sequence,
            "dropped": list(self.dropped),
        }
        return Message(Kind.DONE, fields)

    @classmethod
    def of(cls, message: Message) -> Reply:
        return cls(
            rank=int(message["rank"]),
            status=Status(message["status"]),
            elapsed=float(message.get("elapsed") or 0.0),
            refusal=message.get("refusal"),
            generation=int(message.get("generation") or 0),
            sequence=message.get("sequence"),
            dropped=tuple(message.get("dropped") or ()),
        )


@dataclass(frozen=True)
class Hello:
    """What a rank says once it joined: where it runs and its process's start (its identity
    with the pid: a pid alone may be another process's after a restart)."""

    rank: int
    pid: int
    started: float
    host: str
    device: str
    backend: str
    generation: int

    def message(self) -> Message:
        return Message(Kind.HELLO, dict(self.__dict__))

    @classmethod
    def of(cls, message: Message) -> Hello:
        return cls(**{name: message[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RankExit:
    """The supervisor's word that a rank's process ended: its exit code, or the signal that
    killed it (the OOM killer's SIGKILL, a segfault)."""

    rank: int
    pid: int
    code: int | None
    signal: int | None

    def message(self) -> Message:
        return Message(Kind.RANK_EXITED, dict(self.__dict__))

    @classmethod
    def of(cls, message: Message) -> RankExit:
        return cls(**{name: message[name] for name in cls.__dataclass_fields__})
