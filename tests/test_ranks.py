"""Ranks that stay (``%ranks``, ``%%ranks``), through real kernels (jupyter_client), real
torchrun and gloo on the CPU: state across cells, rank-specific cells, push and pull, a rank's
error and the next cell, an interrupt, a hang flagged with every rank's stack, training on the
pool, kernel restart and ``kill -9``, and a pool waiting in the GPU queue (NVML test double:
this machine has no NVIDIA driver)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client import KernelManager

from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import describe_processes, wait_for

START = "%load_ext jiyu_magics\n%ranks start 2 --device cpu --name {name}"


class Kernel:
    """A real ipykernel in ``cwd`` with its own jiyu home; cells run one at a time and their
    output (streams, displays, errors) is collected as a notebook would show it."""

    def __init__(self, cwd: Path, home: Path, env: dict[str, str] | None = None):
        self.home = home
        self.manager = KernelManager(kernel_name="python3")
        extra = {"JIYU_HOME": str(home), "OMP_NUM_THREADS": "1", "JPY_SESSION_NAME": str(cwd / "pool.ipynb")}
        self.manager.start_kernel(cwd=str(cwd), env={**os.environ, **extra, **(env or {})})
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(120)

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def run(self, code: str, timeout: float = 300) -> Cell:
        cell = Cell()
        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=cell.take)
        cell.status = reply["content"]["status"]
        return cell

    def start(self, code: str) -> str:
        return self.client.execute(code)

    def read_until(self, msg_id: str, text: str, timeout: float = 120) -> str:
        """What a cell started with ``start`` printed, once it has printed ``text`` (``wait``
        then collects the rest)."""
        said, deadline = "", time.monotonic() + timeout
        while text not in said:
            msg = self.client.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                said += msg["content"]["text"]
        return said

    def wait(self, msg_id: str, timeout: float = 300) -> Cell:
        """The output of a cell started with ``start``, once it ends."""
        cell = Cell()
        deadline = time.monotonic() + timeout
        while True:
            msg = self.client.get_iopub_msg(timeout=max(1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return cell
            cell.take(msg)

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=False)


class Cell:
    def __init__(self) -> None:
        self.text, self.errors, self.displays, self.status = "", [], [], None

    def take(self, msg: dict) -> None:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            self.text += content["text"]
        elif msg["msg_type"] in ("display_data", "execute_result"):
            self.displays.append(content["data"])
        elif msg["msg_type"] == "error":
            self.errors.append(content)


def pool_of(home: Path):
    (pool,) = [run for run in RunStore(store_path(home)).list() if run.kind == "ranks" and run.active]
    return pool


def rank_pids(home: Path, run_id: str) -> list[int]:
    from jiyu_magics.jobs.process import rank_records

    os.environ["JIYU_HOME"] = str(home)
    return sorted(record.pid for record in rank_records.read_all(run_id))


def rank_pid(home: Path, run_id: str, rank: int) -> int:
    """The pid of ``rank``'s latest process, by its record (not by pid order: pids wrap around
    on a long run, and a replacement's pid says nothing of its rank)."""
    from jiyu_magics.jobs.process import rank_records

    os.environ["JIYU_HOME"] = str(home)
    (pid,) = [record.pid for record in rank_records.read_all(run_id) if record.rank == rank]
    return pid


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel with one pool for the tests that leave it running."""
    cwd = tmp_path_factory.mktemp("ranks")
    kernel = Kernel(cwd, cwd / "home", env={"TMPDIR": str(cwd)})
    started = kernel.run(START.format(name="shared-pool"))
    assert started.status == "ok" and "ready in" in started.text, started.text + str(started.errors)
    yield kernel
    kernel.run("%ranks stop")
    kernel.close()


def test_the_pool_is_a_run_of_its_notebook_and_state_persists_across_cells(kernel):
    pool = pool_of(kernel.home)
    assert (pool.kind, pool.status, pool.nproc, pool.name) == ("ranks", "running", 2, "shared-pool")
    assert pool.notebook.endswith("pool.ipynb") and pool.owner_pid == kernel.pid
    first = kernel.run(
        "%%ranks\nimport torch, torch.distributed as dist\nrank = dist.get_rank()\n"
        "x = torch.ones(1) * (rank + 1)\ndist.all_reduce(x)\nprint('sum', x.item())"
    )
    assert first.status == "ok" and first.text == "sum 3.0\n", "rank 0's output, once"
    again = kernel.run("%%ranks --all-output\nprint('still', rank, x.item())")
    assert sorted(again.text.splitlines()) == ["[rank0] still 0 3.0", "[rank1] still 1 3.0"]
    one = kernel.run("%%ranks 1\nprint('only', rank)")
    assert one.text == "only 1\n"
    shown = kernel.run("%%ranks\nrank * 10 + 7")
    assert shown.displays == [{"text/plain": "7"}], "rank 0's last expression shows as the cell's own"
    figure = kernel.run("%%ranks\nimport matplotlib.pyplot as plt\nplt.plot([rank, 1, 2]);")
    assert [set(d) for d in figure.displays] == [{"image/png", "text/plain"}], "rank 0's figure, once"
    status = kernel.run("%ranks")
    assert f"ranks pool {pool.id} (shared-pool): 2 rank(s), gloo" in status.text


def test_push_and_pull_move_objects_and_weights(kernel):
    kernel.run("import torch\nconfig = {'lr': 0.5, 'layers': [4, 8]}\nnet = torch.nn.Linear(3, 2)")
    pushed = kernel.run("%ranks push config")
    assert "pushed config to 2 rank(s)" in pushed.text
    assert kernel.run("%%ranks --all-output\nprint(config['layers'][rank])").text.count("\n") == 2
    kernel.run(
        "%%ranks\ntorch.manual_seed(rank)\nnet = torch.nn.Linear(3, 2)\n"
        "with torch.no_grad():\n    net.weight.fill_(rank + 1.5)"
    )
    pulled = kernel.run("%ranks pull net --from 1\nprint(float(net.weight.detach().sum()))")
    assert "loaded rank 1's net weights into the notebook's net" in pulled.text
    assert pulled.text.strip().endswith(str(2.5 * 6)), pulled.text
    plain = kernel.run("%ranks pull config --from 0 --as config_back\nprint(config_back == config)")
    assert plain.text.strip().endswith("True")
    big = kernel.run("big = torch.arange(2**20, dtype=torch.float32)\n%ranks push big")  # 4 MB: through shared memory
    assert "pushed big to 2 rank(s)" in big.text, big.text + str(big.errors)
    kernel.run("%%ranks\nbig = big * (rank + 2)")
    back = kernel.run("%ranks pull big --from 1 --as big_back\nprint(bool(torch.equal(big_back, big * 3)))")
    assert back.text.strip().endswith("True"), back.text
    import json

    from jiyu_magics.ranks.pool import ADDRESS_FILE

    shared = Path(
        json.loads((RunFiles.of(pool_of(kernel.home).id, kernel.home).root / ADDRESS_FILE).read_text())["shared"]
    )
    assert shared.is_dir() and list(shared.iterdir()) == [], "no buffer's file outlives its request"
    bad = kernel.run("make = lambda: 1\n%ranks push make")
    assert bad.status == "error" and "UsageError: %ranks push: make cannot be pickled" in bad.text, bad.text
    missing = kernel.run("%ranks pull nothing_here --from 1")
    assert missing.status == "error" and "rank 1 has no 'nothing_here'" in missing.text + str(missing.errors)


def test_scatter_and_gather_split_and_join_along_the_first_dimension(kernel):
    kernel.run("import numpy as np\nrows = torch.arange(10.0).reshape(5, 2)\ntable = np.arange(7)")
    scattered = kernel.run("%ranks scatter rows --as part")
    assert "scattered rows as part over 2 rank(s) (3, 2 along the first dimension)" in scattered.text, scattered.text
    shown = kernel.run("%%ranks --all-output\nprint(part.shape[0], float(part.sum()))")
    assert sorted(shown.text.splitlines()) == ["[rank0] 3 15.0", "[rank1] 2 30.0"]
    kernel.run("%%ranks\npart = part * (rank + 1)")
    gathered = kernel.run("%ranks gather part --as back\nprint(back.tolist())")
    assert gathered.text.strip().endswith(str([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [12.0, 14.0], [16.0, 18.0]]))
    kernel.run("%ranks scatter table")
    joined = kernel.run("%ranks gather table --as table_back\nprint(type(table_back).__name__, table_back.tolist())")
    assert joined.text.strip().endswith("ndarray [0, 1, 2, 3, 4, 5, 6]"), joined.text
    bad = kernel.run("scalar = 3\n%ranks scatter scalar")
    assert bad.status == "error" and "UsageError: %ranks scatter: cannot split a int" in bad.text, bad.text


def test_an_error_on_rank_1_ends_the_cell_with_its_traceback_and_the_pool_lives(kernel):
    pool = pool_of(kernel.home).id
    pids = rank_pids(kernel.home, pool)
    failed = kernel.run("%%ranks\nif rank == 1:\n    raise ValueError('rank one gave up')\nprint('rank', rank, 'fine')")
    assert failed.status == "error" and failed.text == "rank 0 fine\n"
    (error,) = failed.errors
    assert (error["ename"], error["evalue"]) == ("RankCellError", "rank 1: ValueError: rank one gave up")
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert "raise ValueError('rank one gave up')" in traceback
    assert "jiyu_magics" not in traceback and "(on rank 1)" in traceback
    assert "rebuilt" not in traceback, "no collective was left half done: nothing to rebuild"
    after = kernel.run("%%ranks\nprint('next', x.item())")
    assert (after.status, after.text) == ("ok", "next 3.0\n")
    assert pool_of(kernel.home).id == pool and rank_pids(kernel.home, pool) == pids, "the same ranks, state kept"


def test_the_same_error_on_every_rank_is_one_traceback_every_time(kernel):
    """An error on every rank at once, again and again (the kernel's interrupt must never land
    in a rank that just finished): one grouped traceback each time, no stray line, no restart."""
    pool = pool_of(kernel.home).id
    pids = rank_pids(kernel.home, pool)
    for _ in range(12):
        failed = kernel.run("%%ranks\nundefined_name")
        (error,) = failed.errors
        assert error["evalue"] == "ranks 0, 1: NameError: name 'undefined_name' is not defined", error
        assert failed.text == "" and "KeyboardInterrupt" not in "".join(error["traceback"])
    kernel.run("class Unloadable:\n    def __reduce__(self):\n        return (eval, ('1/0',))\nodd = Unloadable()")
    for _ in range(4):
        refused = kernel.run("%ranks push odd")
        assert refused.status == "error" and "odd cannot be unpickled here: ZeroDivisionError" in refused.text
    assert "ZMQError" not in refused.text and rank_pids(kernel.home, pool) == pids


def assert_an_interrupt_ends_a_busy_cell(kernel: Kernel) -> None:
    """A kernel interrupt 3 s into a cell every rank is busy in ends it with every rank's
    KeyboardInterrupt within 10 s."""
    msg = kernel.start("%%ranks\nimport time\nfor _ in range(600):\n    time.sleep(0.1)")
    time.sleep(3)
    interrupted = time.monotonic()
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=60)
    took = time.monotonic() - interrupted
    assert cell.errors and cell.errors[0]["evalue"].endswith(": KeyboardInterrupt"), cell.errors
    assert cell.errors[0]["evalue"].startswith(("ranks 0, 1", "ranks 0–1", "rank 0")), cell.errors
    assert took < 10, f"the interrupt took {took:.1f} s"


def test_an_interrupt_interrupts_every_rank_and_the_pool_lives(kernel):
    pool = pool_of(kernel.home).id
    assert_an_interrupt_ends_a_busy_cell(kernel)
    after = kernel.run("%%ranks --all-output\nprint('alive', rank)")
    assert sorted(after.text.splitlines()) == ["[rank0] alive 0", "[rank1] alive 1"]
    assert pool_of(kernel.home).id == pool


def test_an_interrupt_inside_a_collective_aborts_it_and_keeps_every_ranks_state(kernel):
    """Rank 0 waits in a barrier while rank 1 sleeps: the stop button ends the cell in seconds,
    the barrier aborted, the process group rebuilt in the same processes, and the next cell's
    collective is right."""
    pool = pool_of(kernel.home).id
    pids = rank_pids(kernel.home, pool)
    msg = kernel.start("%%ranks\nimport time\nif rank == 1:\n    time.sleep(120)\ndist.barrier()")
    time.sleep(2)
    interrupted = time.monotonic()
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=60)
    took = time.monotonic() - interrupted
    (error,) = cell.errors
    assert error["evalue"] == "rank 1: KeyboardInterrupt", error
    notes = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert "time.sleep(120)" in notes and "rank 0: the collective it waited in was aborted" in notes
    assert "the process group was rebuilt" in notes and "every rank kept its state" in notes
    assert took < 10, f"the interrupt took {took:.1f} s"
    assert_collectives_right(kernel, 2)
    assert rank_pids(kernel.home, pool) == pids


def assert_collectives_right(kernel: Kernel, nproc: int) -> None:
    """Every rank's state is there (``x``, made in the first cell) and a fresh all_reduce sums
    each rank's own value (a collective left over from before would sum something else)."""
    cell = kernel.run(
        "%%ranks --all-output\nz = torch.ones(2) * (rank + 1)\ndist.all_reduce(z)\nprint(z.tolist(), x.item())"
    )
    total = float(nproc * (nproc + 1) // 2)  # x was made the same way in the pool's first cell
    expected = f"{[total, total]} {total}"
    assert cell.status == "ok", cell.errors
    assert sorted(cell.text.splitlines()) == sorted(f"[rank{r}] {expected}" for r in range(nproc)), cell.text


def test_a_hang_names_the_missing_rank_and_the_stop_button_keeps_the_state(kernel):
    """Rank 1 waits in an all_reduce rank 0 never makes: the cell says it stalled, which rank is
    missing and which collective the other waits in (operation, sequence number, shape), with
    every rank's stack; the stop button then ends the cell in seconds with the state kept."""
    pool = pool_of(kernel.home)
    pids = rank_pids(kernel.home, pool.id)
    msg = kernel.start("%%ranks --stall-timeout 3\nif rank == 1:\n    dist.all_reduce(torch.ones(5, 2))")
    store = RunStore(store_path(kernel.home))
    wait_for(lambda: store.get(pool.id).stalled_since is not None, 60, what="the pool flagged stalled")
    interrupted = time.monotonic()
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=180)
    took = time.monotonic() - interrupted
    assert "stalled: rank 1 has not finished 3 s after another rank did" in cell.text, cell.text
    assert re.search(r"rank 1 waits in all_reduce #\d+ \(Float \[5, 2\]\)", cell.text), cell.text
    assert re.search(r"rank 0 left the cell after collective #\d+: it never entered #\d+", cell.text), cell.text
    assert re.search(r"rank 1 is in .*all_reduce", cell.text) and f"jiyu stacks {pool.id}" in cell.text
    (error,) = cell.errors
    assert error["evalue"] in ("rank 1: interrupted", "rank 1: KeyboardInterrupt"), error
    assert took < 10, f"the stop took {took:.1f} s"
    assert_collectives_right(kernel, 2)
    assert pool_of(kernel.home).id == pool.id and rank_pids(kernel.home, pool.id) == pids


