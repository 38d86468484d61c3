"""A shared GPU box for the lease and queue tests, through the NVML test double
(tests/nvml_double/pynvml.py: this machine has no NVIDIA driver): N identical GPUs whose process
lists name real processes the test started (kernels, a ``sleep`` standing in for someone
else's training), read by every process the test starts (supervisors, CLI, servers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

GIB = 2**30


def uuid_of(index: int) -> str:
    """The double's UUID of GPU ``index`` on a shared box."""
    return f"GPU-00000000-0000-0000-0000-{index:012d}"


class GpuBox:
    def __init__(self, state: Path, count: int):
        self.state, self.count = state, count
        self.processes: dict[str, list[list[int]]] = {}
        self.util: dict[str, int] = {}
        self.host: dict[str, list[list[int]]] = {}
        self._write()

    def hold(self, gpu: int, pid: int, used: int) -> None:
        """Process ``pid`` holds ``used`` bytes on GPU ``gpu`` (NVML lists it while it lives)."""
        self.processes.setdefault(str(gpu), []).append([pid, used])
        self._write()

    def hold_from_host(self, gpu: int, pid: int, used: int) -> None:
        """A pid NVML reports from outside this container's process table (listed, alive or not)."""
        self.host.setdefault(str(gpu), []).append([pid, used])
        self._write()

    def release(self, gpu: int, pid: int) -> None:
        self.processes[str(gpu)] = [p for p in self.processes.get(str(gpu), []) if p[0] != pid]
        self._write()

    def set_util(self, gpu: int, percent: int) -> None:
        self.util[str(gpu)] = percent
        self._write()

    def _write(self) -> None:
        temp = self.state.with_suffix(".tmp")
        temp.write_text(json.dumps({"processes": self.processes, "util": self.util, "host_processes": self.host}))
        os.replace(temp, self.state)


def configure(monkeypatch, folder: Path, count: int) -> GpuBox:
    """``count`` GPUs for this process and every process it starts (the double must be on the
    path already: the ``nvml_double`` fixture)."""
    state = folder / "nvml_processes.json"
    monkeypatch.setenv("JIYU_NVML_DOUBLE_GPUS", str(count))
    monkeypatch.setenv("JIYU_NVML_DOUBLE_PROCESSES", str(state))
    return GpuBox(state, count)
