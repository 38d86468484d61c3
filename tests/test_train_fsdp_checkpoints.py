"""Sharded (DCP) checkpoints of ``strategy="fsdp"`` under real ``torchrun`` with gloo on this
CPU machine (tests/fsdp_ckpt_script.py): a shard per rank in one folder, rotated; bit-exact
round trips of model and optimizer (its ``step`` included) on 2, 1 and 3 ranks; resumes on
another number of ranks continue the loss curve exactly as a resume from the same state as a
full (unsharded) checkpoint does.

The ranks run one after another in four torchrun launches (2, 1, 2 and 3 ranks), each building
on the checkpoints of the one before: module-scoped fixtures, ~10 s of start-up each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from torch import nn

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.train import TrainConfigError, fit
from jiyu_magics.train.checkpoint import FORMAT, load_checkpoint, load_state_file, save_atomic
from jiyu_magics.train.checkpoint_files import is_checkpoint, newest_checkpoint
from jiyu_magics.train.weights_export import export_weights

from .cli_runner import jiyu
from .conftest import ROOT

SCRIPT = Path(__file__).with_name("fsdp_ckpt_script.py")
EVERY_4 = {"ckpt_every": 4}


class Ranks:
    """Launches of the script that share one folder and one JIYU_HOME."""

    def __init__(self, folder: Path):
        self.folder, self.home = folder, folder / "home"

    def run(self, nproc: int, *calls: dict, timeout: float = 240) -> str:
        plan = self.folder / f"plan-{calls[0]['name']}.json"
        plan.write_text(json.dumps({"out": str(self.folder), "calls": list(calls)}))
        env = dict(
            os.environ, TMPDIR=str(self.folder), JIYU_HOME=str(self.home), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"
        )
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        launcher = subprocess.Popen(
            [*command, str(SCRIPT), str(plan)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = launcher.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(launcher.pid)
            raise AssertionError(f"torchrun of {plan.name} did not finish in {timeout} s") from None
        assert launcher.returncode == 0, output[-4000:]
        return output

    def result(self, name: str) -> dict:
        return json.loads((self.folder / f"{name}.json").read_text())

    def state(self, name: str) -> dict:
        return torch.load(self.folder / f"{name}-state.pt", weights_only=True)

    def losses(self, name: str) -> dict[int, float]:
        return {int(step): loss for step, loss in self.result(name)["losses"].items()}

    def full_copy(self, checkpoint: Path, name: str) -> str:
        """The same checkpoint as one full (unsharded) file: the reference resume."""
        return str(export_weights(checkpoint, self.folder / name, whole=True).to)


def _kill_tree(pid: int) -> None:
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)


def flat(value, prefix: str = "") -> dict:
    items = value.items() if isinstance(value, dict) else enumerate(value)
    out = {}
    for key, item in items:
        if isinstance(item, (dict, list, tuple)):
            out.update(flat(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out


def differences(a: dict, b: dict) -> list[str]:
    """Keys whose values are not bit-for-bit equal (tensors: ``torch.equal``), or are missing."""
    left, right = flat(a), flat(b)
    missing = sorted(set(left) ^ set(right))
    unequal = [
        key
        for key in set(left) & set(right)
        if not (torch.equal(left[key], right[key]) if isinstance(left[key], torch.Tensor) else left[key] == right[key])
    ]
    return missing + sorted(unequal)


def model_and_optimizer(state: dict) -> dict:
    return {"model": state["model"], "optimizer": state["optimizer"]}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Ranks:
    """Two ranks: 12 steps with a checkpoint every 4 (two kept); a second call resumes the
    middle one and trains the same last 4 steps; a third loads the last one and trains none.
    A fourth (``z``) leaves two checkpoints for the damage tests."""
    ranks = Ranks(tmp_path_factory.mktemp("fsdp"))
    a, f = ranks.folder / "A", ranks.folder
    ranks.run(
        2,
        {"name": "a", "max_steps": 12, "ckpt_dir": str(a), "ckpt_every": 4, "keep_ckpts": 2},
        {"name": "a-again", "resume": str(a / "step-00000008.dcp"), "max_steps": 12, "ckpt_dir": str(f / "A2")},
        {"name": "a-load", "resume": str(a / "step-00000012.dcp"), "max_steps": 12, "ckpt_dir": str(f / "A3")},
        {"name": "z", "max_steps": 8, "ckpt_dir": str(f / "Z"), "ckpt_every": 4, "keep_ckpts": 2},
    )
    return ranks


def test_every_rank_writes_its_shard_into_one_folder_and_old_ones_rotate_out(ranks):
    a = ranks.folder / "A"
    assert sorted(p.name for p in a.iterdir()) == ["step-00000008.dcp", "step-00000012.dcp"], "--keep-ckpts 2"
    last = a / "step-00000012.dcp"
    assert sorted(p.name for p in last.iterdir()) == [
        ".metadata",
        ".metadata.sha256",
        "__0_0.distcp",
        "__0_0.distcp.sha256",
        "__1_0.distcp",
        "__1_0.distcp.sha256",
        "jiyu-state.pt",
        "jiyu-state.pt.sha256",
    ]
    checked = subprocess.run(
        ["sha256sum", "-c", *sorted(p.name for p in last.iterdir() if p.suffix == ".sha256")],
        cwd=last,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0 and checked.stdout.count(": OK") == 4, checked.stdout + checked.stderr
    state = load_state_file(last)
    assert (state["step"], state["world_size"], len(state["rng"]), len(state["epoch_rng"])) == (12, 2, 2, 2)
    run = ranks.result("a")["run_id"]
    events = read_events(RunFiles.of(run, home=ranks.home).events)[0]
    saved = [(e["step"], Path(e["path"]).name) for e in events if e["kind"] == "ckpt"]
    assert saved == [(4, "step-00000004.dcp"), (8, "step-00000008.dcp"), (12, "step-00000012.dcp")]
    assert ranks.result("a")["checkpoints"] == [str(a / "step-00000008.dcp"), str(last)]


def test_the_checkpoint_holds_the_exact_state_and_loads_into_one_process(ranks):
    """``load_checkpoint`` in this process (no process group): the shards put together are the
    ranks' model and optimizer bit for bit, the optimizer's per-parameter ``step`` included."""
    trained = ranks.state("a")
    loaded = load_checkpoint(ranks.folder / "A" / "step-00000012.dcp")
    assert differences(model_and_optimizer(loaded), model_and_optimizer(trained)) == []
    steps = {name: s["step"] for name, s in loaded["optimizer"]["state"].items()}
    assert len(steps) == 6 and all(torch.equal(s, torch.tensor(12.0)) for s in steps.values()), steps


def test_a_round_trip_on_two_ranks_is_bit_exact_and_training_goes_on_identically(ranks):
    trained = ranks.state("a")
    assert differences(ranks.state("a-load"), trained) == [], "loaded into fresh objects: the same state"
    assert differences(ranks.state("a-again"), trained) == [], "resumed at step 8 and trained to 12: the same"
    assert ranks.losses("a-again") == {s: v for s, v in ranks.losses("a").items() if s > 8}


@pytest.fixture(scope="module")
def one_rank(ranks) -> Ranks:
    """One rank resumes what two saved: from the sharded checkpoint, and from the same state
    as one full file (the unsharded resume it must match); and loads the last one."""
    a, f = ranks.folder / "A", ranks.folder
    full = ranks.full_copy(a / "step-00000008.dcp", "a8-full.pt")
    ranks.run(
        1,
        {"name": "b", "resume": str(a / "step-00000008.dcp"), "max_steps": 16, "ckpt_dir": str(f / "B"), **EVERY_4},
        {"name": "b-full", "resume": full, "max_steps": 16, "ckpt_dir": str(f / "Bf"), **EVERY_4},
        {"name": "b-load", "resume": str(a / "step-00000012.dcp"), "max_steps": 12, "ckpt_dir": str(f / "B3")},
    )
    return ranks


def test_two_to_one_rank_loads_exactly_and_continues_as_an_unsharded_resume(one_rank):
    assert differences(one_rank.state("b-load"), one_rank.state("a")) == []
    sharded, unsharded = one_rank.losses("b"), one_rank.losses("b-full")
    assert sorted(sharded) == list(range(9, 17)) and sharded == unsharded
    assert sorted(p.name for p in (one_rank.folder / "B" / "step-00000012.dcp").iterdir()) == [
        ".metadata",
        ".metadata.sha256",
        "__0_0.distcp",
        "__0_0.distcp.sha256",
        "jiyu-state.pt",
        "jiyu-state.pt.sha256",
    ]


@pytest.fixture(scope="module")
def two_from_one(one_rank) -> Ranks:
    b, f = one_rank.folder / "B", one_rank.folder
    full = one_rank.full_copy(b / "step-00000012.dcp", "b12-full.pt")
    one_rank.run(
        2,
        {"name": "c", "resume": str(b / "step-00000012.dcp"), "max_steps": 16, "ckpt_dir": str(f / "C")},
        {"name": "c-full", "resume": full, "max_steps": 16, "ckpt_dir": str(f / "Cf")},
    )
    return one_rank


def test_one_to_two_ranks_continues_as_an_unsharded_resume(two_from_one):
    sharded, unsharded = two_from_one.losses("c"), two_from_one.losses("c-full")
    assert sorted(sharded) == [13, 14, 15, 16] and sharded == unsharded
    assert differences(two_from_one.state("c"), two_from_one.state("c-full")) == []


def test_two_to_three_ranks_loads_exactly_and_trains_on(ranks):
    a, f = ranks.folder / "A", ranks.folder
    ranks.run(
        3,
        {"name": "d-load", "resume": str(a / "step-00000012.dcp"), "max_steps": 12, "ckpt_dir": str(f / "D3")},
        {"name": "d", "resume": str(a / "step-00000008.dcp"), "max_steps": 10, "ckpt_dir": str(f / "D")},
    )
    assert differences(ranks.state("d-load"), ranks.state("a")) == []
    resumed = ranks.result("d")
    assert (resumed["status"], sorted(ranks.losses("d"))) == ("succeeded", [9, 10])
    shards = sorted(p.name for p in (f / "D" / "step-00000010.dcp").iterdir() if p.suffix == ".distcp")
    assert shards == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp"]
    rng = [state["torch"] for state in load_state_file(f / "D" / "step-00000010.dcp")["rng"]]
    assert len(rng) == 3 and not torch.equal(rng[2], rng[0]) and not torch.equal(rng[2], rng[1]), (
        "the new rank 2 drew from streams of its own, not a copy of rank 0's (dropout masks)"
    )


def test_a_model_that_does_not_fit_the_sharded_checkpoint_is_one_line(ranks):
    """In this process (one process, no torchrun): what DCP collects as a CheckpointException
    of the ranks' errors is one line naming the first."""
    wider = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Dropout(0.1), nn.Linear(48, 41), nn.ReLU(), nn.Linear(41, 3))
    x = torch.randn(32, 24)
    with pytest.raises(TrainConfigError) as refused:
        fit(
            wider,
            torch.optim.AdamW(wider.parameters()),
            (x, x[:, 0].gt(0).long()),
            batch_size=16,
            loss_fn=nn.CrossEntropyLoss(),
            resume=str(ranks.folder / "A" / "step-00000012.dcp"),
        )
    assert str(refused.value) == (
        f"checkpoint {ranks.folder / 'A' / 'step-00000012.dcp'} does not fit this model: Size mismatch between "
        "saved torch.Size([40, 48]) and current: torch.Size([41, 48]) for model.3.weight"
    )


