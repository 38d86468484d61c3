"""The image entrypoint's JupyterLab side and the healthcheck, outside Docker: a real JupyterLab
started through the entrypoint in a temporary home, real HTTP requests, a dead proxy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from .image_runner import JUPYTER_CONFIG, SYSTEM_PATH, VENV_BIN, as_root, healthcheck, http_status, run, start
from .ports import free_port

LAB_ARGS = ("lab", "--allow-root") if as_root() else ("lab",)


@pytest.fixture
def lab_env(tmp_path):
    """A temporary home, workspace and runtime folder; a ~/.jupyter config that tries to turn
    authentication off (the image's config must win over it)."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    (home / ".jupyter").mkdir(parents=True)
    workspace.mkdir()
    (home / ".jupyter" / "jupyter_server_config.py").write_text('c.IdentityProvider.token = ""\n')
    return {
        "PATH": f"{VENV_BIN}:{SYSTEM_PATH}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "JIYU_HOME": os.environ["JIYU_HOME"],
        "JIYU_WORKSPACE": str(workspace),
        "JIYU_STATE_DIR": str(tmp_path / "state"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JIYU_JUPYTER_CONFIG": str(JUPYTER_CONFIG),
        "JUPYTER_IP": "127.0.0.1",
        "JUPYTER_PORT": str(free_port()),
        "SSH_AUTHORIZED_KEYS_FILE": str(tmp_path / "no-such-file"),
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture
def lab(lab_env, tmp_path):
    """Starts JupyterLab through the entrypoint with extra environment; waits until it answers."""
    running = []

    def _start(**extra: str):
        entry = start({**lab_env, **extra}, *LAB_ARGS, log=tmp_path / "lab.log")
        running.append(entry)
        api = f"http://127.0.0.1:{lab_env['JUPYTER_PORT']}/api"
        entry.wait_for(lambda: _answers(api) and "is running at" in entry.output(), timeout=120)
        return entry

    yield _start
    for entry in running:
        if entry.proc.poll() is None:
            entry.stop()


def _answers(url: str) -> bool:
    try:
        return http_status(url) == 200
    except OSError:
        return False


def dead_proxy_env(env: dict[str, str]) -> dict[str, str]:
    """Every proxy variable pointing at a port nobody listens on."""
    proxy = f"http://127.0.0.1:{free_port()}"
    return {
        **env,
        **{
            name: proxy for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
        },
    }


def test_lab_requires_the_token_from_JUPYTER_TOKEN(lab, lab_env):
    entry = lab(JUPYTER_TOKEN="the-users-token-123")
    status = f"http://127.0.0.1:{lab_env['JUPYTER_PORT']}/api/status"
    assert http_status(status) == 403
    assert http_status(status, token="wrong") == 403
    assert http_status(status, token="the-users-token-123") == 200
    output = entry.output()
    assert f"jiyu: JupyterLab on port {lab_env['JUPYTER_PORT']}; token from JUPYTER_TOKEN" in output
    assert "the-users-token-123" not in output and "All authentication is disabled" not in output
    assert Path(lab_env["JIYU_STATE_DIR"], "services").read_text().split() == ["jupyter"]


def test_healthcheck_ignores_proxies_and_notices_the_server_stopping(lab, lab_env):
    entry = lab(JUPYTER_TOKEN="t0ken")
    env = dead_proxy_env(lab_env)
    url = f"http://127.0.0.1:{lab_env['JUPYTER_PORT']}/api"
    with pytest.raises(urllib.error.URLError):  # the proxy is dead, and urllib would use it
        with_proxies = urllib.request.build_opener(urllib.request.ProxyHandler({"http": env["http_proxy"]}))
        with_proxies.open(url, timeout=10)
    healthy = healthcheck(env)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert re.fullmatch(rf"healthy: jupyter_server [\d.]+\S* at {re.escape(url)}\n", healthy.stdout)
    entry.stop()
    sick = healthcheck(env)
    assert sick.returncode == 1
    assert (
        sick.stdout == f"unhealthy: no running Jupyter server has a runtime file in {lab_env['JUPYTER_RUNTIME_DIR']}\n"
    )


def test_lab_generates_a_token_when_JUPYTER_TOKEN_is_empty_and_prints_it_once(lab, lab_env):
    entry = lab(JUPYTER_TOKEN="")  # what compose's ${JUPYTER_TOKEN:-} hands over when unset
    output = entry.output()
    tokens = re.findall(r"token=([0-9a-f]+)  \(generated token", output)
    assert len(tokens) == 1 and len(tokens[0]) == 48, output
    assert output.count(tokens[0]) == 1, "the generated token is printed once, by the entrypoint only"
    status = f"http://127.0.0.1:{lab_env['JUPYTER_PORT']}/api/status"
    assert http_status(status) == 403 and http_status(status, token=tokens[0]) == 200
    assert (
        json.loads(next(Path(lab_env["JUPYTER_RUNTIME_DIR"]).glob("jpserver-*.json")).read_text())["token"] == tokens[0]
    )


@pytest.mark.parametrize(
    "argument",
    [
        "--IdentityProvider.token=",
        "--ServerApp.token=''",
        "--NotebookApp.token",
        "--IdentityProvider.token=visible-in-ps",
        "--token=x",
        "--ServerApp.identity_provider_class=my.Open",
        "--config=/tmp/other.py",
    ],
)
def test_lab_refuses_arguments_that_blank_or_replace_the_token(lab_env, argument):
    began = time.monotonic()
    result = run(lab_env, *LAB_ARGS, argument, timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("jiyu: refusing "), result.stderr
    assert argument.split("=")[0] in result.stderr
    assert time.monotonic() - began < 10  # refused before anything started
    assert not Path(lab_env["JUPYTER_RUNTIME_DIR"]).exists()


def test_lab_refuses_to_start_without_the_config_that_enforces_the_token(lab_env, tmp_path):
    result = run({**lab_env, "JIYU_JUPYTER_CONFIG": str(tmp_path / "missing.py")}, *LAB_ARGS, timeout=30)
    assert result.returncode == 2
    assert result.stderr == (
        f"jiyu: refusing to start JupyterLab without authentication: {tmp_path}/missing.py"
        " (which enforces the token) is missing\n"
    )


def test_the_config_pins_the_token_and_keeps_it_from_kernels(monkeypatch):
    monkeypatch.setenv("JUPYTER_TOKEN", "abc123")
    config = PyFileConfigLoader(JUPYTER_CONFIG.name, path=str(JUPYTER_CONFIG.parent)).load_config()
    assert config.IdentityProvider.token == "abc123"
    assert "JUPYTER_TOKEN" not in os.environ  # kernels and terminals inherit the server's environment
    monkeypatch.setenv("JUPYTER_TOKEN", "")
    with pytest.raises(SystemExit, match="refusing to start JupyterLab without a token"):
        PyFileConfigLoader(JUPYTER_CONFIG.name, path=str(JUPYTER_CONFIG.parent)).load_config()


def _write_server_file(runtime: Path, pid: int, port: int) -> None:
    runtime.mkdir(parents=True, exist_ok=True)
    (runtime / f"jpserver-{pid}.json").write_text(
        json.dumps({"url": f"http://127.0.0.1:{port}/", "pid": pid, "port": port, "token": "x", "version": "2"})
    )


def test_healthcheck_without_a_started_entrypoint_is_unhealthy(lab_env):
    result = healthcheck(lab_env)
    assert result.returncode == 1
    assert result.stdout.startswith("unhealthy: the entrypoint has not started")


def test_healthcheck_with_no_services_started_is_healthy(lab_env):
    state = Path(lab_env["JIYU_STATE_DIR"])
    state.mkdir()
    (state / "services").write_text("")
    result = healthcheck(lab_env)
    assert (result.returncode, result.stdout) == (0, "healthy: no services to check\n")


def test_healthcheck_fails_on_a_stale_runtime_file_and_on_a_closed_port(lab_env):
    state, runtime = Path(lab_env["JIYU_STATE_DIR"]), Path(lab_env["JUPYTER_RUNTIME_DIR"])
    state.mkdir()
    (state / "services").write_text("jupyter\n")
    dead = subprocess.Popen(["true"])
    dead.wait()
    _write_server_file(runtime, dead.pid, free_port())  # a server killed with SIGKILL leaves this
    stale = healthcheck(lab_env)
    assert stale.returncode == 1 and "no running Jupyter server" in stale.stdout
    port = free_port()
    _write_server_file(runtime, os.getpid(), port)  # alive process, nothing on the port
    closed = healthcheck(lab_env)
    assert closed.returncode == 1
    assert closed.stdout.startswith(f"unhealthy: http://127.0.0.1:{port}/api: ") and "refused" in closed.stdout


def test_the_entrypoint_sets_up_a_shared_box_when_asked(lab_env, tmp_path):
    from .unix_users import ROOT

    box = tmp_path / "box"
    env = {**lab_env, "JIYU_BOX_INIT": "1", "JIYU_BOX": str(box), "PYTHONPATH": str(ROOT)}
    try:
        done = run(env, "jiyu", "box", "status", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["leases"] == [] and (box / "policy.yaml").exists()
        assert "The box's book keeper started" in done.stderr
    finally:
        subprocess.run(["jiyu", "box", "stop", "--path", str(box)], env=env, capture_output=True, timeout=30)
    assert not (box / "book.sock").exists()
