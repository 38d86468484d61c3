"""A ranks pool on a Slurm allocation, on a real two-node Slurm (tests/slurm_cluster.py: nodes
n1 and n2 on this machine, each a slurmd with its own loopback address 127.0.1.I, hostname and
/etc/hosts): ``%ranks start 1 --backend slurm --nodes 2`` from a real kernel, cells that run on
both nodes with one process group, the channel letting in the allocation's nodes and nothing
else, a failing rank and a kernel interrupt reaching the other node's rank over the channel
(not by a signal from this machine), and ``%ranks stop`` ending the Slurm job with nothing left.
``pytest -m slurm`` runs it with the other Slurm tests."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs import scheduler_follower
from jiyu_magics.jobs.process import rank_records
from jiyu_magics.ranks.pool import ADDRESS_FILE

from .jobs_workload import assert_no_processes, wait_for
from .test_ranks import Kernel, assert_an_interrupt_ends_a_busy_cell, pool_of

pytestmark = pytest.mark.slurm
HANDSHAKE_S = 5.0


def handshake(endpoint: str, source: str, kind: int, keys: dict, client: tuple[bytes, bytes] | None = None) -> str:
    """Connects a socket of ``kind`` (the one a rank connects there) to ``endpoint`` from the
    address ``source`` as a CurveZMQ client of the kernel's key (``keys``: the pool's address
    file), with the pool's client key or ``client``'s, and says how ZMQ's handshake ended:
    ``accepted``, ``refused`` (the kernel's ZAP handler said no) or ``none``."""
    context = zmq.Context()
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    public, secret = client or (keys["client_public"].encode(), keys["client_secret"].encode())
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys["server_key"].encode(), public, secret
    monitor = sock.get_monitor_socket()
    sock.connect(f"tcp://{source}:0;{endpoint.removeprefix('tcp://')}")
    outcome = "none"
    deadline = time.monotonic() + HANDSHAKE_S
    try:
        while time.monotonic() < deadline and monitor.poll(int((deadline - time.monotonic()) * 1000)):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                outcome = "accepted"
                break
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                outcome = "refused"
                break
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)
        context.term()
    return outcome


