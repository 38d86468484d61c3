"""``--track``: runs in TensorBoard and MLflow, written by a follower outside the training loop,
read back with each tracker's own reader (``EventAccumulator``, ``MlflowClient`` on the SQLite
store). ``%%train`` through a real InteractiveShell; ``jiyu track`` as the installed console
script. The servers and their pages are in test_trackers_servers.py."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest
from IPython.core.error import UsageError

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.trackers.destinations import Destination, TrackSpecError, default_track, parse_track
from jiyu_magics.trackers.translate import Resume, Translator

from .cli_runner import jiyu
from .conftest import ROOT
from .trackers_tools import mlflow_finished, mlflow_run, tb_folder, tb_scalars, wait_for
from .train_models import shell_setup

SETUP = shell_setup(512)
BODY = """
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(X[:128], y[:128]), batch_size=64)
loss_fn = nn.CrossEntropyLoss()
"""


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP)
    return ip


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory):
    """One MLflow SQLite store for the module, created once (its migrations take seconds):
    each test finds its runs by their jiyu run ids."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def where(tmp_path, monkeypatch, mlflow_db):
    """A TensorBoard folder of the test's own and the module's MLflow store; no default tracking."""
    monkeypatch.delenv("JIYU_TRACK", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tb = tmp_path / "tb"
    return tb, f"sqlite:///{mlflow_db}", f"tensorboard:{tb},mlflow:{mlflow_db}"


def logged(run_id: str, kind: str) -> list[dict]:
    return [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == kind]


def followers_of(run_id: str) -> list[psutil.Process]:
    """The follower processes of ``run_id`` this test started (its kernel's, here) still running."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if (
                process.status() != psutil.STATUS_ZOMBIE
                and ["jiyu_magics.trackers", "follow", run_id] == process.cmdline()[2:5]
            ):
                found.append(process)
        except psutil.Error:
            continue
    return found


# -- destinations --------------------------------------------------------------------------------
def test_track_values_are_destinations_with_absolute_places(tmp_path, jiyu_home, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    found = parse_track(["tensorboard", "mlflow:runs.db,tensorboard:tb"], cwd=tmp_path)
    assert found == [
        Destination("tensorboard", str(jiyu_home / "tensorboard")),
        Destination("mlflow", f"sqlite:///{tmp_path / 'runs.db'}"),
        Destination("tensorboard", str(tmp_path / "tb")),
    ]
    assert parse_track("mlflow") == [Destination("mlflow", f"sqlite:///{jiyu_home / 'mlflow.db'}")]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert parse_track("mlflow,mlflow") == [Destination("mlflow", "http://127.0.0.1:5999")]
    assert parse_track([str(d) for d in found]) == found, "the canonical form reads back as itself"
    assert parse_track("none") == [] and parse_track(" NONE ") == []
    for bad, said in (
        ("wandb", "tracker 'wandb': expected tensorboard[:DIR] or mlflow[:URI]"),
        ("none,mlflow", "'none' cannot go with a tracker"),
        ("mlflow:some/dir", "expected a tracking URI (sqlite:///PATH.db, http://HOST:PORT) or a .db file"),
    ):
        with pytest.raises(TrackSpecError, match=None) as error:
            parse_track(bad)
        assert said in str(error.value) and "\n" not in str(error.value)


def test_the_default_is_JIYU_TRACK_else_the_config_file(jiyu_home, tmp_path):
    """``default_track(variable)``: JIYU_TRACK as the process's entry point read it (LaunchContext)."""
    assert default_track(None) == []
    (jiyu_home / "config.yaml").write_text(f"track: [tensorboard:{tmp_path / 'tb'}]\n")
    assert default_track(None) == [Destination("tensorboard", str(tmp_path / "tb"))]
    assert default_track("none") == [], "the variable wins over the file, and none turns it off"
    (jiyu_home / "config.yaml").write_text("track: 3\n")
    with pytest.raises(TrackSpecError, match="config.yaml: track: expected"):
        default_track(None)


def test_each_event_becomes_scalars_with_their_steps_and_a_resume_restarts_the_curve():
    translator = Translator()
    first = translator.feed(
        [
            {"t": 1.0, "kind": "start", "name": "exp", "epochs": 2, "amp": "bf16", "params": 738, "start_step": 0},
            {"t": 2.0, "kind": "step", "step": 4, "epoch": 1, "loss": 0.5, "lr": 0.1, "samples_per_s": 900.0},
            {"t": 2.5, "kind": "step", "step": 8, "loss": 0.4, "mem_peak": 3 * 1024 * 1024},
            {"t": 3.0, "kind": "val", "step": 8, "loss": 0.45, "accuracy": 0.9},
            {"t": 3.1, "kind": "end", "status": "stopped", "step": 8, "elapsed": 2.1},
        ]
    )
    keys = [(p.key, p.step, p.value) for p in first.scalars]
    assert keys[:4] == [
        ("train/loss", 4, 0.5),
        ("train/lr", 4, 0.1),
        ("train/epoch", 4, 1.0),
        ("perf/samples_per_s", 4, 900),
    ]
    assert ("gpu/mem_peak_mib", 8, 3.0) in keys and ("val/accuracy", 8, 0.9) in keys
    assert keys[-1] == ("run/elapsed_s", 8, 2.1)
    assert first.params == {"fit.epochs": 2, "fit.amp": "bf16", "fit.model_parameters": 738}
    assert first.status == "stopped" and first.end_time == 3.1
    resumed = translator.feed(
        [
            {"t": 9.0, "kind": "start", "name": "exp", "start_step": 8},
            {"t": 9.5, "kind": "step", "step": 12, "loss": 0.3},
            {"t": 9.6, "kind": "start", "name": "other", "start_step": 0},
            {"t": 9.7, "kind": "step", "step": 2, "loss": 0.9},
        ]
    )
    assert resumed.points[0] == Resume(9, 9.0), "points after the checkpoint's step are overtaken"
    assert [(p.key, p.step) for p in resumed.scalars] == [("train/loss", 12), ("other/train/loss", 2)]
    assert resumed.status == "running" and resumed.params == {}, "a run's parameters are its first call's"


# -- live, from %%train in a kernel ------------------------------------------------------------
def test_train_track_puts_the_run_in_tensorboard_and_mlflow_as_it_logged_it(shell, where, capsys):
    tb, uri, track = where
    shell.run_cell_magic("train", f"--epochs 3 --refresh 0.01 --log-every 4 --name digits --track {track}", BODY)
    result = shell.user_ns["train_result"]
    said = capsys.readouterr().out  # the end of the run says where its data went
    assert f"tracked in TensorBoard: {tb}" in said and f"(tensorboard --logdir {tb})" in said, said
    assert "tracked in MLflow: run digits " in said and f" in experiment jiyu at {uri}" in said, said
    assert result.status == "succeeded" and result.step == 48
    steps, vals = logged(result.run_id, "step"), logged(result.run_id, "val")
    wait_for(lambda: not followers_of(result.run_id), timeout=120, message="the follower to finish and exit")
    client, run = mlflow_finished(uri, result.run_id)

    scalars = tb_scalars(tb_folder(tb))  # TensorBoard's own reader
    assert tb_folder(tb).name == f"digits-{result.run_id}"
    assert [s for s, _ in scalars["train/loss"]] == [e["step"] for e in steps]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([e["loss"] for e in steps], rel=1e-6)  # float32
    assert [s for s, _ in scalars["val/accuracy"]] == [e["step"] for e in vals] == [16, 32, 48]
    assert {"train/lr", "train/epoch", "perf/samples_per_s", "run/elapsed_s"} <= set(scalars)

    history = client.get_metric_history(run.info.run_id, "train/loss")  # MLflow's own client
    assert [(m.step, m.value) for m in history] == [(e["step"], e["loss"]) for e in steps]
    assert [m.timestamp for m in history] == [int(e["t"] * 1000) for e in steps]
    assert run.info.status == "FINISHED" and run.info.run_name == "digits"
    params = run.data.params
    assert params["fit.epochs"] == "3" and params["fit.log_every"] == "4", "fit options too"
    assert (params["fit.optimizer"], params["optimizer.lr"], params["fit.model"]) == ("AdamW", "0.01", "Sequential")
    assert run.data.tags["jiyu.kind"] == "kernel" and run.data.tags["jiyu.status"] == "succeeded"
    # a training run, as MLflow 3 files one; the offset it keeps is bookkeeping, hidden by its UI
    assert client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert [o.model_id for o in client.get_run(run.info.run_id).outputs.model_outputs], "the model it trained"
    assert not [tag for tag in run.data.tags if tag.startswith("jiyu.offset")], run.data.tags
    assert run.data.tags[f"mlflow.jiyu.offset.{result.run_id}"].isdigit()
    # what the dashboard and the summary say once the follower has: the folder, the MLflow run
    from jiyu_magics.trackers.where import places

    tb_place, mlflow_place = (p.text for p in places(result.run_id, logged(result.run_id, "start")[0]["track"]))
    assert tb_place == f"TensorBoard: {tb_folder(tb)} (tensorboard --logdir {tb})"
    assert mlflow_place == (
        f"MLflow: run digits ({run.info.run_id}) in experiment jiyu at {uri} (mlflow ui --backend-store-uri {uri})"
    )
    assert run.data.metrics["val/accuracy"] == pytest.approx(vals[-1]["accuracy"])
    assert logged(result.run_id, "start")[0]["track"] == f"tensorboard:{tb},mlflow:{uri}"


def test_resume_last_continues_the_same_tracker_run(shell, where):
    tb, uri, track = where
    shell.run_cell_magic("train", f"--epochs 1 --refresh 0.01 --log-every 4 --name exp --track {track}", BODY)
    first = shell.user_ns["train_result"]
    wait_for(lambda: not followers_of(first.run_id), timeout=120, message="the first follower to exit")
    assert mlflow_finished(uri, first.run_id)
    shell.run_line_magic("train", f"--epochs 2 --refresh 0.01 --log-every 4 --name exp --resume last --track {track}")
    second = shell.user_ns["train_result"]
    assert second.run_id != first.run_id and second.step == 32
    wait_for(lambda: not followers_of(second.run_id), timeout=120, message="the second follower to exit")

    client, run = mlflow_run(uri, first.run_id)  # the chain's first run names the tracker run
    assert run.info.status == "FINISHED"
    assert {f"mlflow.jiyu.offset.{first.run_id}", f"mlflow.jiyu.offset.{second.run_id}"} <= set(run.data.tags)
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(4, 33, 4)), "one curve: 4..16, then 20..32 from the checkpoint at 16"
    assert mlflow_run(uri, second.run_id)[1] is None, "no MLflow run of its own"

    folder = tb_folder(tb)
    assert folder.name == f"exp-{first.run_id}" and len(list(folder.glob("events.out.tfevents.*"))) == 2
    assert [s for s, _ in tb_scalars(folder)["train/loss"]] == list(range(4, 33, 4))


