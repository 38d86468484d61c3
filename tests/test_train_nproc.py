"""``%%train --nproc 2`` from a real kernel (nbclient): real torchrun, gloo, two ranks on this
machine. The kernel's model starts the ranks and gets rank 0's final weights back; an interrupt
stops every rank with a checkpoint that a second launch resumes; a failing rank is one line."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import psutil
import pytest
from IPython.core.error import UsageError
from jupyter_client import KernelManager
from nbclient import NotebookClient

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import processes_of
from .notebook_runner import execute, first_logged_step, notebook, text_of, widget_html

DATA = """%load_ext jiyu_magics
import os, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
X = torch.randn(512, 8); y = X @ torch.linspace(-1, 1, 8).unsqueeze(1)
index = torch.arange(512)
model = torch.nn.Linear(8, 1)
before = {k: v.clone() for k, v in model.state_dict().items()}"""

RECORDING_BODY = """
optimizer = torch.optim.SGD(model.parameters(), 0.05)
train_loader = DataLoader(TensorDataset(X, y, index), batch_size=32, shuffle=True)

def train_step(model, batch):
    inputs, targets, seen = batch
    with open(f"seen_rank{os.environ.get('RANK', 'kernel')}{os.environ.get('JIYU_MARK', '')}.txt", "a") as f:
        f.write(" ".join(map(str, seen.tolist())) + "\\n")
    return torch.nn.functional.mse_loss(model(inputs), targets)
