"""Sharing a GPU box, in a real JupyterLab driven through headless Chromium: the panel's GPU cards
name the notebook whose kernel holds a GPU (with its memory, idle time and warning) and the run
leasing the other one; "Shut down kernel" asks first, then really ends that kernel. And a queued
run survives a restart of the Jupyter server. The GPUs come from the NVML test double (no driver
here), configured as a shared box whose process lists name the real kernel's and rank's pids.
Screenshots: test-artifacts/lab_gpu_owners*.png (docs/img/ for the documentation)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import psutil
from playwright.sync_api import expect, sync_playwright

from jiyu_magics.core.runs.files import store_path
from jiyu_magics.core.store.run_store import RunStore

from .conftest import NVML_DOUBLE_DIR, ROOT
from .gpu_box import GIB, GpuBox
from .jobs_workload import wait_for, write_notebook
from .lab_runner import jupyter_lab, launch_chromium

PANEL = "#jiyu-panel"
PYTHON3 = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def shared_box_env(folder) -> tuple[dict, GpuBox]:
    state = folder / "nvml_processes.json"
    return {"JIYU_NVML_DOUBLE_GPUS": "2", "JIYU_NVML_DOUBLE_PROCESSES": str(state)}, GpuBox(state, 2)


def rest(lab, *path: str, method: str = "GET", data: dict | None = None):
    request = urllib.request.Request(
        f"{lab.url}{'/'.join(path)}",
        method=method,
        data=None if data is None else json.dumps(data).encode(),
        headers={"Authorization": f"token {lab.token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        text = reply.read()
    return json.loads(text) if text else None


def kernel_pid(kernel_id: str) -> int:
    """The kernel's process, found by its connection file (read from the process table)."""
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(f"kernel-{kernel_id}.json" in part for part in proc.info["cmdline"] or []):
            return proc.info["pid"]
    raise AssertionError(f"no process for kernel {kernel_id}")


def submit(lab, box_env: dict, notebook, *args: str) -> str:
    env = {**lab.env(), **box_env, "PYTHONPATH": f"{NVML_DOUBLE_DIR}:{ROOT}"}
    jiyu = str(sys.executable).rsplit("/", 1)[0] + "/jiyu"
    done = subprocess.run(
        [jiyu, "submit", str(notebook), *args], env=env, capture_output=True, text=True, timeout=60, cwd=lab.root
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]