def test_a_bad_track_is_one_line_and_nothing_trains(shell, where):
    with pytest.raises(UsageError, match=r"^tracker 'wandb': expected tensorboard\[:DIR\] or mlflow\[:URI\]$"):
        shell.run_cell_magic("train", "--epochs 1 --track wandb", BODY)
    assert "train_result" not in shell.user_ns


def test_JIYU_TRACK_tracks_a_run_that_names_no_tracker(shell, where, monkeypatch):
    tb, _, _ = where
    monkeypatch.setenv("JIYU_TRACK", f"tensorboard:{tb}")
    shell.run_cell_magic("train", "--max-steps 6 --refresh 0.01 --log-every 2 --name by-default", BODY)
    result = shell.user_ns["train_result"]
    wait_for(lambda: not followers_of(result.run_id), timeout=120, message="the follower to exit")
    assert [s for s, _ in tb_scalars(tb_folder(tb))["train/loss"]] == [2, 4, 6]
    shell.run_cell_magic("train", "--max-steps 2 --refresh 0.01 --name untracked --track none", BODY)
    assert logged(shell.user_ns["train_result"].run_id, "start")[0].get("track") is None
    assert len([p for p in tb.iterdir() if p.is_dir()]) == 1


def test_an_unreachable_tracker_costs_the_run_nothing_and_is_said(shell, where, capfd):
    from .ports import free_port

    shell.run_cell_magic("train", f"--max-steps 4 --refresh 0.01 --track mlflow:http://127.0.0.1:{free_port()}", BODY)
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded"
    wait_for(lambda: not followers_of(result.run_id), timeout=120, message="the follower to give up and exit")
    said = capfd.readouterr().err
    assert f"jiyu: cannot write run {result.run_id} to MLflow (http://127.0.0.1:" in said


