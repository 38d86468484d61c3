"""A team on one box, with real Unix users: alice, bob and carol (made by the test, as root,
each with a private home and the default ``~/.jiyu``), one box set up by ``jiyu box init
--group``, its book keeper answering them over its socket, and the NVML test double as the
box's GPUs (this machine has no NVIDIA driver).

Each user runs jiyu as themself (``runuser``, a clean environment): their jobs lease through
the box's book, wait for each other's leases, see each other as a user and a kind of run, and
cannot touch each other's runs, files or leases, however they try.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from .gpu_box import GpuBox
from .jobs_workload import write_notebook, write_train_notebook
from .unix_users import ROOT, UnixUsers, can_make_users, wait_until

pytestmark = pytest.mark.skipif(
    not can_make_users() and not os.environ.get("JIYU_REQUIRE_SERVICES"),
    reason="needs root to make Unix users (useradd, runuser)",
)
GPUS = 2
PYTHON3 = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
PREEMPT_AFTER_MIN = 0.05  # 3 s: a test's waiting run preempts soon


@pytest.fixture(scope="module")
def team():
    """Three users, one box of 2 GPUs; everything removed afterwards, also on failure."""
    users = UnixUsers(["alice", "bob", "carol"], outsiders=("dave",))  # dave is not in the box's group
    try:
        box = users.root / "box"
        state = users.root / "nvml_processes.json"
        users.gpus = GpuBox(state, GPUS)
        os.chmod(state, 0o644)
        users.box = box
        users.extra = {
            "JIYU_BOX": str(box),
            "JIYU_NVML_DOUBLE_GPUS": str(GPUS),
            "JIYU_NVML_DOUBLE_PROCESSES": str(state),
        }
        init = subprocess.run(
            [sys.executable, "-m", "jiyu_magics", "box", "init", "--path", str(box), "--group", users.group],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=60,
        )
        assert init.returncode == 0, init.stderr
        policy = box / "policy.yaml"
        policy.write_text(
            f"group: {users.group}\nadmins: [{users.login('carol')}]\n"
            f"preempt_after_minutes: {PREEMPT_AFTER_MIN}\nidle_kernel_minutes: 30\n"
        )
        yield users
    finally:
        subprocess.run(
            [sys.executable, "-m", "jiyu_magics", "box", "stop", "--path", str(users.root / "box")],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=30,
        )
        users.remove()


@pytest.fixture(autouse=True)
def runs_end_with_the_test(request):
    """A failed test must not leave its jobs holding the box's GPUs for the next one."""
    yield
    if "team" not in request.fixturenames:
        return
    team = request.getfixturevalue("team")
    for user in team.names:
        for run_id, run in runs_of(team, user).items():
            if run["status"] in ("queued", "starting", "running", "stopping"):
                jiyu(team, user, "stop", run_id, "--grace", "2")


def jiyu(team, user: str, *args: str, timeout: float = 120):
    return team.jiyu(user, *args, extra=team.extra, timeout=timeout)


def submit(team, user: str, notebook: str, *args: str) -> str:
    done = jiyu(team, user, "submit", notebook, *args)
    assert done.returncode == 0, done.stderr
    return re.search(r"Submitted run ([0-9a-f]{8})", done.stdout).group(1)