"""


pytestmark = pytest.mark.usefixtures("torchrun_tmp")


def test_two_ranks_train_disjoint_samples_and_the_kernel_gets_rank0_weights(tmp_path):
    nb = execute(
        notebook(
            DATA + "\n%env JIYU_MARK=-from-kernel",
            "%%train --nproc 2 --epochs 1 --seed 0 --name ddp-lin" + RECORDING_BODY,
            "import torch\nfinal = torch.load(train_result.last_checkpoint, weights_only=True)['model']\n"
            "print(train_result.status, train_result.step, train_result.run_id)\n"
            "print(all(torch.equal(final[k], v) for k, v in model.state_dict().items()),\n"
            "      any(not torch.equal(before[k], v) for k, v in model.state_dict().items()))\n"
            "print(train_result.history[0]['loss'] > train_result.history[-1]['loss'])",
        ),
        tmp_path,
        timeout=300,
    )
    status, step, run_id = text_of(nb.cells[2]).splitlines()[0].split()
    assert (status, step) == ("succeeded", "8")  # 512 samples / 2 ranks / batch 32
    outputs = nb.cells[1].outputs  # said at once, before the seconds of export and torchrun start
    dashboard = next(i for i, out in enumerate(outputs) if out.output_type == "display_data")
    said = "".join(out.text for out in outputs[:dashboard] if out.output_type == "stream")
    assert (
        said.startswith(f"jiyu: exporting the notebook for run {run_id}")
        and "jiyu: starting torchrun (2 processes)" in said
    ), said
    assert text_of(nb.cells[2]).splitlines()[1:] == ["True True", "True"], (
        "the kernel's model must hold rank 0's final weights (and differ from where it started)"
    )
    # the ranks inherit the kernel's environment (%env included): the file names carry its mark
    seen = {
        rank: [
            int(i)
            for line in (tmp_path / f"seen_rank{rank}-from-kernel.txt").read_text().split("\n")
            for i in line.split()
        ]
        for rank in (0, 1)
    }
    assert not (tmp_path / "seen_rankkernel.txt").exists(), "the kernel itself must not train"
    assert len(seen[0]) == len(seen[1]) == 256 and not set(seen[0]) & set(seen[1])
    assert set(seen[0]) | set(seen[1]) == set(range(512))
    run = RunStore().get(run_id)
    assert (run.kind, run.nproc, run.status, run.exit_code) == ("ddp", 2, "succeeded", 0)
    starts = [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "start"]
    assert [(e["nproc"], e["strategy"], e["backend"]) for e in starts] == [(2, "ddp", "gloo")]
    assert processes_of(run_id) == []


def test_interrupt_stops_every_rank_with_a_checkpoint_and_resume_continues(tmp_path, jiyu_home, monkeypatch):
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "ddp.ipynb"))  # as Jupyter names the kernel's notebook
    nb = notebook(
        DATA,
        "%%train --nproc 2 --epochs 100000 --log-every 5 --name ddp-stop" + RECORDING_BODY,
        "print(train_result.status, train_result.step, train_result.last_checkpoint is not None)",
        "%%train --nproc 2 --resume last --max-steps 4 --name ddp-stop" + RECORDING_BODY,
        "print(train_result.status, train_result.step)",
    )
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})

    async def run():
        async with client.async_setup_kernel():
            await client.async_execute_cell(nb.cells[0], 0)
            training = asyncio.ensure_future(client.async_execute_cell(nb.cells[1], 1))
            run_id = await asyncio.get_running_loop().run_in_executor(None, first_logged_step, jiyu_home)
            await asyncio.sleep(1.0)
            interrupted = time.monotonic()
            await client.km.interrupt_kernel()
            await training
            took = time.monotonic() - interrupted
            left = processes_of(run_id)
            for index in (2, 3, 4):
                await client.async_execute_cell(nb.cells[index], index)
            return run_id, took, left

    run_id, took, left = asyncio.run(run())
    # no time limit here (a loaded machine is slow): exit code 0 below says no rank needed the SIGKILL
    assert left == [], f"ranks still running {took:.1f} s after the interrupt: {left}"
    status, step, has_checkpoint = text_of(nb.cells[2]).split()
    assert status == "stopped" and has_checkpoint == "True" and int(step) > 0
    stopped = RunStore().get(run_id)
    # the one stop rule of the lifecycle: the ranks stopped, torchrun ended cleanly, one line says where
    assert (stopped.status, stopped.exit_code) == ("stopped", 0)
    assert stopped.error.startswith(f"stopped at step {step} by request; checkpoint ")
    assert "Traceback" not in RunFiles.of(run_id).log.read_text()
    stopped_at = int(step)
    resumed = [r for r in RunStore().list() if r.name == "ddp-stop" and r.id != run_id]
    assert len(resumed) == 1 and resumed[0].status == "succeeded"
    start = next(e for e in read_events(RunFiles.of(resumed[0].id).events)[0] if e["kind"] == "start")
    assert start["start_step"] == stopped_at and start["resumed_from"], "the second launch resumed the checkpoint"
    assert text_of(nb.cells[4]).split() == ["succeeded", str(max(stopped_at, 4))]


def run_in(client, code: str) -> str:
    """Runs ``code`` in the kernel (after whatever it is still running) and returns what it printed."""
    out = []
    reply = client.execute_interactive(
        code, timeout=180, output_hook=lambda m: out.append(m["content"].get("text", ""))
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def test_jiyu_stop_of_a_kernels_run_ends_its_ranks_and_the_kernel_lives_on(tmp_path, jiyu_home):
    """``jiyu stop ID`` from a shell, on a ``%%train --nproc`` run a live kernel owns: the row
    records torchrun as the run's process and the kernel as its owner; the stop ends every
    rank, the run is ``stopped``, and no signal reaches the kernel, which goes on working, nor
    another process the kernel started (were the kernel the recorded process, the stop would
    sweep its whole tree)."""
    kernel = KernelManager(kernel_name="python3")
    kernel.start_kernel(cwd=str(tmp_path))
    client = kernel.client()
    client.start_channels()
    helper = None
    try:
        client.wait_for_ready(60)
        kernel_pid = kernel.provisioner.process.pid
        helper = int(
            run_in(
                client,
                DATA + "\nimport subprocess, sys\n"
                "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                "print(helper.pid)",
            )
        )
        client.execute("%%train --nproc 2 --epochs 100000 --log-every 2 --name ddp-cli-stop" + RECORDING_BODY)
        run_id = first_logged_step(jiyu_home)
        run = RunStore().get(run_id)
        assert (run.status, run.owner_pid) == ("running", kernel_pid)
        assert run.pid not in (None, kernel_pid), "torchrun is the recorded process, not the kernel"
        assert "torch.distributed.run" in " ".join(psutil.Process(run.pid).cmdline())
        stop = jiyu("stop", run_id, "--grace", "10")
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.strip() == f"Run {run_id} (ddp-cli-stop): stopped.", stop.stdout
        assert processes_of(run_id) == [] and RunStore().get(run_id).status == "stopped"
        assert kernel.is_alive() and psutil.Process(kernel_pid).status() != psutil.STATUS_ZOMBIE
        assert psutil.Process(helper).status() != psutil.STATUS_ZOMBIE, "the kernel's other child was signalled"
        assert run_in(client, "print(train_result.status, train_result.run_id, 6 * 7)").split() == [
            "stopped",
            run_id,
            "42",
        ], "the kernel bound the result and runs the next cell"
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)
        if helper is not None:
            os.kill(helper, signal.SIGKILL)


def test_a_failing_rank_is_one_line_and_nothing_is_left(tmp_path):
    nb = execute(
        notebook(
            DATA,
            "%%train --nproc 2 --max-steps 50 --name ddp-fail"
            + RECORDING_BODY.replace(
                "    return torch",
                "    if os.environ['RANK'] == '1':\n        raise RuntimeError('rank one is out of coffee')\n"
                "    return torch",
            ),
        ),
        tmp_path,
        timeout=300,
        allow_errors=True,
    )
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "RankFailure"
    assert error.evalue == "%%train --nproc 2 failed: rank 1: RuntimeError: rank one is out of coffee"
    first, blank, *traceback = error.traceback
    assert first.startswith("RankFailure: %%train --nproc 2 failed: rank 1") and blank == ""
    assert (
        traceback[0] == "Traceback (most recent call last):"
        and traceback[-1] == "RuntimeError: rank one is out of coffee"
    ), "the first failing rank's traceback, in full"
    frames = [line for line in traceback if re.match(r'\s*(File "|(cell \d+|the current cell), line \d+)', line)]
    assert frames and all("jiyu_magics" not in f and "torch/distributed/elastic" not in f for f in frames), traceback
    assert "in train_step" in frames[-1] and "raise RuntimeError('rank one is out of coffee')" in "\n".join(traceback)
    (run,) = [r for r in RunStore().list() if r.name == "ddp-fail"]
    assert run.status == "failed" and "rank one is out of coffee" in run.error
    assert processes_of(run.id) == []


def test_a_rank_failing_before_training_does_not_leave_the_cell_waiting_on_rank_0(tmp_path):
    """Rank 1 fails in the cell's set-up, before it joins the process group; rank 0 waits for it
    inside ``init_process_group``, where its SIGTERM handler cannot run. It ends itself (its
    record says so) instead of waiting for torchrun's SIGKILL, and rank 1 is the failure shown."""
    from jiyu_magics.jobs.process import rank_records

    nb = execute(
        notebook(
            DATA,
            "%%train --nproc 2 --max-steps 50 --name ddp-early\n"
            "if os.environ.get('RANK') == '1':\n    time.sleep(5)  # rank 0 is in init_process_group by then\n"
            "    raise RuntimeError('no shard for rank 1')" + RECORDING_BODY,
        ),
        tmp_path,
        timeout=300,
        allow_errors=True,
    )
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.evalue == "%%train --nproc 2 failed: rank 1: RuntimeError: no shard for rank 1", (
        "the body's own error, not a generic 'the cell body failed'"
    )
    assert error.traceback[-2:] == [
        "    raise RuntimeError('no shard for rank 1')",
        "RuntimeError: no shard for rank 1",
    ]
    (run,) = [r for r in RunStore().list() if r.name == "ddp-early"]
    rank0, rank1 = rank_records.read_all(run.id)
    assert (rank0.state, rank0.exit_code) == ("exited", 1) and "after rank 1 failed: it was stuck" in rank0.error
    assert rank1.error == "RuntimeError: no shard for rank 1" and rank1.ended < rank0.ended
    assert run.status == "failed" and processes_of(run.id) == []