# -- jiyu track: export after the fact -----------------------------------------------------------
def test_jiyu_track_exports_a_finished_run_once(shell, where):
    tb, uri, track = where
    shell.run_cell_magic("train", "--epochs 1 --refresh 0.01 --log-every 4 --name later", BODY)
    run_id = shell.user_ns["train_result"].run_id
    done = jiyu("track", run_id, "--to", track)
    assert done.returncode == 0, done.stderr
    events = len(read_events(RunFiles.of(run_id).events)[0])
    assert done.stdout.splitlines() == [
        f"run {run_id} (later): {events} events exported to TensorBoard ({tb})",
        f"run {run_id} (later): {events} events exported to MLflow ({uri})",
    ]
    again = jiyu("track", "--all", "--to", f"tensorboard:{tb}", "--to", f"mlflow:{uri}")
    assert again.returncode == 0 and again.stdout.splitlines() == [
        f"run {run_id} (later): already in TensorBoard ({tb})",
        f"run {run_id} (later): already in MLflow ({uri})",
    ]
    client, run = mlflow_run(uri, run_id)
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 4 and run.info.status == "FINISHED"
    assert len(tb_scalars(tb_folder(tb))["train/loss"]) == 4
    assert len(list(tb_folder(tb).glob("events.out.tfevents.*"))) == 1, "the second export wrote no file"


