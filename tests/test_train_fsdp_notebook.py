"""``%%train --nproc 2 --strategy fsdp`` from a real kernel (nbclient), real torchrun with gloo:
sharded checkpoints through the magic. A save that fails inside DCP on one rank fails the cell
in one line and leaves nothing behind; ``--resume last`` then starts from the checkpoint before
it; the kernel gets the trained weights back; the kernel itself (one process, no torchrun)
resumes from the two ranks' sharded checkpoint; and ``jiyu submit --max-restarts 1`` of a
notebook whose rank 0 is killed in the middle of a save restarts from the checkpoint before."""

from __future__ import annotations

import re

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.train.checkpoint import load_checkpoint, load_state_file

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, finished
from .notebook_runner import execute, notebook, text_of

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

DATA = """%load_ext jiyu_magics
import os, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
X = torch.randn(512, 8); y = X @ torch.linspace(-1, 1, 8).unsqueeze(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))"""

# Rank 1's part of the save of step 8 fails inside torch.distributed.checkpoint (its writer), once:
# the kernel makes the marker file and the failing rank consumes it, so the ranks of the next launch
# (which replay this cell, but are no kernel) save normally.
FAIL_ONCE = """from torch.distributed.checkpoint import FileSystemWriter
_write_data = FileSystemWriter.write_data
def _failing_write(self, plan, planner):
    if os.environ.get("RANK") == "1" and "step-00000008" in str(self.path) and os.path.exists("fail-once"):
        os.remove("fail-once")
        raise OSError(28, "No space left on device")
    return _write_data(self, plan, planner)
FileSystemWriter.write_data = _failing_write
if "RANK" not in os.environ:
    open("fail-once", "w").close()"""

TRAIN = "%%train --nproc 2 --strategy fsdp --max-steps 12 --ckpt-every 4 --log-every 2 --seed 0 --name fsdp-nb"
BODY = """
optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
loss_fn = torch.nn.MSELoss()
"""


def starts(run_id: str) -> list[dict]:
    return [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "start"]


def test_a_failed_save_is_one_line_and_resume_last_goes_back_to_the_checkpoint_before(tmp_path):
    nb = execute(
        notebook(
            DATA,
            FAIL_ONCE,
            TRAIN + BODY,
            TRAIN + " --resume last" + BODY,
            "from jiyu_magics.train.checkpoint import load_checkpoint\n"
            "final = load_checkpoint(train_result.last_checkpoint)['model']\n"
            "print(train_result.status, train_result.step, train_result.run_id, train_result.last_checkpoint)\n"
            "print(all(torch.equal(final[k], v) for k, v in model.state_dict().items()))",
            "%%train --max-steps 14 --resume last --log-every 1 --name fsdp-nb" + BODY,
            "print(train_result.status, train_result.step, train_result.run_id)",
        ),
        tmp_path,
        timeout=400,
        allow_errors=True,
    )
    failure = text_of(nb.cells[2])
    assert "RankFailure: %%train --nproc 2 failed: rank " in failure, failure
    line = re.search(r"RankFailure: [^\n]*", failure).group(0)
    assert "cannot write checkpoint step-00000008.dcp: no space left on the disk" in line, line
    assert line.endswith("step-00000004.dcp, is kept"), line
    failed = next(r for r in RunStore().list() if r.name == "fsdp-nb" and r.status == "failed")
    ckpt = RunFiles.of(failed.id).ckpt
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000004.dcp"], "no half-written folder left"

    status, step, run_id, last = text_of(nb.cells[4]).splitlines()[0].split()
    assert (status, step) == ("succeeded", "12") and last.endswith("step-00000012.dcp")
    (start,) = starts(run_id)
    before = str(ckpt / "step-00000004.dcp")
    assert (start["resumed_from"], start["start_step"], start["strategy"]) == (before, 4, "fsdp")
    assert text_of(nb.cells[4]).splitlines()[1] == "True", "the kernel's model holds the ranks' final weights"

    kernel = text_of(nb.cells[6]).split()
    assert kernel[:2] == ["succeeded", "14"], text_of(nb.cells[5])
    (in_kernel,) = starts(kernel[2])
    assert (in_kernel["resumed_from"], in_kernel["nproc"], in_kernel["strategy"]) == (last, 1, "single")
    assert load_state_file(last)["world_size"] == 2, "two ranks wrote what one process resumed"

    exported = jiyu("export-weights", run_id, "--to", str(tmp_path / "model.pt"))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"Wrote {tmp_path / 'model.pt'}: the model's weights of step 12")
    weights = torch.load(tmp_path / "model.pt", weights_only=True)
    assert all(torch.equal(weights[k], v) for k, v in load_checkpoint(last)["model"].items())
    refused = jiyu("export-weights", run_id, "--to", "/dev/null")
    assert (refused.returncode, refused.stderr) == (
        2,
        "jiyu export-weights: error: --to /dev/null is a device, not a file: refusing to write over it\n",
    )


KILL_MID_SAVE = """from torch.distributed.checkpoint import FileSystemWriter
import signal
_write_data = FileSystemWriter.write_data
def _dying_write(self, plan, planner):  # the first attempt's rank 0 dies while the ranks write step 8
    first_attempt = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
    if os.environ["RANK"] == "0" and first_attempt and "step-00000008" in str(self.path):
        os.kill(os.getpid(), signal.SIGKILL)
    return _write_data(self, plan, planner)
FileSystemWriter.write_data = _dying_write"""


def test_a_rank_killed_mid_save_is_restarted_from_the_checkpoint_before(tmp_path):
    path = tmp_path / "killed.ipynb"
    cells = [DATA, KILL_MID_SAVE, TRAIN.replace("--nproc 2 ", "").replace("fsdp-nb", "fsdp-job") + BODY]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    submitted = jiyu("submit", str(path), "--nproc", "2", "--max-restarts", "1", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    run_id = re.search(r"\b([0-9a-f]{8})\b", submitted.stdout).group(1)
    done = finished(run_id, 300)
    assert done.status == "succeeded", done.error
    events = read_events(RunFiles.of(run_id).events)[0]
    first, again = starts(run_id)
    ckpt = RunFiles.of(run_id).ckpt
    assert first["start_step"] == 0 and again["resumed_from"] == str(ckpt / "step-00000004.dcp")
    assert again["start_step"] == 4, "resumed from the last complete checkpoint, not the one cut short"
    saved = [e["step"] for e in events if e["kind"] == "ckpt"]
    assert saved == [4, 8, 12], "the save cut short recorded no checkpoint; the restart saved 8 and 12"
    assert sorted(p.name for p in ckpt.iterdir()) == [f"step-{s:08d}.dcp" for s in (4, 8, 12)]
    assert load_state_file(ckpt / "step-00000008.dcp")["step"] == 8
    assert_no_processes(run_id)
