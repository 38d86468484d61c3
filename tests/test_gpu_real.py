"""On a real GPU (skipped elsewhere): the snapshot agrees with nvidia-smi, and a tensor this
test allocates shows up under this test's own pid."""

import os
import subprocess

import pytest

from jiyu_magics.core.gpu import snapshot as gpu

pytestmark = pytest.mark.gpu
MIB = 2**20


def nvidia_smi(query: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines()]


def test_snapshot_matches_nvidia_smi():
    snap = gpu.snapshot()
    rows = nvidia_smi("index,uuid,name,memory.total,memory.used")
    assert snap.available and len(snap.devices) == len(rows)
    for device, (index, uuid, name, total, used) in zip(snap.devices, rows, strict=False):
        assert device.index == int(index) and device.uuid == uuid and device.name == name
        assert abs(device.mem_total / MIB - float(total)) <= 1
        assert abs(device.mem_used / MIB - float(used)) <= 256  # other processes may allocate between reads


def test_own_cuda_tensor_is_found_under_own_pid():
    torch = pytest.importorskip("torch")
    tensor = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    snap = gpu.snapshot(env={})
    index = (
        int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
        if os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].isdigit()
        else 0
    )
    procs = {p.pid: p for p in snap.devices[index].processes}
    assert os.getpid() in procs, f"own pid missing from {sorted(procs)} (PID namespace?)"
    mine = procs[os.getpid()]
    assert mine.mine and (mine.used_memory is None or mine.used_memory >= 512 * MIB)
    del tensor
