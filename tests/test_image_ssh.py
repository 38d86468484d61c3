"""The image entrypoint run unprivileged outside Docker, as in the container: its SSH side with
the real sshd, checked with ``sshd -t``/``sshd -T`` and real ``ssh`` logins; its workspace check."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

import pytest

from .image_runner import (
    SYSTEM_PATH,
    UNPRIVILEGED_UID,
    as_root,
    hand_over,
    healthcheck,
    port_open,
    private_folder,
    remove,
    run,
    start,
    unprivileged,
    unprivileged_user,
)
from .ports import free_port

SSHD = Path("/usr/sbin/sshd")


@pytest.fixture(autouse=True)
def _openssh_server_installed():
    assert SSHD.exists(), "openssh-server is missing: `make test-system-deps` installs it"


def keypair(folder: Path, name: str) -> tuple[Path, str]:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key, (folder / f"{name}.pub").read_text().strip()


@pytest.fixture
def box(tmp_path):
    """A private folder for the entrypoint's state, host keys and workspace, and its environment
    (with secrets that must not reach SSH sessions)."""
    folder = private_folder()
    (folder / "workspace").mkdir()
    hand_over(folder / "workspace")
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": str(folder),
        "LANG": "C.UTF-8",
        "JIYU_STATE_DIR": str(folder / "state"),
        "JIYU_SSH_HOST_KEY_DIR": str(folder / "host-keys"),
        "SSH_AUTHORIZED_KEYS_FILE": str(folder / "authorized_keys"),
        "SSH_PORT": str(free_port()),
        "JIYU_WORKSPACE": str(folder / "workspace"),
        "JIYU_HOME": "/workspace/checkpoints/jiyu",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "JUPYTER_TOKEN": "jupyter-secret",
        "HF_TOKEN": "hf-secret",
    }
    yield folder, env
    remove(folder)


@pytest.fixture
def started(box, tmp_path):
    """Starts the entrypoint (command: sleep) with the given extra environment; stops it after."""
    folder, env = box
    running = []

    def _start(**extra: str):
        entry = start({**env, **extra}, "sleep", "600", log=tmp_path / f"entrypoint{len(running)}.log", drop_root=True)
        running.append(entry)
        entry.wait_for(lambda: "jiyu: SSH on port" in entry.output() and port_open(int(env["SSH_PORT"])), timeout=60)
        return entry

    yield _start
    for entry in running:
        if entry.proc.poll() is None:
            entry.stop()


def sshd_settings(folder: Path) -> dict[str, list[str]]:
    """``sshd -T``: the configuration sshd will really use, keyword -> values."""
    config = folder / "state" / "sshd" / "sshd_config"
    check = subprocess.run([*unprivileged(), str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    dump = subprocess.run(
        [*unprivileged(), str(SSHD), "-T", "-f", str(config)], capture_output=True, text=True, check=True
    ).stdout
    settings: dict[str, list[str]] = {}
    for line in dump.splitlines():
        keyword, _, value = line.partition(" ")
        settings.setdefault(keyword, []).append(value)
    return settings


def ssh(env, key: Path, known_hosts: Path, *remote: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "ssh",
            "-v",
            "-F",
            "/dev/null",
            "-p",
            env["SSH_PORT"],
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=20",
            f"{unprivileged_user()}@127.0.0.1",
            *remote,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def known_hosts_from_volume(folder: Path, env, path: Path) -> Path:
    """known_hosts built from the host-key volume: a login proves sshd serves those keys."""
    lines = [
        f"[127.0.0.1]:{env['SSH_PORT']} " + " ".join(pub.read_text().split()[:2])
        for pub in sorted((folder / "host-keys").glob("*.pub"))
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_without_a_key_there_is_no_sshd(box):
    folder, env = box
    result = run(env, "sh", "-c", "echo command-ran", drop_root=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "command-ran"
    assert "jiyu: SSH off: set SSH_PUBLIC_KEY" in result.stderr
    assert not (folder / "state" / "sshd").exists() and not (folder / "host-keys").exists()
    assert (folder / "state" / "services").read_text() == ""


def test_sshd_config_is_key_only_without_root_and_passes_sshd_t(box, started, tmp_path):
    folder, env = box
    _, public = keypair(tmp_path, "user")
    entry = started(SSH_PUBLIC_KEY=public)
    settings = sshd_settings(folder)
    assert settings["permitrootlogin"] == ["no"]
    assert settings["passwordauthentication"] == ["no"]
    assert settings["kbdinteractiveauthentication"] == ["no"]
    assert settings["permitemptypasswords"] == ["no"]
    assert settings["pubkeyauthentication"] == ["yes"]
    assert settings["authenticationmethods"] == ["publickey"]
    assert settings["usepam"] == ["no"] and settings["strictmodes"] == ["yes"]
    assert settings["port"] == [env["SSH_PORT"]]
    assert settings["allowusers"] == [unprivileged_user()]
    assert sorted(settings["hostkey"]) == [f"{folder}/host-keys/ssh_host_{t}_key" for t in ("ed25519", "rsa")]
    session_env = dict(value.split("=", 1) for value in settings["setenv"])
    assert session_env["PATH"] == SYSTEM_PATH and session_env["JIYU_CONTAINER_PATH"] == SYSTEM_PATH
    assert session_env["JIYU_HOME"] == "/workspace/checkpoints/jiyu" and session_env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert not {"JUPYTER_TOKEN", "HF_TOKEN", "SSH_PUBLIC_KEY"} & session_env.keys()
    authorized = folder / "state" / "sshd" / "authorized_keys"
    assert authorized.read_text().strip() == public and authorized.stat().st_mode & 0o077 == 0
    assert (folder / "state" / "services").read_text().split() == ["sshd"]
    assert (
        f"jiyu: SSH on port {env['SSH_PORT']}: user {unprivileged_user()}, public-key only, 1 key(s)" in entry.output()
    )


def test_login_with_either_key_and_nothing_else(box, started, tmp_path):
    """SSH_PUBLIC_KEY and the authorized_keys mount both admit their key; another key, and
    passwords, are refused; the host key served is the one in the volume."""
    folder, env = box
    env_key, env_public = keypair(tmp_path, "from-env")
    file_key, file_public = keypair(tmp_path, "from-file")
    stranger, _ = keypair(tmp_path, "stranger")
    mount = Path(env["SSH_AUTHORIZED_KEYS_FILE"])
    mount.write_text(f"# mounted authorized_keys\n\n{file_public}\n")
    mount.chmod(0o644)
    started(SSH_PUBLIC_KEY=env_public)
    known_hosts = known_hosts_from_volume(folder, env, tmp_path / "known_hosts")
    for key in (env_key, file_key):
        login = ssh(
            env, key, known_hosts, "echo jiyu-ssh-ok; echo JIYU_HOME=$JIYU_HOME; echo TOKEN=${JUPYTER_TOKEN:-none}"
        )
        assert "Authenticated to 127.0.0.1" in login.stderr and 'using "publickey"' in login.stderr, login.stderr
        if as_root():  # the session runs daemon's login shell, /usr/sbin/nologin
            assert "This account is currently not available" in login.stdout + login.stderr
        else:
            assert login.stdout.split() == ["jiyu-ssh-ok", "JIYU_HOME=/workspace/checkpoints/jiyu", "TOKEN=none"]
    refused = ssh(env, stranger, known_hosts, "true")
    assert refused.returncode == 255 and "Permission denied (publickey)" in refused.stderr
    assert "Authenticated to" not in refused.stderr
    offered = [line for line in refused.stderr.splitlines() if "Authentications that can continue" in line]
    assert offered and all(line.endswith(": publickey") for line in offered), offered


def test_host_keys_are_generated_once_and_kept(box, started, tmp_path):
    folder, env = box
    _, public = keypair(tmp_path, "user")
    first = started(SSH_PUBLIC_KEY=public)
    assert first.output().count("generated SSH host key") == 2
    keys = {p.name: p.read_text() for p in (folder / "host-keys").iterdir()}
    assert sorted(keys) == [
        "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub",
        "ssh_host_rsa_key",
        "ssh_host_rsa_key.pub",
    ]
    assert all((folder / "host-keys" / name).stat().st_mode & 0o077 == 0 for name in keys if not name.endswith(".pub"))
    first.stop()
    second = started(SSH_PUBLIC_KEY=public)
    assert "generated SSH host key" not in second.output()
    assert {p.name: p.read_text() for p in (folder / "host-keys").iterdir()} == keys


@pytest.mark.parametrize("key", ["ssh-ed25519 not-base64-at-all user@host", "my laptop key"])
def test_a_mistyped_key_stops_the_start(box, key):
    folder, env = box
    result = run({**env, "SSH_PUBLIC_KEY": f"# my key\n{key}"}, "sleep", "600", drop_root=True)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"jiyu: SSH_PUBLIC_KEY line 2 is not an SSH public key: {key[:40]}"]
    assert not port_open(int(env["SSH_PORT"]))


@contextlib.contextmanager
def listening_on_every_address(port: int):
    """Takes the port on IPv4 and IPv6 (sshd carries on while it can bind either)."""
    try:
        sock = socket.socket(socket.AF_INET6)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError:
        sock = socket.socket(socket.AF_INET)
        sock.bind(("0.0.0.0", port))
    with sock:
        sock.listen()
        yield


def test_sshd_that_cannot_listen_stops_the_start(box, tmp_path):
    folder, env = box
    _, public = keypair(tmp_path, "user")
    with listening_on_every_address(int(env["SSH_PORT"])):
        result = run({**env, "SSH_PUBLIC_KEY": public}, "sleep", "600", drop_root=True)
    assert result.returncode == 2, result.stderr
    assert "Bind to port" in result.stderr
    assert result.stderr.splitlines()[-1] == "jiyu: sshd stopped at start (its message is above)"


def test_an_authorized_keys_mount_that_docker_made_a_folder_stops_the_start(box):
    folder, env = box
    Path(env["SSH_AUTHORIZED_KEYS_FILE"]).mkdir(mode=0o755)
    result = run(env, "sleep", "600", drop_root=True)
    assert result.returncode == 2
    assert "is a directory: the host file did not exist when the container was created" in result.stderr


def test_healthcheck_follows_sshd(box, started, tmp_path):
    folder, env = box
    _, public = keypair(tmp_path, "user")
    started(SSH_PUBLIC_KEY=public)
    healthy = healthcheck(env)
    assert healthy.returncode == 0 and healthy.stdout.strip() == f"healthy: sshd on port {env['SSH_PORT']}"
    pid = int((folder / "state" / "sshd" / "sshd.pid").read_text())
    subprocess.run(["kill", str(pid)], check=True)
    deadline = time.monotonic() + 10
    while port_open(int(env["SSH_PORT"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    sick = healthcheck(env)
    assert sick.returncode == 1 and sick.stdout.startswith("unhealthy: sshd"), sick.stdout


def test_a_workspace_folder_the_user_cannot_write_is_reported(box):
    """A bind mount keeps its host owner; the user hears about it at start, not at the first save."""
    folder, env = box
    (folder / "workspace" / "code").mkdir(mode=0o555)  # owned by root when dropping root
    (folder / "workspace" / "code").chmod(0o555)
    result = run(env, "true", drop_root=True)
    assert result.returncode == 0
    warnings = [line for line in result.stderr.splitlines() if "not writable" in line]
    assert warnings == [
        f"jiyu: warning: {folder}/workspace/code is not writable by uid "
        f"{UNPRIVILEGED_UID}: chown it on the host or run with --user $(id -u)"
    ]