def test_a_collective_one_rank_made_alone_never_pairs_with_a_later_one(kernel):
    """Rank 0 starts an all_reduce nobody joins and leaves it pending (async): the ranks' counts
    of collectives differ, so the process group is rebuilt before the next cell, whose
    all_reduce then sums what it should."""
    cell = kernel.run("%%ranks\nif rank == 0:\n    pending = dist.all_reduce(torch.full((2,), 100.0), async_op=True)")
    assert cell.status == "ok" and "the process group was rebuilt (the ranks made different numbers" in cell.text
    assert_collectives_right(kernel, 2)


def test_a_background_cell_streams_and_wait_collects_its_end(kernel):
    started = kernel.run(
        "%%ranks --bg\nimport time\nfor i in range(3):\n    print('step', i, flush=True)\n"
        "    time.sleep(0.3)\nraise KeyError('late')"
    )
    assert started.status == "ok" and started.displays, "the cell returns at once, with a display to stream into"
    refused = kernel.run("%%ranks\nprint('meanwhile')")
    assert refused.status == "error" and "a %%ranks --bg cell runs on the pool: %ranks wait" in refused.text
    waited = kernel.run("%ranks wait")
    (error,) = waited.errors
    assert error["evalue"] == "ranks 0, 1: KeyError: 'late'", error
    assert kernel.run("%%ranks\nprint('free again')").text == "free again\n"