def runs_of(team, user: str) -> dict[str, dict]:
    listed = jiyu(team, user, "jobs", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    return {r["id"]: r for r in json.loads(listed.stdout)}


def notebook_for(team, user: str, name: str, writer=write_notebook, **params) -> str:
    path = team.home(user) / name
    writer(path, **params)
    os.chown(path, team.uids[user], -1)
    return str(path)


def status_of(team, user: str, run_id: str) -> str:
    return runs_of(team, user)[run_id]["status"]


def test_two_users_jobs_wait_for_each_other_and_never_share_a_gpu(team):
    alice_nb = notebook_for(team, "alice", "a.ipynb", steps=30, step_seconds=0.1)
    bob_nb = notebook_for(team, "bob", "b.ipynb", steps=3)
    first = submit(team, "alice", alice_nb, "--gpus", "2")
    wait_until(lambda: status_of(team, "alice", first) == "running", 120, what="alice's job running")
    second = submit(team, "bob", bob_nb, "--gpus", "2")
    alice, bob, carol = (team.login(u) for u in ("alice", "bob", "carol"))

    waiting = wait_until(
        lambda: (r := runs_of(team, "bob")[second])["queue_reason"] and r, 60, what="bob's run saying why it waits"
    )
    assert waiting["status"] == "queued" and waiting["queue_position"] == 1
    assert re.search(rf"GPU 0 leased by {alice} \(job, \d+ (s|min)\)", waiting["queue_reason"])
    gpu = jiyu(team, "bob", "gpu")
    assert re.search(rf"{alice}, job, \d+ (s|min)", gpu.stdout), gpu.stdout
    assert "a.ipynb" not in gpu.stdout and first not in gpu.stdout  # her notebook and run stay hers
    queue = jiyu(team, "carol", "queue")
    assert re.search(rf"{bob}\s+1\s+{second}\s+n/a\s+job\s+2 GPU\(s\)", queue.stdout), queue.stdout
    assert "b.ipynb" not in queue.stdout

    wait_until(lambda: status_of(team, "bob", second) == "succeeded", 240, what="bob's job to run after alice's")
    a, b = runs_of(team, "alice")[first], runs_of(team, "bob")[second]
    assert a["status"] == "succeeded" and b["started"] >= a["ended"]
    assert [g["index"] for g in a["gpus"]] == [g["index"] for g in b["gpus"]] == [0, 1]
    assert b["gpus"][0]["since"] >= a["gpus"][0]["ended"]  # the book's leases, mirrored in each home
    usage = json.loads(jiyu(team, "carol", "usage", "--by", "user", "--json").stdout)
    assert {row["key"] for row in usage} >= {alice, bob}


def test_another_user_cannot_touch_alices_work_and_every_attempt_is_refused_in_one_line(team):
    alice, bob = team.login("alice"), team.login("bob")
    began = time.time()
    holder = submit(
        team, "alice", notebook_for(team, "alice", "long.ipynb", steps=400, step_seconds=0.1), "--gpus", "2"
    )
    waiting = submit(team, "alice", notebook_for(team, "alice", "next.ipynb", steps=3), "--gpus", "1")
    run = wait_until(
        lambda: (r := runs_of(team, "alice")[holder])["status"] == "running" and r, 120, what="alice's job running"
    )
    alice_home = team.home("alice") / ".jiyu"
    attempts = {}

    def attempt(label: str, done: subprocess.CompletedProcess) -> str:
        line = (done.stderr or done.stdout).strip()
        assert done.returncode != 0 and len(line.splitlines()) == 1, (label, done.returncode, line)
        attempts[label] = line
        return line

    owner_line = f"run {holder} is {alice}'s: only {alice} can see, change or stop it"
    assert attempt("jiyu stop", jiyu(team, "bob", "stop", holder)).endswith(owner_line)
    assert attempt("jiyu logs", jiyu(team, "bob", "logs", holder)).endswith(owner_line)
    assert attempt("jiyu queue --top", jiyu(team, "bob", "queue", "--top", waiting)).endswith(
        f"run {waiting} is {alice}'s: only {alice} can see, change or stop it"
    )
    signalled = team.run("bob", ["kill", "-TERM", str(_supervisor(holder))])
    assert "Operation not permitted" in attempt("kill -TERM her supervisor", signalled)
    for label, path in [
        ("read her run log", alice_home / "runs" / holder / "stdout.log"),
        ("read her checkpoints", alice_home / "runs" / holder / "ckpt"),
        ("read her run store", alice_home / "jiyu.sqlite"),
    ]:
        assert "Permission denied" in attempt(label, team.run("bob", ["ls", "-l", str(path)]))
    book = team.box / "book.sqlite"
    opened = team.run(
        "bob",
        [
            str(team.python),
            "-c",
            "import sqlite3, sys\ntry:\n"
            f"    sqlite3.connect('file:{book}?mode=rw', uri=True).execute('INSERT INTO leases VALUES (1)')\n"
            "except sqlite3.Error as error:\n    sys.exit(str(error))",
        ],
    )
    assert "unable to open database file" in attempt("open the book's file", opened).lower()
    for label, request, refusal in [
        (
            "a request claiming to be alice",
            {"op": "release", "run": holder, "uid": team.uids["alice"]},
            "does not say who asks",
        ),
        (
            "end her lease",
            {"op": "release", "run": holder},
            f"run {holder} is {alice}'s: only {alice} can end its lease",
        ),
        ("requeue her run", {"op": "requeue", "run": holder}, f"only {alice} can requeue it"),
        (
            "lease her GPU in a kernel",
            {"op": "record", "run": "b0b0b0b0", "kind": "kernel", "slot": [_uuid(0), 0]},
            f"GPU 0 is leased by {alice}",
        ),
    ]:
        reply = _ask_as(team, "bob", request)
        assert reply["ok"] is False and refusal in reply["error"], (label, reply)
        attempts[label] = reply["error"]
    # what fit calls for an in-kernel %%train on cuda:0 (a CPU build of torch cannot place a
    # model there, so the call is made as fit makes it; its refusal ends the fit in this line)
    in_kernel = team.run(
        "bob",
        [
            str(team.python),
            "-c",
            "import sys, torch\nfrom jiyu_magics.train.device_lease import DeviceRefused, record_device_lease\n"
            "try:\n    record_device_lease('b1b1b1b1', torch.device('cuda', 0), None)\n"
            "except DeviceRefused as refused:\n    sys.exit(str(refused))",
        ],
        extra=team.extra,
    )
    assert f"cuda:0 (GPU 0): GPU 0 is leased by {alice} (job," in attempt("%%train on her GPU", in_kernel)

    after = runs_of(team, "alice")
    assert after[holder]["status"] == "running" and after[holder]["gpus"] == run["gpus"]
    assert after[waiting]["status"] == "queued"  # nothing of hers changed
    changes = json.loads(jiyu(team, "carol", "box", "log", "--json", "--limit", "500").stdout)
    assert changes and all(c["by"] in (alice, "keeper") or c["owner"] != alice for c in changes)
    assert not [c for c in changes if c["by"] == bob and c["at"] >= began]  # none of bob's attempts changed it
    stopped = jiyu(team, "alice", "stop", holder)
    assert stopped.returncode == 0, stopped.stderr
    print("\n".join(f"{label} -> {line}" for label, line in attempts.items()))
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "box_refusals.json").write_text(json.dumps(attempts, indent=2))


