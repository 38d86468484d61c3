"""The pool's agent: the one owner of what happens when a rank fails, is interrupted, hangs or
dies, so that the ranks keep their state through all of it. The magic only parses and shows.

A request ends when every rank it went to has answered or died. Meanwhile:

- **A rank fails** (its cell raised, or it died): the ranks still busy get ``FAILURE_GRACE_S`` to
  finish on their own (an error on every rank comes on every rank at once), then an interrupt.
- **An interrupt** (the kernel's, or the one above): a rank busy in Python takes it at once. A
  rank that has not come back ``INTERRUPT_GRACE_S`` later, while another has left the request,
  is blocked in a collective that rank will never join: the process group's generation is
  aborted on every rank, and the blocked call returns. (With nobody gone, ``ALL_BLOCKED_S``: the
  ranks sit in collectives that do not match.) A stop gives ``fit`` a grace to reach a step and
  checkpoint, but once a rank left the request, ``LEFT_GRACE_S``: no collective of the world can
  complete without it (a rank stuck inside a step gives itself the second interrupt and leaves).
- **Still not back** ``RELEASE_S`` after the abort (stuck where no abort reaches: a subgroup, C++
  that ignores both): that rank is ended; it is dead now, the others keep their state.

Once it ended, the process group is made whole again: rebuilt at its next generation when it was
aborted or when the ranks' collective counts differ (a collective one rank made and another did
not must never pair with a later one); with a dead rank, at its replacement, which ``%ranks
restart`` (or ``--replace-dead``) starts and the join hook brings up to date.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..jobs.job_error import JobError
from .pool import PUMP_S, RanksPool, RankState
from .protocol import Kind, Message, RankExit, Status
from .reports import collective_hang, death_line, ranks_text
from .requests import Request

FAILURE_GRACE_S = 0.2
INTERRUPT_GRACE_S = 0.3
ALL_BLOCKED_S = 2.0
LEFT_GRACE_S = 0.5  # after an interrupt, how long the others get once a rank left the request
RELEASE_S = 10.0  # long enough for seven ranks to return from an abort on a busy 2-core machine
SECOND_INTERRUPT_S = 1.0  # a second interrupt this long after the first ends ranks that are not back
REBUILD_S = 60.0
JOIN_S = 60.0  # a replacement's start: fork, join, hello


class PoolGone(JobError):
    """The pool ended (stopped, or its launcher died): nothing is restarted unasked."""


@dataclass
class Outcome:
    request: Request
    rebuilt: str | None = None  # why the process group was rebuilt
    replaced: list[int] = field(default_factory=list)
    joined: Request | None = None  # the join hook's run after a replacement
    idle_deaths: list[RankExit] = field(default_factory=list)  # ranks that died between requests, replaced


@dataclass
class PoolAgent:
    pool: RanksPool
    replace_dead: bool = False
    join_hook: str | None = None  # a cell every rank runs after a replacement joined
    broken: str | None = None  # why the process group could not be rebuilt, until it is
    trained: Any = None  # the FitResult of the latest %%train on the pool (its weights are in the ranks)

    @property
    def run_id(self) -> str:
        return self.pool.run_id

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def nproc(self) -> int:
        return self.pool.nproc

    # -- one request, start to end -----------------------------------------------------------------
    def run(
        self,
        kind: Kind,
        fields: dict | None = None,
        ranks: Iterable[int] | None = None,
        buffers: Sequence[bytes] = (),
        on_message: Callable[[Message], None] | None = None,
        stall: float | None = None,
        on_stall: Callable[[Request], None] | None = None,
        per_rank: dict[int, list[bytes]] | None = None,
    ) -> Outcome:
        """Runs a request to its end (``stall``: seconds after a rank finished before
        ``on_stall`` hears that others did not), then makes the process group whole.
        ``per_rank``: each rank's own buffers (a scatter) instead of ``buffers`` for all."""
        self.pool.pump(0)  # what came while no request was in flight (a rank's exit) first
        healed = self.heal()
        targets = self.targets(ranks)
        request = self.pool.begin(kind, fields, targets, buffers, on_message, per_rank)
        try:
            self.follow(request, stall, on_stall)
        finally:
            self.pool.done(request)
        if request.deaths and self.pool.stop_asked():  # its ranks ended because of it: not deaths to replace
            self.check()
        outcome = self.settle(request)
        if healed is not None:
            outcome.idle_deaths, outcome.replaced = healed.idle_deaths, healed.replaced + outcome.replaced
        return outcome

    def heal(self) -> Outcome | None:
        """With ``--replace-dead``: ranks that died since the last request are replaced now."""
        dead = self.pool.dead()
        if not dead or not self.replace_dead or self.pool.ended:
            return None
        deaths = [death for rank in dead if (death := self.pool.ranks[rank].exit) is not None]
        outcome = self.replace(dead)
        outcome.idle_deaths = deaths
        return outcome

    def targets(self, ranks: Iterable[int] | None) -> list[int]:
        """The ranks a request goes to, refused when the pool cannot take it (ended, or a rank
        it needs is dead)."""
        self.check()
        wanted = list(range(self.pool.nproc)) if ranks is None else sorted(set(ranks))
        dead = [rank for rank in wanted if self.pool.ranks[rank].state is not RankState.READY]
        if self.broken and not dead:
            raise JobError(f"ranks pool {self.pool.run_id}: {self.broken}; %ranks restart rebuilds it")
        if dead:
            deaths = [self.pool.ranks[rank].exit for rank in dead]
            said = "; ".join(death_line(d) for d in deaths if d is not None) or f"{ranks_text(dead)} not running"
            raise JobError(
                f"{said}: %ranks restart {' '.join(map(str, dead))} starts a new one (the others keep "
                f"their state; a %%ranks --on-join cell brings it up to date), %%ranks {_list(self.pool.live())} "
                "runs on the others"
            )
        return wanted

    def check(self) -> None:
        """Refused in one line when the pool ended, or is being stopped (``jiyu stop``, the
        panel's Stop): a stop stays a stop."""
        pool = self.pool
        if pool.ended or not pool.alive():
            why = pool.record_end()
            raise PoolGone(
                f"ranks pool {pool.run_id} has ended ({why}); its ranks' state is gone. "
                "%ranks start N starts a new pool"
            )
        if pool.stop_asked():
            raise PoolGone(
                f"ranks pool {pool.run_id} is being stopped (a stop was asked for: jiyu stop, the panel's Stop); "
                "%ranks start N starts a new pool once it ended"
            )

    def follow(
        self, request: Request, stall: float | None = None, on_stall: Callable[[Request], None] | None = None
    ) -> None:
        """Until the request ended, whatever happens meanwhile (module docstring)."""
        stalled, wait = False, PUMP_S
        while not request.finished:
            try:
                self.pool.pump(wait)
                if self.pool.ended:
                    return
                wait = self.police(request)
                if (
                    stall
                    and not stalled
                    and on_stall is not None
                    and not request.failed
                    and self._stalled(request, stall)
                ):
                    stalled = True
                    on_stall(request)
            except KeyboardInterrupt:
                self.interrupted(request)

    def _stalled(self, request: Request, stall: float) -> bool:
        """A rank finished ``stall`` seconds ago and others did not; or, with none finished,
        ``stall`` seconds into the request a rank waits in a collective another has not
        entered (asked of the ranks' flight recorders once per ``stall`` seconds: a long cell
        that makes no collective is no stall)."""
        now = time.monotonic()
        if request.first_finished is not None:
            return now - request.first_finished > stall
        if now - request.began < stall or now < request.next_stall_look:
            return False
        request.next_stall_look = now + stall
        return collective_hang(request.pending, self.pool.ask_collectives(request.pending))

    def interrupted(self, request: Request) -> None:
        """The kernel's interrupt: the ranks still busy are interrupted; a second one, once the
        first had time to work, ends the ranks that are not back."""
        now = time.monotonic()
        if request.interrupted is not None and now - request.interrupted > SECOND_INTERRUPT_S:
            self._end_stuck(request)
            return
        self.interrupt(request)

    def police(self, request: Request, grace: float | None = None) -> float:
        """One look at a request under way: interrupt, abort, end, as the time since a failure
        or an interrupt says (module docstring). ``grace``: how long an interrupted rank gets to
        come back before its collective is aborted (a stop of training: time to checkpoint).
        How long until it has something to do next (at most ``PUMP_S``)."""
        grace = INTERRUPT_GRACE_S if grace is None else grace
        if request.finished:
            return PUMP_S
        now = time.monotonic()
        if request.first_failure is not None and request.interrupted is None:
            due = request.first_failure + FAILURE_GRACE_S
            if now < due:
                return due - now
            self.interrupt(request)
        if request.interrupted is not None and request.aborted is None:
            others_gone = request.first_finished is not None or set(self.pool.live()) - set(request.ranks)
            due = request.interrupted + (grace if others_gone else max(grace, ALL_BLOCKED_S))
            if request.first_finished is not None:  # a collective of the whole world can no longer complete
                due = min(due, max(request.interrupted, request.first_finished) + LEFT_GRACE_S)
            if now < due:
                return min(PUMP_S, due - now)
            request.aborted = now
            self.pool.abort()
        if request.aborted is not None and not request.killed:
            due = request.aborted + RELEASE_S
            if now < due:
                return min(PUMP_S, due - now)
            self._end_stuck(request)
        return PUMP_S

    def interrupt(self, request: Request) -> None:
        request.interrupted = request.interrupted or time.monotonic()
        self.pool.interrupt(request, request.pending)

    def _end_stuck(self, request: Request) -> None:
        stuck = request.pending
        request.killed = stuck
        self.pool.kill(stuck)

    # -- after a request -------------------------------------------------------------------------
    def settle(self, request: Request) -> Outcome:
        """Makes the process group whole after ``request``: rebuilt when it needs it, a dead
        rank replaced when the pool was started with ``--replace-dead``."""
        outcome = Outcome(request)
        dead = self.pool.dead()
        if dead:  # the group is whole again once they are replaced; meanwhile cells go to the others
            if self.replace_dead and not self.pool.ended:
                self.replace(dead, outcome)
            return outcome
        why = self._inconsistency(request)
        if why is not None and not self.pool.ended:
            self.rebuild(why)
            outcome.rebuilt = why
        return outcome

    def _inconsistency(self, request: Request) -> str | None:
        if request.aborted is not None or request.with_status(Status.ABORTED):
            return "its process group was aborted under a collective"
        counts = {rank: state.sequence for rank, state in self.pool.ranks.items() if state.state is RankState.READY}
        if len(set(counts.values())) > 1:
            said = ", ".join(f"rank {rank}: {count}" for rank, count in sorted(counts.items()))
            return f"the ranks made different numbers of collectives ({said})"
        return None

    def rebuild(self, why: str, newcomers: Sequence[int] = ()) -> None:
        """Every live rank leaves the process group and joins its next generation (with
        ``newcomers``, replacements started to join it)."""
        pool = self.pool
        generation = pool.generation + 1
        if newcomers:
            pool.spawn(newcomers, generation)
        survivors = [rank for rank in pool.live() if rank not in newcomers]
        request = pool.begin(Kind.REBUILD, {"generation": generation, "replaced": list(newcomers)}, survivors)
        deadline = time.monotonic() + (JOIN_S if newcomers else REBUILD_S)
        cut_at: float | None = None  # when the rendezvous was aborted (a death, an interrupt, too long)
        try:
            while not (request.finished and all(pool.ranks[r].state is not RankState.JOINING for r in newcomers)):
                try:
                    pool.pump()
                except KeyboardInterrupt:
                    why, deadline = f"{why}; interrupted", time.monotonic()
                if pool.ended:
                    raise PoolGone(f"ranks pool {pool.run_id} ended while its process group was rebuilt")
                if cut_at is None and (pool.dead() or time.monotonic() >= deadline):
                    pool.abort(generation)  # the ranks waiting in the rendezvous come back with an error
                    cut_at = time.monotonic()
                if cut_at is not None and time.monotonic() - cut_at > RELEASE_S:
                    break
        finally:
            pool.done(request)
        failed = [rank for rank, reply in request.replies.items() if reply.status is not Status.OK]
        joining = [rank for rank in newcomers if pool.ranks[rank].state is not RankState.READY]
        if failed or joining or request.deaths:
            refused = "; ".join(r.refusal or r.status.value for r in request.replies.values() if r.refusal)
            self.broken = f"its process group could not be rebuilt ({why}): {refused or ranks_text(failed + joining)}"
            raise JobError(f"ranks pool {pool.run_id}: {self.broken}; %ranks restart tries again")
        pool.generation, self.broken = generation, None

    def replace(
        self, ranks: Sequence[int], outcome: Outcome | None = None, on_message: Callable[[Message], None] | None = None
    ) -> Outcome:
        """New processes for ``ranks`` (ended first if still alive), joined with the others at
        the process group's next generation; then the join hook on every rank."""
        outcome = outcome or Outcome(Request("restart", Kind.REBUILD, tuple(ranks)))
        pool = self.pool
        if not pool.supervised:
            raise JobError("a rank of a pool on a Slurm allocation cannot be replaced alone (torchrun ends them all)")
        alive = [rank for rank in ranks if pool.ranks[rank].state is RankState.READY]
        if alive:
            pool.kill(alive)
            deadline = time.monotonic() + RELEASE_S
            while any(pool.ranks[r].state is RankState.READY for r in alive) and time.monotonic() < deadline:
                pool.pump(0.05)
        self.rebuild(f"{ranks_text(ranks)} replaced", newcomers=list(ranks))
        outcome.replaced = list(ranks)
        if self.join_hook:
            outcome.joined = self.run(Kind.EXECUTE, {"code": self.join_hook}, on_message=on_message).request
        return outcome


def _list(ranks: Iterable[int]) -> str:
    return ",".join(map(str, ranks))