def test_another_unix_user_cannot_reach_the_pools_sockets(kernel, other_user):
    """Another user of the machine could connect to a pool's loopback port before its ranks,
    claim an 8 GiB frame and flood it (the pool's start hung, the kernel grew 2 GB). Its sockets
    are Unix sockets in a folder only the pool's user enters: the other user cannot connect at all,
    nor read the pool's address file, and the pool does not notice the attempts."""
    import json
    import stat

    from jiyu_magics.ranks.pool import ADDRESS_FILE

    from .test_private_home import as_user

    pool = pool_of(kernel.home)
    address_file = RunFiles.of(pool.id, kernel.home).root / ADDRESS_FILE
    address = json.loads(address_file.read_text())
    sockets = [Path(address[name].removeprefix("ipc://")) for name in ("requests", "replies")]
    assert all(s.is_socket() for s in sockets) and stat.S_IMODE(sockets[0].parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(address["shared"]).stat().st_mode) == 0o700, "big buffers' shared memory: private too"
    assert stat.S_IMODE(address_file.stat().st_mode) == 0o600
    probe = (
        "import socket, sys\nfor path in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n        s.connect(path); s.sendall(b'\\xff' + b'\\x00' * 7 + b'\\x02' * 8); print('connected')\n"
        "    except OSError as e:\n        print(type(e).__name__)"
    )
    for _ in range(3):
        tried = as_user(other_user, "/usr/bin/python3", "-c", probe, *map(str, sockets))
        assert tried.stdout.split() == ["PermissionError", "PermissionError"], tried.stdout + tried.stderr
    refused = as_user(other_user, "/bin/cat", str(address_file))
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert kernel.run("%%ranks\nprint('unbothered', rank)").text == "unbothered 0\n"