def test_a_preemptible_job_yields_with_a_checkpoint_and_resumes_after_the_waiting_users_run(team):
    bob_nb = notebook_for(team, "bob", "pre.ipynb", writer=write_train_notebook)
    preemptible = submit(
        team, "bob", bob_nb, "--gpus", "2", "--preemptible", "-p", "steps", "60", "-p", "step_seconds", "0.2"
    )
    wait_until(lambda: _steps(team, "bob", preemptible) >= 5, 180, what="bob's preemptible job training")
    alice_nb = notebook_for(team, "alice", "urgent.ipynb", steps=3)
    urgent = submit(team, "alice", alice_nb, "--gpus", "2")
    wait_until(lambda: status_of(team, "alice", urgent) == "succeeded", 240, what="alice's run after the preemption")
    log = jiyu(team, "bob", "logs", preemptible).stdout
    assert "preempted for another user's run: checkpoint saved, back in the queue" in log
    final = wait_until(
        lambda: (r := runs_of(team, "bob")[preemptible])["status"] in ("succeeded", "failed") and r,
        300,
        what="bob's job to resume and finish",
    )
    assert final["status"] == "succeeded", final
    assert "(resuming from its checkpoints)" in jiyu(team, "bob", "logs", preemptible).stdout
    a = runs_of(team, "alice")[urgent]
    bob_leases = final["gpus"]
    assert len(bob_leases) == 4  # two leases before the preemption, two after it
    first_end = min(g["ended"] for g in bob_leases)
    assert a["gpus"][0]["since"] >= first_end and min(g["since"] for g in bob_leases[2:] or bob_leases) >= 0
    starts = [json.loads(line) for line in _read_as_root(team, "bob", preemptible, "events.jsonl").splitlines()]
    resumed = [e for e in starts if e.get("kind") == "start"]
    assert len(resumed) == 2 and resumed[0]["start_step"] == 0, resumed
    assert resumed[1]["start_step"] > 0 and resumed[1]["resumed_from"], resumed  # from the preemption's checkpoint


def _steps(team, user: str, run_id: str) -> int:
    try:
        text = _read_as_root(team, user, run_id, "events.jsonl")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if '"kind": "step"' in line or '"kind":"step"' in line)


def _read_as_root(team, user: str, run_id: str, name: str) -> str:
    return (team.home(user) / ".jiyu" / "runs" / run_id / name).read_text()


