"""Builds images/Dockerfile for real with podman, on a Debian base with CPU torch standing in for
the CUDA base image (no registry is reachable here, and there is no GPU).

Three stand-ins, each made once and kept in podman's own storage under a tag that names what it
was made from, so a later run (``make test`` again, CI on the same machine) reuses them:

* ``localhost/jiyu-check/debian:bookworm-<month>-<hash>``: ``debootstrap --variant=minbase`` of
  Debian bookworm with python3, imported with ``tar | podman import``. The month in the tag makes
  a fresh one (with that month's security updates) once a month; the hash covers the suite,
  mirror and packages.
* ``localhost/jiyu-check/cpu-base:<hash>`` (``tests/data/image/cpu-base.Containerfile``): that
  Debian with torch 2.13.0+cpu in a virtual environment on the PATH, standing in for
  ``pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime``; the wheel is the one pip finds for this
  machine (``pip download torch==2.13.0 --no-deps``), not PyPI's multi-GB CUDA build.
* ``localhost/jiyu-check/node:<hash>`` (``node.Containerfile``): this machine's node binary at
  ``/usr/local/bin/node``, standing in for ``node:22-bookworm-slim``.

Then ``podman build -f images/Dockerfile`` with ``BASE_IMAGE``, ``NODE_IMAGE`` and
``CUDA_VERSION=cpu``: every instruction of the users' Dockerfile runs (apt, the user, the
front-end and wheel build, pip), and podman's layer cache skips the steps whose inputs did not
change. Podman runs as root with runc and the cgroupfs manager, default ulimits within the
current hard limits and the host's network (``containers.conf`` written under the cache folder):
what works in this machine's containers.

``python -m tests.image_build`` builds it by hand and prints the times and the image's size.

A test session that will check the image starts that build in the background as soon as its
tests are collected (``start_background``, from conftest): on a cold machine most of the build
waits on the Debian mirror, PyPI and the disk, and overlaps the rest of the suite instead of
adding its minutes to it. The image's tests wait for that process to end (``built``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
STANDINS = Path(__file__).resolve().parent / "data" / "image"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jiyu-image-check"
ARTIFACTS = ROOT / "test-artifacts"

SUITE = "bookworm"
MIRROR = os.environ.get("JIYU_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("python3", "python3-venv")
TORCH = "torch==2.13.0"
CA_BUNDLE = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
IMAGE = "localhost/jiyu/pytorch-lab:2.13.0-cpu-check"
TOOLS = ("podman", "debootstrap", "runc")

CONTAINERS_CONF = """\
# podman as root on this machine: crun and the systemd cgroup manager fail (cgroups in hybrid
# mode, setrlimit not permitted), and container networks need what a sandbox may not allow.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def unavailable() -> str | None:
    """Why the image cannot be built here, or None."""
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed (make test-system-deps installs them)"
    if os.geteuid() != 0:
        return "podman builds here only as root (debootstrap and runc need it)"
    if not shutil.which("node"):
        return "no node on PATH (the stand-in for the node image copies this machine's)"
    if not CA_BUNDLE.is_file():
        return f"no CA bundle at {CA_BUNDLE}"
    return None


def podman_env() -> dict[str, str]:
    """The environment every podman call gets: the containers.conf above."""
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman(*args: str, timeout: float = 120, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, **kwargs
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} ... exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def _digest(*parts: str | bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode() if isinstance(part, str) else part)
        sha.update(b"\0")
    return sha.hexdigest()[:12]


@dataclass
class Build:
    """What was built and how long each part took (seconds; 0 where a cached one was used)."""

    image: str
    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, began: float) -> None:
        self.seconds[name] = round(time.monotonic() - began, 1)


def debian_base(build: Build) -> str:
    """The debootstrap base, made when this month's is not there yet."""
    tag = f"localhost/jiyu-check/debian:{SUITE}-{date.today():%Y%m}-{_digest(SUITE, MIRROR, *PACKAGES)}"
    if exists(tag):
        return tag
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jiyu-debootstrap-") as folder:
        rootfs = Path(folder) / "rootfs"
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            check=True,
            capture_output=True,
            timeout=1200,
        )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        podman("import", "-", tag, stdin=tar.stdout, timeout=600)
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap folder failed")
    build.timed("debian_base", began)
    return tag