def test_train_on_the_pool_uses_the_ranks_objects_without_export(kernel):
    kernel.run(
        "%%ranks\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\ntorch.manual_seed(0)\n"
        "X = torch.randn(256, 8); y = (X.sum(1) > 0).long()\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))"
    )
    trained = kernel.run(
        "%%train --nproc 2 --epochs 2 --name on-the-pool\noptimizer = torch.optim.SGD(model.parameters(), 0.1)\n"
        "loss_fn = torch.nn.CrossEntropyLoss()\ntrain_loader = DataLoader(TensorDataset(X, y), batch_size=32)\n"
        "print('the body ran')"
    )
    assert trained.status == "ok", trained.errors
    store = RunStore(store_path(kernel.home))
    (run,) = [r for r in store.list() if r.name == "on-the-pool"]
    assert (run.kind, run.status, run.params["pool"]) == ("ddp", "succeeded", pool_of(kernel.home).id)
    log = RunFiles.of(run.id, kernel.home).log.read_text().splitlines()
    assert sorted(line for line in log if "the body ran" in line) == ["[rank0]: the body ran", "[rank1]: the body ran"]
    from jiyu_magics.core.processes.info import process_start_time
    from jiyu_magics.jobs.process import rank_records

    os.environ["JIYU_HOME"] = str(kernel.home)
    records = rank_records.read_all(run.id)  # who each rank is: its pid and its process's start, so never "killed"
    assert [(r.rank, r.started) for r in records] == [(r.rank, process_start_time(r.pid)) for r in records]
    assert not RunFiles(RunFiles.of(run.id, kernel.home).root).script.exists(), "nothing was exported"
    result = kernel.run("print(train_result.status, train_result.step, train_result.run_id)")
    assert result.text.split() == ["succeeded", "8", run.id]  # 2 epochs of 256 / (32 x 2 ranks)
    assert "%ranks pull model --from 0" in kernel.run("print(train_result)").text
    kernel.run(
        "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))"
    )
    pulled = kernel.run("%ranks pull model")
    assert "loaded rank 0's model weights into the notebook's model" in pulled.text, pulled.text + str(pulled.errors)
    said = kernel.run("print(train_result)").text
    assert "%ranks pull" not in said and "rank 0's trained model was pulled into the notebook's model" in said, said
    moved = kernel.run("%%ranks --all-output\nprint(round(float(model[0].weight.detach().sum()), 5))")
    lines = sorted(moved.text.splitlines())
    assert len(lines) == 2 and lines[0].split()[1] == lines[1].split()[1], "DDP kept both ranks' weights equal"
    second = kernel.run("%train --nproc 2 --epochs 1 --name on-the-pool-2")
    assert second.status == "ok" and [r.status for r in store.list() if r.name == "on-the-pool-2"] == ["succeeded"]
    for call in (1, 2):  # FSDP shards the ranks' model once; the second call trains it on, sharded
        sharded = kernel.run(f"%train --nproc 2 --strategy fsdp --epochs 1 --name fsdp-on-pool-{call}")
        assert sharded.status == "ok", sharded.text + str(sharded.errors)
    for call in (1, 2):
        (run,) = [r for r in store.list() if r.name == f"fsdp-on-pool-{call}"]
        assert run.status == "succeeded"
        assert [p.suffix for p in RunFiles.of(run.id, kernel.home).ckpt.iterdir()] == [".dcp"], "one sharded checkpoint"
    wrong = kernel.run("%train --nproc 3 --epochs 1")
    assert wrong.status == "error" and "UsageError: --nproc 3: this kernel's ranks pool has 2 rank(s)" in wrong.text


