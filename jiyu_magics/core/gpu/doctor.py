"""Why ``torch.cuda.is_available()`` says False, and what to do about it.

Each check reads only its probes (environment, paths, the NVML module, torch's build facts),
so tests build every situation for real: a folder without ``nvidia0``, a ``/proc/modules``
listing nouveau, a ``CUDA_VISIBLE_DEVICES`` that hides a GPU.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from ..settings import VISIBLE_DEVICES_ENV, Settings
from .snapshot import cuda_version_string, device_handles, init_nvml, load_nvml, nvml_failure, nvml_value
from .torch_versions import TorchFacts, torch_facts
from .torch_wheels import install_command
from .visible_devices import parse_visible_devices

Level = Literal["ok", "warning", "problem"]
OK: Level = "ok"
WARNING: Level = "warning"
PROBLEM: Level = "problem"
MIN_SHM_BYTES = 1 << 30


class FindingJson(TypedDict):
    """A finding as data (``%gpu_doctor --json``, the REST API's ``GpuStatus.doctor``)."""

    check: str
    level: Level
    summary: str
    fix: str | None


@dataclass
class Finding:
    check: str
    level: Level
    summary: str
    fix: str | None = None

    def to_dict(self) -> FindingJson:
        return FindingJson(check=self.check, level=self.level, summary=self.summary, fix=self.fix)


def _shm_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


def _visible_devices_now() -> dict[str, str]:
    """The part of this process's environment the doctor checks, as it is now."""
    visible = Settings.from_environ().visible_devices
    return {} if visible is None else {VISIBLE_DEVICES_ENV: visible}


@dataclass
class Probes:
    """Where the doctor looks. The defaults are the real machine."""

    env: Mapping[str, str] = field(default_factory=lambda: _visible_devices_now())
    dev_dir: Path = Path("/dev")
    proc_modules: Path = Path("/proc/modules")
    shm_dir: Path = Path("/dev/shm")
    shm_bytes: Callable[[Path], int | None] = _shm_bytes
    nvml: Callable[[], Any] = load_nvml
    torch: Callable[[], TorchFacts | None] = torch_facts


@dataclass
class _Nvml:
    """What NVML told us, gathered once for all checks."""

    error: str | None = None
    uuids: list[str] = field(default_factory=list)
    cuda_driver: str | None = None
    mig: list[int] = field(default_factory=list)


def diagnose(probes: Probes | None = None) -> list[Finding]:
    probes = probes or Probes()
    torch = probes.torch()
    nvml = _query_nvml(probes.nvml)
    return [
        _check_torch_build(torch, nvml),
        _check_nvml(nvml),
        _check_device_nodes(probes.dev_dir),
        _check_nouveau(probes.proc_modules),
        _check_visible_devices(probes.env, nvml),
        _check_driver_cuda(torch, nvml),
        _check_cudnn_nccl(torch),
        _check_shm(probes.shm_dir, probes.shm_bytes),
        _check_cuda_initialised(torch),
        _check_mig(nvml),
    ]


def has_problem(findings: list[Finding]) -> bool:
    return any(f.level == PROBLEM for f in findings)


def first_problem(findings: list[Finding]) -> Finding | None:
    """The finding a one-line view shows: the first problem, else the first warning."""
    for level in (PROBLEM, WARNING):
        for finding in findings:
            if finding.level == level:
                return finding
    return None


def _query_nvml(load: Callable[[], Any]) -> _Nvml:
    try:
        nvml = load()
        init_nvml(nvml)
        handles = device_handles(nvml, nvml.nvmlDeviceGetCount())
    except ImportError as error:
        return _Nvml(error=f"nvidia-ml-py is not installed ({error})")
    except Exception as error:
        return _Nvml(error=nvml_failure(error))
    result = _Nvml(uuids=[nvml_value(nvml.nvmlDeviceGetUUID, h) or "" for h in handles])
    result.cuda_driver = cuda_version_string(nvml_value(nvml.nvmlSystemGetCudaDriverVersion))
    result.mig = [i for i, h in enumerate(handles) if (nvml_value(nvml.nvmlDeviceGetMigMode, h) or (0,))[0]]
    return result


def _check_torch_build(torch: TorchFacts | None, nvml: _Nvml) -> Finding:
    fix = "Install a CUDA build: " + install_command(torch.version if torch else None, nvml.cuda_driver) + "."
    if torch is None:
        return Finding("torch build", PROBLEM, "torch is not installed.", fix)
    if not torch.cuda:
        return Finding(
            "torch build", PROBLEM, f"torch {torch.version} is a CPU-only build (torch.version.cuda is None).", fix
        )
    return Finding("torch build", OK, f"torch {torch.version} built for CUDA {torch.cuda}.")


def _check_nvml(nvml: _Nvml) -> Finding:
    if nvml.error:
        return Finding(
            "NVIDIA driver",
            PROBLEM,
            f"NVML unavailable: {nvml.error}.",
            "On a host: install the NVIDIA driver (nvidia-smi must work). In Docker: start the "
            "container with --gpus all and the NVIDIA Container Toolkit; in Kubernetes: request "
            "nvidia.com/gpu and use the nvidia runtime class.",
        )
    if not nvml.uuids:
        return Finding(
            "NVIDIA driver",
            PROBLEM,
            "The driver is loaded but reports no GPU.",
            "Check nvidia-smi on the host; in a container, check NVIDIA_VISIBLE_DEVICES.",
        )
    return Finding("NVIDIA driver", OK, f"NVML sees {len(nvml.uuids)} GPU(s).")


def _check_device_nodes(dev_dir: Path) -> Finding:
    nodes = sorted(p.name for p in dev_dir.glob("nvidia*")) if dev_dir.is_dir() else []
    gpus = [n for n in nodes if n[len("nvidia") :].isdigit()]
    if not gpus:
        return Finding(
            "device files",
            PROBLEM,
            f"No {dev_dir}/nvidia[0-9]* device files.",
            "The container was started without GPU access: use docker run --gpus all "
            "(or --runtime=nvidia); on a host, load the driver (nvidia-modprobe).",
        )
    missing = [n for n in ("nvidiactl", "nvidia-uvm") if n not in nodes]
    if missing:
        return Finding(
            "device files",
            WARNING,
            f"{', '.join(gpus)} present but {', '.join(missing)} missing.",
            "CUDA needs nvidiactl and nvidia-uvm: run nvidia-modprobe -u -c=0 on the host.",
        )
    return Finding("device files", OK, f"{', '.join(gpus)}, nvidiactl, nvidia-uvm present.")


def _check_nouveau(proc_modules: Path) -> Finding:
    try:
        loaded = any(line.split(" ", 1)[0] == "nouveau" for line in proc_modules.read_text().splitlines())
    except OSError:
        return Finding("nouveau", OK, f"{proc_modules} not readable here (containers hide it); skipped.")
    if loaded:
        return Finding(
            "nouveau",
            PROBLEM,
            "The open-source nouveau driver is loaded; it blocks the NVIDIA driver.",
            "Blacklist it: echo 'blacklist nouveau' > /etc/modprobe.d/blacklist-nouveau.conf, "
            "update-initramfs -u, reboot.",
        )
    return Finding("nouveau", OK, "nouveau is not loaded.")


def _check_visible_devices(env: Mapping[str, str], nvml: _Nvml) -> Finding:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    name = "CUDA_VISIBLE_DEVICES"
    if raw is None:
        return Finding(name, OK, "Not set: every GPU is visible.")
    if not raw.strip():
        return Finding(
            name,
            PROBLEM,
            "Set but empty: it hides every GPU from CUDA.",
            "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0,1.",
        )
    if nvml.error:
        return Finding(name, WARNING, f"Set to {raw!r}; cannot check it without NVML.")
    visible = parse_visible_devices(raw, nvml.uuids)
    if visible.invalid is not None:
        shown = ", ".join(map(str, visible.order)) or "none"
        return Finding(
            name,
            PROBLEM,
            f"Entry {visible.invalid!r} of {raw!r} matches no GPU; CUDA ignores it and everything "
            f"after it (visible: {shown}).",
            f"Use indices 0..{len(nvml.uuids) - 1} or GPU UUIDs from %gpu_status.",
        )
    hidden = len(nvml.uuids) - len(visible.order) if not visible.mig else 0
    if hidden > 0:
        return Finding(
            name,
            WARNING,
            f"{raw!r} hides {hidden} of {len(nvml.uuids)} GPU(s).",
            "Intended? unset CUDA_VISIBLE_DEVICES to use every GPU.",
        )
    return Finding(name, OK, f"{raw!r}: all listed GPUs exist.")


def _check_driver_cuda(torch: TorchFacts | None, nvml: _Nvml) -> Finding:
    name = "driver vs torch CUDA"
    if not (torch and torch.cuda and nvml.cuda_driver):
        return Finding(name, OK, "Not applicable (needs a CUDA build of torch and a driver).")
    have, need = _version_tuple(nvml.cuda_driver), _version_tuple(torch.cuda)
    fix = (
        f"Upgrade the NVIDIA driver to one supporting CUDA {torch.cuda}, or install a torch build for "
        f"CUDA {nvml.cuda_driver} or older."
    )
    if have[0] < need[0]:
        return Finding(name, PROBLEM, f"Driver supports CUDA {nvml.cuda_driver}; torch needs CUDA {torch.cuda}.", fix)
    if have < need:
        return Finding(
            name,
            WARNING,
            f"Driver supports CUDA {nvml.cuda_driver}, older than torch's {torch.cuda}: "
            "works through minor-version compatibility, but PTX JIT kernels may fail.",
            fix,
        )
    return Finding(name, OK, f"Driver supports CUDA {nvml.cuda_driver} >= torch's {torch.cuda}.")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _check_cudnn_nccl(torch: TorchFacts | None) -> Finding:
    name = "cuDNN / NCCL"
    if not (torch and torch.cuda):
        return Finding(name, OK, "Not applicable to a CPU-only torch.")
    missing = [lib for lib, version in (("cuDNN", torch.cudnn), ("NCCL", torch.nccl)) if not version]
    if missing:
        return Finding(
            name,
            WARNING,
            f"{' and '.join(missing)} not found"
            + ("; DDP will fall back to gloo (slow)." if "NCCL" in missing else "."),
            "Install torch's CUDA wheels with their nvidia-cudnn/nvidia-nccl dependencies "
            "(pip install --force-reinstall torch ...).",
        )
    return Finding(name, OK, f"cuDNN {torch.cudnn}, NCCL {torch.nccl}.")


def _check_shm(shm_dir: Path, shm_bytes: Callable[[Path], int | None]) -> Finding:
    size = shm_bytes(shm_dir)
    if size is None:
        return Finding(
            "/dev/shm",
            WARNING,
            f"{shm_dir} is missing; DataLoader workers need shared memory.",
            "Start the container with --shm-size=16g or --ipc=host.",
        )
    if size < MIN_SHM_BYTES:
        return Finding(
            "/dev/shm",
            WARNING,
            f"{shm_dir} is {size / 2**20:.0f} MiB; DataLoader workers (num_workers>0) crash "
            "with 'bus error' below ~1 GiB (Docker's default is 64 MiB).",
            "Start the container with --shm-size=16g or --ipc=host (compose: shm_size: 16gb).",
        )
    return Finding("/dev/shm", OK, f"{shm_dir} is {size / 2**30:.1f} GiB.")


def _check_cuda_initialised(torch: TorchFacts | None) -> Finding:
    name = "CUDA in this process"
    if torch and torch.cuda_initialized:
        return Finding(
            name,
            WARNING,
            "CUDA is already initialised in this kernel: fork-based launchers "
            "(notebook_launcher, ddp_notebook) will fail.",
            "Use %%train --nproc N (runs real torchrun, no fork) or restart the kernel.",
        )
    return Finding(name, OK, "CUDA not initialised in this process.")


def _check_mig(nvml: _Nvml) -> Finding:
    if nvml.mig:
        gpus = ", ".join(map(str, nvml.mig))
        return Finding(
            "MIG",
            WARNING,
            f"MIG mode is enabled on GPU {gpus}: each process sees one MIG instance, and NCCL cannot span instances.",
            "Address instances by MIG UUID in CUDA_VISIBLE_DEVICES (nvidia-smi -L), or "
            "disable MIG (nvidia-smi -mig 0) for multi-GPU DDP.",
        )
    return Finding("MIG", OK, "MIG is not enabled.")