def test_export_weights_of_a_run_and_its_one_line_refusals(ranks, tmp_path, monkeypatch):
    monkeypatch.setenv("JIYU_HOME", str(ranks.home))
    run, last = ranks.result("a")["run_id"], ranks.folder / "A" / "step-00000012.dcp"
    done = jiyu("export-weights", run, "--step", "8", "--to", str(tmp_path / "w8.pt"))
    assert done.returncode == 0 and "the model's weights of step 8" in done.stdout, done.stderr
    weights = torch.load(tmp_path / "w8.pt", weights_only=True)
    assert differences(weights, load_checkpoint(ranks.folder / "A" / "step-00000008.dcp")["model"]) == []
    whole = jiyu("export-weights", str(last), "--whole", "--to", str(tmp_path / "whole.pt"))
    assert whole.returncode == 0, whole.stderr
    one_file = model_and_optimizer(load_checkpoint(tmp_path / "whole.pt"))
    assert differences(one_file, model_and_optimizer(ranks.state("a"))) == [], "what --resume whole.pt would load"
    folder, inside, kept, link = tmp_path / "folder", last / "x.pt", tmp_path / "kept.txt", tmp_path / "link.pt"
    folder.mkdir()
    kept.write_text("mine")
    link.symlink_to(kept)
    refusals = {
        ("nope", "--to", "x.pt"): "no run with id 'nope'",
        (run, "--step", "4", "--to", "x.pt"): f"run {run} has no checkpoint of step 4; its checkpoints: steps 8, 12",
        (str(tmp_path), "--to", "x.pt"): f"{tmp_path} is not a checkpoint (a .pt file or a complete .dcp folder)",
        (run, "--to", "/dev/null"): "--to /dev/null is a device, not a file: refusing to write over it",
        (run, "--to", str(folder)): f"--to {folder} is a folder, not a file: refusing to write over it",
        (str(last), "--to", str(inside)): f"--to {inside} is the checkpoint being exported (or inside it)",
        (run, "--to", str(link)): f"--to {link} is a symbolic link; pass --force to write to its target",
    }
    for args, line in refusals.items():
        refused = jiyu("export-weights", *args, cwd=tmp_path)
        assert (refused.returncode, refused.stderr) == (2, f"jiyu export-weights: error: {line}\n"), args
    assert kept.read_text() == "mine" and link.is_symlink(), "nothing written through the link"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "folder",
        "kept.txt",
        "link.pt",
        "w8.pt",
        "w8.pt.sha256",
        "whole.pt",
        "whole.pt.sha256",
    ]
    forced = jiyu("export-weights", run, "--to", str(link), "--force")
    assert forced.returncode == 0 and link.is_symlink(), forced.stderr
    assert differences(torch.load(kept, weights_only=True), load_checkpoint(last)["model"]) == [], "--force: its target"


