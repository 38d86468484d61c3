"""On a shared box, a kernel that keeps GPU memory while nobody uses it says so in its notebook.

Memory a kernel holds after its training (a model left on the GPU, PyTorch's cache) keeps the
GPU busy for everyone else on the box. Once the kernel has been idle (no cell running) for the
box policy's ``idle_kernel_minutes`` while NVML lists GPU memory for it, it prints one line,
once per idle spell; it appears under the notebook's last cell (a thread's output goes to the
latest cell in ipykernel). It never interrupts anything: a running cell resets the clock, and
reclaiming the kernel is an admin's act (``jiyu box reclaim``), carried out by the user's own
Jupyter server only while the kernel is idle still.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ..core.box.client import BoxClient, BoxRefused, BoxUnreachable
from ..core.box.location import BoxLocation, find

CHECK_EVERY_S = 60.0  # how often the idle clock is looked at (NVML is read only past the limit)
POLICY_EVERY_S = 300.0  # how often the box's limit is asked for again


class IdleNotice:
    def __init__(self, shell, location: BoxLocation):
        self.location = location
        self.idle_since = time.time()
        self.running = False
        self.warned = False
        self._limit: tuple[float, float] | None = None  # (seconds, when asked)
        shell.events.register("pre_run_cell", self._cell_started)
        shell.events.register("post_run_cell", self._cell_ended)
        self._thread = threading.Thread(target=self._watch, name="jiyu-idle-notice", daemon=True)
        self._thread.start()

    def _cell_started(self, *args) -> None:
        self.running, self.warned = True, False

    def _cell_ended(self, *args) -> None:
        self.running, self.idle_since = False, time.time()

    def _watch(self) -> None:
        while True:
            time.sleep(CHECK_EVERY_S)
            try:
                line = self.check()
            except Exception:  # noqa: BLE001 - a notice must never disturb the kernel
                line = None
            if line:
                print(line, file=sys.stderr, flush=True)

    def check(self, now: float | None = None) -> str | None:
        """The line to print now, or None (a cell runs, not idle long enough, said already,
        or no GPU memory held)."""
        now = time.time() if now is None else now
        if self.running or self.warned:
            return None
        limit = self.limit(now)
        idle = now - self.idle_since
        if limit is None or idle < limit:
            return None
        held = gpu_memory(os.getpid())
        if not held:
            return None
        self.warned = True
        where = ", ".join(f"{mib / 1024:.1f} GiB on GPU {index}" for index, mib in held.items())
        return (
            f"jiyu: this kernel has held {where} while idle for {idle / 60:.0f} min; others on this shared "
            "box may be waiting for it. Free it (del the model, torch.cuda.empty_cache()) or shut the kernel "
            f"down: past {limit / 60:g} min an admin of the box may reclaim it (jiyu box idle)."
        )

    def limit(self, now: float) -> float | None:
        if self._limit is None or now - self._limit[1] >= POLICY_EVERY_S:
            try:
                policy = BoxClient(self.location).call("status")["policy"]
                self._limit = (float(policy["idle_kernel_minutes"]) * 60.0, now)
            except (BoxUnreachable, BoxRefused):
                return None if self._limit is None else self._limit[0]
        return self._limit[0]


def gpu_memory(pid: int) -> dict[int, float]:
    """MiB this process holds on each GPU, as NVML lists it (no CUDA call)."""
    from ..core.gpu import snapshot as gpu

    held: dict[int, float] = {}
    for device in gpu.snapshot().devices:
        used = sum(p.used_memory or 0 for p in device.processes if p.pid == pid)
        if used:
            held[device.index] = used / 2**20
    return held


_started: dict[int, IdleNotice] = {}


def start(shell) -> IdleNotice | None:
    """Once per kernel, on a machine with a box."""
    location = find()
    if location is None or id(shell) in _started:
        return None
    _started[id(shell)] = IdleNotice(shell, location)
    return _started[id(shell)]
