"""Run the image's entrypoint and healthcheck outside Docker, unprivileged, as the container does.

The scripts take every path from environment variables whose defaults are the container's; here
they point into a private folder. sshd runs unprivileged in the container (uid 1000), so when the
tests run as root its part runs as the system account ``daemon`` through ``setpriv`` (not
``nobody``: nss-systemd reports nobody's password as "!*", which sshd takes for a locked account),
and the folder lives where sshd's StrictModes accepts it: every folder above an authorized_keys
file must be owned by root or the user and not group/world-writable (so not under /tmp).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"
ENTRYPOINT = IMAGES / "entrypoint.sh"
HEALTHCHECK = IMAGES / "healthcheck.py"
JUPYTER_CONFIG = IMAGES / "jupyter_server_config.py"
VENV_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNPRIVILEGED = pwd.getpwnam("daemon")
UNPRIVILEGED_UID = UNPRIVILEGED.pw_uid if os.geteuid() == 0 else os.getuid()


def as_root() -> bool:
    return os.geteuid() == 0


def unprivileged() -> list[str]:
    """The command prefix that drops root to ``daemon`` (nothing when not root)."""
    if not as_root():
        return []
    return ["setpriv", f"--reuid={UNPRIVILEGED.pw_uid}", f"--regid={UNPRIVILEGED.pw_gid}", "--clear-groups"]


def unprivileged_user() -> str:
    return UNPRIVILEGED.pw_name if as_root() else pwd.getpwuid(os.getuid()).pw_name


def _usable_by_sshd(folder: Path) -> bool:
    """sshd's StrictModes test for the folders above a key file (all the way to /), and, for
    ``daemon``, a way through them."""
    for path in (folder, *folder.parents):
        info = path.stat()
        if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022 or not info.st_mode & 0o001:
            return False
    return True


def private_folder() -> Path:
    """A fresh folder sshd's StrictModes accepts, owned by the unprivileged user, holding a copy
    of the entrypoint: under the repository's build/ when the checkout allows it (a clone under
    /tmp does not), else /run. Not as root: under the home folder, where sshd's check stops."""
    parent = Path.home()
    if as_root():
        build = ROOT / "build"
        parent = build if _usable_by_sshd(ROOT) else Path("/run")
        parent.mkdir(mode=0o755, exist_ok=True)
        assert _usable_by_sshd(parent), f"no folder for the sshd tests: {parent} is writable by others"
    folder = Path(tempfile.mkdtemp(prefix="jiyu-image-test-", dir=parent))
    folder.chmod(0o755)
    shutil.copy2(ENTRYPOINT, folder / ENTRYPOINT.name)  # reachable for daemon wherever the checkout is
    return hand_over(folder)


def hand_over(path: Path) -> Path:
    """Make a path the test created (as root) belong to the unprivileged user."""
    if as_root():
        os.chown(path, UNPRIVILEGED.pw_uid, UNPRIVILEGED.pw_gid)
    return path


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Started:
    """A running entrypoint (in its own session, so everything it started stops with it)."""

    proc: subprocess.Popen
    log: Path
    env: dict[str, str] = field(repr=False)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, ready, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"entrypoint exited ({self.proc.returncode}):\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready after {timeout} s:\n{self.output()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the process group, as tini -g does, and check that nothing is left."""
        group = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == self.proc.pid]
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        _, alive = psutil.wait_procs(group, timeout=timeout)
        for process in alive:
            process.kill()
        self.proc.wait(timeout=timeout)
        assert not alive, f"still running after SIGTERM: {alive}"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _entrypoint(env: dict[str, str], drop_root: bool) -> list[str]:
    """The command: the repository's entrypoint, or as ``daemon`` the copy in its private folder."""
    if drop_root:
        return [*unprivileged(), str(Path(env["HOME"]) / ENTRYPOINT.name)]
    return [str(ENTRYPOINT)]


def start(env: dict[str, str], *command: str, log: Path, drop_root: bool = False) -> Started:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*_entrypoint(env, drop_root), *command],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Started(proc, log, env)


def run(
    env: dict[str, str], *command: str, drop_root: bool = False, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Runs the entrypoint to its end; on a timeout its whole session (sshd too) is killed."""
    args = [*_entrypoint(env, drop_root), *command]
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=30)


def http_status(url: str, token: str | None = None) -> int:
    """GET without any proxy; the HTTP status (403 when the token is missing or wrong)."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
