"""%%train through a real InteractiveShell (terminal front-end: text progress lines)."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError

from jiyu_magics.core.store.run_store import RunStore

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


def test_train_cell_runs_setup_trains_and_binds_the_result(shell, capsys):
    shell.run_cell_magic("train", "--epochs 3 --refresh 0.01 --log-every 4", BODY)
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 48
    assert result.val_acc > 0.9
    model, X, y = shell.user_ns["model"], shell.user_ns["X"], shell.user_ns["y"]
    assert (model(X).argmax(1) == y).float().mean() > 0.9, "the trained model stays in the namespace"
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(re.match(r"step \d+/48 \(\d+%\) · epoch [123]/3 · loss \d", line) for line in lines), lines
    assert lines[-1].startswith("Trained 48 steps (3 epochs)")
    assert RunStore().get(result.run_id).kind == "kernel"


def test_line_form_and_renamed_objects(shell):
    shell.run_cell(BODY.replace("model =", "net =").replace("model.parameters", "net.parameters"))
    shell.run_line_magic("train", "--model net --max-steps 5 --result out --no-ckpt")
    result = shell.user_ns["out"]
    assert result.step == 5 and result.checkpoints == []


def test_resume_last_continues_the_previous_run(shell):
    shell.run_cell_magic("train", "--epochs 1 --name exp", BODY)
    shell.run_line_magic("train", "--epochs 2 --name exp --resume last")
    assert shell.user_ns["train_result"].step == 32


def test_quoted_values_lose_their_quotes_as_in_a_shell(shell, tmp_path, monkeypatch):
    from jiyu_magics.train.end_messages import resume_command

    monkeypatch.chdir(tmp_path)
    shell.run_cell_magic("train", f"--epochs 1 --name \"my run\" --ckpt-dir '{tmp_path}/ck dir'", BODY)
    result = shell.user_ns["train_result"]
    assert RunStore().get(result.run_id).name == "my run"
    assert result.checkpoints and all(path.startswith(f"{tmp_path}/ck dir/") for path in result.checkpoints)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck dir"], "no folder named after a quote"
    command = resume_command("my run", 2, None)  # what a stop prints, pasted back
    assert command == "%train --resume last --name 'my run' --epochs 2"
    shell.run_line_magic("train", command.removeprefix("%train "))
    assert shell.user_ns["train_result"].step == 32


def test_an_unclosed_quote_is_one_line(shell):
    with pytest.raises(UsageError, match="^cannot read the options: no closing quotation in '--name \"my run'$"):
        shell.run_cell_magic("train", '--name "my run', BODY)


@pytest.mark.parametrize(
    "line, prepare, message",
    [
        ("--epochs -1", "", "--epochs must be >= 1, got -1"),
        ("--accum 0", "", "--accum must be >= 1, got 0"),
        ("--clip -1", "", "clip must be a positive gradient norm, got -1"),
        ("--stall-timeout -1", "", "--stall-timeout must be seconds >= 0 (0: off), got -1.0"),
        ("--stall-timeout inf", "", "--stall-timeout must be seconds >= 0 (0: off), got inf"),
        ("--bogus 3", "", "unrecognized arguments: --bogus 3"),
        ("--amp fp8", "", "argument --amp: invalid choice: 'fp8'"),
        ("--nproc 0", "", "--nproc 0: expected a whole number from 1 to 1024"),
        ("--nproc-per-node 1025", "", "--nproc 1025: expected a whole number from 1 to 1024"),
        ("--refresh 0", "", "--refresh takes a positive number of seconds, got 0"),
        ("--stall-timeout nan", "", "--stall-timeout must be seconds >= 0 (0: off), got nan"),
        ("--result 1bad", "", "--result '1bad': expected a variable name (a Python identifier)"),
        ("--result train_result.x", "", "--result 'train_result.x': expected a variable name"),
        ("--no-ckpt --ckpt-every 5", "", "--no-ckpt and --ckpt-every conflict"),
        ("", "del model", "no model named 'model' in the notebook: define it in the cell or pass --model NAME"),
        ("--val-loader missing", "", "no val_loader named 'missing'"),
        ("", "optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), 0.1)", "the optimizer holds none of model's"),
        (
            "",
            "train_loader = DataLoader(TensorDataset(X[:0], y[:0]), batch_size=8)",
            "the training data has no batches",
        ),
        (
            "",
            "train_loader = DataLoader(TensorDataset(X[:4], y[:4]), batch_size=8, drop_last=True)",
            "the training data has no batches",
        ),
        ("", "train_step = lambda m, b: m(b[0]).sum()", "both loss_fn and train_step are defined"),
        ("--loss-fn loss_fn --train-step ts", "ts = lambda m, b: 0", "--loss-fn and --train-step conflict"),
        ("", "del loss_fn", "batches are (inputs, targets) but there is no loss_fn"),
        ("", "model = 'not a model'", "model must be a torch.nn.Module, got str"),
        ("--resume /nowhere/ckpt.pt", "", "resume checkpoint /nowhere/ckpt.pt does not exist"),
        ("--batch-size 8", "", "batch_size conflicts with the DataLoader's own batch size"),
        ("--device bogus", "", "device 'bogus' is not a device torch knows; use cpu, cuda, cuda:N or mps"),
        pytest.param("--device cuda", "", "use --device cpu", marks=pytest.mark.driverless),
        ("--name a\x1b[31mred", "", "name: a run name must be one line of printable text"),
        ("--no-val --val-loader val_loader", "", "--no-val and --val-loader conflict"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(shell, line, prepare, message):
    shell.run_cell(BODY + "\n" + prepare)
    with pytest.raises(UsageError) as error:
        shell.run_line_magic("train", line)
    assert message in str(error.value) and "\n" not in str(error.value).strip()
    assert all(run.status != "running" for run in RunStore().list()), "nothing left running"


@pytest.mark.parametrize(
    "line, message",
    [
        ("--resume /nowhere/ckpt.pt", "resume checkpoint /nowhere/ckpt.pt does not exist"),
        ("--resume last --name never-trained", "--resume last: no checkpoint of an earlier run named 'never-trained'"),
    ],
)
def test_a_resume_that_cannot_be_done_is_said_once_and_registers_no_run(shell, capsys, line, message):
    capsys.readouterr()
    with pytest.raises(UsageError, match=f"^{re.escape(message)}"):
        shell.run_cell_magic("train", line, BODY)
    out = capsys.readouterr()
    assert message not in out.out + out.err, "the UsageError is the one line (no progress summary repeating it)"
    assert RunStore().list() == [], "a refused call leaves no failed run in %jobs"


def test_fit_checks_the_run_name_by_the_one_rule():
    from torch import nn

    from jiyu_magics.train import TrainConfigError, fit

    model = nn.Linear(2, 2)
    with pytest.raises(TrainConfigError, match="^name: a run name must be one line of printable text"):
        fit(model, __import__("torch").optim.SGD(model.parameters(), 0.1), [], name="a\ntouch pwned")
    assert RunStore().list() == []


BROKEN = """
class Broken(nn.Module):
    def __init__(self):
        super().__init__(); self.net = nn.Linear(20, 2)
    def forward(self, x):
        raise ValueError("shapes do not fit")