def test_a_dead_tracker_is_said_in_the_runs_own_cell_and_jiyu_track_writes_only_where_asked(tmp_path, where):
    """Issue 36, in a real kernel: the follower's failure showed in whichever cell ran next (it
    came seconds after the run's cell ended); an export also wrote the destinations the run's
    cell had named and reported their failure as the one asked for (exit 1); and a port where
    nothing listens took MLflow's own retries, 4 minutes, to be said."""
    from .notebook_runner import execute, notebook, text_of
    from .ports import free_port

    tb, _, _ = where
    dead = f"http://127.0.0.1:{free_port()}"
    nb = execute(
        notebook(
            "%load_ext jiyu_magics\n" + SETUP,
            f"%%train --max-steps 4 --refresh 0.01 --name elsewhere --track mlflow:{dead}\n{BODY}",
            "print(train_result.run_id)",
        ),
        tmp_path,
        timeout=180,
    )
    run_id = text_of(nb.cells[2]).strip()
    why = f"Unreachable: nothing listens at {dead} (connection refused)"
    said = f"jiyu: cannot write run {run_id} to MLflow ({dead}): {why}"
    assert said in text_of(nb.cells[1]), text_of(nb.cells[1])
    assert "cannot write" not in text_of(nb.cells[2])
    done = jiyu("track", run_id, "--to", f"tensorboard:{tb}")
    events = len(read_events(RunFiles.of(run_id).events)[0])
    exported = f"run {run_id} (elsewhere): {events} events exported to TensorBoard ({tb})\n"
    assert (done.returncode, done.stdout, done.stderr) == (0, exported, "")
    refused = jiyu("track", run_id, "--to", f"mlflow:{dead}", timeout=60)
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert refused.stderr == f"run {run_id} (elsewhere): not exported to MLflow ({dead}): {why}\n"


