"""A team's JupyterHub on one box: a real JupyterHub (configurable-http-proxy from npm, the
LocalProcessSpawner) starts alice's and bob's single-user servers as those Unix users, each
with jiyu's server extension; the box's book keeper and the NVML test double (no driver on
this machine) are as in tests/test_box_users.py.

bob submits a job from his server; alice's server, her panel in a real JupyterLab (headless
Chromium, logged in through the hub's own login page) and her REST calls see bob's lease as
bob's (user, kind, time: nothing of his run's name or notebook), and her Stop on it is refused
in one line. Screenshot: test-artifacts/box_hub_panel.png.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from playwright.sync_api import expect, sync_playwright

from .hub_runner import PASSWORD, jupyterhub_path, proxy_command, start_hub, stop_hub
from .jobs_workload import write_notebook
from .lab_runner import launch_chromium, write_user_settings
from .test_box_users import team  # noqa: F401 - the module's users and box (a fixture)
from .unix_users import ROOT, can_make_users, wait_until

pytestmark = pytest.mark.skipif(
    not os.environ.get("JIYU_REQUIRE_SERVICES")
    and (not can_make_users() or jupyterhub_path() is None or proxy_command() is None),
    reason="needs root (Unix users), jupyterhub (pip) and configurable-http-proxy (npm)",
)


@pytest.fixture(scope="module")
def hub(team):  # noqa: F811 - the fixture imported above
    labext = team.root / "hub" / "jupyter-data" / "labextensions"
    labext.mkdir(parents=True)
    (labext / "jiyu-magics").symlink_to(ROOT / "jiyu_magics" / "labextension")  # this tree's panel
    for user in ("alice", "bob"):
        settings = team.home(user) / ".jupyter" / "lab" / "user-settings"
        write_user_settings(settings, {"refreshInterval": 1})
        for path in [team.home(user) / ".jupyter", *(team.home(user) / ".jupyter").rglob("*")]:
            os.chown(path, team.uids[user], -1)
    env = {k: v for k, v in team.env("alice", team.extra).items() if k not in ("HOME", "USER", "LOGNAME", "TMPDIR")}
    started = start_hub(team.root / "hub", team, env)
    try:
        yield started
    finally:
        stop_hub(started)


def test_alices_server_and_panel_show_bobs_lease_as_bobs_and_refuse_her_stop(team, hub, artifacts):  # noqa: F811
    alice, bob = team.login("alice"), team.login("bob")
    alice_token, bob_token = hub.start_server(alice), hub.start_server(bob)
    notebook = team.home("bob") / "secret-project.ipynb"
    write_notebook(notebook, steps=3000, step_seconds=0.1)
    os.chown(notebook, team.uids["bob"], -1)
    status, run = hub.api(f"user/{bob}/jiyu/api/runs", "POST", {"notebook": notebook.name, "gpus": 1}, token=bob_token)
    assert status == 201, run
    bob_run = run["id"]

    def bobs_lease():
        status, snap = hub.api(f"user/{alice}/jiyu/api/gpus", token=alice_token)
        assert status == 200, snap
        leases = [lease for d in snap["devices"] for lease in d["leases"]]
        return leases[0] if leases else None

    lease = wait_until(bobs_lease, 180, what="bob's lease in alice's server")
    assert (lease["user"], lease["mine"], lease["run_kind"], lease["index"]) == (bob, False, "job", 0)
    assert lease["run_name"] is None and lease["notebook"] is None and lease["reported_memory"] is None
    status, refused = hub.api(f"user/{alice}/jiyu/api/runs/{bob_run}/stop", "POST", {}, token=alice_token)
    assert status == 403 and refused["message"] == f"run {bob_run} is {bob}'s: only {bob} can see, change or stop it"
    status, _ = hub.api(f"user/{alice}/jiyu/api/runs/{bob_run}/log", token=alice_token)
    assert status == 403
    status, _ = hub.api(f"user/{bob}/api/contents", token=alice_token)
    assert status == 403  # her token does not open his server
    status, _ = hub.api(f"user/{alice}/api/contents", token=bob_token)
    assert status == 403

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_context(viewport={"width": 1360, "height": 820}).new_page()
        page.goto(f"{hub.url}hub/login")
        page.fill("input[name=username]", alice)
        page.fill("input[name=password]", PASSWORD)
        page.click("input[type=submit], button[type=submit]")
        page.wait_for_url(f"**/user/{alice}/lab**", timeout=120_000)
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=120_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => true)")
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jiyu-panel"]').click()
        card = page.locator("#jiyu-panel .jp-JiyuGpu").nth(0)
        held = card.locator(f'.jp-JiyuGpu-lease[data-user="{bob}"]')
        expect(held).to_contain_text(f"Leased by {bob}, job, ", timeout=60_000)
        expect(card).not_to_contain_text("secret-project")
        held.get_by_role("button", name="Stop the run leasing GPU 0").click()
        page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
        refusal = f"Could not stop {bob}, job, "
        page.locator(".jp-Notification-Status").click()  # the status bar's bell: the notification list
        listed = page.locator(".jp-Notification-List")
        expect(listed).to_contain_text(refusal, timeout=30_000)
        expect(listed).to_contain_text(f"run {bob_run} is {bob}'s: only {bob} can see, change or stop it")
        page.screenshot(path=artifacts / "box_hub_panel.png")
        browser.close()

    status, still = hub.api(f"user/{bob}/jiyu/api/runs/{bob_run}", token=bob_token)
    assert status == 200 and still["status"] == "running"  # her attempts changed nothing
    status, stopped = hub.api(f"user/{bob}/jiyu/api/runs/{bob_run}/stop", "POST", {}, token=bob_token)
    assert status == 200 and stopped["status"] == "stopped", stopped
    log = json.loads(
        team.jiyu("carol", "box", "log", "--json", "--limit", "500", extra=team.extra).stdout
    )  # carol is the box's admin: every change, each with who made it
    assert [c["by"] for c in log if c["run_id"] == bob_run] == [bob, bob, bob]  # queued, leased, released


def test_an_admin_reclaims_an_idle_kernel_holding_gpu_memory_and_never_a_busy_one(team, hub):  # noqa: F811
    from jupyter_client import BlockingKernelClient

    alice, bob, carol = (team.login(u) for u in ("alice", "bob", "carol"))
    token = hub.user_tokens.get(alice) or hub.start_server(alice)
    (team.box / "policy.yaml").write_text(
        f"group: {team.group}\nadmins: [{carol}]\nidle_kernel_minutes: 0.05\n"  # 3 s: idle soon
    )
    kernels = {}
    for name in ("idle", "busy"):
        status, kernel = hub.api(f"user/{alice}/api/kernels", "POST", {"name": "python3"}, token=token)
        assert status == 201, kernel
        kernels[name] = kernel["id"]
    pids = {name: _kernel_process(kid) for name, kid in kernels.items()}
    team.gpus.hold(1, pids["idle"].pid, 2 * 2**30)
    team.gpus.hold(1, pids["busy"].pid, 2 * 2**30)
    clients = {}
    for name, proc in pids.items():  # as a notebook connects: the kernel answers and turns idle
        clients[name] = BlockingKernelClient(connection_file=_connection_file(proc))
        clients[name].load_connection_file()
        clients[name].start_channels(hb=False)  # a heartbeat late under load reads as a dead kernel
        clients[name].wait_for_ready(timeout=60)
    clients["busy"].execute("import time; time.sleep(120)")  # a running cell, as from its notebook
    try:

        def listed():
            idle = json.loads(team.jiyu("carol", "box", "idle", "--json", extra=team.extra).stdout)["kernels"]
            found = {k["kernel_id"]: k for k in idle if k["user"] == alice}
            ok = found.get(kernels["idle"], {}).get("over_limit") and found.get(kernels["busy"], {}).get("busy")
            return found if ok else None

        found = wait_until(listed, 90, what="alice's kernels in the box's idle list")
        assert found[kernels["idle"]]["memory"] == 2 * 2**30 and found[kernels["idle"]]["gpus"] == [1]
        status, snap = hub.api(f"user/{alice}/jiyu/api/gpus", token=token)
        assert snap["idle_warning_s"] == 3.0  # the box's policy, not the server's own setting
        assert [k["idle_warning"] for k in snap["kernels"] if k["kernel_id"] == kernels["idle"]] == [True]
        mine = json.loads(team.jiyu("bob", "box", "idle", "--json", extra=team.extra).stdout)["kernels"]
        assert [k for k in mine if k["user"] == alice] == []  # a member sees their own kernels only

        refused = team.jiyu("bob", "box", "reclaim", alice, kernels["idle"][:8], extra=team.extra)
        assert refused.returncode == 2 and "is not an admin of this box" in refused.stderr
        busy = team.jiyu("carol", "box", "reclaim", alice, kernels["busy"][:8], extra=team.extra)
        assert busy.returncode == 2 and "is running a cell: it is never reclaimed" in busy.stderr
        done = team.jiyu("carol", "box", "reclaim", alice, kernels["idle"][:8], extra=team.extra)
        assert done.returncode == 0, done.stderr

        def running_kernels():
            status, listed_now = hub.api(f"user/{alice}/api/kernels", token=token)
            return {k["id"] for k in listed_now}

        wait_until(lambda: kernels["idle"] not in running_kernels(), 60, what="the idle kernel shut down by her server")
        assert kernels["busy"] in running_kernels() and pids["busy"].is_running()
        log = json.loads(team.jiyu("carol", "box", "log", "--json", extra=team.extra).stdout)
        assert [(c["by"], c["action"]) for c in log if c["action"].startswith("reclaim")] == [
            (carol, "reclaim"),
            (alice, "reclaimed"),
        ]
    finally:
        for client in clients.values():
            client.stop_channels()
        team.gpus.release(1, pids["idle"].pid)
        team.gpus.release(1, pids["busy"].pid)


def _kernel_process(kernel_id: str):
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        if any(f"kernel-{kernel_id}.json" in part for part in proc.info["cmdline"] or []):
            return proc
    raise AssertionError(f"no process for kernel {kernel_id}")


def _connection_file(proc) -> str:
    return next(part for part in proc.cmdline() if part.endswith(".json") and "kernel-" in part)


def test_a_kernel_holding_gpu_memory_while_idle_says_so_in_its_notebook(team, hub):  # noqa: F811
    from jupyter_client import BlockingKernelClient

    alice, carol = team.login("alice"), team.login("carol")
    token = hub.user_tokens.get(alice) or hub.start_server(alice)
    (team.box / "policy.yaml").write_text(f"group: {team.group}\nadmins: [{carol}]\nidle_kernel_minutes: 0.05\n")
    status, kernel = hub.api(f"user/{alice}/api/kernels", "POST", {"name": "python3"}, token=token)
    assert status == 201, kernel
    proc = _kernel_process(kernel["id"])
    client = BlockingKernelClient(connection_file=_connection_file(proc))
    client.load_connection_file()
    client.start_channels(hb=False)  # a heartbeat late under load reads as a dead kernel
    try:
        client.wait_for_ready(timeout=60)
        # the notice looks every minute; the test's kernel looks every half second
        client.execute_interactive(
            "import jiyu_magics.magics.idle_notice as notice\nnotice.CHECK_EVERY_S = 0.5\n%load_ext jiyu_magics",
            timeout=60,
        )
        team.gpus.hold(1, proc.pid, 2 * 2**30)  # the model it trained stays on GPU 1
        deadline, said = time.monotonic() + 60, []
        while time.monotonic() < deadline and not said:
            try:
                msg = client.get_iopub_msg(timeout=1)
            except Exception:  # queue.Empty: nothing yet
                continue
            if msg["msg_type"] == "stream" and "jiyu: this kernel has held" in msg["content"]["text"]:
                said.append(msg["content"]["text"])
        assert said, "no notice in the notebook"
        assert said[0].startswith("jiyu: this kernel has held 2.0 GiB on GPU 1 while idle for 0 min;")
        assert "an admin of the box may reclaim it" in said[0]
    finally:
        client.stop_channels()
        team.gpus.release(1, proc.pid)
        hub.api(f"user/{alice}/api/kernels/{kernel['id']}", "DELETE", token=token)