def flip_16_bytes(path: Path) -> None:
    """16 bytes in the middle of the file inverted: what torch.load and DCP would not notice."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def damaged(ranks) -> tuple[Ranks, str, str]:
    """16 bytes flipped inside rank 1's shard of run ``z``'s newest checkpoint (step 8); then,
    on two ranks, ``--resume last`` of ``z`` and a resume naming that checkpoint. Returns the
    ranks, ``z``'s run id and what the launch said."""
    z_run = ranks.result("z")["run_id"]
    z, f = ranks.folder / "Z", ranks.folder
    flip_16_bytes(z / "step-00000008.dcp" / "__1_0.distcp")
    said = ranks.run(
        2,
        {"name": "z", "resume": "last", "max_steps": 12, "ckpt_dir": str(f / "Z2")},
        {"name": "z-path", "resume": str(z / "step-00000008.dcp"), "max_steps": 12, "ckpt_dir": str(f / "Z3")},
    )
    return ranks, z_run, said


def test_a_damaged_shard_is_refused_and_resume_last_takes_the_intact_one_before_it(damaged):
    ranks, _, said = damaged
    z = ranks.folder / "Z"
    newest, before = z / "step-00000008.dcp", z / "step-00000004.dcp"
    line = (
        f"checkpoint {newest} is damaged: the SHA-256 of its __1_0.distcp differs from the one saved with it "
        "(__1_0.distcp.sha256)"
    )
    assert f"jiyu: {line}; resuming from the one before it, {before}\n" in said, said[-3000:]
    resumed = ranks.result("z")
    assert resumed["status"] == "succeeded" and sorted(ranks.losses("z")) == list(range(5, 13))
    assert ranks.losses("z") == {s: v for s, v in ranks.losses("a").items() if s > 4}, "step 4's exact state"
    assert ranks.result("z-path") == {"refused": f"{line}; resume from an earlier checkpoint"}
    assert list((ranks.folder / "Z3").iterdir()) == [], "the refused resume saved nothing"