def test_a_pool_on_two_slurm_nodes_runs_cells_on_both_and_only_its_nodes_reach_the_kernel(
    slurm_nodes, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    monkeypatch.setenv("JIYU_HOME", str(home))
    kernel = Kernel(tmp_path, home, env={"TMPDIR": str(tmp_path)})
    try:
        loaded = kernel.run("%load_ext jiyu_magics\n%ranks start 2 --nodes 2 --device cpu")
        assert loaded.status == "error" and loaded.text.strip() == (
            "UsageError: %ranks start: --nodes take(s) --backend slurm (a local pool runs on this machine)"
        ), loaded.text
        no_nodes = kernel.run("%ranks start 1 --backend slurm --nodes 0 --device cpu")
        assert no_nodes.status == "error" and no_nodes.text.startswith("UsageError: "), no_nodes.text
        assert len(no_nodes.text.strip().splitlines()) == 1 and "nnodes" in no_nodes.text, no_nodes.text

        started = time.monotonic()
        ready = kernel.run("%ranks start 1 --backend slurm --nodes 2 --device cpu --name two-node-pool")
        assert ready.status == "ok" and "ready in" in ready.text, ready.text + str(ready.errors)
        print(f"pool on 2 Slurm nodes ready in {time.monotonic() - started:.1f} s")
        pool = pool_of(home)
        assert (pool.kind, pool.backend, pool.nnodes, pool.status) == ("ranks", "slurm", 2, "running")
        assert pool.scheduler_id and slurm_nodes.jobs() == [pool.scheduler_id]
        status = kernel.run("%ranks").text
        assert f"2 rank(s), Slurm job {pool.scheduler_id}, 2 node(s), gloo" in status, status
        assert "on node n1 on cpu" in status and "on node n2 on cpu" in status, status

        both = kernel.run(
            "%%ranks --all-output\nimport socket, torch, torch.distributed as dist\nrank = dist.get_rank()\n"
            "x = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint(rank, dist.get_world_size(), "
            "socket.gethostname(), x.item())"
        )
        assert sorted(both.text.splitlines()) == ["[rank0] 0 2 n1 3.0", "[rank1] 1 2 n2 3.0"], both.text

        # the kernel's sockets let in the allocation's nodes (n1 127.0.1.1, n2 127.0.1.2), with
        # the pool's own CurveZMQ key, only
        address = json.loads((RunFiles.of(pool.id).root / ADDRESS_FILE).read_text())
        stranger = zmq.curve_keypair()
        for endpoint, kind in ((address["requests"], zmq.DEALER), (address["replies"], zmq.PUSH)):
            assert handshake(endpoint, "127.0.1.2", kind, address) == "accepted"
            assert handshake(endpoint, "127.0.1.2", kind, address, stranger) == "refused", "a key not the pool's"
            assert handshake(endpoint, "127.0.0.1", kind, address) == "refused", "not a node of the allocation"
            assert handshake(endpoint, "127.0.1.3", kind, address) == "refused", "no node of the allocation"

        # rank 1 (on n2) fails while rank 0 (on n1) sleeps: rank 0 is interrupted over the channel
        began = time.monotonic()
        failed = kernel.run(
            "%%ranks\nimport time\nif rank == 1:\n    raise ValueError('n2 gave up')\nfor _ in range(600):\n"
            "    time.sleep(0.1)"
        )
        took = time.monotonic() - began
        assert failed.status == "error" and failed.errors[0]["evalue"] == "rank 1: ValueError: n2 gave up"
        assert took < 10 and "restarted" not in failed.text, f"{took:.1f} s: {failed.text}"

        assert_an_interrupt_ends_a_busy_cell(kernel)  # a kernel interrupt reaches both nodes' ranks

        # a stall: n2's rank is still in its cell 3 s after n1's finished; its stack comes from n2
        # through the run folder (the kernel cannot signal a process on another machine)
        msg = kernel.start("%%ranks --stall-timeout 3\nimport time\nif rank == 1:\n    time.sleep(60)")
        wait_for(
            lambda: (RunFiles.of(pool.id).root / "stacks").exists() and RunStore().stored(pool.id).stalled_since,
            60,
            every=0.5,
            what="the pool flagged stalled",
        )
        time.sleep(10)  # the dump: the node's watch reads the request once a second, then the stack settles
        kernel.manager.interrupt_kernel()
        stalled = kernel.wait(msg, timeout=60)
        assert "jiyu: stalled: rank 1 has not finished 3 s after another rank did" in stalled.text, stalled.text
        assert "jiyu:   rank 1 is in " in stalled.text and "outside Python" not in stalled.text, stalled.text

        kept = kernel.run("%%ranks --all-output\nprint('still', rank, x.item())")
        assert sorted(kept.text.splitlines()) == ["[rank0] still 0 3.0", "[rank1] still 1 3.0"], kept.text
        assert pool_of(home).id == pool.id, "the same pool: nothing was restarted"

        # %%train on the pool: DDP across both nodes on the objects the ranks hold, a run of its own
        kernel.run(
            "%%ranks\nfrom torch.utils.data import DataLoader, TensorDataset\ntorch.manual_seed(0)\n"
            "X = torch.randn(256, 8); y = (X.sum(1) > 0).long()\n"
            "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))"
        )
        trained = kernel.run(
            "%%train --nproc 2 --epochs 2 --name across-nodes\noptimizer = torch.optim.SGD(model.parameters(), 0.1)\n"
            "loss_fn = torch.nn.CrossEntropyLoss()\ntrain_loader = DataLoader(TensorDataset(X, y), batch_size=32)"
        )
        assert trained.status == "ok", trained.text + str(trained.errors)
        (run,) = [r for r in RunStore().list() if r.name == "across-nodes"]
        assert (run.kind, run.status, run.params["pool"]) == ("ddp", "succeeded", pool.id)
        assert sorted((r.rank, r.host) for r in rank_records.read_all(run.id)) == [(0, "n1"), (1, "n2")]
        moved = kernel.run(
            "%%ranks --all-output\nprint(socket.gethostname(), round(float(model[0].weight.detach().sum()), 5))"
        )
        weights = {line.split()[-1] for line in moved.text.splitlines()}
        assert len(moved.text.splitlines()) == 2 and len(weights) == 1, "DDP kept both nodes' weights equal"

        began = time.monotonic()
        stopped = kernel.run("%ranks stop")
        print(f"%ranks stop of a pool on 2 Slurm nodes: {time.monotonic() - began:.1f} s")
        assert stopped.text.strip() == f"jiyu: ranks pool {pool.id} succeeded", stopped.text
    finally:
        kernel.close()
    assert slurm_nodes.jobs() == [], "the pool's Slurm job left the queue"
    assert_no_processes(pool.id)


def test_the_ranks_of_a_killed_kernel_end_and_give_back_the_allocation(slurm_nodes, tmp_path, monkeypatch):
    """The kernel's machine lost: its kernel and the home's scheduler follower killed (-9). Nothing
    there can end the ranks on the nodes; each rank sees its kernel's connection gone and ends, so
    the Slurm job leaves the queue, and the next follower (the next jiyu command's upkeep starts
    one) records the run's end with the ranks' reason."""
    home = tmp_path / "home"
    monkeypatch.setenv("JIYU_HOME", str(home))
    kernel = Kernel(tmp_path, home, env={"TMPDIR": str(tmp_path)})
    try:
        ready = kernel.run("%load_ext jiyu_magics\n%ranks start 1 --backend slurm --nodes 2 --device cpu")
        assert ready.status == "ok" and "ready in" in ready.text, ready.text + str(ready.errors)
        pool = pool_of(home)
        follower = scheduler_follower.running_pid(home)
        assert follower is not None, "the pool started the home's scheduler follower"
        os.kill(follower, signal.SIGKILL)
        os.kill(kernel.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: slurm_nodes.jobs() == [], 90, every=1, what="the pool's Slurm job leaving the queue")
        print(f"kernel killed -> the pool's Slurm job gone in {time.monotonic() - killed:.1f} s")
    finally:
        kernel.close()
    assert_no_processes(pool.id)
    scheduler_follower.ensure_running()
    wait_for(lambda: not RunStore().stored(pool.id).active, 30, every=1, what="the pool's run recorded ended")
    ended = RunStore().stored(pool.id)
    assert ended.status == "failed" and "its kernel is gone" in (ended.error or ""), (ended.status, ended.error)
    log = (RunFiles.of(pool.id).log).read_text()
    assert "its kernel is gone" in log, log[-2000:]


def test_a_pool_whose_kernel_dies_while_slurm_holds_it_pending_is_cancelled(slurm_nodes, tmp_path, monkeypatch):
    """Both nodes busy, so Slurm holds the pool's job pending; the kernel is killed meanwhile.
    No rank ever connected to notice: the home's scheduler follower ends the pool's job (it
    leaves the queue, never to start) and records why."""
    home = tmp_path / "home"
    monkeypatch.setenv("JIYU_HOME", str(home))
    blocker = slurm_nodes.run(
        "sbatch",
        "--parsable",
        "-N",
        "2",
        "--output=/dev/null",
        f"--chdir={tmp_path}",
        "--wrap",
        "sleep 300",
        check=True,
    ).stdout.strip()
    kernel = Kernel(tmp_path, home, env={"TMPDIR": str(tmp_path)})
    try:
        kernel.start("%load_ext jiyu_magics\n%ranks start 1 --backend slurm --nodes 2 --device cpu --name pending")
        wait_for(
            lambda: [r for r in RunStore().list() if r.name == "pending" and r.scheduler_id],
            60,
            every=0.5,
            what="the pool's job submitted",
        )
        (pool,) = [r for r in RunStore().list() if r.name == "pending"]
        assert set(slurm_nodes.jobs()) == {blocker, pool.scheduler_id}
        kernel_pid = kernel.pid
        os.kill(kernel_pid, signal.SIGKILL)
        wait_for(lambda: pool.scheduler_id not in slurm_nodes.jobs(), 60, every=1, what="the pending pool cancelled")
    finally:
        kernel.close()
    wait_for(lambda: not RunStore().stored(pool.id).active, 30, every=1, what="the pool's run recorded ended")
    ended = RunStore().stored(pool.id)
    assert ended.status == "failed" and f"its kernel (pid {kernel_pid}) is gone" in (ended.error or ""), ended.error
    assert slurm_nodes.jobs() == [blocker], "the other job is untouched"
