"""The box's book and its rules, in the process (a real SQLite file; the keeper's socket and
real Unix users are tests/test_box_users.py's): one box-wide queue, fair share, the per-user
limit, preemption, and changes only by the run's own user, each recorded with who made it.

Peers are built as the keeper builds them from SO_PEERCRED (pid, uid, gid); the pids are live
processes of this test (a run whose owner is gone holds nothing), the uids need no account.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from jiyu_magics.core.box import queue_order
from jiyu_magics.core.box.book import Book
from jiyu_magics.core.box.book_rows import Refused
from jiyu_magics.core.box.identity import Peer
from jiyu_magics.core.box.policy import Policy, PolicyError, parse

from .jobs_workload import wait_for

ALICE, BOB, CAROL = 60101, 60102, 60103
SLOTS = [("GPU-0", 0), ("GPU-1", 1), ("GPU-2", 2), ("GPU-3", 3)]


@pytest.fixture
def owners():
    """Live processes standing for each run's owner (a supervisor, a kernel)."""
    started = []

    def owner() -> int:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        started.append(proc)
        return proc.pid

    yield owner
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.fixture
def book(tmp_path):
    rules = {"policy": Policy()}
    made = Book(tmp_path / "book.sqlite", lambda: rules["policy"])
    made.rules = rules
    yield made
    made.close()


def run(run_id: str, gpus: int = 1, **fields) -> dict:
    return {"run": run_id, "kind": fields.pop("kind", "job"), "gpus": gpus, **fields}


def test_one_gpu_is_never_leased_twice_and_the_waiting_run_says_who_holds_it(book, owners):
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    granted = book.acquire(alice, run("a0000001", 4), SLOTS)["leases"]
    assert [g["index"] for g in granted] == [0, 1, 2, 3]
    waiting = book.acquire(bob, run("b0000001", 1), SLOTS)
    assert "leases" not in waiting and waiting["position"] == 1 and waiting["head"]
    assert waiting["reason"].startswith(f"GPU 0 leased by {ALICE} (job, ")
    book.release(alice, "a0000001")
    assert [g["index"] for g in book.acquire(bob, run("b0000001", 1), SLOTS)["leases"]] == [0]
    leases = book.status(alice)["leases"]
    assert [(lease["user"], lease["kind"], lease["mine"]) for lease in leases] == [(str(BOB), "job", False)]


def test_among_waiting_users_the_one_with_fewer_recent_gpu_hours_goes_first(book, owners):
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    assert book.acquire(alice, run("a0000001", 4), SLOTS)["leases"]
    time.sleep(0.05)  # alice's GPU time grows while she holds them
    assert book.wait(alice, run("a0000002", 1))["position"] == 1  # first in line while nobody else waits
    bob_turn = book.wait(bob, run("b0000001", 1))
    assert bob_turn["position"] == 1 and bob_turn["head"]  # bob used less: he goes ahead of her earlier run
    alice_turn = book.wait(alice, run("a0000002", 1))
    assert alice_turn["position"] == 2 and not alice_turn["head"]
    assert re.fullmatch(
        rf"{BOB}'s job \(position 1\) starts first: fair share, {BOB} used 0\.00 GPU-hours in the last 24 h, "
        rf"{ALICE} 0\.\d\d",
        alice_turn["reason"],
    ), alice_turn["reason"]


def test_users_take_turns_and_priority_orders_each_users_own_runs():
    entries = [
        queue_order.Entry(ALICE, f"a{i}", "job", 1, queued=float(i), priority=5 if i == 2 else 0) for i in range(3)
    ]
    entries += [queue_order.Entry(BOB, f"b{i}", "job", 1, queued=10.0 + i) for i in range(2)]
    turns = queue_order.order(entries, queue_order.Usage(), cap=None)
    assert [t.entry.run_id for t in turns] == ["a2", "b0", "a0", "b1", "a1"]
    assert [t.blocked is None for t in turns] == [True, False, False, False, False]


def test_the_per_user_limit_refuses_in_one_line_that_names_the_rule_and_when_it_frees(book, owners):
    book.rules["policy"] = Policy(max_gpus_per_user=2)
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    assert len(book.acquire(alice, run("a0000001", 2), SLOTS)["leases"]) == 2
    capped = book.acquire(alice, run("a0000002", 1), SLOTS)
    assert "leases" not in capped and not capped["head"]
    assert capped["reason"] == (
        f"{ALICE} holds 2 of 2 GPUs allowed per user (max_gpus_per_user); this run waits until 1 of them free"
    )
    assert book.acquire(bob, run("b0000001", 2), SLOTS)["leases"]  # the limit holds alice, not the queue
    with pytest.raises(Refused, match="holds 2 of 2 GPUs allowed per user"):
        book.record(alice, run("a0000003", kind="kernel"), ("GPU-4", 4))


