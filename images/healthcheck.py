#!/usr/bin/env python3
"""jiyu-healthcheck: Docker's HEALTHCHECK. Healthy when every service the entrypoint started
answers: JupyterLab at the URL in its runtime file, sshd with its SSH banner.

Why not ``curl localhost:8888``: the port, base URL and TLS can be changed by configuration, and
an ``http_proxy`` in the container's environment sends even localhost requests through a proxy,
two ways docker-stacks' healthcheck reported healthy servers as unhealthy. So the URL comes from
Jupyter's own runtime file (``JUPYTER_RUNTIME_DIR``, set in the image so that every user and
HOME agree), and requests never use a proxy. Standard library only: it runs every 30 seconds.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import urllib.request
from pathlib import Path

TIMEOUT_S = 5.0


class Unhealthy(Exception):
    """A service the entrypoint started does not answer; the message says which and why."""


def state_dir() -> Path:
    default = Path.home() / ".local" / "state" / "jiyu"
    return Path(os.environ.get("JIYU_STATE_DIR") or default)


def runtime_dir() -> Path:
    if os.environ.get("JUPYTER_RUNTIME_DIR"):
        return Path(os.environ["JUPYTER_RUNTIME_DIR"])
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_servers(folder: Path) -> list[dict]:
    """Server info files whose process is alive (a killed server leaves its file behind)."""
    servers = []
    for path in sorted(folder.glob("jpserver-*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if pid_alive(info.get("pid")):
            servers.append(info)
    return servers


def get_json(url: str) -> dict:
    """GET without any proxy; a self-signed certificate is fine, this only asks "alive?"."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=insecure))
    with opener.open(url, timeout=TIMEOUT_S) as response:
        return json.load(response)


def check_jupyter() -> str:
    folder = runtime_dir()
    servers = running_servers(folder)
    if not servers:
        raise Unhealthy(f"no running Jupyter server has a runtime file in {folder}")
    errors = []
    for info in servers:
        url = info.get("url", "").rstrip("/") + "/api"
        try:
            return f"jupyter_server {get_json(url)['version']} at {url}"
        except (OSError, ValueError, KeyError) as error:
            errors.append(f"{url}: {error}")
    raise Unhealthy("; ".join(errors))


def check_sshd() -> str:
    pid_file = state_dir() / "sshd" / "sshd.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise Unhealthy(f"sshd has no pid file at {pid_file}") from None
    if not pid_alive(pid):
        raise Unhealthy(f"sshd (pid {pid}) is not running")
    port = int(os.environ.get("SSH_PORT") or 2222)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as conn:
            banner = conn.recv(64)
    except OSError as error:
        raise Unhealthy(f"sshd port {port}: {error}") from None
    if not banner.startswith(b"SSH-"):
        raise Unhealthy(f"port {port} answers {banner[:20]!r}, not SSH")
    return f"sshd on port {port}"


CHECKS = {"jupyter": check_jupyter, "sshd": check_sshd}


def main() -> int:
    services_file = state_dir() / "services"
    try:
        services = services_file.read_text().split()
        reports = [CHECKS[name]() for name in services]
    except OSError:
        print(f"unhealthy: the entrypoint has not started (no {services_file})")
        return 1
    except Unhealthy as error:
        print(f"unhealthy: {error}")
        return 1
    print("healthy: " + ("; ".join(reports) or "no services to check"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
