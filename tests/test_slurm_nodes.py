"""Runs on a real two-node Slurm (tests/slurm_cluster.py: nodes n1 and n2 on this machine, each
a slurmd with its own loopback address, hostname and /etc/hosts): a ``--nnodes 2`` DDP notebook
job from ``%submit``, ``jiyu submit`` and the REST API, followed to its end with a rank on each
node; stop, the time-limit requeue and a stall on two nodes; and what breaks multi-node torchrun
in the field, each staged on node n2 and reported in one line naming the node within 30 s: a
rank killed, the node's slurmd killed, the first node's name unresolvable or resolving to n2
itself, a node that never starts, n2 meeting someone else at the first node's name.
``pytest -m slurm`` runs them with the other Slurm tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import node_records, rank_records

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, wait_for
from .notebook_runner import execute, notebook, text_of
from .server_fixtures import body
from .slurm_workload import ended, events, job_state, write_notebook

pytestmark = pytest.mark.slurm
TWO_NODES = {"nnodes": 2, "nproc": 1, "backend": "slurm"}
CPU_JOB = {"gpus_per_node": 0}  # no GPU here: ranks on gloo
FAILURE_BOUND_S = 30  # a failure's line is recorded within this of the failure


def hosts_of(run_id: str) -> list[tuple[int, str]]:
    return [(r.rank, r.host) for r in rank_records.read_all(run_id)]


def path_without(folder, *programs: str) -> str:
    """A PATH with every program this one has except ``programs`` (links in ``folder``)."""
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for program in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
            link, source = folder / program, os.path.join(directory, program)
            if program not in programs and not link.exists() and os.access(source, os.X_OK):
                link.symlink_to(source)
    return str(folder)


def test_a_two_node_job_from_the_magic_has_a_rank_on_each_node_and_logs_from_both(slurm_nodes, tmp_path, torchrun_tmp):
    """Each node's rank is read on the node itself (SLURM_NODEID in its own task, never expanded
    by the batch shell on the first node, where every node would be node 0)."""
    workload = write_notebook(tmp_path / "train.ipynb", steps=20)
    nb = execute(
        notebook(
            "%load_ext jiyu_magics",
            f"run = %submit {workload} --backend slurm --nnodes 2 --nproc 1 --gpus-per-node 0 --name two-nodes",
        ),
        tmp_path,
    )
    said = text_of(nb.cells[1])
    assert " for slurm: submitted as Slurm job " in said, said
    run_id = said.split()[1]
    done = ended(run_id)
    assert (done.status, done.nnodes, done.nproc) == ("succeeded", 2, 1), done.error
    assert hosts_of(run_id) == [(0, "n1"), (1, "n2")]
    assert all(r.nnodes == 2 and r.exit_code == 0 for r in rank_records.read_all(run_id))
    nodes = node_records.read_all(run_id)
    assert [(n.node, n.host, n.node_rank, n.nnodes, n.addresses) for n in nodes] == [
        ("n1", "n1", 0, 2, ["127.0.1.1"]),
        ("n2", "n2", 1, 2, ["127.0.1.1"]),
    ]
    log = jiyu("logs", run_id).stdout
    assert "node n1 (n1, node rank 0 of 2): rendezvous at n1:" in log
    assert "node n2 (n2, node rank 1 of 2): rendezvous at n1:" in log
    assert "[rank0]: Trained 20 steps" in log and "[rank1]: trained to" in log, log[-2000:]
    assert events(run_id, "end")[-1]["status"] == "succeeded" and slurm_nodes.jobs() == []
    assert_no_processes(run_id)


def test_jiyu_submit_on_two_nodes_needs_no_scontrol_in_the_job_and_stop_ends_both_ranks(
    slurm_nodes, tmp_path, torchrun_tmp
):
    """The job's PATH has no scontrol (a container without Slurm's tools): the first node is
    still found (the batch script runs there), not left empty for every node to rendezvous with
    itself. jiyu stop then ends the ranks on both nodes at one step, with a checkpoint."""
    job_path = path_without(tmp_path / "bin", "scontrol")
    done = jiyu(
        "submit",
        str(write_notebook(tmp_path / "long.ipynb", steps=100000, step_seconds=0.05)),
        *("--backend", "slurm", "--nnodes", "2", "--nproc", "1", "--gpus-per-node", "0"),
        f"--sbatch-arg=--export=ALL,PATH={job_path}",
    )
    assert done.returncode == 0, done.stderr
    (run,) = RunStore().list()
    wait_for(lambda: len(events(run.id, "step")) >= 3, 180, what="steps on two nodes")
    assert hosts_of(run.id) == [(0, "n1"), (1, "n2")]
    stopped = jiyu("stop", run.id, "--grace", "30")
    assert stopped.returncode == 0 and stopped.stdout.strip().endswith(": stopped."), stopped.stderr
    end = events(run.id, "end")[0]
    assert end["status"] == "stopped" and events(run.id, "ckpt")[-1]["step"] == end["step"]
    ranks = rank_records.read_all(run.id)
    assert [(r.host, r.stopped, r.exit_code) for r in ranks] == [("n1", True, 0), ("n2", True, 0)]
    assert RunStore().get(run.id).status == "stopped" and slurm_nodes.jobs() == []
    assert_no_processes(run.id, within=5)


async def test_a_stalled_two_node_job_from_the_rest_api_shows_every_ranks_stack_and_node(
    slurm_nodes, jp_fetch, jp_root_dir, torchrun_tmp, artifacts
):
    """The panel's Submit (POST /jiyu/api/runs) with a backend, nodes and Slurm options; rank 1
    on n2 stalls. The server follows the job and flags the stall; the ranks, on other hosts than
    the server's, dump their stacks on a request through the shared run folder."""
    write_notebook(jp_root_dir / "stall.ipynb", steps=100000, step_seconds=0.05, stall_rank=1, stall_step=8)
    payload = {
        "notebook": "stall.ipynb",
        "nproc": 1,
        "backend": "slurm",
        "nnodes": 2,
        "slurm": {"gpus_per_node": 0},
        "stall_timeout": 3,
        "name": "stalls",
    }
    record = body(await jp_fetch("jiyu", "api", "runs", method="POST", body=json.dumps(payload).encode()))
    run_id = record["id"]
    assert (record["backend"], record["nnodes"], record["nproc"]) == ("slurm", 2, 1)
    for _ in range(240):
        record = body(await jp_fetch("jiyu", "api", "runs", run_id))
        if record["stalled_since"] is not None or record["status"] not in ("queued", "running"):
            break
        await asyncio.sleep(1)
    assert record["status"] == "running" and record["stalled_since"] is not None, record
    shown = jiyu("stacks", run_id)
    assert shown.returncode == 0, shown.stderr
    (artifacts / "slurm_nodes_stacks.txt").write_text(shown.stdout)  # for docs/guide/slurm.md
    headlines = shown.stdout.splitlines()[1:3]
    assert any(line.strip().startswith("rank 1 on n2 is in train_step") for line in headlines), shown.stdout
    assert any(line.strip().startswith("rank 0 on n1 is in ") for line in headlines), shown.stdout
    assert "== rank 1 on n2 ==" in shown.stdout and "== rank 0 on n1 ==" in shown.stdout
    ranks = body(await jp_fetch("jiyu", "api", "runs", run_id, "ranks"))["ranks"]
    assert [(r["rank"], r["host"], r["state"]) for r in ranks] == [(0, "n1", "running"), (1, "n2", "running")]
    stopped = body(await jp_fetch("jiyu", "api", "runs", run_id, "stop", method="POST", body=b"{}"))
    assert stopped["status"] == "stopped", stopped
    assert_no_processes(run_id, within=15)