"""


def test_an_error_in_user_code_shows_the_users_frames_not_jiyus(shell, capsys):
    shell.run_cell(BROKEN)
    shell.run_cell(
        "%%train --epochs 1" + BODY.replace("nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))", "Broken()")
    )
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "ValueError: shapes do not fit" in out and "in Broken.forward" in out
    assert 'raise ValueError("shapes do not fit")' in out
    assert "jiyu_magics" not in out, out
    assert shell.user_ns.get("train_result") is None


def test_resume_from_a_file_that_is_not_a_checkpoint_is_one_line(shell, tmp_path):
    import torch
    from torch import nn

    shell.run_cell(BODY)
    pickled = tmp_path / "model.pt"
    torch.save(nn.Linear(2, 2), pickled)  # a whole pickled model, as people save them
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    for path in (pickled, garbage):
        with pytest.raises(UsageError, match=f"{path} is not a jiyu checkpoint") as error:
            shell.run_line_magic("train", f"--resume {path}")
        assert "\n" not in str(error.value)


def test_a_failing_cell_body_trains_nothing(shell):
    with pytest.raises(UsageError, match="the cell body failed"):
        shell.run_cell_magic("train", "--epochs 1", "raise ValueError('broken set-up')")
    assert RunStore().list() == []


def test_help_lists_every_option(shell):
    doc = shell.find_cell_magic("train").__doc__
    for option in (
        "--epochs",
        "--max-steps",
        "--amp",
        "--accum",
        "--clip",
        "--compile",
        "--resume",
        "--nproc",
        "--strategy",
        "--model",
        "--train-loader",
        "--loss-fn",
        "--train-step",
        "--refresh",
    ):
        assert option in doc


def test_load_ext_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from IPython.core.interactiveshell import InteractiveShell; "
        "InteractiveShell.instance().run_line_magic('load_ext', 'jiyu_magics'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_nan_loss_in_a_cell_is_one_line_and_the_result_is_bound(shell, capsys):
    shell.run_cell(BODY + "\ntrain_step = lambda m, b: m(b[0]).sum() * float('nan')\ndel loss_fn")
    shell.run_cell("%train --epochs 1 --log-every 2")
    out = capsys.readouterr().out
    assert "TrainingFailed: Loss became nan at step 1" in out and "Traceback" not in out
    assert shell.user_ns["train_result"].status == "failed"


def test_options_and_namespace_lookup_are_reusable_by_a_launcher(shell):
    from jiyu_magics.magics.train_magic import fit_kwargs, parse_options

    shell.run_cell(BODY)
    kwargs = fit_kwargs(parse_options("--epochs 2 --amp bf16 --accum 4 --nproc 3"), shell.user_ns)
    assert kwargs["model"] is shell.user_ns["model"] and kwargs["train_data"] is shell.user_ns["train_loader"]
    assert kwargs["val_data"] is shell.user_ns["val_loader"] and "train_step" not in kwargs
    assert (kwargs["epochs"], kwargs["amp"], kwargs["accum"], kwargs["save_ckpts"]) == (2, "bf16", 4, True)


def test_a_run_ends_on_its_samples_over_its_wall_time_not_its_last_short_batch(shell):
    """512 samples in batches of 100: each epoch ends on a batch of 12. Logged every step, the
    last step's rate is that batch's (a run at 780 samples/s ended saying 52); the end, the
    run store's summary (the panel's row) and the summary text say the call's own rate."""
    from jiyu_magics.core.events.log import read_events
    from jiyu_magics.core.runs.files import RunFiles
    from jiyu_magics.views.train_text import summary_text
    from jiyu_magics.views.training_view import TrainingView

    body = BODY.replace("batch_size=32", "batch_size=100").replace("val_loader = ", "unused = ").replace(
        "loss_fn = ", "unused_loss = "
    ) + (
        "import time\n"
        "def train_step(model, batch):  # a step takes 10 ms whatever its size, as on a GPU that waits on data\n"
        "    time.sleep(0.01)\n"
        "    return nn.functional.cross_entropy(model(batch[0]), batch[1])\n"
    )
    shell.run_cell_magic("train", "--epochs 2 --log-every 1 --refresh 0.01 --no-ckpt", body)
    run_id = shell.user_ns["train_result"].run_id
    events, _ = read_events(RunFiles.of(run_id).events)
    steps = [e for e in events if e["kind"] == "step"]
    (end,) = [e for e in events if e["kind"] == "end"]
    total, final = 2 * 512, end["samples_per_s"]
    # the loop's wall time lies between the logged steps' span and the whole call's
    assert total / end["elapsed"] * 0.95 <= final <= total / (steps[-1]["elapsed"] - steps[0]["elapsed"]) * 1.05, (
        final,
        end,
        steps[0],
        steps[-1],
    )
    assert final > 3 * steps[-1]["samples_per_s"], "the last batch of 12 does not decide the run's rate"
    assert RunStore().get(run_id).summary["samples_per_s"] == final
    assert f"{final:,.0f} samples/s" in summary_text(TrainingView.of(events))


