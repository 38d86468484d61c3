"""A real JupyterHub for the shared-box tests: the hub (as root), configurable-http-proxy from
npm, the DummyAuthenticator (a shared password: the test logs in through the hub's own login
page) and the LocalProcessSpawner, which starts each user's single-user server as that Unix
user, with jiyu's server extension and this tree's build of the panel.

The test talks to the hub's REST API with a service token (creating users, starting their
servers, making each user a token) and to each single-user server through the proxy, as a
browser or a script of that user would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .ports import free_port
from .unix_users import ROOT, UnixUsers

CHP_PACKAGE = "configurable-http-proxy"
CHP_CACHE = ROOT / "build" / "chp"  # npm installs it here when it is not on PATH (ignored by git)
PASSWORD = secrets.token_hex(8)


def jupyterhub_path() -> Path | None:
    """The folder holding the jupyterhub package (installed in this environment, or in
    build/hub-site by ``pip install --target``), to put on the servers' path."""
    spec = importlib.util.find_spec("jupyterhub")
    if spec is None:
        local = ROOT / "build" / "hub-site"
        return local if (local / "jupyterhub").is_dir() else None
    return Path(spec.origin).parent.parent


def proxy_command() -> str | None:
    """configurable-http-proxy: on PATH, or installed from npm into build/chp once."""
    found = shutil.which(CHP_PACKAGE) or str(CHP_CACHE / "node_modules" / ".bin" / CHP_PACKAGE)
    if os.access(found, os.X_OK):
        return found
    if not shutil.which("npm"):
        return None
    CHP_CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CHP_CACHE), CHP_PACKAGE],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return found


@dataclass
class Hub:
    url: str  # the proxy's public URL: /hub/..., /user/NAME/...
    token: str  # the test service's token (admin of users and servers)
    process: subprocess.Popen
    folder: Path
    user_tokens: dict[str, str] = field(default_factory=dict)

    def api(self, path: str, method: str = "GET", data: dict | None = None, token: str | None = None):
        """A request to the hub's or a user server's REST API; (status, JSON or text)."""
        request = urllib.request.Request(
            f"{self.url}{path.lstrip('/')}",
            method=method,
            data=None if data is None else json.dumps(data).encode(),
            headers={"Authorization": f"token {token or self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status, body = reply.status, reply.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, body.decode(errors="replace")

    def start_server(self, user: str, timeout: float = 180) -> str:
        """The user's single-user server started by the hub as that Unix user; a token of theirs."""
        self.api(f"hub/api/users/{user}", "POST", {})
        status, body = self.api(f"hub/api/users/{user}/server", "POST", {})
        assert status in (201, 202), (status, body)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, info = self.api(f"hub/api/users/{user}")
            if (info.get("servers") or {}).get("", {}).get("ready"):
                break
            if self.process.poll() is not None:
                raise RuntimeError(f"the hub exited:\n{self.log()}")
            time.sleep(0.5)
        else:
            raise TimeoutError(f"{user}'s server did not start within {timeout:.0f} s:\n{self.log()}")
        status, made = self.api(f"hub/api/users/{user}/tokens", "POST", {"note": "jiyu box test", "expires_in": 3600})
        assert status == 201, (status, made)
        self.user_tokens[user] = made["token"]
        return made["token"]

    def log(self) -> str:
        return (self.folder / "hub.log").read_text(errors="replace")[-4000:]


def hub_config(folder: Path, users: UnixUsers, token: str, env: dict[str, str], ports: dict[str, int]) -> str:
    """The hub's configuration as Python: every value spelled out, nothing taken from ~/."""
    hub_site = jupyterhub_path()
    spawner_env = {
        **env,
        "PYTHONPATH": ":".join(p for p in (env.get("PYTHONPATH", ""), str(hub_site or "")) if p),
        "JUPYTERLAB_DIR": str(Path(sys.prefix) / "share" / "jupyter" / "lab"),
        "JUPYTER_PATH": f"{folder / 'jupyter-data'}:{Path(sys.prefix) / 'share' / 'jupyter'}",
        "JUPYTER_CONFIG_PATH": str(Path(sys.prefix) / "etc" / "jupyter"),
    }
    return f"""
c = get_config()  # noqa
c.JupyterHub.bind_url = "http://127.0.0.1:{ports["public"]}/"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{ports["hub"]}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy_api"]}"
c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.db_url = "sqlite:///{folder / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = "{folder / "cookie_secret"}"
c.JupyterHub.pid_file = "{folder / "hub.pid"}"
c.JupyterHub.cleanup_servers = True
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {set(users.names.values())!r}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{str(users.python)!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.args = ["--LabApp.expose_app_in_browser=True", "--JiyuApp.usage_sample_interval=2"]
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = {spawner_env!r}
c.JupyterHub.services = [{{"name": "jiyu-box-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [
    {{
        "name": "jiyu-box-test",
        "scopes": ["admin:users", "admin:servers", "tokens", "read:users"],
        "services": ["jiyu-box-test"],
    }}
]
"""


def start_hub(folder: Path, users: UnixUsers, env: dict[str, str], timeout: float = 90) -> Hub:
    """The hub as root, from ``folder`` (its database, proxy and log live there)."""
    folder.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(24)
    ports = {"public": free_port(), "hub": free_port(), "proxy_api": free_port()}
    config = folder / "jupyterhub_config.py"
    config.write_text(hub_config(folder, users, token, env, ports))
    hub_site = jupyterhub_path()
    hub_env = {
        **os.environ,
        "PYTHONPATH": ":".join(filter(None, [str(ROOT), str(hub_site or ""), os.environ.get("PYTHONPATH", "")])),
        "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(24),
    }
    log = open(folder / "hub.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(config), "--no-ssl"],
        cwd=folder,
        env=hub_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    hub = Hub(f"http://127.0.0.1:{ports['public']}/", token, process, folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the hub exited with {process.returncode}:\n{hub.log()}")
        try:
            with urllib.request.urlopen(f"{hub.url}hub/health", timeout=5) as reply:
                if reply.status == 200:
                    return hub
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the hub did not answer within {timeout:.0f} s:\n{hub.log()}")


def stop_hub(hub: Hub) -> None:
    """SIGTERM to the hub's session (it stops the servers it spawned: cleanup_servers), then
    the proxy by its pid (it can outlive the hub)."""
    import signal

    import psutil

    proxies = []
    for child in psutil.Process(hub.process.pid).children(recursive=True):
        try:
            if "configurable" in " ".join(child.cmdline()):
                proxies.append(child)
        except psutil.Error:
            continue
    try:
        os.killpg(hub.process.pid, signal.SIGTERM)
        hub.process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(hub.process.pid, signal.SIGKILL)
        hub.process.wait(10)
    except ProcessLookupError:
        pass
    for proxy in proxies:
        try:
            proxy.kill()
        except psutil.Error:
            pass