def test_an_in_kernel_training_is_refused_a_gpu_another_user_leases_and_shares_its_users_own(book, owners):
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    book.acquire(bob, run("b0000001", 1), SLOTS)
    with pytest.raises(Refused, match=rf"^GPU 0 is leased by {BOB} \(job, \d+ s\): train on a free GPU"):
        book.record(alice, {"run": "a0000001", "kind": "kernel"}, ("GPU-0", 0))
    assert book.status(alice)["leases"][0]["user"] == str(BOB)  # nothing written for alice
    book.acquire(alice, run("a0000002", 1), SLOTS)  # GPU 1
    shared = book.record(alice, {"run": "a0000003", "kind": "kernel"}, ("GPU-1", 1))
    assert shared["sharing"] == ["a0000002"] and shared["leases"][0]["shared"]


def test_only_a_runs_own_user_or_an_admin_changes_it_and_every_change_names_who(book, owners):
    book.rules["policy"] = Policy(admins=(str(CAROL),))
    alice, bob, carol = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB), Peer(owners(), CAROL, CAROL)
    book.acquire(alice, run("a0000001", 1), SLOTS)
    book.wait(alice, run("a0000002", 4))
    for attempt in (book.release, book.requeue, book.top):
        with pytest.raises(Refused, match=rf"^run a000000\d is {ALICE}'s: only {ALICE} can "):
            attempt(bob, "a0000001" if attempt is not book.top else "a0000002")
    assert [lease["run_id"] for lease in book.status(bob)["leases"]] == ["a0000001"]  # unchanged
    book.release(carol, "a0000001")  # an admin may end it
    changes = book.changes(carol)["changes"]
    assert [(c["by"], c["action"], c["owner"]) for c in changes] == [
        (str(ALICE), "queue", str(ALICE)),
        (str(ALICE), "lease", str(ALICE)),
        (str(ALICE), "queue", str(ALICE)),
        (str(CAROL), "release", str(ALICE)),
    ]
    assert all(c["pid"] for c in changes)
    assert [c["action"] for c in book.changes(bob)["changes"]] == []  # bob's own log: nothing of his


def test_moving_ahead_of_other_users_is_for_those_the_policy_lets_jump(book, owners):
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    book.acquire(bob, run("b0000000", 4), SLOTS)
    book.wait(bob, run("b0000001", 1))
    book.wait(alice, run("a0000001", 1))
    book.wait(alice, run("a0000002", 1))
    moved = book.top(alice, "a0000002")
    assert moved["ahead_of"] == "own" and "may_jump_queue" in moved["rule"]
    order = [w["run_id"] for w in book.status(alice)["queue"]]
    assert order.index("a0000002") < order.index("a0000001")
    book.rules["policy"] = Policy(may_jump_queue=(str(ALICE),))
    assert book.top(alice, "a0000001")["ahead_of"] == "everyone"
    assert book.status(alice)["queue"][0]["run_id"] == "a0000001"


def test_a_run_waiting_past_the_limit_asks_another_users_preemptible_run_to_yield(book, owners):
    book.rules["policy"] = Policy(preempt_after_minutes=0)
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    book.acquire(bob, run("b0000001", 2, preemptible=True), SLOTS[:2])
    book.acquire(bob, run("b0000002", 2), SLOTS[2:])  # not preemptible: never asked
    waiting = book.acquire(alice, run("a0000001", 2), SLOTS)
    assert waiting["preempting"].startswith(f"preempting {BOB}'s job")
    assert book.check(bob, "b0000001")["preempt"] and not book.check(bob, "b0000002")["preempt"]
    book.requeue(bob, "b0000001")  # its owner stopped it with a checkpoint
    assert [g["index"] for g in book.acquire(alice, run("a0000001", 2), SLOTS)["leases"]] == [0, 1]
    back = book.wait(bob, run("b0000001", 2, preemptible=True))
    assert back["position"] == 1 and not book.check(bob, "b0000001")["preempt"]
    assert any(c["action"] == "preempt" and c["by"] == "keeper" for c in book.changes(bob)["changes"])


def test_a_preempted_run_of_a_user_with_fewer_gpu_hours_does_not_take_the_gpus_back(book, owners):
    """Fair share would put bob (fewer GPU-hours) ahead of alice's waiting run again: the
    preemption would repeat until alice happened to ask first (seen as 8 leases instead of 4 in
    test_box_users under load)."""
    book.rules["policy"] = Policy(preempt_after_minutes=0)
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    assert book.acquire(alice, run("a0000001", 2), SLOTS[:2])["leases"]
    time.sleep(0.3)  # alice's GPU-hours grow past what bob will have used
    book.release(alice, "a0000001")
    assert book.acquire(bob, run("b0000001", 2, preemptible=True), SLOTS[:2])["leases"]
    assert book.acquire(alice, run("a0000002", 2), SLOTS[:2])["preempting"]
    book.requeue(bob, "b0000001")
    again = book.acquire(bob, run("b0000001", 2, preemptible=True), SLOTS[:2])  # bob asks first
    assert "leases" not in again and again["position"] == 2 and not again["head"], again
    assert again["reason"].startswith(f"{ALICE}'s job (position 1) starts first: this run was preempted"), again
    assert not book.check(bob, "b0000001")["preempt"]  # waiting: nothing for its watch to stop
    assert [g["index"] for g in book.acquire(alice, run("a0000002", 2), SLOTS[:2])["leases"]] == [0, 1]
    book.release(alice, "a0000002")
    assert [g["index"] for g in book.acquire(bob, run("b0000001", 2, preemptible=True), SLOTS[:2])["leases"]] == [0, 1]
    assert book.check(bob, "b0000001") == {"known": True, "state": "holding", "preempt": False}


