"""Each doctor check against a situation built for real: device folders, /proc/modules files,
environments. NVML situations use the real driverless library of this machine, or the NVML
test double (tests/nvml_double) where a driver must seem present."""

from pathlib import Path

import pytest

from jiyu_magics.core.gpu import doctor
from jiyu_magics.core.gpu.doctor import OK, PROBLEM, WARNING, Probes
from jiyu_magics.core.gpu.torch_versions import TorchFacts

CUDA_TORCH = TorchFacts(version="2.5.1+cu124", cuda="12.4", cudnn="9.1.0", nccl="2.21.5")


@pytest.fixture
def gpu_box(tmp_path) -> dict:
    """A /dev with GPU nodes and a /proc/modules with the nvidia driver: a healthy host."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    modules = tmp_path / "modules"
    modules.write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 nvidia_uvm, Live 0x0\n")
    return dict(dev_dir=dev, proc_modules=modules, env={}, shm_bytes=lambda p: 8 << 30, torch=lambda: CUDA_TORCH)


def by_check(findings):
    return {f.check: f for f in findings}


def test_healthy_gpu_box_has_no_findings(gpu_box, nvml_double):
    findings = doctor.diagnose(Probes(**gpu_box, nvml=lambda: nvml_double))
    assert [f for f in findings if f.level != OK] == []
    assert not doctor.has_problem(findings)


@pytest.mark.driverless
def test_this_machine_is_driverless_and_cpu_only():
    findings = by_check(doctor.diagnose())
    assert findings["NVIDIA driver"].level == PROBLEM and "--gpus all" in findings["NVIDIA driver"].fix
    assert findings["torch build"].level == PROBLEM and "CPU-only" in findings["torch build"].summary
    assert findings["device files"].level == PROBLEM


def test_missing_device_nodes_points_at_container_flags(gpu_box, nvml_double, tmp_path):
    empty = tmp_path / "emptydev"
    empty.mkdir()
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "dev_dir": empty}, nvml=lambda: nvml_double)))
    assert f["device files"].level == PROBLEM and "--gpus all" in f["device files"].fix


def test_missing_uvm_node_is_a_warning(gpu_box, nvml_double):
    (gpu_box["dev_dir"] / "nvidia-uvm").unlink()
    f = by_check(doctor.diagnose(Probes(**gpu_box, nvml=lambda: nvml_double)))
    assert f["device files"].level == WARNING and "nvidia-uvm" in f["device files"].summary


def test_nouveau_loaded(gpu_box, nvml_double):
    gpu_box["proc_modules"].write_text("nouveau 2334720 0 - Live 0x0\nttm 1 1 nouveau, Live 0x0\n")
    f = by_check(doctor.diagnose(Probes(**gpu_box, nvml=lambda: nvml_double)))
    assert f["nouveau"].level == PROBLEM and "blacklist nouveau" in f["nouveau"].fix


@pytest.mark.parametrize(
    "value, level, words",
    [
        ("", PROBLEM, "hides every GPU"),
        ("-1", PROBLEM, "'-1'"),
        ("0,5", PROBLEM, "'5'"),
        ("1", WARNING, "hides 1 of 2"),
        ("GPU-99999999", WARNING, "hides 1 of 2"),
        ("1,0", OK, "all listed"),
    ],
)
def test_cuda_visible_devices(gpu_box, nvml_double, value, level, words):
    f = by_check(
        doctor.diagnose(Probes(**{**gpu_box, "env": {"CUDA_VISIBLE_DEVICES": value}}, nvml=lambda: nvml_double))
    )["CUDA_VISIBLE_DEVICES"]
    assert f.level == level and words in f.summary


@pytest.mark.parametrize("torch_cuda, level", [("13.0", PROBLEM), ("12.6", WARNING), ("12.1", OK)])
def test_driver_cuda_older_than_torch_cuda(gpu_box, nvml_double, torch_cuda, level):
    facts = TorchFacts(version="x", cuda=torch_cuda, cudnn="9", nccl="2")
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "torch": lambda: facts}, nvml=lambda: nvml_double)))
    assert f["driver vs torch CUDA"].level == level  # the double's driver supports CUDA 12.4


def test_missing_nccl_warns_about_gloo(gpu_box, nvml_double):
    facts = TorchFacts(version="x", cuda="12.4", cudnn="9.1.0", nccl=None)
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "torch": lambda: facts}, nvml=lambda: nvml_double)))
    assert f["cuDNN / NCCL"].level == WARNING and "gloo" in f["cuDNN / NCCL"].summary


def test_small_shm(gpu_box, nvml_double):
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "shm_bytes": lambda p: 64 << 20}, nvml=lambda: nvml_double)))
    assert f["/dev/shm"].level == WARNING and "64 MiB" in f["/dev/shm"].summary
    assert "--shm-size" in f["/dev/shm"].fix


def test_real_shm_is_measured():
    f = by_check(doctor.diagnose(Probes(shm_dir=Path("/dev/shm"))))["/dev/shm"]
    assert "GiB" in f.summary or "MiB" in f.summary


def test_cuda_already_initialised(gpu_box, nvml_double):
    facts = TorchFacts(version="x", cuda="12.4", cudnn="9", nccl="2", cuda_initialized=True, imported=True)
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "torch": lambda: facts}, nvml=lambda: nvml_double)))
    assert f["CUDA in this process"].level == WARNING and "--nproc" in f["CUDA in this process"].fix


def test_mig_enabled(gpu_box, nvml_double, monkeypatch):
    monkeypatch.setitem(nvml_double._DEVICES[0], "mig", (1, 1))
    f = by_check(doctor.diagnose(Probes(**gpu_box, nvml=lambda: nvml_double)))
    assert f["MIG"].level == WARNING and "GPU 0" in f["MIG"].summary


def test_no_torch_installed(gpu_box, nvml_double):
    f = by_check(doctor.diagnose(Probes(**{**gpu_box, "torch": lambda: None}, nvml=lambda: nvml_double)))
    assert f["torch build"].level == PROBLEM and "not installed" in f["torch build"].summary


def test_first_problem_is_what_one_line_views_show():
    findings = doctor.diagnose()
    assert doctor.first_problem(findings).level == PROBLEM


@pytest.mark.parametrize(
    "torch_version, driver_cuda, command",
    [
        ("2.13.0+cpu", "13.0", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"),
        ("2.13.0+cpu", "12.9", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"),
        ("2.5.1+cpu", "12.4", "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124"),
        ("2.5.1+cpu", "12.2", "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu121"),
        ("2.5.1+cpu", "11.4", "older than every build of torch 2.5.1 (cu118, cu121, cu124): update the NVIDIA driver"),
    ],
)
def test_cpu_only_torch_fix_names_the_wheel_index_the_driver_can_run(
    torch_version, driver_cuda, command, gpu_box, nvml_double, monkeypatch
):
    """The driver's CUDA version comes from NVML (the double reports the number NVML gives)."""
    major, minor = map(int, driver_cuda.split("."))
    monkeypatch.setattr(nvml_double, "nvmlSystemGetCudaDriverVersion", lambda: major * 1000 + minor * 10)
    cpu_torch = TorchFacts(version=torch_version, cuda=None)
    finding = by_check(doctor.diagnose(Probes(**{**gpu_box, "torch": lambda: cpu_torch}, nvml=lambda: nvml_double)))
    assert finding["torch build"].level == PROBLEM and command in finding["torch build"].fix


@pytest.mark.driverless
def test_without_a_driver_the_fix_says_to_pick_the_tag_the_driver_supports():
    fix = by_check(doctor.diagnose())["torch build"].fix
    assert "cuXYZ" in fix and "the tag your driver supports" in fix and "cu124" not in fix
