"""One request to some ranks of a pool, as its replies come in: who answered how, who failed
first, who is still busy, who died under it. Pure bookkeeping: what to do about a failure is the
agent's (``agent``), how to show it the magic's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .protocol import Kind, Message, RankExit, Reply, Status

FAILED = frozenset({Status.ERROR, Status.INTERRUPTED, Status.ABORTED, Status.REFUSED})


@dataclass
class Request:
    id: str
    kind: Kind
    ranks: tuple[int, ...]
    on_message: Callable[[Message], None] | None = None
    began: float = field(default_factory=time.monotonic)
    replies: dict[int, Reply] = field(default_factory=dict)
    errors: dict[int, Message] = field(default_factory=dict)  # rank -> its ERROR (ename, evalue, traceback)
    values: dict[int, Message] = field(default_factory=dict)  # rank -> a pulled VALUE
    deaths: dict[int, RankExit] = field(default_factory=dict)  # ranks whose process ended under it
    order: list[int] = field(default_factory=list)  # ranks in the order they finished
    first_finished: float | None = None
    first_failure: float | None = None  # when the first rank failed (or died)
    interrupted: float | None = None  # when the ranks still busy were interrupted
    aborted: float | None = None  # when the process group was aborted under it
    killed: list[int] = field(default_factory=list)  # ranks ended because they never came back
    next_stall_look: float = 0.0  # when the agent may next ask the ranks whether they hang
    shared: list[str] = field(default_factory=list)  # its buffers' files in shared memory

    @property
    def pending(self) -> list[int]:
        return [rank for rank in self.ranks if rank not in self.replies and rank not in self.deaths]

    @property
    def finished(self) -> bool:
        return not self.pending

    @property
    def ok(self) -> bool:
        return not self.deaths and all(reply.status is Status.OK for reply in self.replies.values())

    @property
    def failed(self) -> bool:
        return bool(self.deaths) or any(reply.status in FAILED for reply in self.replies.values())

    def take(self, message: Message) -> bool:
        """Takes a message of this request; False when it is another's (late output of one
        that ended)."""
        if message.get("request") != self.id:
            return False
        rank = message.get("rank")
        if message.kind is Kind.DONE:
            reply = Reply.of(message)
            if reply.status is Status.ERROR and self.aborted is not None:
                # an error after the abort is the abort's ("Connection closed by peer"): a peer's
                # cut may reach a rank before its own abort does
                reply = replace(reply, status=Status.ABORTED)
            self.replies[reply.rank] = reply
            self._finished(reply.rank, failed=reply.status in FAILED)
        elif message.kind is Kind.ERROR:
            self.errors.setdefault(rank, message)
        elif message.kind is Kind.VALUE:
            self.values[rank] = message
        if self.on_message is not None:
            self.on_message(message)
        return True

    def died(self, death: RankExit) -> None:
        if death.rank in self.ranks and death.rank not in self.replies:
            self.deaths[death.rank] = death
            self._finished(death.rank, failed=True)

    def _finished(self, rank: int, failed: bool) -> None:
        now = time.monotonic()
        self.order.append(rank)
        self.first_finished = self.first_finished or now
        if failed:
            self.first_failure = self.first_failure or now

    def root_failure(self) -> tuple[int, Message] | None:
        """The error that started it: a rank's own error (the first to come), before the
        interrupts and aborts its failure caused in the others."""
        for status in (Status.ERROR, Status.INTERRUPTED):  # an aborted collective is never the cause
            ranks = [r for r in self.order if r in self.errors and self.status_of(r) is status]
            if ranks:
                return ranks[0], self.errors[ranks[0]]
        return None

    def status_of(self, rank: int) -> Status | None:
        reply = self.replies.get(rank)
        return reply.status if reply is not None else None

    def with_status(self, status: Status) -> list[int]:
        return sorted(rank for rank, reply in self.replies.items() if reply.status is status)