def test_a_yielded_run_goes_behind_the_other_users_runs_queued_before_it_was_asked():
    entries = [
        queue_order.Entry(BOB, "b-yielded", "job", 2, queued=1.0, preempt_asked=20.0),
        queue_order.Entry(BOB, "b-later", "job", 1, queued=2.0),
        queue_order.Entry(ALICE, "a-waited", "job", 2, queued=10.0),
        queue_order.Entry(CAROL, "c-after", "job", 1, queued=30.0),
    ]
    usage = queue_order.Usage(recent_s={BOB: 1.0, ALICE: 500.0, CAROL: 900.0})
    turns = queue_order.order(entries, usage, cap=None)
    assert [t.entry.run_id for t in turns] == ["a-waited", "b-yielded", "c-after", "b-later"]  # c came after


def test_a_run_whose_owner_died_holds_no_gpu_and_no_place(book, owners):
    alice, bob = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB)
    dying = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    book.acquire(Peer(dying.pid, ALICE, ALICE), run("a0000001", 4), SLOTS)
    assert "leases" not in book.acquire(bob, run("b0000001", 1), SLOTS)
    dying.stdin.close()
    dying.wait()
    assert book.acquire(bob, run("b0000001", 1), SLOTS)["leases"]
    assert book.status(alice)["leases"][0]["user"] == str(BOB)
    swept = [c for c in book.changes(Peer(alice.pid, 0, 0))["changes"] if c["action"] == "sweep"]
    assert swept and swept[0]["owner"] == str(ALICE) and swept[0]["by"] == "keeper"


def test_a_policy_value_of_the_wrong_kind_is_refused_naming_its_key():
    assert parse("max_gpus_per_user: 4\nmay_jump_queue: [alice]\n").max_gpus_per_user == 4
    for text, message in [
        ("max_gpus_per_user: four", "max_gpus_per_user: 'four' is not a number"),
        ("max_gpu_per_user: 4", "unknown setting 'max_gpu_per_user'"),
        ("admins: alice", "admins: 'alice' is not a list of user names"),
        ("fair_share_hours: -1", "fair_share_hours: -1 is below 0"),
    ]:
        with pytest.raises(PolicyError, match=message):
            parse(text)


def test_a_release_wakes_the_head_at_once_its_lease_the_next_and_runs_behind_stay_waiting(book, owners):
    """Owners block in the keeper (``block``): the head of the queue in ``acquire`` until GPUs
    free, the runs behind it in ``wait`` until the queue moves them to the head. One release
    must wake each at once, and only those it moved."""
    import threading

    alice, bob, carol = Peer(owners(), ALICE, ALICE), Peer(owners(), BOB, BOB), Peer(owners(), CAROL, CAROL)
    book.acquire(alice, run("a0000001", 4), SLOTS)
    for peer, run_id in ((bob, "b0000001"), (carol, "c0000001"), (carol, "c0000002")):
        book.wait(peer, run(run_id, 4))
    answers = {}

    def asks(ask, peer, run_id):
        started = time.monotonic()
        answers[run_id] = (ask(peer, run_id), time.monotonic() - started)

    def acquires(peer, run_id):
        return book.acquire(peer, run(run_id, 4), SLOTS, block=3.0)

    def waits(peer, run_id):
        return book.wait(peer, run(run_id, 4), block=3.0)

    threads = [
        threading.Thread(target=asks, args=(acquires, bob, "b0000001")),
        threading.Thread(target=asks, args=(waits, carol, "c0000001")),
        threading.Thread(target=asks, args=(waits, carol, "c0000002")),
    ]
    for thread in threads:
        thread.start()
    _wait_until_blocked_in(threads, "_await_change")  # all three are held in the keeper now
    book.release(alice, "a0000001")
    for thread in threads:
        thread.join()
    (bob_got, bob_took), (next_turn, next_took), (last_turn, last_took) = (
        answers[run_id] for run_id in ("b0000001", "c0000001", "c0000002")
    )
    assert [g["index"] for g in bob_got["leases"]] == [0, 1, 2, 3] and bob_took < 1.5  # woken by the release
    assert next_turn["head"] and next_took < 1.5  # woken by bob's lease, which made it the head
    assert not last_turn["head"] and last_turn["position"] == 2 and last_took >= 2.9  # behind: waited it out


def _wait_until_blocked_in(threads, function: str, timeout: float = 10.0) -> None:
    """Returns once every thread's stack is inside ``function`` (there, a thread waits on the
    book's condition): the event a release must come after, where a fixed sleep would guess."""

    def inside(thread) -> bool:
        frame = sys._current_frames().get(thread.ident)
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        return frame is not None

    wait_for(lambda: all(inside(t) for t in threads), timeout, every=0.005, what=f"the threads to block in {function}")