def test_the_time_limit_requeues_a_two_node_job_that_resumes_on_both_nodes(slurm_nodes, tmp_path, torchrun_tmp):
    nb = write_notebook(tmp_path / "slow.ipynb", steps=100, first_attempt_seconds=1.0)
    run = jobs.submit(nb, **TWO_NODES, slurm={**CPU_JOB, "time": "1", "checkpoint_grace": 5, "max_requeues": 2})
    done = ended(run.id, 300)
    assert done.status == "succeeded", done.error
    first, second = events(run.id, "start")[:2]
    stop = events(run.id, "end")[0]
    assert stop["status"] == "stopped" and "time limit" in stop["message"]
    assert second["start_step"] == stop["step"] > first["start_step"] == 0
    nodes = node_records.read_all(run.id)
    assert [(n.node, n.attempt) for n in nodes] == [("n1", 1), ("n2", 1)], "the second attempt ran on both nodes"
    assert [(r.rank, r.host, r.restart) for r in rank_records.read_all(run.id)] == [(0, "n1", 0), (1, "n2", 0)]
    log = RunFiles.of(run.id).log.read_text()
    assert "requeued (1 of 2)" in log and "attempt 2, on n[1-2]" in log
    assert job_state(slurm_nodes, run.scheduler_id) == "COMPLETED"
    assert_no_processes(run.id)


