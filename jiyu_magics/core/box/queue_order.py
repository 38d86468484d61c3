"""The box's queue, as pure rules over plain records: in which order waiting runs start, which
one may lease now, why the others wait, and whose preemptible runs yield to a run that waited
too long. The book (``book``) reads the records and writes what these rules decide.

Order: runs a user allowed to jump the queue moved up come first (the latest move first);
then users take turns, the one with fewer GPU-hours in the policy's recent window first
(fair share; equal usage: the one whose run waited longest), each user's own runs by
``--priority`` (higher first), then by when they were queued. Only the first run in that order
whose user is within the per-user limit may lease; it waits while too few GPUs are free, and
everyone behind it waits too, so a big request is never starved by small ones. A run preempted
for another user's run waits behind every other user's run that was waiting when it was asked to
yield: fair share could else hand the GPUs straight back to it (its user may have used fewer
GPU-hours), and the preemption would repeat until the waiting run happened to ask first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .identity import user_name


@dataclass
class Entry:
    """A run in the book: waiting for GPUs or holding them."""

    uid: int
    run_id: str
    kind: str
    gpus: int
    priority: int = 0
    share: bool = False
    preemptible: bool = False
    queued: float = 0.0
    jumped: float | None = None
    state: str = "waiting"  # waiting | holding | ended
    started: float | None = None
    preempt_asked: float | None = None

    @property
    def user(self) -> str:
        return user_name(self.uid)


@dataclass
class HeldGpu:
    """A live lease as the rules see it."""

    uuid: str
    index: int
    uid: int
    run_id: str
    shared: bool = False


@dataclass
class Turn:
    """What the queue says to one waiting run: its place, and why it may not lease yet (None:
    it is the run that may lease now)."""

    entry: Entry
    position: int
    blocked: str | None = None


@dataclass
class Usage:
    """GPU-seconds per uid in the fair-share window, and GPUs each uid holds now."""

    recent_s: dict[int, float] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)


def order(waiting: Iterable[Entry], usage: Usage, cap: int | None) -> list[Turn]:
    """Every waiting run with its place; the first unblocked one is the head."""
    entries = [e for e in waiting if e.state == "waiting"]
    jumped = sorted((e for e in entries if e.jumped is not None), key=lambda e: -(e.jumped or 0.0))
    by_user: dict[int, list[Entry]] = {}
    for entry in sorted((e for e in entries if e.jumped is None), key=lambda e: (-e.priority, e.queued)):
        by_user.setdefault(entry.uid, []).append(entry)
    users = sorted(by_user, key=lambda uid: (usage.recent_s.get(uid, 0.0), by_user[uid][0].queued))
    ordered = _behind_those_it_yielded_to([*jumped, *_turns(users, by_user)])
    turns, head_found = [], False
    for position, entry in enumerate(ordered, 1):
        blocked = over_cap(entry, usage, cap)
        if blocked is None and head_found:
            blocked = "runs ahead of it start first"
        head_found |= blocked is None
        turns.append(Turn(entry, position, blocked))
    return turns


def _behind_those_it_yielded_to(ordered: list[Entry]) -> list[Entry]:
    """Each waiting run that was asked to yield (``preempt_asked``) moved behind every other
    user's run queued before it was asked, else left where it was; yielded runs keep their order."""
    result = [e for e in ordered if e.preempt_asked is None]
    floor = 0
    for i, entry in enumerate(ordered):
        if entry.preempt_asked is None:
            continue
        follower = next((e for e in ordered[i + 1 :] if e.preempt_asked is None), None)
        at = next((j for j, e in enumerate(result) if e is follower), len(result))
        for j, other in enumerate(result):
            if other.uid != entry.uid and other.queued <= entry.preempt_asked:
                at = max(at, j + 1)
        at = max(at, floor)
        result.insert(at, entry)
        floor = at + 1
    return result


def _turns(users: list[int], by_user: dict[int, list[Entry]]) -> list[Entry]:
    """Users take turns in fair-share order: the first run of each, then the second of each..."""
    ordered: list[Entry] = []
    depth = max((len(runs) for runs in by_user.values()), default=0)
    for i in range(depth):
        ordered += [by_user[uid][i] for uid in users if i < len(by_user[uid])]
    return ordered


def over_cap(entry: Entry, usage: Usage, cap: int | None) -> str | None:
    """The per-user limit's refusal, naming the rule and when it frees; None within it."""
    held = usage.held.get(entry.uid, 0)
    if cap is None or held + entry.gpus <= cap:
        return None
    return (
        f"{entry.user} holds {held} of {cap} GPUs allowed per user (max_gpus_per_user); "
        f"this run waits until {entry.gpus - (cap - held)} of them free"
    )


def available(slots: Sequence[tuple[str, int]], held: Iterable[HeldGpu], share: bool) -> list[tuple[str, int]]:
    """The ``slots`` a new lease may take: unleased ones first; for a sharing run then those
    whose every lease is shared."""
    leases: dict[str, list[bool]] = {}
    for lease in held:
        leases.setdefault(lease.uuid, []).append(lease.shared)
    free = [s for s in slots if s[0] not in leases]
    if share:
        free += [s for s in slots if s[0] in leases and all(leases[s[0]])]
    return free


def pick(slots: Sequence[tuple[str, int]], held: Iterable[HeldGpu], want: int, share: bool) -> list[tuple[str, int]]:
    """``want`` of the ``available`` slots, or none when fewer are there."""
    free = available(slots, held, share)
    return free[:want] if len(free) >= want else []


def victims(head: Entry, holding: Iterable[Entry], held: Iterable[HeldGpu], free: int) -> list[Entry]:
    """Other users' preemptible runs that, stopped, free enough GPUs (with the ``free`` ones)
    for ``head``: lowest priority first, then the most recently started. Empty when even all of
    them would not do, or when runs already asked to yield will free enough."""
    gpus: dict[tuple[int, str], int] = {}
    for lease in held:
        if not lease.shared:
            gpus[lease.uid, lease.run_id] = gpus.get((lease.uid, lease.run_id), 0) + 1
    candidates = [e for e in holding if e.preemptible and e.uid != head.uid and e.state == "holding"]
    yielding = sum(gpus.get((e.uid, e.run_id), 0) for e in candidates if e.preempt_asked is not None)
    if free + yielding >= head.gpus:
        return []
    chosen: list[Entry] = []
    count = free + yielding
    for entry in sorted(
        (e for e in candidates if e.preempt_asked is None), key=lambda e: (e.priority, -(e.started or 0.0))
    ):
        if count >= head.gpus:
            break
        chosen.append(entry)
        count += gpus.get((entry.uid, entry.run_id), 0)
    return chosen if count >= head.gpus else []
