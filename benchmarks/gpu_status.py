"""Snapshot latency of ``%gpu_status`` (NVML in-process) against an ``nvidia-smi`` subprocess.

Prints medians over interleaved repetitions and their ratio. Where no GPU is present it says
so and measures the no-driver answer instead (the one-line reply must take milliseconds).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time

from jiyu_magics.core.gpu import snapshot as gpu
from jiyu_magics.views import gpu_table as view

QUERY = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm"
)


def timed(fn, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main(repeat: int = 30) -> None:
    first = time.perf_counter()
    snap = gpu.snapshot()
    first = time.perf_counter() - first
    if not snap.available:
        answer = statistics.median(timed(lambda: view.render_text(gpu.snapshot()), repeat))
        print(f"no GPU present ({snap.reason}); nothing to compare with nvidia-smi")
        print(f"no-driver answer: first call {first * 1e3:.2f} ms, median {answer * 1e3:.3f} ms over {repeat}")
        return
    smi = shutil.which("nvidia-smi")
    ours, theirs = [], []
    for _ in range(repeat):  # interleaved, so drift hits both alike
        ours += timed(lambda: view.render_text(gpu.snapshot()), 1)
        if smi:
            theirs += timed(
                lambda: subprocess.run([smi, f"--query-gpu={QUERY}", "--format=csv"], capture_output=True, check=True),
                1,
            )
    m_ours = statistics.median(ours)
    print(f"{len(snap.devices)} GPU(s); first snapshot (NVML init) {first * 1e3:.1f} ms")
    print(f"%gpu_status snapshot+render median: {m_ours * 1e3:.2f} ms over {repeat}")
    if theirs:
        m_theirs = statistics.median(theirs)
        print(f"nvidia-smi --query-gpu subprocess median: {m_theirs * 1e3:.2f} ms over {repeat}")
        print(f"ratio nvidia-smi / %gpu_status: {m_theirs / m_ours:.1f}x")


if __name__ == "__main__":
    main()