def test_jiyu_stop_kernel_restart_and_kill_9_end_the_pool_and_leave_no_process(tmp_path):
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        assert kernel.run(START.format(name="stopped")).status == "ok"
        pool = pool_of(kernel.home)
        pids = rank_pids(kernel.home, pool.id)
        busy = kernel.start("%%ranks\nimport time\ntime.sleep(60)")
        time.sleep(1)
        stop = jiyu("stop", pool.id, env={**os.environ, "JIYU_HOME": str(kernel.home)})
        assert stop.returncode == 0 and f"Run {pool.id} (stopped): stopped." in stop.stdout, stop.stdout + stop.stderr
        assert alive(pids) == [] and kernel.manager.is_alive()
        interrupted = kernel.wait(busy, timeout=60)  # the cell it stopped says so: no death, no traceback
        assert f"ranks pool {pool.id} " in interrupted.text and "stop" in interrupted.text, (
            interrupted.text,
            interrupted.errors,
        )
        assert "died" not in interrupted.text and "Traceback" not in interrupted.text, interrupted.text
        said = kernel.run("%%ranks\nprint('back')")
        assert said.status == "error" and "back" not in said.text, "a stopped pool is never started again unasked"
        assert f"UsageError: ranks pool {pool.id} has ended (" in said.text and "%ranks start N" in said.text
        assert "Traceback" not in said.text and len(RunStore(store_path(kernel.home)).list()) == 1, said.text
        kernel.run("%ranks stop")
        assert kernel.run(START.format(name="restarted")).status == "ok"
        pool = pool_of(kernel.home)
        pids = rank_pids(kernel.home, pool.id)
        assert len(alive(pids)) == 2
        kernel.manager.restart_kernel(now=False)
        wait_for(lambda: alive(pids) == [], 60, what="the ranks to end with the kernel")
        ended = RunStore(store_path(kernel.home)).get(pool.id)
        assert not ended.active and ended.status in ("succeeded", "lost"), ended.status
        kernel.client.wait_for_ready(120)
        assert kernel.run(START.format(name="killed")).status == "ok"
        pool = pool_of(kernel.home)
        pids = rank_pids(kernel.home, pool.id) + [RunStore(store_path(kernel.home)).get(pool.id).pid]
        os.kill(kernel.pid, signal.SIGKILL)
        wait_for(lambda: alive(pids) == [], 90, what=f"no process left: {describe_processes(alive(pids))}")
        assert RunStore(store_path(kernel.home)).get(pool.id).status == "lost"
        assert RunStore(store_path(kernel.home)).leases.live() == []
    finally:
        kernel.close()


