"""%load_ext + %gpu_status + %gpu_doctor in a notebook executed by nbclient in a real ipykernel."""

import pytest

from .notebook_runner import execute, html_of, notebook, text_of


@pytest.mark.driverless
def test_notebook_on_this_driverless_machine(tmp_path):
    nb = execute(
        notebook(
            "%load_ext jiyu_magics",
            "%gpu_status",
            "%gpu_doctor",
            "snap = %gpu_status --json\nprint(snap['available'], 'torch' in __import__('sys').modules)",
        ),
        cwd=tmp_path,
    )
    status, doctor, probe = nb.cells[1], nb.cells[2], nb.cells[3]
    assert "No NVIDIA GPU visible: " in html_of(status) and "Run %gpu_doctor." in html_of(status)
    assert "FAIL" in html_of(doctor) and "fix:" in html_of(doctor)
    assert text_of(probe).strip() == "False False"  # no GPU, and the magics did not import torch


def test_notebook_tables_and_live_watch(tmp_path, nvml_double):
    """The kernel inherits PYTHONPATH with the NVML test double (no driver on this machine)."""
    nb = execute(
        notebook(
            "%load_ext jiyu_magics",
            "%gpu_status",
            "%gpu_status --watch 0.2",
            "import time; time.sleep(1.5)\n"
            "w = get_ipython().magics_manager.registry['GpuMagics'].watch\n"
            "print('refreshes', w.refreshes)\nw.stop()\nprint(w.label.value)",
        ),
        cwd=tmp_path,
        store_widget_state=True,
    )
    table = html_of(nb.cells[1])
    assert "NVIDIA H100 80GB HBM3" in table and "Tesla T4" in table and "(this kernel)" in table
    assert table.count('role="meter"') == 2
    watch_outputs = nb.cells[2].outputs
    assert len(watch_outputs) == 1, "the watch must be one widget, not a pile of outputs"
    assert "application/vnd.jupyter.widget-view+json" in watch_outputs[0].data
    refreshes = int(text_of(nb.cells[3]).split()[1])
    assert 3 <= refreshes <= 10  # refreshed by the clock (0.2 s) during the 1.5 s wait
    assert "stopped after" in text_of(nb.cells[3])
    states = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    html_values = [s["state"].get("value", "") for s in states.values() if s["model_name"] == "HTMLModel"]
    assert any("Tesla T4" in v for v in html_values)