# -- failures, staged on node n2 -------------------------------------------------------------------


def submit_long(tmp_path, **slurm) -> object:
    nb = write_notebook(tmp_path / "long.ipynb", steps=100000, step_seconds=0.05)
    return jobs.submit(nb, **TWO_NODES, slurm={**CPU_JOB, **slurm})


def ended_within(run_id: str, since: float, bound: float = FAILURE_BOUND_S):
    """The run once its end is recorded, at most ``bound`` seconds after ``since`` (monotonic)."""
    done = ended(run_id, timeout=bound + 30)
    took = time.monotonic() - since
    assert took <= bound, f"the end was recorded {took:.1f} s after the failure: {done.error}"
    return done


def test_a_rank_killed_on_node_2_ends_the_run_naming_its_node_and_no_rank_is_left_waiting(
    slurm_nodes, tmp_path, torchrun_tmp
):
    """kill -9 of rank 1 on n2: rank 0 on n1, in an all-reduce with it, fails too ("Connection
    closed by peer"); the run's line is the killed rank's, with its node, not its victim's."""
    run = submit_long(tmp_path)
    wait_for(lambda: len(events(run.id, "step")) >= 3, 180, what="steps on two nodes")
    (victim,) = [r for r in rank_records.read_all(run.id) if r.host == "n2"]
    os.kill(victim.pid, signal.SIGKILL)
    done = ended_within(run.id, time.monotonic())
    assert (done.status, done.error) == ("failed", "rank 1 on n2: killed by SIGKILL (out of memory?)")
    assert events(run.id, "error")[-1]["message"] == done.error
    assert_no_processes(run.id)


def test_a_node_whose_slurmd_dies_ends_the_run_with_slurms_line_naming_it(slurm_nodes, tmp_path, torchrun_tmp):
    """Slurm declares n2 down (here within SlurmdTimeout, 5 s, and a ping's MessageTimeout) and
    ends the job NODE_FAIL: the run fails with that line and the node, instead of Slurm
    requeueing it to wait for a node that may not come back. n2's rank, whose peer on n1 is
    gone, ends itself."""
    run = submit_long(tmp_path)
    wait_for(lambda: len(events(run.id, "step")) >= 3, 180, what="steps on two nodes")
    slurm_nodes.kill_slurmd("n2")
    done = ended_within(run.id, time.monotonic(), bound=FAILURE_BOUND_S + 5)
    said = f"Slurm job {run.scheduler_id}: a node of the job failed (NODE_FAIL): n2"
    assert (done.status, done.error) == ("failed", said)
    assert job_state(slurm_nodes, run.scheduler_id) == "NODE_FAIL"
    assert_no_processes(run.id, within=30)