def test_rank_output_and_a_print_in_the_cell_body_reach_the_cell(tmp_path):
    nb = execute(
        notebook(
            DATA,
            "%%train --nproc 2 --max-steps 4 --name ddp-prints\n"
            "print(f\"hello from the cell body, rank {os.environ.get('RANK', 'kernel')}\")" + RECORDING_BODY,
        ),
        tmp_path,
        timeout=300,
        store_widget_state=True,
    )
    (pane,) = widget_html(nb, "jiyu-rank-output")
    assert "[rank0] hello from the cell body, rank 0" in pane, pane
    assert "[rank1]" not in pane, "rank 0's lines by default; the toggle shows all"
    shown = [o for o in nb.cells[1].outputs if "data" in o]
    kinds = [
        "widget" if "application/vnd.jupyter.widget-view+json" in o.data else "summary"
        for o in shown
        if "application/vnd.jupyter.widget-view+json" in o.data or "image/png" in o.data
    ]
    assert kinds == ["summary", "widget"], "the dashboard (its summary once done), then the rank output under it"
    assert "hello from the cell body, rank kernel" in text_of(nb.cells[1]), "the body ran in the kernel too"


def test_in_a_terminal_rank_zeros_lines_are_printed(ip, tmp_path, monkeypatch, capsys):
    """Terminal IPython (no widgets): rank 0's lines are printed as they come, ``[rank0]``-prefixed.
    The run's parameters are the notebook's values its line names, never the line itself
    (``train = "--nproc 2 ..."`` was one, and Compare called it a differing parameter)."""
    from jiyu_magics.core.run_comparison import compare

    monkeypatch.chdir(tmp_path)
    ip.run_cell(DATA.split("\n", 1)[1] + "\nsteps = 2", store_history=True)  # what the ranks replay
    ip.run_cell(
        "%%train --nproc 2 --max-steps {steps} --name ddp-terminal\n"
        "print(f\"hello from rank {os.environ.get('RANK', 'kernel')}\")" + RECORDING_BODY,
        store_history=True,
    )
    out = capsys.readouterr().out
    assert "[rank0] hello from rank 0" in out and "[rank1]" not in out, out
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded"
    assert RunStore().get(result.run_id).params == {"steps": 2}
    (record,), _ = compare([result.run_id])
    assert [c for c in record if c.startswith("param.")] == ["param.steps"], record