def test_gpu_cards_name_the_notebook_holding_a_gpu_and_shut_its_kernel_down(tmp_path, artifacts, torchrun_tmp):
    env, box = shared_box_env(tmp_path)
    with (
        jupyter_lab(
            tmp_path,
            {"refreshInterval": 1},
            env={**env, "TMPDIR": str(torchrun_tmp)},
            args=("--JiyuApp.kernel_idle_warning=0",),
        ) as lab,
        sync_playwright() as playwright,
    ):
        (lab.root / "shared-box.ipynb").write_text(
            json.dumps({"cells": [], "metadata": PYTHON3, "nbformat": 4, "nbformat_minor": 5})
        )
        browser = launch_chromium(playwright)
        page = browser.new_context(viewport={"width": 1360, "height": 820}).new_page()
        page.goto(lab.entry + "&reset")
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => true)")
        page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'shared-box.ipynb'})")
        page.evaluate("() => new Promise(r => setTimeout(r, 500))")
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready.then(() => true)")
        (session,) = rest(lab, "api", "sessions")
        kernel_id = session["kernel"]["id"]
        pid = kernel_pid(kernel_id)
        box.hold(0, pid, 6 * GIB)  # the notebook's kernel keeps 6 GiB on GPU 0

        job = submit(
            lab,
            env,
            write_notebook(lab.root / "digits.ipynb"),
            "--name",
            "digits",
            "-p",
            "steps",
            "3000",
            "-p",
            "step_seconds",
            "0.1",
        )
        wait_for(lambda: RunStore(store_path(lab.home)).get(job).status == "running", 120, what="the job running")
        assert [g["index"] for g in RunStore(store_path(lab.home)).get(job).gpus] == [1]  # GPU 0 is busy
        rank_file = lab.home / "runs" / job / "ranks" / "0.json"
        wait_for(rank_file.exists, 120, what="the job's rank")
        box.hold(1, json.loads(rank_file.read_text())["pid"], 3 * GIB)
        waiting = submit(lab, env, lab.root / "digits.ipynb", "--name", "wide", "--gpus", "2", "-p", "steps", "3")

        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jiyu-panel"]').click()
        panel = page.locator(PANEL)
        card0, card1 = panel.locator(".jp-JiyuGpu").nth(0), panel.locator(".jp-JiyuGpu").nth(1)
        expect(card0).to_contain_text("shared-box.ipynb", timeout=30_000)
        expect(card0).to_contain_text(f"kernel {kernel_id[:8]} · shared-box.ipynb")
        expect(card0).to_contain_text("6.0 GiB")
        expect(card0.locator(".jp-JiyuProc-idle")).to_contain_text("idle")
        expect(card0).to_contain_text("Busy: 6.0 GiB held outside jiyu")
        expect(card1).to_contain_text(f"Leased by run digits ({job}, job) · digits.ipynb since")
        expect(card1.locator(".jp-JiyuProc-owner")).to_have_text(f"run digits ({job}, job) · digits.ipynb")
        expect(panel.locator(".jp-JiyuPanel-warning")).to_contain_text("shared-box.ipynb holds 6.0 GiB on GPU 0")
        row = panel.locator(f'li.jp-JiyuRun[data-run-id="{job}"]')
        expect(row.locator(".jp-JiyuRun-gpus")).to_have_text("GPU 1")
        queued = panel.locator(f'li.jp-JiyuRun[data-run-id="{waiting}"]')
        expect(queued.locator(".jp-JiyuChip")).to_have_text("queued #1")
        expect(queued.locator(".jp-JiyuRun-gpus")).to_have_text("waits for 2 GPUs")
        expect(row.locator(".jp-JiyuRun-step")).to_contain_text("step", timeout=60_000)
        page.screenshot(path=artifacts / "lab_gpu_owners.png")

        card0.get_by_role("button", name="Shut down kernel of shared-box.ipynb").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Shut down the kernel of shared-box.ipynb?")
        expect(dialog).to_contain_text("holds 6.0 GiB on GPU 0")
        page.screenshot(path=artifacts / "lab_gpu_owners_shutdown_dialog.png")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_have_count(0)
        assert psutil.pid_exists(pid) and [k["id"] for k in rest(lab, "api", "kernels")] == [kernel_id]

        card0.get_by_role("button", name="Shut down kernel of shared-box.ipynb").click()
        dialog.get_by_role("button", name="Shut down kernel").click()
        wait_for(lambda: rest(lab, "api", "kernels") == [], 30, what="the kernel shut down")
        wait_for(
            lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
            30,
            what="the kernel's process gone",
        )
        expect(card0.locator(".jp-JiyuGpu-holder")).to_have_text("Free", timeout=30_000)
        for run in (waiting, job):
            rest(lab, "jiyu", "api", "runs", run, "stop", method="POST", data={})
        assert RunStore(store_path(lab.home)).get(waiting).started is None  # it never got its 2 GPUs
        browser.close()


def test_a_queued_run_survives_a_restart_of_the_jupyter_server(tmp_path, torchrun_tmp):
    env, _ = shared_box_env(tmp_path)
    env["TMPDIR"] = str(torchrun_tmp)
    with jupyter_lab(tmp_path, {}, env=env) as lab:
        write_notebook(lab.root / "t.ipynb")
        holder = rest(
            lab,
            "jiyu",
            "api",
            "runs",
            method="POST",
            data={"notebook": "t.ipynb", "gpus": 2, "name": "holder", "param_lines": ["steps = 3000"]},
        )
        waiting = rest(
            lab,
            "jiyu",
            "api",
            "runs",
            method="POST",
            data={"notebook": "t.ipynb", "gpus": 1, "name": "waiting", "param_lines": ["steps = 3"]},
        )
        wait_for(lambda: RunStore(store_path(lab.home)).get(holder["id"]).status == "running", 120)
    with jupyter_lab(tmp_path / "again", {}, env={**env, "JIYU_HOME": str(lab.home)}) as again:
        runs = {r["id"]: r for r in rest(again, "jiyu", "api", "runs")["runs"]}
        assert (runs[waiting["id"]]["status"], runs[waiting["id"]]["queue_position"]) == ("queued", 1)
        rest(again, "jiyu", "api", "runs", holder["id"], "stop", method="POST", data={})
        wait_for(
            lambda: RunStore(store_path(lab.home)).get(waiting["id"]).status in ("running", "succeeded"),
            120,
            what="the queued run starting after the restart",
        )
        done = wait_for(
            lambda: (lambda r: r if not r.active else None)(RunStore(store_path(lab.home)).get(waiting["id"])), 180
        )
        assert done.status == "succeeded"
