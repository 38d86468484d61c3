"""The image built from images/Dockerfile and run for real with podman (tests/image_build.py: a
Debian base with CPU torch stands in for the CUDA base, which no registry here serves): what the
image promises, checked in one running container. JupyterLab answers only with its token and
serves the jiyu panel and REST API; SSH takes the given key only; nothing runs as root; tini is
PID 1; the healthcheck passes; a notebook job runs inside and its checkpoints land in the host
folder mounted at /workspace/checkpoints.

The container shares the host's network (containers.conf), so it is given free ports; the tests
talk to it over loopback. Where podman is missing (or not as root) the tests skip with the reason,
and fail with it under ``make test`` (JIYU_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from . import image_build
from .conftest import REQUIRE_SERVICES_ENV
from .image_runner import http_status
from .ports import free_port

# The session builds the image in the background from the moment its tests are collected
# (conftest); the first test's set-up waits for it. On a machine that has built none yet
# (debootstrap, the stand-in bases, the front-end, pip) that took 6 minutes on 2 quiet cores;
# later, with podman's layer cache, about a minute.
pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]
UID = 1000

TRAIN_NOTEBOOK = [
    "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n%load_ext jiyu_magics",
    "torch.manual_seed(0)\nX = torch.randn(256, 8)\ny = (X.sum(1) > 0).long()",
    "%%train --epochs 2 --ckpt-every 4 --name in-the-image\n"
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))\n"
    "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
    "loss_fn = torch.nn.CrossEntropyLoss()\n"
    "train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)",
]


@pytest.fixture(scope="module")
def image() -> image_build.Build:
    reason = image_build.unavailable()
    if reason:
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SERVICES_ENV}=1)", pytrace=False)
        pytest.skip(reason)
    return image_build.built()


@pytest.fixture(scope="module")
def ssh_keys(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ssh-keys")
    keys = {}
    for name in ("given", "other"):
        keys[name] = folder / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys[name])], check=True)
    return keys


@dataclass
class Container:
    name: str
    token: str
    lab_port: int
    ssh_port: int
    checkpoints: Path  # the host folder mounted at /workspace/checkpoints

    def exec(self, *command: str, timeout: float = 60, user: str | None = None) -> subprocess.CompletedProcess:
        args = ["exec", *(["--user", user] if user else []), self.name, *command]
        return image_build.podman(*args, timeout=timeout, check=False)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.lab_port}{path}"


@pytest.fixture(scope="module")
def container(image, ssh_keys, tmp_path_factory):
    """One running container: a token, the given SSH key, a code folder with a notebook, and a
    checkpoints folder, both from the host and owned by uid 1000 as the image's user."""
    mounts = tmp_path_factory.mktemp("image-mounts")
    code, checkpoints = mounts / "code", mounts / "checkpoints"
    for folder in (code, checkpoints):
        folder.mkdir()
        os.chown(folder, UID, UID)
    notebook = new_notebook(cells=[new_code_cell(source) for source in TRAIN_NOTEBOOK])
    nbformat.write(notebook, code / "train.ipynb")
    os.chown(code / "train.ipynb", UID, UID)
    name = f"jiyu-image-check-{secrets.token_hex(4)}"
    running = Container(name, secrets.token_hex(16), free_port(), free_port(), checkpoints)
    began = time.monotonic()
    image_build.podman(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "-e",
        f"JUPYTER_TOKEN={running.token}",
        "-e",
        f"SSH_PUBLIC_KEY={ssh_keys['given'].with_suffix('.pub').read_text()}",
        "-e",
        "JUPYTER_IP=127.0.0.1",
        "-e",
        f"JUPYTER_PORT={running.lab_port}",
        "-e",
        f"SSH_PORT={running.ssh_port}",
        "-e",
        "OMP_NUM_THREADS=1",
        "-v",
        f"{code}:/workspace/code",
        "-v",
        f"{checkpoints}:/workspace/checkpoints",
        image.image,
    )
    try:
        _wait_for(lambda: _answers(running.url("/api/status"), running.token), timeout=120, container=name)
        image_build.note_timing("image_lab_ready_s", time.monotonic() - began)
        yield running
    finally:
        image_build.podman("rm", "-f", "-t", "10", name, timeout=60, check=False)


def _answers(url: str, token: str) -> bool:
    try:
        return http_status(url, token) == 200
    except OSError:
        return False


