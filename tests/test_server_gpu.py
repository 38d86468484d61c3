"""What the panel and /jiyu/metrics read from a real NVIDIA GPU (run by benchmarks/gpu_checks.sh
on the GPU machine; needs prometheus_client there, not jupyter_server)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.gpu


def test_panel_snapshot_and_metrics_match_the_real_gpu_without_torch():
    code = """
import json, sys
from prometheus_client.parser import text_string_to_metric_families
from jiyu_magics.server.gpu_sampler import read_gpus
from jiyu_magics.server.metrics import render
snap = read_gpus()
found = {(s.name, s.labels.get("gpu")): s.value
         for f in text_string_to_metric_families(render(snap, [], {}).decode()) for s in f.samples}
print(json.dumps({"snap": snap, "found": {f"{k[0]}|{k[1]}": v for k, v in found.items()},
                  "torch": "torch" in sys.modules}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    import json

    data = json.loads(out.stdout)
    snap, found = data["snap"], data["found"]
    assert data["torch"] is False  # NVML only: no CUDA context in the Jupyter server
    assert snap["available"] is True and snap["doctor"] is None and snap["devices"]
    first = snap["devices"][0]
    assert first["mem_total"] > 0 and first["name"]
    assert found["jiyu_nvml_up|None"] == 1
    assert found["jiyu_gpu_memory_total_bytes|0"] == first["mem_total"]
    if first["gpu_util"] is not None:
        assert 0 <= found["jiyu_gpu_utilization_ratio|0"] <= 1
    if first["power_draw"] is not None:
        assert found["jiyu_gpu_power_watts|0"] > 0