def torch_wheel(folder: Path) -> Path:
    """The CPU torch wheel pip finds for this machine (a local file: no multi-GB download)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", TORCH, "--no-deps", "-d", str(folder)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheels = list(folder.glob("torch-*.whl"))
    if len(wheels) != 1 or "+cpu" not in wheels[0].name:
        raise RuntimeError(f"expected one CPU torch wheel, pip gave {[w.name for w in wheels]}")
    return wheels[0]


def cpu_base(build: Build, debian: str) -> str:
    containerfile = STANDINS / "cpu-base.Containerfile"
    tag = f"localhost/jiyu-check/cpu-base:{_digest(debian, containerfile.read_bytes(), TORCH)}"
    if exists(tag):
        return tag
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jiyu-cpu-base-") as folder:
        context = Path(folder)
        wheel = torch_wheel(context)
        shutil.copy(CA_BUNDLE, context / "ca-certificates.crt")
        _build(containerfile, context, tag, DEBIAN_BASE=debian, TORCH_WHEEL=wheel.name)
    build.timed("cpu_base", began)
    return tag


def node_base(build: Build, debian: str) -> str:
    containerfile = STANDINS / "node.Containerfile"
    node = Path(shutil.which("node")).resolve()
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    tag = f"localhost/jiyu-check/node:{_digest(debian, containerfile.read_bytes(), version)}"
    if exists(tag):
        return tag
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jiyu-node-") as folder:
        shutil.copy(node, Path(folder) / "node")
        _build(containerfile, Path(folder), tag, DEBIAN_BASE=debian)
    build.timed("node_base", began)
    return tag


def _build(containerfile: Path, context: Path, tag: str, timeout: float = 1500, **args: str) -> None:
    build_args = [item for name, value in args.items() for item in ("--build-arg", f"{name}={value}")]
    # --format docker: the OCI image format has no HEALTHCHECK (podman drops it with a warning)
    podman(
        "build",
        "--layers",
        "--format",
        "docker",
        "-f",
        str(containerfile),
        *build_args,
        "-t",
        tag,
        str(context),
        timeout=timeout,
    )


def build(timings: bool = True) -> Build:
    """The stand-ins (cached), then the image from images/Dockerfile (podman's layer cache)."""
    result = Build(IMAGE)
    debian = debian_base(result)
    base, node = cpu_base(result, debian), node_base(result, debian)
    began = time.monotonic()
    before = image_id(IMAGE)
    _build(
        ROOT / "images" / "Dockerfile",
        ROOT,
        IMAGE,
        BASE_IMAGE=base,
        NODE_IMAGE=node,
        CUDA_VERSION="cpu",
    )
    result.timed("image", began)
    if before and before != image_id(IMAGE):
        # The previous build, untagged now. Only it: `podman image prune` would also remove the
        # build stage's layers (no image descends from them), the cache of the front-end build.
        podman("rmi", before, check=False)
    # What older builds left (layers of a front-end or dependencies since changed) goes after a
    # week: storage stays bounded, and a cache unused for a week is rebuilt once.
    podman("image", "prune", "-f", "--filter", "until=168h", check=False)
    if timings:
        note_timings(result)
    return result


def note_timings(result: Build) -> None:
    for name, seconds in result.seconds.items():
        note_timing(f"image_build_{name}_s", seconds)


# -- the build in the background of a test session -----------------------------------------------

BACKGROUND_NICE = 10  # the suite's timed waits keep the CPU first; the build takes what is left


@dataclass
class Background:
    """``python -m tests.image_build --result FILE`` started by this session."""

    process: subprocess.Popen
    result: Path
    log: Path


_background: Background | None = None
RESULT_NAME, LOG_NAME = "image_build_result.json", "image_build.log"


def _build_arguments(result: Path) -> list[str]:
    """The background build's arguments after the interpreter: how it is started, and how an
    xdist worker finds it in the process table."""
    return ["-m", "tests.image_build", "--result", str(result)]


def start_background(folder: Path) -> None:
    """Start the build beside the suite (its own process group, so that an ended session can end
    podman and what it runs with it)."""
    global _background
    folder.mkdir(parents=True, exist_ok=True)
    result, log = folder / RESULT_NAME, folder / LOG_NAME
    result.unlink(missing_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *_build_arguments(result)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(BACKGROUND_NICE),
        )
    _background = Background(process, result, log)
    # Reaped as soon as it ends: an xdist worker waits for it by pid, and a zombie lives on
    threading.Thread(target=process.wait, name="image-build-reaper", daemon=True).start()


def started() -> bool:
    return _background is not None


def built(timeout: float = 2400) -> Build:
    """The image: the background build's, once it has ended, or built here and now when this
    session started none (a single test run by hand). An xdist worker waits for the build its
    controller started (found by its command line: the controller is not its parent)."""
    global _background
    if _background is None and os.environ.get("PYTEST_XDIST_WORKER"):
        return _controllers_build(timeout)
    if _background is None:
        return build()
    background, _background = _background, None
    code = background.process.wait(timeout=timeout)
    return _result(background.result, background.log, code)


def _controllers_build(timeout: float) -> Build:
    result, log = ARTIFACTS / RESULT_NAME, ARTIFACTS / LOG_NAME
    arguments = _build_arguments(result)
    for process in psutil.process_iter(["cmdline"]):
        if process.info["cmdline"] and process.info["cmdline"][1:] == arguments:
            try:
                process.wait(timeout=timeout)
            except psutil.NoSuchProcess:
                pass
    return _result(result, log, None)


def _result(result: Path, log: Path, code: int | None) -> Build:
    if code or not result.exists():
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        ended = "left no result" if code is None else f"exited {code}"  # None: the controller's build
        raise RuntimeError(f"the background image build {ended}:\n{tail}")
    data = json.loads(result.read_text())
    image = Build(data["image"], data["seconds"])
    note_timings(image)
    return image


def stop_background() -> None:
    """End a build this session started and no test waited for (the session was cut short)."""
    global _background
    if _background is not None and _background.process.poll() is None:
        os.killpg(_background.process.pid, signal.SIGTERM)
        try:
            _background.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(_background.process.pid, signal.SIGKILL)
    _background = None


def image_id(tag: str) -> str | None:
    found = podman("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def note_timing(name: str, seconds: float) -> None:
    """Build and run times go to test-artifacts/timings.json (people ask; no test asserts them)."""
    path = ARTIFACTS / "timings.json"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[name] = round(seconds, 1)
    path.write_text(json.dumps(data, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the image as its tests do.")
    parser.add_argument("--result", type=Path, help="write what was built here as JSON (a test session's build)")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(f"cannot build the image here: {reason}")
    done = build(timings=args.result is None)
    if args.result:
        partial = args.result.with_name(args.result.name + ".partial")
        partial.write_text(json.dumps({"image": done.image, "seconds": done.seconds}))
        partial.rename(args.result)
    print(f"built {done.image} ({image_size(done.image) / 2**30:.2f} GiB); seconds: {done.seconds}")


if __name__ == "__main__":
    main()
