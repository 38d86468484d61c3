"""Real Unix users for the shared-box tests: made with ``useradd`` (as root), each with a home
of its own (mode 0700), in a group of their own, and removed afterwards with every process
they ran (also when a test fails; users a crashed test session left are removed by the next).

Their processes run under ``runuser`` with a clean environment. The Python they run is a
virtual environment any user may execute (the test's own interpreter may sit in root's private
home), seeing the test's packages through a ``.pth`` file; the source tree comes first on
``PYTHONPATH`` as for every other test process.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
NVML_DOUBLE_DIR = Path(__file__).resolve().parent / "nvml_double"
MARK = "jiyu test user"  # the GECOS comment that lets a later session find users a crashed one left


def can_make_users() -> bool:
    return os.getuid() == 0 and all(shutil.which(tool) for tool in ("useradd", "userdel", "groupadd", "runuser"))


class UnixUsers:
    """``names`` as real users in one new group (``outsiders`` in none of ours), under a
    world-readable scratch folder."""

    def __init__(self, names: list[str], outsiders: tuple[str, ...] = ()):
        remove_leftovers()
        tag = secrets.token_hex(2)
        self.root = Path(tempfile.mkdtemp(prefix="jiyu-box-"))
        os.chmod(self.root, 0o755)
        self.group = f"jiyugrp{tag}"
        self.names = {name: f"{name}{tag}" for name in [*names, *outsiders]}  # alice -> alice3f2a
        self.uids: dict[str, int] = {}
        self.python = user_python(self.root / "python")
        self._run(["groupadd", self.group])
        for short, login in self.names.items():
            home = self.root / "home" / short
            home.parent.mkdir(exist_ok=True, mode=0o755)
            self._run(
                [
                    "useradd",
                    "-M",
                    "-N",
                    "-g",
                    "nogroup" if short in outsiders else self.group,
                    "-d",
                    str(home),
                    "-s",
                    "/bin/sh",
                    "-c",
                    f"{MARK} {os.getpid()}",
                    login,
                ]
            )
            home.mkdir(mode=0o700)
            (home / "tmp").mkdir(mode=0o700)
            uid = pwd.getpwnam(login).pw_uid
            for path in (home, home / "tmp"):
                os.chown(path, uid, -1)
            self.uids[short] = uid

    def login(self, name: str) -> str:
        return self.names[name]

    def home(self, name: str) -> Path:
        return self.root / "home" / name

    def env(self, name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean environment for ``name``, as a login would give it, plus the test's."""
        home = self.home(name)
        return {
            "PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "USER": self.names[name],
            "LOGNAME": self.names[name],
            "TMPDIR": str(home / "tmp"),
            "PYTHONPATH": f"{ROOT}:{NVML_DOUBLE_DIR}",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OMP_WAIT_POLICY": "PASSIVE",
            "LANG": "C.UTF-8",
            **(extra or {}),
        }

    def command(self, name: str, argv: list[str], extra: Mapping[str, str] | None = None) -> list[str]:
        env = [f"{k}={v}" for k, v in self.env(name, extra).items()]
        return ["runuser", "-u", self.names[name], "--", "env", "-i", *env, *argv]

    def run(self, name: str, argv: list[str], extra: Mapping[str, str] | None = None, timeout: float = 120, **kw):
        """``argv`` as ``name``, from its home; the finished process (text output)."""
        return subprocess.run(
            self.command(name, argv, extra), capture_output=True, text=True, timeout=timeout, cwd=self.home(name), **kw
        )

    def jiyu(self, name: str, *args: str, extra: Mapping[str, str] | None = None, timeout: float = 120):
        return self.run(name, [str(self.python), "-m", "jiyu_magics", *args], extra, timeout)

    def popen(self, name: str, argv: list[str], extra: Mapping[str, str] | None = None, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(name, argv, extra), cwd=self.home(name), **kw)

    def remove(self) -> None:
        """Every process of these users ended (by pid), the users and their group deleted, the
        scratch folder removed."""
        uids = set(self.uids.values())
        end_processes(uids)
        for login in self.names.values():
            account_change(["userdel", login], check=False)
        account_change(["groupdel", self.group], check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _run(argv: list[str]) -> None:
        account_change(argv)


ACCOUNTS_LOCK = Path("/tmp/jiyu-test-accounts.lock")


def account_change(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """``useradd``, ``userdel``, ``groupadd`` or ``groupdel``, one at a time on this machine: two
    test workers changing accounts at once meet /etc/passwd's lock, which these tools do not
    wait for (exit code 10)."""
    with ACCOUNTS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(argv, check=check, capture_output=True, text=True)


def end_processes(uids: set[int], wait_s: float = 5.0) -> None:
    procs = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in uids]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=wait_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=wait_s)


def remove_leftovers() -> None:
    """Users a test session that died without cleaning up made (its pid is in their comment)."""
    left = []
    for entry in pwd.getpwall():
        if not entry.pw_gecos.startswith(MARK):
            continue
        creator = entry.pw_gecos.split()[-1]
        if creator.isdigit() and psutil.pid_exists(int(creator)) and int(creator) != os.getpid():
            continue  # a session running now
        left.append(entry)
    if not left:
        return
    end_processes({entry.pw_uid for entry in left})
    for entry in left:
        account_change(["userdel", entry.pw_name], check=False)
        shutil.rmtree(Path(entry.pw_dir).parent.parent, ignore_errors=True)


def user_python(venv: Path) -> Path:
    """A Python every user may run, with this interpreter's packages: a venv of the system's
    interpreter of the same version where there is one (this one may live in root's home)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = next(
        (p for p in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}") if os.access(p, os.X_OK)),
        sys.executable,
    )
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    packages = venv / "lib" / f"python{version}" / "site-packages"
    # addsitedir, not a plain path line: the test environment's own .pth files count too
    lines = [f"import site; site.addsitedir({folder!r})" for folder in site.getsitepackages()]
    (packages / "test_packages.pth").write_text("\n".join(lines) + "\n")
    for path in (venv, *venv.rglob("*")):
        if not path.is_symlink():
            os.chmod(path, os.stat(path).st_mode | (0o755 if path.is_dir() else 0o644))
    return venv / "bin" / "python"


def wait_until(predicate, timeout: float, what: str, every: float = 0.2, context=None):
    """``predicate()``'s first true value; on a timeout, an error naming ``what`` and saying
    what ``context()`` (when given) finds then: the state the test waited to change."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    found = f"\n{context()}" if context is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{found}")
