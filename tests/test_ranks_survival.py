"""Ranks that survive, through real kernels (jupyter_client) and gloo on the CPU: a pool of 8
ranks on this 2-core machine keeps every rank's state through errors inside a barrier, a rank
killed inside a collective (named at once, replaced by ``%ranks restart``, brought up to date by
the ``--on-join`` cell); a pool started ``--replace-dead`` replaces a rank that died while idle;
an idle pool whose supervisor is killed is recorded ended within seconds, its leases freed; a
start whose rank never joins says where each rank is, and an interrupt ends it with nothing left.
Every rank, the first ones and a replacement, is forked by a process that runs one thread: a rank
forked beside the rendezvous store's thread hung in glibc's resolver lock, and the pool's start
with it (one start of 8 in three under load, before the fork server)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from jiyu_magics.core.runs.files import store_path
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process.process_tree import leftovers

from .jobs_workload import wait_for
from .test_ranks import Kernel, alive, assert_collectives_right, pool_of, rank_pid, rank_pids

FAULTS = Path(__file__).parent / "fault_injection"  # its sitecustomize hangs a chosen rank
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def threads_of_their_parents(pids: list[int]) -> list[int]:
    """How many threads the process that forked these ranks runs, for each such process."""
    parents = {psutil.Process(pid).ppid() for pid in pids}
    return [psutil.Process(parent).num_threads() for parent in sorted(parents)]


def plain(cell) -> str:
    return ANSI.sub("", cell.text + "".join("\n".join(e["traceback"]) for e in cell.errors))


@pytest.fixture(scope="module")
def kernel8(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("ranks8")
    kernel = Kernel(cwd, cwd / "home", env={"TMPDIR": str(cwd)})
    started = kernel.run("%load_ext jiyu_magics\n%ranks start 8 --device cpu --name eight")
    assert started.status == "ok" and "8 rank(s), gloo" in started.text, started.text + str(started.errors)
    first = kernel.run(
        "%%ranks\nimport os, torch, torch.distributed as dist\nrank = dist.get_rank()\n"
        "x = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nweights = torch.full((3,), float(rank))"
    )
    assert first.status == "ok", first.errors
    yield kernel
    kernel.run("%ranks stop")
    kernel.close()


def test_an_error_while_the_others_wait_in_a_barrier_keeps_all_eight_ranks(kernel8):
    pool = pool_of(kernel8.home).id
    pids = rank_pids(kernel8.home, pool)
    assert threads_of_their_parents(pids) == [1], "one fork server, and no thread in it but its main one"
    for trial, failing in enumerate((1, 6, 0)):
        began = time.monotonic()
        cell = kernel8.run(f"%%ranks\nif rank == {failing}:\n    raise ValueError('bad batch {trial}')\ndist.barrier()")
        took = time.monotonic() - began
        (error,) = cell.errors
        assert error["evalue"] == f"rank {failing}: ValueError: bad batch {trial}", error
        said = plain(cell)
        others = sorted(set(range(8)) - {failing})
        assert f"ranks {others[0]}" in said and "the collectives they waited in was aborted" not in said
        assert "the collectives they waited in were aborted" in said or "waited in was aborted" in said, said
        assert "the process group was rebuilt" in said and "every rank kept its state" in said
        assert took < 30, f"trial {trial}: the cell took {took:.1f} s"
        assert_collectives_right(kernel8, 8)
    assert rank_pids(kernel8.home, pool) == pids, "the same eight processes"


def test_a_rank_killed_inside_a_collective_is_named_and_replaced_with_the_join_hook(kernel8):
    pool = pool_of(kernel8.home).id
    hook = kernel8.run(
        "%%ranks --on-join\nimport os, torch, torch.distributed as dist\nrank = dist.get_rank()\n"
        "if 'weights' not in globals():\n    weights = torch.zeros(3)\n    x = torch.zeros(1)\n"
        "dist.broadcast(weights, src=0)\ndist.broadcast(x, src=0)\nprint('joined', rank, weights.tolist())"
    )
    assert "kept as the join hook" in hook.text
    kernel8.run("%%ranks\nweights = torch.full((3,), 7.0)")
    began = time.monotonic()
    cell = kernel8.run("%%ranks\nif rank == 5:\n    os.kill(os.getpid(), 9)\ndist.all_reduce(torch.ones(4))")
    took = time.monotonic() - began
    (error,) = cell.errors
    assert (error["ename"], error["evalue"].splitlines()[0]) == (
        "RankDied",
        "rank 5 died: killed by SIGKILL — out of memory?",
    )
    assert "%ranks restart 5 starts a new rank 5" in plain(cell) and took < 30, (took, plain(cell))
    refused = kernel8.run("%%ranks\nprint('all of them')")
    assert refused.status == "error" and "UsageError: %%ranks: rank 5 died" in refused.text
    assert "%%ranks 0,1,2,3,4,6,7 runs on the others" in refused.text and "all of them" not in refused.text
    pushed = kernel8.run("w = 1\n%ranks push w")
    assert pushed.status == "error" and "pushed" not in pushed.text and "rank 5 died" in pushed.text
    others = kernel8.run("%%ranks 0,1,2,3,4,6,7 --all-output\nprint('kept', rank, weights.tolist())")
    assert sorted(others.text.splitlines())[0] == "[rank0] kept 0 [7.0, 7.0, 7.0]", others.text
    assert pool_of(kernel8.home).id == pool and pool_of(kernel8.home).status == "running"
    restarted = kernel8.run("%ranks restart 5")
    assert restarted.status == "ok", plain(restarted)
    assert "joined 0 [7.0, 7.0, 7.0]" in restarted.text and "rank(s) 5 joined in" in restarted.text
    brought = kernel8.run("%%ranks 5\nprint('new', rank, weights.tolist(), os.getpid())")
    assert brought.text.startswith("new 5 [7.0, 7.0, 7.0]"), brought.text
    live = alive(rank_pids(kernel8.home, pool))
    assert int(brought.text.split()[-1]) in live and len(live) == 8, live
    assert threads_of_their_parents(live) == [1], "the replacement too, from the same fork server"
    assert_collectives_right(kernel8, 8)


def test_a_replace_dead_pool_replaces_a_rank_that_died_while_idle_and_an_idle_pool_ends_with_its_supervisor(tmp_path):
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        started = kernel.run("%load_ext jiyu_magics\n%ranks start 2 --device cpu --replace-dead --name healing")
        assert started.status == "ok", started.errors
        setup = "import torch, torch.distributed as dist\nrank = dist.get_rank()"
        made = kernel.run(f"%%ranks\n{setup}\nx = torch.ones(1) * 3")
        assert made.status == "ok", plain(made)
        hook = kernel.run(f"%%ranks --on-join\n{setup}")
        assert hook.status == "ok" and "kept as the join hook" in hook.text, plain(hook)
        held = kernel.run("%%ranks --all-output\nprint('held', rank, 'x' in globals())")
        assert sorted(held.text.splitlines()) == ["[rank0] held 0 True", "[rank1] held 1 True"], plain(held)
        pool = pool_of(kernel.home)
        victim = rank_pid(kernel.home, pool.id, 1)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: "rank 1: dead" in kernel.run("%ranks").text, 30, what="the idle pool to see rank 1 gone")
        cell = kernel.run("%%ranks --all-output\nprint('here', rank, 'x' in globals())")
        assert "rank 1 died: killed by SIGKILL — out of memory? (while the pool was idle); a new rank 1" in cell.text
        assert sorted(cell.text.splitlines())[:2] == ["[rank0] here 0 True", "[rank1] here 1 False"], cell.text
        store = RunStore(store_path(kernel.home))
        supervisor = store.get(pool.id).pid
        ranks = rank_pids(kernel.home, pool.id)
        os.kill(supervisor, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not store.get(pool.id).active, 30, what="the pool's end recorded")
        assert time.monotonic() - killed < 10 and store.get(pool.id).status in ("failed", "lost")
        assert store.leases.live() == []
        wait_for(lambda: alive(ranks) == [], 60, what="the ranks to end with their supervisor")
        after = kernel.run("%%ranks\nprint('x')")
        assert after.status == "error" and f"ranks pool {pool.id} has ended" in after.text and "x\n" not in after.text
    finally:
        kernel.close()


def test_a_start_whose_rank_never_joins_says_where_each_rank_is_and_an_interrupt_ends_it(tmp_path):
    faults = {"PYTHONPATH": str(FAULTS), "JIYU_TEST_HANG_RANK": "1"}
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path), **faults})
    try:
        bad = kernel.run("%load_ext jiyu_magics\n%ranks start 3 --device cpu --stall-timeout -1")
        assert bad.status == "error" and bad.text.strip() == (
            "UsageError: %ranks start: --stall-timeout -1: expected seconds >= 0 (0: off)"
        ), bad.text
        msg_id = kernel.start("%ranks start 3 --device cpu --name stuck --stall-timeout 10")
        said = kernel.read_until(msg_id, "an interrupt ends the start")
        assert "jiyu: stalled: ranks 0–2 have not joined 10 s after the ranks started" in said, said
        assert "ranks 0, 2 are in " in said and "rank 1: no stack (its worker has not started" in said, said
        pool = pool_of(kernel.home)
        store = RunStore(store_path(kernel.home))
        assert store.get(pool.id).stalled_since is not None, "the panel shows the start stalled"
        kernel.manager.interrupt_kernel()
        ended = kernel.wait(msg_id, timeout=120)
        assert "UsageError: %ranks start: interrupted; no pool was started" in plain(ended), plain(ended)
        run = store.get(pool.id)
        assert not run.active and run.stalled_since is None and store.leases.live() == []
        os.environ["JIYU_HOME"] = str(kernel.home)
        wait_for(lambda: leftovers(pool.id) == [], 60, what="every process of the start to end, the hung rank too")
    finally:
        kernel.close()
