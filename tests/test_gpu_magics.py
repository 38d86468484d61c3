"""%gpu_status and %gpu_doctor through a real InteractiveShell. Device tables use the NVML test
double (tests/nvml_double) because this machine has no NVIDIA driver."""

import io
import os

import pytest
from IPython.core.error import UsageError

from jiyu_magics.widgets.terminal_redraw import watch_text


@pytest.mark.driverless
def test_gpu_status_without_driver_is_one_line(ip, capsys):
    ip.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out.strip()
    assert out.startswith("No NVIDIA GPU visible: ") and out.endswith("Run %gpu_doctor.")
    assert len(out.splitlines()) == 1


def test_gpu_status_table(ip, capsys, nvml_double):
    ip.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in out and "Tesla T4" in out and f"{os.getpid()}*" in out


def test_gpu_status_json_returns_data(ip, nvml_double):
    snap = ip.run_line_magic("gpu_status", "--json")
    assert [d["name"] for d in snap["devices"]] == ["NVIDIA H100 80GB HBM3", "Tesla T4"]
    assert snap["devices"][1]["temperature"] is None


@pytest.mark.parametrize(
    "line, message",
    [
        ("--watch 0", "--watch takes a positive number of seconds, got 0"),
        ("--watch -2", "--watch takes a positive number of seconds, got -2"),
        ("--watch abc", "invalid float value: 'abc'"),
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--json --watch 1", "--json and --watch cannot be combined"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(ip, line, message):
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("gpu_status", line)
    assert message in str(error.value) and "\n" not in str(error.value).strip()


def test_gpu_doctor_lists_findings(ip, capsys):
    ip.run_line_magic("gpu_doctor", "")
    out = capsys.readouterr().out
    for check in ("torch build", "NVIDIA driver", "device files", "CUDA_VISIBLE_DEVICES", "/dev/shm", "MIG"):
        assert check in out
    findings = ip.run_line_magic("gpu_doctor", "--json")
    assert {f["level"] for f in findings} <= {"ok", "warning", "problem"}


def test_magic_help_is_the_docstring(ip):
    doc = ip.find_line_magic("gpu_status").__doc__
    assert "--watch SECONDS" in doc and "NVML" in doc


def test_unload_removes_the_magics(ip):
    ip.run_line_magic("unload_ext", "jiyu_magics")
    assert ip.find_line_magic("gpu_status") is None
    ip.run_line_magic("load_ext", "jiyu_magics")
    assert ip.find_line_magic("gpu_status") is not None


def test_terminal_watch_redraws_in_place():
    out = io.StringIO()
    frames = iter(["a\nb", "c\nd"])
    watch_text(lambda: next(frames), 0.01, out=out, rounds=2)
    # the second frame moves the cursor up over the two lines of the first, then clears
    assert out.getvalue() == "\x1b[Ja\nb\n\x1b[2F\x1b[Jc\nd\n"