@pytest.mark.parametrize(
    "n1_on_n2, said",
    [
        (None, "node n2: cannot resolve the rendezvous host n1 ("),
        ("127.0.0.1", "node n2: the rendezvous host n1 resolves to 127.0.0.1 there, an address of n2 itself"),
        ("127.0.1.2", "node n2: the rendezvous host n1 resolves to 127.0.1.2 there, an address of n2 itself"),
    ],
    ids=["unresolvable", "localhost", "n2s-own-address"],
)
def test_a_wrong_name_for_the_first_node_on_node_2_fails_before_torchrun(
    slurm_nodes, tmp_path, torchrun_tmp, n1_on_n2, said
):
    """n2's /etc/hosts has no n1, or maps it to 127.0.0.1 or to n2's own address: n2 would wait
    alone for a rendezvous (its TCPStore client giving up after 60 s, the first node after 10
    minutes). Its check fails at once, and n1's ranks are ended."""
    slurm_nodes.set_hosts("n2", {"n1": n1_on_n2})
    began = time.monotonic()
    run = submit_long(tmp_path)
    done = ended_within(run.id, began)
    assert done.status == "failed" and done.error.startswith(said), done.error
    assert "(fix n1's entry in DNS or /etc/hosts on n2)" in done.error or n1_on_n2 is None
    (n2,) = [n for n in node_records.read_all(run.id) if n.node == "n2"]
    assert n2.error == done.error and n2.pid is None, "torchrun never started on n2"
    assert said in RunFiles.of(run.id).log.read_text()
    assert_no_processes(run.id)


def test_a_node_that_never_starts_fails_the_rendezvous_after_the_join_timeout(slurm_nodes, tmp_path, torchrun_tmp):
    """Python hangs on n2 (as on a node with a stale shared mount): n1 waits for it the join
    timeout (10 s here), not torch's 10 minutes, and says which nodes came."""
    with slurm_nodes.hanging("n2", sys.executable):
        began = time.monotonic()
        run = submit_long(tmp_path, join_timeout=10)
        done = ended_within(run.id, began + 10)  # the failure: n2 not there when the join timeout ran out
    (n1,) = node_records.read_all(run.id)
    assert done.status == "failed" and done.error == (
        f"node n1: the rendezvous at {n1.rdzv} timed out after 10 s (the join timeout): 1 of 2 nodes came (n1); "
        "the other node(s) of n[1-2] never started their launcher (a node that hangs before the job's first line: "
        "its log says nothing)"
    )
    assert_no_processes(run.id)


def test_node_2_meeting_another_machine_at_the_first_nodes_name_is_named_when_the_rendezvous_fails(
    slurm_nodes, tmp_path, torchrun_tmp
):
    """n2 resolves n1 to 127.0.1.99, where something else listens (a login node, say): its
    checks pass (the address is not its own, something answers) but the nodes never meet. When
    the rendezvous fails, the line says which node resolved the first node's name differently."""
    slurm_nodes.set_hosts("n2", {"n1": "127.0.1.99"})
    began = time.monotonic()
    run = submit_long(tmp_path, join_timeout=10)
    first = wait_for(lambda: node_records.read(run.id, "n1"), 120, what="the first node's record")
    impostor = socket.create_server(("127.0.1.99", int(first.rdzv.rpartition(":")[2])))
    try:
        done = ended_within(run.id, began, bound=FAILURE_BOUND_S + 10)
    finally:
        impostor.close()
    assert done.status == "failed" and done.error == (
        "node n2: the rendezvous host n1 resolves to 127.0.1.99 there but to 127.0.1.1 on n1, which hosts the "
        "rendezvous: the nodes cannot meet (fix n1's entry in DNS or /etc/hosts on n2)"
    )
    assert "warning: node n2: the rendezvous host n1 resolves to 127.0.1.99" in RunFiles.of(run.id).log.read_text()
    assert_no_processes(run.id)