def test_a_pool_waits_in_the_gpu_queue_and_starts_when_its_gpu_frees(tmp_path, nvml_double, monkeypatch):
    from .gpu_box import configure

    configure(monkeypatch, tmp_path, 1)
    home = tmp_path / "home"
    monkeypatch.setenv("JIYU_HOME", str(home))
    store = RunStore()
    from jiyu_magics.core.processes.info import process_start_time
    from jiyu_magics.core.store.leases import GpuSlot

    holder = store.create(
        "job", "holds-the-gpu", gpus_requested=1, pid=os.getpid(), pid_started=process_start_time(os.getpid())
    )
    assert store.leases.acquire(holder.id, [GpuSlot("GPU-00000000-0000-0000-0000-000000000000", 0)])
    kernel = Kernel(tmp_path, home, env={"TMPDIR": str(tmp_path)})
    try:
        msg = kernel.start("%load_ext jiyu_magics\n%ranks start 1 --name queued-pool")
        # the GPU frees once the cell says the pool waits: the pool asked the queue and was refused
        said = kernel.read_until(msg, "queued at position 1, waiting for 1 GPU(s)")
        (queued,) = [r for r in store.list() if r.kind == "ranks"]
        assert queued.status == "queued" and queued.queue_position == 1 and queued.gpus_requested == 1
        store.mark_running(holder.id, pid=os.getpid())
        store.finish(holder.id, "succeeded", exit_code=0)
        cell = kernel.wait(msg, timeout=180)
        assert "ready in" in cell.text and "ready in" not in said, said + cell.text
        started = store.get(queued.id)
        assert started.status == "running" and [g["index"] for g in started.gpus] == [0]
        kernel.run("%ranks stop")
        assert store.get(queued.id).status == "succeeded" and store.leases.live() == []
    finally:
        kernel.close()


