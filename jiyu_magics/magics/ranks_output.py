"""What a ``%%ranks`` cell shows: the ranks' output as it comes, and at the end what happened,
in the order a user needs it (the cause, then what it did to the others, then the pool's state).

The words come from ``ranks.reports``; this module only puts them in a notebook: a stream as
the kernel's own, rank 0's displays as its own displays, a failure as one error whose
traceback is the failing rank's cell.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

if TYPE_CHECKING:
    from ..core.runs import stack_groups
    from ..ranks.agent import Outcome, PoolAgent
    from ..ranks.pool import RanksPool
    from ..ranks.protocol import Message
    from ..ranks.requests import Request


class RankCellError(RuntimeError):
    """A rank's cell failed: one line naming the rank(s) and the error, then that rank's
    traceback as its shell formatted it (the cell's own frames), then what it did to the others."""

    def __init__(self, line: str, traceback: Sequence[str] = (), notes: Sequence[str] = (), where: str = ""):
        super().__init__(line)
        self.traceback, self.notes, self.where = list(traceback), list(notes), where

    def _render_traceback_(self) -> list[str]:
        head = [*self.traceback, f"(on {self.where})"] if self.traceback else [f"RankCellError: {self}"]
        return head + [f"jiyu: {note}" for note in self.notes]


class RankDied(RuntimeError):
    """A rank's process ended under the cell: one line, no traceback (there is none to show)."""

    def _render_traceback_(self) -> list[str]:
        return [f"RankDied: {line}" if i == 0 else f"jiyu: {line}" for i, line in enumerate(str(self).split("\n"))]


class Echo:
    """What a cell shows of the ranks' messages: streams as they come (each line prefixed
    with its rank when every rank's output is shown), displays of the shown rank."""

    def __init__(self, all_ranks: bool, shown: int = 0):
        self.all_ranks, self.shown = all_ranks, shown
        self.partial: dict[tuple[int, str], str] = {}

    def take(self, message: Message) -> None:
        from ..ranks.protocol import Kind

        rank = message.get("rank")
        if message.kind is Kind.STREAM and (self.all_ranks or rank == self.shown):
            self._stream(rank, message["name"], message["text"])
        elif message.kind is Kind.DISPLAY and rank == self.shown:
            from IPython.display import publish_display_data

            publish_display_data(message["data"], message.get("metadata") or {})

    def _stream(self, rank: int, name: str, text: str) -> None:
        out = sys.stderr if name == "stderr" else sys.stdout
        if not self.all_ranks:
            out.write(text)
            out.flush()
            return
        text = self.partial.pop((rank, name), "") + text
        *lines, rest = text.split("\n")
        out.write("".join(f"[rank{rank}] {line}\n" for line in lines))
        out.flush()
        if rest:
            self.partial[(rank, name)] = rest

    def flush(self) -> None:
        for (rank, name), rest in self.partial.items():
            (sys.stderr if name == "stderr" else sys.stdout).write(f"[rank{rank}] {rest}\n")
        self.partial.clear()


def report(outcome: Outcome, what: str) -> None:
    """The end of a request: notes on what the pool did, then its failure raised (a rank's
    error with its traceback, a rank's death, a refusal), or nothing when it went well."""
    from ..ranks.protocol import Status
    from ..ranks.reports import death_line, group_errors, ranks_text

    request = outcome.request
    notes = _pool_notes(outcome)
    own = request.with_status(Status.ERROR) or request.with_status(Status.INTERRUPTED)
    groups = group_errors({rank: error for rank, error in request.errors.items() if rank in own})
    aborted = request.with_status(Status.ABORTED)
    waited = "the collective it waited in was" if len(aborted) == 1 else "the collectives they waited in were"
    consequences = [f"{ranks_text(aborted)}: {waited} aborted"] if aborted else []
    if request.deaths:  # a death comes first: the others' errors are what it did to them
        lines = [death_line(death) for death in request.deaths.values()]
        others = [f"{group.line} (after the death)" for group in groups]
        raise RankDied("\n".join([*lines, *others, *consequences, *notes]))
    root = request.root_failure()
    if root is not None:
        rank, error = root
        first = next((g for g in groups if rank in g.ranks), None)
        where = ranks_text(first.ranks if first is not None else [rank])
        line = first.line if first is not None else f"{where}: {error['ename']}: {error['evalue']}".rstrip(": ")
        others = [g.line for g in groups if g is not first]
        raise RankCellError(line, error.get("traceback") or (), [*others, *consequences, *notes], where)
    if request.killed:
        raise RankDied("\n".join(notes))
    interrupted = request.with_status(Status.INTERRUPTED) + aborted
    if interrupted:
        raise RankCellError(f"{ranks_text(interrupted)}: interrupted", (), notes)
    refusals = {rank: reply.refusal for rank, reply in request.replies.items() if reply.refusal}
    if refusals:
        raise UsageError(f"{what}: {refusals[min(refusals)]}")
    for note in notes:
        print(f"jiyu: {note}", flush=True)


def _pool_notes(outcome: Outcome) -> list[str]:
    from ..ranks.reports import death_line, ranks_text

    request, notes = outcome.request, []
    for death in outcome.idle_deaths:
        notes.append(f"{death_line(death)} (while the pool was idle); a new rank {death.rank} took its place")
    if request.killed:
        notes.append(
            f"{ranks_text(request.killed)} did not come back from the interrupt (stuck where no abort reaches) "
            f"and was ended; %ranks restart {' '.join(map(str, request.killed))} starts a new one"
        )
    if outcome.replaced and not outcome.idle_deaths:
        notes.append(f"{ranks_text(outcome.replaced)} replaced: a new process joined the process group")
    elif request.deaths and not request.killed:
        dead = sorted(request.deaths)
        notes.append(
            f"the other ranks keep their state; %ranks restart {' '.join(map(str, dead))} starts a new "
            f"{ranks_text(dead)} (a %%ranks --on-join cell brings it up to date)"
        )
    joined = outcome.joined
    if joined is not None and joined.failed:
        from ..ranks.reports import group_errors

        lines = [group.line for group in group_errors(joined.errors)] or [ranks_text(sorted(joined.deaths))]
        notes.append(f"the --on-join cell failed: {'; '.join(lines)}")
    if outcome.rebuilt:
        notes.append(f"the process group was rebuilt ({outcome.rebuilt}); every rank kept its state")
    dropped = sorted({name for reply in request.replies.values() for name in reply.dropped})
    if dropped:
        notes.append(
            f"{', '.join(dropped)}: the failed step was undone (its gradients dropped; weights and optimizer kept)"
        )
    return notes


def show_stall(agent: PoolAgent, request: Request, stall: float) -> None:
    """Some ranks finished the cell, others not ``stall`` seconds later: say where each is (the
    collective it waits in, the rank that never came to it), with every rank's stack headline;
    the pool's run is flagged stalled while it lasts."""
    from ..core.runs import stack_groups
    from ..ranks.reports import ranks_text, stall_lines, waiting_in

    pool = agent.pool
    pending = request.pending
    states = pool.ask_collectives(pool.live())
    if request.first_finished is not None:
        print(f"jiyu: stalled: {ranks_text(pending)} has not finished {stall:g} s after another rank did", flush=True)
    else:
        in_collective = sorted(waiting_in(pending, states))
        others = [rank for rank in pending if rank not in in_collective]
        wait = "waits" if len(in_collective) == 1 else "wait"
        if others:
            have = "has" if len(others) == 1 else "have"
            what = f"{ranks_text(in_collective)} {wait} in a collective that {ranks_text(others)} {have} not entered"
        else:
            what = f"{ranks_text(in_collective)} wait in different collectives"
        print(f"jiyu: stalled: {what}, {stall:g} s into the cell", flush=True)
    finished = {rank: request.replies[rank].sequence for rank in request.replies}
    finished.update({rank: pool.ranks[rank].sequence for rank in pool.live() if rank not in request.ranks})
    for line in stall_lines(pending, finished, states):
        print(f"jiyu:   {line}", flush=True)
    waiting = [s for s in _dumped_stacks(pool.run_id) if s.rank in pending]
    for group in stack_groups.group(waiting):
        print(f"jiyu:   {group.headline()}", flush=True)
    # flagged before the report's last line: whoever has read the whole report finds the panel agreeing
    pool.lifecycle.store.mark_stalled(pool.run_id, time.time())
    print(
        f"jiyu:   every rank's stack: jiyu stacks {pool.run_id}; the stop button ends the cell, state kept", flush=True
    )


def _dumped_stacks(run_id: str) -> list[stack_groups.RankStack]:
    """Every live rank's stack, dumped now (none where no rank could be asked)."""
    from ..core.runs import stack_groups
    from ..jobs.stack_dump import dump_stacks

    folder = dump_stacks(run_id)
    return stack_groups.read_dump(folder) if folder is not None else []


def show_start_stall(pool: RanksPool, stall: float) -> None:
    """The ranks have not all joined ``stall`` seconds after they started: where each is (the
    odd one out first), and what ends the start; the pool's run is flagged stalled meanwhile."""
    from ..core.runs import stack_groups
    from ..ranks.reports import ranks_text

    waiting = pool.joining()
    have = "has" if len(waiting) == 1 else "have"
    print(f"jiyu: stalled: {ranks_text(waiting)} {have} not joined {stall:g} s after the ranks started", flush=True)
    stacks = _dumped_stacks(pool.run_id)
    for group in stack_groups.group(stacks):
        print(f"jiyu:   {group.headline()}", flush=True)
    silent = sorted(set(range(pool.nproc)) - {stack.rank for stack in stacks})
    if silent:
        print(f"jiyu:   {ranks_text(silent)}: no stack (its worker has not started, or is elsewhere)", flush=True)
    pool.lifecycle.store.mark_stalled(pool.run_id, time.time())  # before the last line, as in show_stall
    print(f"jiyu:   every rank's stack: jiyu stacks {pool.run_id}; an interrupt ends the start", flush=True)


class Background:
    """A ``%%ranks --bg`` cell: the request followed by a thread while the notebook goes on; its
    output streams into a display of the cell that started it (updated by wall clock), and
    ``%ranks wait`` collects its end."""

    REFRESH_S = 0.5

    def __init__(self, agent: PoolAgent, request: Request, handle, echo: Echo):
        self.agent, self.request, self.handle, self.echo = agent, request, handle, echo
        self.text: list[str] = []
        self.shown = 0.0
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    @classmethod
    def start(cls, agent: PoolAgent, cell: str, ranks: list[int], echo: Echo, stall: float) -> Background:
        from IPython.display import display

        from ..ranks.protocol import Kind

        handle = display(
            {"text/plain": "jiyu: running in the background (%ranks wait collects it)"}, raw=True, display_id=True
        )
        agent.heal()
        request = agent.pool.begin(Kind.EXECUTE, {"code": cell}, agent.targets(ranks))
        background = cls(agent, request, handle, echo)
        request.on_message = background.take
        threading.Thread(target=background.follow, name="jiyu-ranks-bg", daemon=True).start()
        return background

    def take(self, message) -> None:
        from ..ranks.protocol import Kind

        if message.kind is Kind.STREAM and (self.echo.all_ranks or message.get("rank") == self.echo.shown):
            prefix = f"[rank{message['rank']}] " if self.echo.all_ranks else ""
            self.text.append(prefix + message["text"])
            if time.monotonic() - self.shown >= self.REFRESH_S:
                self.show()

    def show(self, end: str = "") -> None:
        self.shown = time.monotonic()
        if self.handle is not None:
            self.handle.update({"text/plain": "".join(self.text) + end}, raw=True)

    def follow(self) -> None:
        try:
            self.agent.follow(self.request)
        except BaseException as error:  # noqa: BLE001 - said at %ranks wait
            self.error = error
        finally:
            self.agent.pool.done(self.request)
        try:
            self.outcome = self.agent.settle(self.request)
        except BaseException as error:  # noqa: BLE001
            self.error = self.error or error
        self.show("\njiyu: finished (%ranks wait shows how)")
        self.done.set()

    def wait(self) -> Outcome:
        from ..ranks.agent import Outcome

        while True:
            try:
                if self.done.wait(0.2):
                    break
            except KeyboardInterrupt:  # the bg cell's interrupt: its thread acts on it (``police``)
                self.agent.interrupted(self.request)
        if self.error is not None:
            raise UsageError(f"%%ranks --bg: {self.error}")
        return self.outcome or Outcome(self.request)