def _wait_for(ready, timeout: float, container: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        state = image_build.podman("inspect", "--format", "{{.State.Status}}", container, check=False).stdout.strip()
        if state != "running" or time.monotonic() > deadline:
            logs = image_build.podman("logs", container, check=False)
            raise AssertionError(f"container {state} after {timeout} s:\n{logs.stdout}\n{logs.stderr}")
        time.sleep(0.5)


def test_jupyterlab_answers_only_with_its_token(container):
    assert http_status(container.url("/api/status")) == 403
    assert http_status(container.url("/api/status"), "wrong-token") == 403
    assert http_status(container.url("/api/status"), container.token) == 200
    logs = image_build.podman("logs", container.name).stdout + image_build.podman("logs", container.name).stderr
    assert container.token not in logs  # a token given in JUPYTER_TOKEN is never printed


def test_the_jiyu_panel_and_server_extension_are_enabled(container):
    listed = container.exec("sh", "-c", "jupyter labextension list 2>&1; jupyter server extension list 2>&1")
    text = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout)  # without the colours
    assert re.search(r"jiyu-magics [^\n]* enabled OK", text), text
    assert re.search(r"jiyu_magics enabled", text), text
    assert http_status(container.url("/jiyu/api/gpus"), container.token) == 200
    request = urllib.request.Request(container.url("/lab"), headers={"Authorization": f"token {container.token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as page:
        assert '"name": "jiyu-magics"' in page.read().decode().replace('\\"', '"')  # the panel in Lab's page config


def _ssh(container, *options: str, key: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "ssh",
            "-p",
            str(container.ssh_port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=10",
            *(["-i", str(key)] if key else []),
            *options,
            "jiyu@127.0.0.1",
            "id -u; echo $JIYU_HOME",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(key.parent if key else Path("/nonexistent"))},
    )


def test_ssh_takes_the_given_key_and_nothing_else(container, ssh_keys):
    _wait_for(lambda: _ssh(container, key=ssh_keys["given"]).returncode == 0, timeout=30, container=container.name)
    given = _ssh(container, key=ssh_keys["given"])
    assert given.stdout.split() == [str(UID), "/workspace/checkpoints/jiyu"], given.stderr
    other = _ssh(container, key=ssh_keys["other"])
    assert other.returncode == 255 and "Permission denied (publickey)" in other.stderr
    password = _ssh(
        container, "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive"
    )
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr


def test_nothing_runs_as_root_and_tini_is_pid_1(container):
    inspect = json.loads(image_build.podman("inspect", container.name).stdout)[0]
    assert inspect["Config"]["User"] == "1000:1000"
    listing = container.exec(
        "python3",
        "-c",
        "import os, pathlib\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    status = dict(l.split(':', 1) for l in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines())\n"
        "    print(pid, status['Uid'].split()[0], status['Name'].strip())",
    )
    processes = [line.split() for line in listing.stdout.splitlines()]
    assert processes and {uid for _, uid, _ in processes} == {str(UID)}, listing.stdout
    assert "sshd" in {name for _, _, name in processes}
    assert dict((pid, name) for pid, _, name in processes)["1"] == "tini"


def test_the_healthcheck_passes(container):
    health = image_build.podman("healthcheck", "run", container.name, check=False)
    assert health.returncode == 0, health.stdout + health.stderr


def test_a_notebook_job_runs_inside_and_checkpoints_land_on_the_volume(container):
    began = time.monotonic()
    submitted = container.exec("jiyu", "submit", "code/train.ipynb", "--nproc", "1", "--name", "image-job")
    assert submitted.returncode == 0, submitted.stderr
    deadline = time.monotonic() + 180
    while True:
        listing = container.exec("jiyu", "jobs", "--all", "--json")
        runs = json.loads(listing.stdout or "[]")
        run = next((r for r in runs if r["name"] == "image-job"), None)
        if run and run["status"] not in ("queued", "starting", "running", "stopping"):
            break
        assert time.monotonic() < deadline, f"job not done after 180 s: {run}\n{submitted.stdout}"
        time.sleep(2)
    image_build.note_timing("image_job_s", time.monotonic() - began)
    log = container.exec("jiyu", "logs", run["id"])
    assert run["status"] == "succeeded", log.stdout + log.stderr
    checkpoints = sorted((container.checkpoints / "jiyu" / "runs" / run["id"]).glob("ckpt/*"))
    assert checkpoints, list((container.checkpoints / "jiyu").rglob("*"))
    assert all(path.stat().st_uid == UID for path in checkpoints)  # written by the image's user
