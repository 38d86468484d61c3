"""The panel in a real JupyterLab (headless Chromium) on a CPU box: no NVIDIA driver's library,
so the panel shows the GPU doctor's finding instead of GPU cards, at the sidebar's default
width. The NVML double answers as a host without the library (``JIYU_NVML_DOUBLE_COUNT=missing``:
the same on a machine that has a GPU); the doctor's finding is this machine's own (its CPU-only
torch build). Screenshot: test-artifacts/lab_panel_cpu_box.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .lab_runner import jupyter_lab
from .test_lab_panel import PANEL, browser  # noqa: F401 (the fixture)


@pytest.fixture(scope="module")
def cpu_lab(tmp_path_factory):
    cpu_box = {"JIYU_NVML_DOUBLE_COUNT": "missing"}
    with jupyter_lab(tmp_path_factory.mktemp("cpu_lab"), {"refreshInterval": 1}, env=cpu_box) as lab:
        yield lab


def test_the_doctors_finding_fits_the_sidebar_at_its_default_width(browser, cpu_lab, artifacts):  # noqa: F811
    """The finding's fix names a long URL (the CUDA wheels' index): it overflowed the panel into
    a horizontal scrollbar, the rows under it clipped."""
    page = browser.new_context(viewport={"width": 1360, "height": 820}).new_page()
    page.goto(cpu_lab.entry + "&reset")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jiyu-panel"]').click()
    panel = page.locator(PANEL)
    doctor = panel.locator(".jp-JiyuNoGpu")
    expect(doctor).to_contain_text("No NVIDIA GPU visible", timeout=30_000)
    expect(doctor).to_contain_text("Doctor:")
    url = doctor.inner_text().split("https://", 1)
    assert len(url) == 2, "the finding names a URL: the case this test is about"
    assert panel.evaluate("n => n.scrollWidth <= n.clientWidth"), "the doctor's URL made the panel scroll sideways"
    box, side = doctor.bounding_box(), panel.bounding_box()
    assert box["x"] + box["width"] <= side["x"] + side["width"] + 1, (box, side)
    page.screenshot(path=artifacts / "lab_panel_cpu_box.png")