def test_the_gpus_column_says_cpu_for_a_kernel_run_on_the_cpu_as_for_a_cpu_job(shell):
    """``jiyu jobs``: a CPU job (0 GPUs requested) said ``cpu``, a kernel's run on the CPU
    (which never queues) ``n/a``: the same kind of run, two words."""
    import json

    from .cli_runner import jiyu
    from .server_fixtures import ended_run

    shell.run_cell_magic("train", "--max-steps 2 --name on-cpu --no-ckpt", BODY)
    kernel_run = shell.user_ns["train_result"].run_id
    job = ended_run("job", "cpu-job", gpus_requested=0)
    listing = {r["id"]: r["display"]["gpus"] for r in json.loads(jiyu("jobs", "--all", "--json").stdout)}
    assert listing == {kernel_run: "cpu", job.id: "cpu"}, listing
    table = jiyu("jobs", "--all").stdout
    assert [line.split()[5] for line in table.splitlines()[2:]] == ["cpu", "cpu"], table


def test_without_a_parameters_cell_the_run_records_what_its_line_and_its_body_read(shell):
    """No parameters cell (terminal IPython, an untagged notebook): the run's parameters were
    the names the magic line braces only, so the run page listed ``epochs`` and not the
    ``lr`` and ``batch_size`` its body read from the notebook."""
    shell.run_cell("lr = 0.02\nbatch_size = 64\nepochs = 1\nwidth = 32\nnote = 'baseline'\nunused = 7")
    shell.run_cell(
        "%%train --epochs {epochs} --name read-names --no-ckpt\n"
        "model = nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Linear(width, 2))\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
        "train_loader = DataLoader(TensorDataset(X, y), batch_size=batch_size, shuffle=True)\n"
        "loss_fn = nn.CrossEntropyLoss()\n"
        "print(note)\n",
        store_history=True,
    )
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded"
    assert RunStore().get(result.run_id).params == {
        "epochs": 1,
        "width": 32,
        "lr": 0.02,
        "batch_size": 64,
        "note": "baseline",
    }, "the line's names, then the body's numbers and strings; not X, y, nn, torch, nor what it does not read"