def test_jiyu_track_refuses_bad_input_in_one_line(where):
    for args, said in (
        (["track", "nope", "--to", "tensorboard"], "jiyu track: error: no run with id 'nope'"),
        (["track", "--all", "--to", "wandb"], "jiyu track: error: tracker 'wandb': expected"),
        (["track", "--all"], "the following arguments are required: --to"),
    ):
        done = jiyu(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done


def test_a_missing_extra_is_one_line_with_the_pip_command(tmp_path, where):
    """A real environment without mlflow: this venv's packages, mlflow's left out."""
    site = next(p for p in map(str, sys.path) if p.endswith("site-packages"))
    without = tmp_path / "site"
    without.mkdir()
    for entry in os.listdir(site):
        if not entry.lower().startswith("mlflow"):
            (without / entry).symlink_to(os.path.join(site, entry))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{without}"}
    code = (
        "import sys\nfrom jiyu_magics.train.fit_options import FitOptions\n"
        "try:\n    FitOptions(track='mlflow').validate()\nexcept Exception as e:\n    print(e)\n"
        "from jiyu_magics.cli import main\nsys.argv = ['jiyu', 'track', '--all', '--to', 'mlflow']\nmain()"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=120)
    line = "tracking to mlflow needs the mlflow package: pip install 'jiyu-magics[mlflow]'"
    assert done.stdout.strip() == line, done.stdout + done.stderr
    assert done.returncode == 2 and done.stderr.strip() == f"jiyu track: error: {line}"


def test_jiyu_submit_track_is_followed_by_the_jobs_supervisor(tmp_path, where, torchrun_tmp):
    """``jiyu submit --track``: the notebook's cell names no tracker; the job's launch does."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    tb, uri, _ = where
    path = tmp_path / "plain.ipynb"
    cells = [
        "%load_ext jiyu_magics\nimport torch\nx = torch.randn(128, 4); y = x.sum(1, keepdim=True)",
        "%%train --max-steps 6 --log-every 2 --device cpu --name plain\nmodel = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), 0.05)\ntrain_loader = torch.utils.data.DataLoader("
        "torch.utils.data.TensorDataset(x, y), batch_size=16)\nloss_fn = torch.nn.MSELoss()",
    ]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    done = jiyu("submit", str(path), "--gpus", "0", "--name", "submitted", "--track", f"tensorboard:{tb}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = next(word for word in done.stdout.split() if RunFiles.of(word).root.is_dir())
    wait_for(lambda: (tb / f"submitted-{run_id}" / "jiyu-sync.json").exists(), timeout=240, message="the run in TB")
    wait_for(lambda: "succeeded" in (tb / f"submitted-{run_id}" / "jiyu-sync.json").read_text(), timeout=240)
    assert [s for s, _ in tb_scalars(tb / f"submitted-{run_id}")["train/loss"]] == [2, 4, 6]
    bad = jiyu("submit", str(path), "--track", "wandb")
    assert bad.returncode == 2 and "--track 'wandb': tracker 'wandb': expected" in bad.stderr


def test_a_slurm_batch_script_follows_the_trackers_inside_the_allocation(tmp_path, no_schedulers, where):
    """A scheduled run has no owner process while it runs: its batch script starts the follower
    beside the ranks (with the submission's --track; it reads the cells' own from the log) and
    ends it after the step, before a requeue or the exit."""
    import shutil

    from jiyu_magics import jobs

    from .jobs_workload import write_notebook

    tb, _, _ = where
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), backend="slurm", track=[f"tensorboard:{tb}"])
    script_path = RunFiles.of(run.id).root / "job.sbatch"
    script = script_path.read_text().splitlines()
    assert subprocess.run([shutil.which("bash"), "-n", str(script_path)]).returncode == 0
    follow = next(i for i, line in enumerate(script) if "-m jiyu_magics.trackers follow" in line)
    assert script[follow] == f'"$python" -m jiyu_magics.trackers follow {run.id} --track tensorboard:{tb} </dev/null &'
    srun = next(i for i, line in enumerate(script) if line.strip().startswith("srun "))
    ended = script.index('kill -TERM "$follower" 2>/dev/null; wait "$follower"')
    requeue = next(i for i, line in enumerate(script) if "scontrol requeue" in line)
    assert follow < srun < ended < requeue


def test_mlflow_takes_at_most_50_points_a_second_per_metric_from_a_fast_run():
    """A backlog of a 1 kHz run is thinned for MLflow by the run's clock; the newest point stays,
    and a write of a run logging at the engine's pace (or a short one) is taken whole."""
    from types import SimpleNamespace

    from jiyu_magics.trackers.sinks.mlflow import MlflowSink
    from jiyu_magics.trackers.translate import Point

    fast = [Point("train/loss", 1.0 / s, s, 100 + s / 1000) for s in range(1, 1001)]  # 1 s at 1 kHz
    kept = MlflowSink._thinned(SimpleNamespace(), fast, {})
    assert 45 <= len(kept) <= 52 and kept[-1].step == 1000 and kept[0].step == 1
    assert all(b.t - a.t >= 0.02 - 1e-9 for a, b in zip(kept[:-2], kept[1:-1], strict=True))
    slow = [Point("train/loss", 1.0, s, 100 + s * 0.5) for s in range(1, 2001)]  # every 0.5 s: an export
    assert MlflowSink._thinned(SimpleNamespace(), slow, {}) == slow
    short = fast[:40]
    assert MlflowSink._thinned(SimpleNamespace(), short, {}) == short