def test_after_reset_the_ranks_replay_only_what_came_after_it(ip, tmp_path, monkeypatch, capsys):
    """``%reset -f`` clears the kernel's namespace, so the cells before it are not replayed."""
    monkeypatch.chdir(tmp_path)
    ip.run_cell("print('before-the-reset'); stale = 1", store_history=True)
    ip.run_cell("%reset -f", store_history=True)
    ip.run_cell(DATA.split("\n", 1)[1], store_history=True)
    ip.run_cell_magic(
        "train",
        "--nproc 1 --max-steps 2 --name ddp-after-reset",
        "print(f\"stale on rank {os.environ.get('RANK', 'kernel')}: {'stale' in globals()}\")" + RECORDING_BODY,
    )
    out = capsys.readouterr().out
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded", out
    script = RunFiles.of(result.run_id).script.read_text()
    assert "before-the-reset" not in script and "'reset'" not in script, script
    assert "[rank0] stale on rank 0: False" in out and "[rank0] before-the-reset" not in out, out


def test_bad_nproc_values(ip, nvml_double):
    """NVML test double: two GPUs visible (no driver on this machine)."""
    ip.run_cell(DATA.split("\n", 1)[1])
    with pytest.raises(UsageError, match="--nproc 0: expected a whole number from 1 to 1024"):
        ip.run_cell_magic("train", "--nproc 0", "pass")
    with pytest.raises(UsageError, match=r"--nproc 3 is more than the 2 GPU\(s\) visible here"):
        ip.run_cell_magic("train", "--nproc 3", RECORDING_BODY)
    assert RunStore().list() == [], "a rejected launch registers no run"


