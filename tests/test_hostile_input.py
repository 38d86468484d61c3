"""Hostile input through every door (issue 24, group 9): one line each, exit code 2 from the
CLI, ``UsageError`` from a magic, ``TrainConfigError`` from ``fit``, HTTP 400 from the server;
nothing created, nothing of the kernel's changed. One parametrized test per entry point."""

from __future__ import annotations

import json
import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .server_fixtures import server_config

HUGE = "9" * 30
LATIN1 = os.fsdecode(b"caf\xe9.ipynb")  # a file name whose bytes are not UTF-8


@pytest.fixture
def jp_server_config():
    return server_config()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A notebook, a copy under a Latin-1 name, and the test's working folder there."""
    nb = new_notebook(cells=[new_code_cell("x = 1")])
    nbformat.write(nb, tmp_path / "nb.ipynb")
    with open(os.fsencode(tmp_path) + b"/caf\xe9.ipynb", "w") as out:
        nbformat.write(nb, out)
    monkeypatch.chdir(tmp_path)
    return tmp_path


TRAIN_SETUP = (
    "import torch\nmodel = torch.nn.Linear(4, 1)\nbefore = model.weight.detach().clone()\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloss_fn = torch.nn.MSELoss()\n"
    "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))]\n"
)


@pytest.mark.parametrize(
    "line, words",
    [
        (f"--seed {HUGE}", "--seed must be a whole number from -2**63 to 2**63-1"),
        (f"--seed -{HUGE}", "--seed must be a whole number from -2**63 to 2**63-1"),
        ("--log-interval inf", "--log-interval must be seconds above 0 and at most 86400"),
        ("--device meta", "device meta: cannot train there"),
        (f"--nproc {HUGE}", "expected a whole number from 1 to 1024"),
    ],
)
def test_train_magic_refuses_in_one_line_and_leaves_the_model_as_it_was(ip, capsys, line, words):
    ip.run_cell(TRAIN_SETUP)
    result = ip.run_cell(f"%train --max-steps 1 {line}")
    error = result.error_in_exec
    assert type(error).__name__ == "UsageError" and words in str(error) and "\n" not in str(error), error
    model = ip.user_ns["model"]
    assert model.weight.device.type == "cpu" and model.weight.detach().equal(ip.user_ns["before"])
    assert "Traceback" not in capsys.readouterr().err
    assert RunStore().list() == [], "a refused call registers no run"


@pytest.mark.parametrize(
    "options, words",
    [
        ({"seed": 10**30}, "seed must be a whole number from -2**63 to 2**63-1"),
        ({"log_interval_s": float("inf")}, "log_interval_s must be seconds above 0"),
        ({"log_interval_s": "fast"}, "log_interval_s must be a number of seconds"),
        ({"device": "meta"}, "device meta: cannot train there"),
    ],
)
def test_fit_refuses_with_a_config_error(options, words):
    import torch

    from jiyu_magics.train import TrainConfigError, fit

    model = torch.nn.Linear(4, 1)
    before = model.weight.detach().clone()
    with pytest.raises(TrainConfigError, match=words.replace("*", r"\*")):
        fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            [(torch.randn(8, 4), torch.randn(8, 1))],
            loss_fn=torch.nn.MSELoss(),
            max_steps=1,
            **options,
        )
    assert model.weight.device.type == "cpu" and model.weight.detach().equal(before)


@pytest.mark.parametrize(
    "line, words",
    [
        (f"nb.ipynb --priority {HUGE}", "--priority"),
        (f"nb.ipynb --nproc {HUGE}", "expected a whole number from 1 to 1024"),
        ("nb.ipynb -f /dev/zero", "-f /dev/zero: not a parameters file"),
        (LATIN1, "is not valid UTF-8"),
    ],
)
def test_submit_magic_refuses_in_one_line_and_creates_nothing(ip, folder, line, words):
    result = ip.run_cell(f"%submit {line}")
    error = result.error_in_exec
    assert type(error).__name__ == "UsageError" and words in str(error) and "\n" not in str(error), error
    assert RunStore().list() == []


@pytest.mark.parametrize(
    "args, words",
    [
        (["submit", LATIN1], "caf\\udce9.ipynb is not valid UTF-8"),
        (["export", LATIN1, "-o", "-"], "caf\\udce9.ipynb is not valid UTF-8"),
        (["submit", "nb.ipynb", "--priority", HUGE], "expected a whole number from -1000000 to 1000000"),
        (["submit", "nb.ipynb", "--nproc", HUGE], "expected a whole number from 1 to 1024"),
        (["submit", "nb.ipynb", "-f", "/dev/zero"], "not a parameters file"),
        (["export", "nb.ipynb", "-o", "-", "-f", "/dev/zero"], "not a parameters file"),
        (["export", "nb.ipynb", "-o", "-", "-f", "."], "-f .: cannot read it (Is a directory)"),
        (["usage", "--since", "1000000000000000000h"], "since 1970"),
        (["jobs", "--since", "99999999999d"], "since 1970"),
    ],
)
def test_cli_refuses_in_one_line_with_exit_2(folder, args, words):
    done = jiyu(*args, timeout=60, cwd=folder)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert RunStore().list() == []


def test_a_huge_limit_lists_every_run_rather_than_calling_the_store_broken(folder):
    RunStore().create("job", "listed", status="running")
    done = jiyu("jobs", "--all", "--limit", HUGE, "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert [r["name"] for r in json.loads(done.stdout)] == ["listed"]


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"notebook": "nb.ipynb", "priority": 10**30}, "'priority'"),
        ({"notebook": "nb.ipynb", "gpus": 10**30}, "'gpus'"),
        (b'{"notebook": "caf\\udce9.ipynb"}', "not valid UTF-8"),
    ],
)
async def test_rest_refuses_with_400(jp_fetch, jp_root_dir, payload, words):
    from tornado.httpclient import HTTPClientError

    nb = new_notebook(cells=[new_code_cell("x = 1")])
    nbformat.write(nb, jp_root_dir / "nb.ipynb")
    with open(os.fsencode(jp_root_dir) + b"/caf\xe9.ipynb", "w") as out:
        nbformat.write(nb, out)
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("jiyu", "api", "runs", method="POST", body=data)
    reply = json.loads(refused.value.response.body)
    assert refused.value.code == 400 and words in reply["message"], reply
