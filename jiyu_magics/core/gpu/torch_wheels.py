"""Which PyTorch wheel index to install a CUDA build from, for this torch and this driver.

PyTorch publishes each release for a few CUDA versions (``https://download.pytorch.org/whl/cuXYZ``).
A driver runs a CUDA build whose version is at most the driver's CUDA version (what NVML and
``nvidia-smi`` report), so the best index is the newest one the release has that the driver can
run. The table lists what PyTorch published per release; a release newer than the table uses
its last row (PyTorch keeps the newest CUDA versions going forward).
"""

from __future__ import annotations

import re

INDEX = "https://download.pytorch.org/whl/{tag}"
# torch minor version -> the CUDA versions its wheels were published for
PUBLISHED: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 3): ("11.8", "12.1"),
    (2, 4): ("11.8", "12.1", "12.4"),
    (2, 5): ("11.8", "12.1", "12.4"),
    (2, 6): ("11.8", "12.4", "12.6"),
    (2, 7): ("11.8", "12.6", "12.8"),
    (2, 8): ("12.6", "12.8", "12.9"),
    (2, 9): ("12.6", "12.8", "13.0"),
    (2, 10): ("12.6", "12.8", "13.0"),
    (2, 11): ("12.6", "12.8", "13.0"),
}


def _version(text: str | None) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def cuda_builds(torch_version: str | None) -> tuple[str, ...]:
    """The CUDA versions ``torch_version`` was published for (the newest release's when unknown)."""
    release = _version(torch_version)
    known = sorted(PUBLISHED)
    older_or_same = [k for k in known if release is not None and k <= release]
    return PUBLISHED[older_or_same[-1] if older_or_same else known[-1 if release is None else 0]]


def wheel_tag(torch_version: str | None, driver_cuda: str | None) -> str | None:
    """``cu128`` for torch 2.7 on a driver of CUDA 12.8 or newer; None when the driver is too
    old for every build of that release, or unknown."""
    driver = _version(driver_cuda)
    if driver is None:
        return None
    runnable = [c for c in cuda_builds(torch_version) if (build := _version(c)) is not None and build <= driver]
    return "cu" + runnable[-1].replace(".", "") if runnable else None


def install_command(torch_version: str | None, driver_cuda: str | None) -> str:
    """The one-line fix for a CPU-only torch: the same release, from the index the driver can run."""
    release = (torch_version or "").split("+")[0]
    package = f"torch=={release}" if _version(release) else "torch"
    tag = wheel_tag(torch_version, driver_cuda)
    if tag:
        return f"pip install {package} --index-url {INDEX.format(tag=tag)}"
    builds = ", ".join("cu" + c.replace(".", "") for c in cuda_builds(torch_version))
    if driver_cuda:
        return (
            f"the driver supports CUDA {driver_cuda}, older than every build of torch {release or '(latest)'} "
            f"({builds}): update the NVIDIA driver, or install an older torch"
        )
    return (
        f"pip install {package} --index-url {INDEX.format(tag='cuXYZ')}, with the tag your driver supports "
        f"({builds} for this release; the driver's CUDA version is in nvidia-smi)"
    )
