"""GPU snapshots. The driverless tests use this machine's real NVML failure; the device-table
tests use the NVML test double (tests/nvml_double/pynvml.py) at the pynvml boundary, because
this machine has no NVIDIA driver."""

import json
import os

import psutil
import pytest

from jiyu_magics.core.gpu import snapshot as gpu
from jiyu_magics.views import gpu_table as view

GIB = 2**30


@pytest.mark.driverless
def test_driverless_snapshot_is_a_reason_not_an_exception():
    snap = gpu.snapshot()
    assert snap.available is False
    assert "NVML" in snap.reason or "driver" in snap.reason
    line = view.render_text(snap)
    assert line.startswith("No NVIDIA GPU visible: ") and line.endswith("Run %gpu_doctor.")
    assert "\n" not in line
    json.dumps(snap.to_dict())


def test_snapshot_reads_every_field_and_marks_unsupported_as_none(nvml_double):
    snap = gpu.snapshot(env={})
    assert snap.available and snap.driver_version == "550.54.15" and snap.cuda_driver_version == "12.4"
    h100, t4 = snap.devices
    assert (h100.index, h100.visible_index, h100.name) == (0, 0, "NVIDIA H100 80GB HBM3")
    assert h100.uuid == "GPU-11111111-2222-3333-4444-555555555555"
    assert (h100.gpu_util, h100.mem_util, h100.temperature, h100.sm_clock) == (45, 30, 54, 1980)
    assert (h100.mem_used, h100.mem_total) == (12 * GIB, 80 * GIB)
    assert (h100.power_draw, h100.power_limit, h100.mig_mode) == (250.0, 700.0, False)
    assert (t4.mem_used, t4.mem_total) == (1 * GIB, 16 * GIB)
    assert [t4.gpu_util, t4.temperature, t4.power_draw, t4.sm_clock, t4.mig_mode] == [None] * 5
    assert t4.processes == []


def test_memory_used_is_nvml_v2_as_nvidia_smi_shows_it_with_reserved_apart(nvml_double):
    """v1's ``used`` counts the driver's reserved memory (615 MiB on an idle H200, where
    nvidia-smi says 0 MiB used): the snapshot reads v2 and shows the reserved memory apart."""
    h100 = gpu.snapshot(env={}).devices[0]
    assert (h100.mem_used, h100.mem_reserved) == (12 * GIB, 615 * 2**20)
    assert "+0.6 reserved" in view.render_text(gpu.snapshot(env={}))


def test_memory_falls_back_to_nvml_v1_on_a_driver_without_v2(nvml_double, monkeypatch):
    monkeypatch.setenv("JIYU_NVML_DOUBLE_NO_V2", "1")
    h100 = gpu.snapshot(env={}).devices[0]
    assert (h100.mem_used, h100.mem_reserved) == (12 * GIB + 615 * 2**20, None)


def test_own_process_is_marked_and_command_line_read(nvml_double):
    snap = gpu.snapshot(env={})
    procs = {p.pid: p for p in snap.devices[0].processes}
    mine = procs[os.getpid()]
    own_command = " ".join(psutil.Process().cmdline())  # pytest's, or an xdist worker's
    assert mine.mine and mine.used_memory == 3 * GIB and mine.command == own_command and "python" in mine.command
    assert procs[1].mine is False and procs[1].used_memory is None


def test_visible_index_follows_cuda_visible_devices(nvml_double):
    snap = gpu.snapshot(env={"CUDA_VISIBLE_DEVICES": "1"})
    assert [d.visible_index for d in snap.devices] == [None, 0]
    assert snap.visible_devices == "1"
    assert "hidden" in view.render_text(snap) and "cuda:0" in view.render_text(snap)


def test_text_and_html_tables_show_na_for_unsupported_fields(nvml_double):
    snap = gpu.snapshot(env={})
    text = view.render_text(snap)
    lines = text.splitlines()
    t4_row = next(line for line in lines if "Tesla T4" in line)
    assert t4_row.count("n/a") >= 4 and "1.0 / 16.0" in t4_row
    assert "Driver 550.54.15" in lines[0] and "CUDA driver 12.4" in lines[0]
    assert f"{os.getpid()}*" in text and "* this process or its children" in text
    html = view.render_html(snap)
    assert html.count('role="meter"') == 2 and "(this kernel)" in html and "n/a" in html


def test_torch_versions_appear_only_when_torch_is_already_imported(nvml_double):
    import sys

    import torch  # noqa: F401  (the user's kernel has imported torch)

    snap = gpu.snapshot(env={})
    assert snap.torch["version"] == torch.__version__ and snap.torch["imported"] is True
    assert snap.torch["cuda_initialized"] is False
    assert "torch " + torch.__version__ in view.versions_line(snap)
    assert "torch" in sys.modules


def test_driver_present_but_no_gpu(nvml_double, monkeypatch):
    monkeypatch.setenv("JIYU_NVML_DOUBLE_COUNT", "0")
    snap = gpu.snapshot(env={})
    assert not snap.available and "no NVIDIA GPU" in snap.reason


def test_a_lost_gpu_reads_as_na_not_an_exception(nvml_double, monkeypatch):
    real = nvml_double.nvmlDeviceGetHandleByIndex

    def lost_second(index):
        if index == 1:
            raise nvml_double.NVMLError()  # what NVML_ERROR_GPU_IS_LOST looks like to us
        return real(index)

    monkeypatch.setattr(nvml_double, "nvmlDeviceGetHandleByIndex", lost_second)
    snap = gpu.snapshot(env={})
    assert snap.devices[0].name == "NVIDIA H100 80GB HBM3"
    assert snap.devices[1].name is None and snap.devices[1].mem_total is None
    assert "n/a" in view.render_text(snap)


def test_utilization_of_one_visible_gpu_for_the_dashboard(nvml_double, monkeypatch):
    assert gpu.utilization(0, env={}) == 45
    assert gpu.utilization(0, env={"CUDA_VISIBLE_DEVICES": "1"}) is None  # the T4 does not report it
    assert gpu.utilization(5, env={}) is None
    monkeypatch.setattr(nvml_double, "nvmlDeviceGetCount", lambda: (_ for _ in ()).throw(nvml_double.NVMLError()))
    assert gpu.utilization(0, env={}) is None