def test_export_weights_refuses_a_damaged_checkpoint_in_one_line(damaged, tmp_path, monkeypatch):
    ranks, z_run, _ = damaged
    monkeypatch.setenv("JIYU_HOME", str(ranks.home))
    z = ranks.folder / "Z"
    line = "is damaged: the SHA-256 of its __1_0.distcp differs from the one saved with it (__1_0.distcp.sha256)"
    for args in ((z_run,), (str(z / "step-00000008.dcp"),)):
        refused = jiyu("export-weights", *args, "--to", str(tmp_path / "w.pt"))
        assert (refused.returncode, refused.stderr) == (
            2,
            f"jiyu export-weights: error: checkpoint {z / 'step-00000008.dcp'} {line}; "
            "export an earlier checkpoint (a run's --step N)\n",
        ), args
    assert not (tmp_path / "w.pt").exists()
    done = jiyu("export-weights", z_run, "--step", "4", "--to", str(tmp_path / "w4.pt"))
    assert done.returncode == 0, done.stderr
    flip_16_bytes(z / "step-00000004.dcp" / ".metadata")
    refused = jiyu("export-weights", z_run, "--step", "4", "--to", str(tmp_path / "w4.pt"))
    assert refused.returncode == 2 and "its .metadata differs" in refused.stderr, refused.stderr


def test_a_save_cut_short_is_never_picked_and_goes_once_its_writer_is_gone(tmp_path):
    """A complete sharded checkpoint, the temporary folder of a save whose rank 0 died (its
    pid is no longer running) and a folder missing its state file: only the first counts."""
    complete, partial = tmp_path / "step-00000004.dcp", tmp_path / "step-00000012.dcp"
    for folder in (complete, partial):
        folder.mkdir()
        (folder / ".metadata").write_bytes(b"")
    save_atomic({"format": FORMAT, "step": 4}, complete / "jiyu-state.pt")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    temp = tmp_path / f".step-00000008.dcp.tmp-{dead.stdout.strip()}"
    temp.mkdir()
    (temp / "__1_0.distcp").write_bytes(b"half")
    assert newest_checkpoint(tmp_path) == complete
    assert not temp.exists(), "the dead writer's temporary folder is removed"
    assert not is_checkpoint(partial) and is_checkpoint(complete)