@pytest.mark.gpu
def test_nccl_launch_after_the_kernel_touched_cuda(ip, tmp_path, monkeypatch):
    """The failure mode of fork-based launchers: CUDA is initialised in the kernel first. Ours
    exports and runs real torchrun, so one NCCL rank trains and its weights come back."""
    import torch

    monkeypatch.chdir(tmp_path)
    held = torch.ones(1024, device="cuda")  # the kernel now has a CUDA context
    assert torch.cuda.is_initialized()
    ip.run_cell(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "X = torch.randn(512, 8); y = X.sum(1, keepdim=True)\nmodel = torch.nn.Linear(8, 1).cuda()"
    )
    ip.run_cell_magic(
        "train",
        "--nproc 1 --max-steps 20 --name nccl-one",
        """
optimizer = torch.optim.SGD(model.parameters(), 0.05)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
loss_fn = torch.nn.MSELoss()
""",
    )
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 20
    start = next(e for e in read_events(RunFiles.of(result.run_id).events)[0] if e["kind"] == "start")
    assert start["backend"] == "nccl" and start["device"].startswith("cuda")
    final = torch.load(result.last_checkpoint, weights_only=True)["model"]
    assert all(torch.equal(final[k].cuda(), v) for k, v in ip.user_ns["model"].state_dict().items())
    assert processes_of(result.run_id) == [] and held.sum().item() == 1024


def test_a_train_cell_refused_after_its_body_ran_still_sets_up_the_ranks(ip, tmp_path, monkeypatch, capsys):
    """A first try refused for want of a train_loader: its body bound the optimizer in the kernel,
    so the next launch replays that body in the ranks too (they used to say "no optimizer")."""
    monkeypatch.chdir(tmp_path)
    ip.run_cell(DATA.split("\n", 1)[1], store_history=True)
    first = ip.run_cell(
        "%%train --nproc 2 --max-steps 2\noptimizer = torch.optim.SGD(model.parameters(), 0.05)", store_history=True
    )
    assert "no train_loader named 'train_loader'" in str(first.error_in_exec)
    ip.run_cell(RECORDING_BODY.replace("optimizer =", "_unused ="), store_history=True)  # train_loader, train_step
    ip.run_cell("%%train --nproc 2 --max-steps 2 --name after-refusal\nprint('second try')", store_history=True)
    out = capsys.readouterr().out
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 2, out[-3000:]
    assert processes_of(result.run_id) == []


def test_the_line_form_launches_too(ip, tmp_path, monkeypatch, capsys):
    """``%train --nproc 2`` (no set-up body): the ranks replay it as the line magic it is (as
    ``%%train`` with an empty body IPython refused it in every rank)."""
    monkeypatch.chdir(tmp_path)
    ip.run_cell(DATA.split("\n", 1)[1] + "\n" + RECORDING_BODY, store_history=True)
    ip.run_cell("%train --nproc 2 --max-steps 2 --name line-form", store_history=True)
    out = capsys.readouterr().out
    result = ip.user_ns.get("train_result")
    assert result is not None and (result.status, result.step) == ("succeeded", 2), out[-3000:]
    assert processes_of(result.run_id) == []