@pytest.mark.gpu
def test_an_nccl_pool_of_one_rank_leases_its_gpu_and_keeps_a_tensor_on_it(tmp_path):
    """On a GPU machine: the rank joins NCCL on its leased GPU and a tensor made in one cell is
    on that GPU, unchanged, in the next; the pool leases the GPU while it lives."""
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        started = kernel.run("%load_ext jiyu_magics\n%ranks start 1 --name nccl-pool")
        assert "1 rank(s), nccl; rank 0: pid" in started.text and "on cuda:0" in started.text, started.text
        pool = pool_of(kernel.home)
        assert [g["ended"] for g in pool.gpus] == [None], "the pool leases its GPU"
        kernel.run(
            "%%ranks\nimport torch, torch.distributed as dist\nt = torch.arange(4.0, device='cuda')\ndist.all_reduce(t)"
        )
        kept = kernel.run("%%ranks\nprint(t.device, t.tolist(), torch.cuda.memory_allocated() > 0)")
        assert kept.text.strip() == "cuda:0 [0.0, 1.0, 2.0, 3.0] True", kept.text
        kernel.run("%ranks stop")
        assert RunStore(store_path(kernel.home)).leases.live() == []
    finally:
        kernel.close()


@pytest.mark.gpu
def test_an_error_inside_an_nccl_collective_aborts_the_communicator_and_keeps_the_gpus_state(tmp_path):
    """On a machine with two GPUs: rank 1 raises while rank 0 waits in an NCCL all_reduce; the
    communicator is aborted (``ncclCommAbort``), the cell ends with rank 1's error, and in the
    same processes a new NCCL group sums right while each rank's tensor is still on its GPU."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs: one NCCL rank per GPU")
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    try:
        assert kernel.run("%load_ext jiyu_magics\n%ranks start 2 --name nccl-abort").status == "ok"
        kernel.run(
            "%%ranks\nimport torch, torch.distributed as dist\nrank = dist.get_rank()\n"
            "x = torch.full((4,), float(rank + 1), device='cuda')\ndist.all_reduce(x)"
        )
        failed = kernel.run(
            "%%ranks\nif rank == 1:\n    raise ValueError('bad batch')\ndist.all_reduce(torch.ones(8, device='cuda'))"
        )
        (error,) = failed.errors
        assert error["evalue"] == "rank 1: ValueError: bad batch", error
        assert "the process group was rebuilt" in re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
        after = kernel.run(
            "%%ranks --all-output\nz = torch.ones(1, device='cuda') * (rank + 1)\ndist.all_reduce(z)\n"
            "print(dist.get_backend(), dist.group.WORLD._get_backend_name(), z.item(), x.tolist(), x.device)"
        )
        assert sorted(after.text.splitlines()) == [
            "[rank0] jiyu nccl 3.0 [3.0, 3.0, 3.0, 3.0] cuda:0",
            "[rank1] jiyu nccl 3.0 [3.0, 3.0, 3.0, 3.0] cuda:1",
        ], after.text
        kernel.run("%ranks stop")
    finally:
        kernel.close()