def _supervisor(run_id: str) -> int:
    """The job's supervisor, from the process table (root must not open alice's store: a WAL
    file it made would be root's)."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "jiyu_magics.jobs.supervisor" in cmdline and run_id in cmdline:
            return proc.pid
    raise AssertionError(f"no supervisor of {run_id}")


def _keeper_log(team) -> str:
    log = team.box / "keeper.log"
    return f"keeper.log: {log.read_text()[-2000:]}" if log.exists() else "no keeper.log"


def _uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


def _ask_as(team, user: str, request: dict) -> dict:
    """One raw request to the keeper from a process of ``user`` (as a hand-written client would)."""
    code = (
        "import json, socket, sys; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({str(team.box / 'book.sock')!r}); s.sendall(sys.argv[1].encode() + b'\\n'); "
        "print(s.makefile().readline())"
    )
    done = team.run(user, [str(team.python), "-c", code, json.dumps(request)])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_while_the_keeper_is_down_a_job_waits_saying_why_and_starts_once_it_is_back(team):
    admin = {**os.environ, "PYTHONPATH": str(ROOT)}
    box = ["box", "--path", str(team.box)]
    stopped = subprocess.run([sys.executable, "-m", "jiyu_magics", "box", "stop", "--path", str(team.box)], env=admin)
    assert stopped.returncode == 0
    try:
        run_id = submit(team, "alice", notebook_for(team, "alice", "patient.ipynb", steps=3), "--gpus", "1")
        waiting = wait_until(
            lambda: (r := runs_of(team, "alice")[run_id])["queue_reason"] and r, 60, what="the waiting line"
        )
        assert waiting["status"] == "queued" and "book keeper" in waiting["queue_reason"]
        assert "is not running: GPU runs wait until it answers" in waiting["queue_reason"]
        gpu = jiyu(team, "alice", "gpu")
        assert gpu.returncode == 0 and "owners unknown: the box's book keeper" in gpu.stdout, gpu.stdout
    finally:
        started = subprocess.run(
            [sys.executable, "-m", "jiyu_magics", box[0], "init", *box[1:], "--group", team.group], env=admin
        )
    assert started.returncode == 0
    wait_until(
        lambda: status_of(team, "alice", run_id) == "succeeded",
        180,
        what="the job once the keeper is back",
        context=lambda: "\n".join(
            (str(runs_of(team, "alice")[run_id]), jiyu(team, "alice", "logs", run_id).stdout[-3000:], _keeper_log(team))
        ),
    )


def test_a_user_outside_the_boxs_group_is_refused_in_one_line_and_sees_why(team):
    status = jiyu(team, "dave", "box", "status")
    assert status.returncode == 2 and "you may not use the box's book" in status.stderr, status.stderr
    assert "ask its admin to add you to its group" in status.stderr and len(status.stderr.splitlines()) == 1
    gpu = jiyu(team, "dave", "gpu")
    assert gpu.returncode == 0 and "owners unknown: you may not use the box's book" in gpu.stdout, gpu.stdout


NPROC_CELLS = [
    "%load_ext jiyu_magics",
    "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "X = torch.randn(256, 8); y = X.sum(1, keepdim=True)\nmodel = torch.nn.Linear(8, 1)",
    "%%train --nproc 1 --epochs 1 --name behind-bob\noptimizer = torch.optim.SGD(model.parameters(), 0.05)\n"
    "train_loader = DataLoader(TensorDataset(X, y), batch_size=32)\nloss_fn = torch.nn.MSELoss()",
]


def test_a_train_nproc_cell_in_alices_kernel_waits_for_bobs_lease(team):
    """%%train --nproc leases through the same queue as jobs: in a real kernel of alice's
    (a notebook run by nbconvert as alice), it waits for bob's job, saying so in its cell."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    bob = team.login("bob")
    holder = submit(team, "bob", notebook_for(team, "bob", "hold.ipynb", steps=150, step_seconds=0.1), "--gpus", "2")
    wait_until(lambda: status_of(team, "bob", holder) == "running", 120, what="bob's job holding both GPUs")
    path = team.home("alice") / "nproc.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in NPROC_CELLS], metadata=PYTHON3), path)
    os.chown(path, team.uids["alice"], -1)
    done = team.run(
        "alice",
        [
            str(team.python),
            "-m",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--inplace",
            str(path),
            "--ExecutePreprocessor.timeout=600",
        ],
        extra=team.extra,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    executed = nbformat.read(path, as_version=4)
    text = "".join(o.get("text", "") for o in executed.cells[2].outputs)
    assert re.search(rf"queued at position 1, waiting for 1 GPU\(s\): GPU 0 leased by {bob} \(job, ", text), text
    (ran,) = [r for r in runs_of(team, "alice").values() if r["name"] == "behind-bob"]
    bobs = runs_of(team, "bob")[holder]
    assert ran["status"] == "succeeded" and ran["started"] >= min(g["ended"] for g in bobs["gpus"])
