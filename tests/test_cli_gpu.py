"""``jiyu gpu`` / ``jiyu doctor`` through the installed console script. Device tables use the
NVML test double (tests/nvml_double) put on the subprocess's PYTHONPATH, because this machine
has no NVIDIA driver."""

import json
import os

import pytest

from .cli_runner import jiyu


def test_help_lists_the_subcommands():
    result = jiyu("--help")
    assert result.returncode == 0
    for command in ("gpu", "doctor"):
        assert command in result.stdout


def test_jiyu_alone_shows_its_help():
    result = jiyu()
    assert result.returncode == 2 and "COMMAND" in result.stderr and "submit" in result.stderr


@pytest.mark.driverless
def test_gpu_without_driver_is_one_line():
    result = jiyu("gpu")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.strip().startswith("No NVIDIA GPU visible: ")
    assert result.stdout.strip().endswith("Run jiyu doctor.") and result.stdout.count("\n") == 1


def test_gpu_table_and_json_with_two_devices(nvml_double):
    table = jiyu("gpu")
    assert table.returncode == 0
    assert "NVIDIA H100 80GB HBM3" in table.stdout and "Tesla T4" in table.stdout
    assert "cuda:0" in table.stdout and "n/a" in table.stdout
    data = json.loads(jiyu("gpu", "--json").stdout)
    assert data["available"] and len(data["devices"]) == 2
    assert data["devices"][0]["processes"][0]["mine"] is True  # the CLI process itself


def test_gpu_respects_cuda_visible_devices(nvml_double):
    data = json.loads(jiyu("gpu", "--json", env={**os.environ, "CUDA_VISIBLE_DEVICES": "1,0"}).stdout)
    assert [d["visible_index"] for d in data["devices"]] == [1, 0]


@pytest.mark.driverless
def test_doctor_exits_nonzero_on_this_driverless_machine():
    result = jiyu("doctor")
    assert result.returncode == 1
    assert "[FAIL] NVIDIA driver" in result.stdout and "fix: " in result.stdout
    findings = json.loads(jiyu("doctor", "--json").stdout)
    assert any(f["level"] == "problem" for f in findings)


@pytest.mark.parametrize(
    "args, message",
    [
        (["gpu", "--watch", "0"], "expected a positive number of seconds, got '0'"),
        (["gpu", "--watch", "abc"], "expected a number of seconds, got 'abc'"),
        (["gpu", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["gpu", "--json", "--watch", "1"], "--json and --watch cannot be combined"),
        (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message):
    result = jiyu(*args)
    assert result.returncode == 2
    assert message in result.stderr
    (line,) = result.stderr.strip().splitlines()  # no usage block above it: --help has that
    assert line.startswith("jiyu")
    assert "Traceback" not in result.stderr
