"""Shared fixtures: an isolated JIYU_HOME per test, the NVML test double, quiet threads."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from . import work_units

# jp_fetch, jp_serverapp, ...: a real jupyter_server per test for the server-extension tests.
# (The GPU machine runs only gpu-marked tests and has no jupyter_server: don't fail there.)
pytest_plugins = (
    []
    if None in (importlib.util.find_spec("pytest_jupyter"), importlib.util.find_spec("jupyter_server"))
    else ["pytest_jupyter.jupyter_server"]
)

ROOT = Path(__file__).resolve().parent.parent
NVML_DOUBLE_DIR = Path(__file__).resolve().parent / "nvml_double"
ARTIFACTS = ROOT / "test-artifacts"
FOLLOWER_MODULE = "jiyu_magics.jobs.scheduler_follower"  # python -m, as ensure_running starts it


def _gpu_present() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


SLURM_FIXTURES = {"slurm_cluster", "slurm_nodes_cluster"}


@pytest.hookimpl(optionalhook=True)  # the GPU machine runs these tests without xdist
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s workers share the suite by units of work (tests/work_units.py)."""
    return work_units.make_scheduler(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``gpu`` tests need a real GPU; ``driverless`` tests check this machine's real no-driver
    path and so cannot hold where a driver is present."""
    present = _gpu_present()
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the GPU machine: benchmarks/gpu_checks.sh)")
    skip_driverless = pytest.mark.skip(reason="checks the no-driver path; this machine has a GPU")
    for item in items:
        if "gpu" in item.keywords and not present:
            item.add_marker(skip_gpu)
        if "driverless" in item.keywords and present:
            item.add_marker(skip_driverless)
        if SLURM_FIXTURES & set(item.fixturenames) and work_units.work_unit(item.nodeid) != "slurm":
            raise pytest.UsageError(
                f"{item.nodeid} uses a Slurm cluster: list its module in tests/work_units.py MACHINE_WIDE_GROUPS"
            )
    items.sort(key=lambda item: work_units.run_order(work_units.work_unit(item.nodeid)))


def pytest_collection_finish(session):
    """The image's build starts now, beside the rest of the suite, when an image test will run
    and this machine can build it (tests/image_build.py)."""
    if session.config.option.collectonly or not any(item.get_closest_marker("image") for item in session.items):
        return
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects every test: the controller builds
        _start_image_build()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """Under xdist, the controller (which collects nothing itself) starts the image's build once
    a worker's collection holds an image test; the worker that runs them waits for it."""
    if any(i.startswith(work_units.IMAGE_MODULE) for i in ids):
        _start_image_build()


def _start_image_build() -> None:
    from . import image_build

    if not image_build.started() and image_build.unavailable() is None:
        image_build.start_background(ARTIFACTS)


def pytest_sessionfinish(session):
    from . import image_build

    image_build.stop_background()


@pytest.fixture(autouse=True)
def jiyu_home(tmp_path_factory, monkeypatch):
    """Every test gets its own run store and run folders, inherited by the kernels, torchrun
    ranks and CLI processes it starts."""
    home = tmp_path_factory.mktemp("jiyu_home")
    monkeypatch.setenv("JIYU_HOME", str(home))
    yield home
    _stop_scheduler_follower(home)


def _stop_scheduler_follower(home: Path) -> None:
    """A test's Slurm runs may stay active in its folder (a job never submitted): the follower
    of its home would poll them on through every later test. Found by its command line and home,
    not its lock: a follower still starting has not taken the lock yet."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if FOLLOWER_MODULE in (proc.info["cmdline"] or []) and proc.environ().get("JIYU_HOME") == str(home):
                proc.kill()
        except psutil.Error:
            continue


@pytest.fixture
def nvml_double(monkeypatch):
    """Routes ``import pynvml`` to tests/nvml_double (see that module's docstring for why) in
    this process and in every process the test starts."""
    monkeypatch.syspath_prepend(str(NVML_DOUBLE_DIR))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(NVML_DOUBLE_DIR), str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    import pynvml

    assert getattr(pynvml, "_DOUBLE", False), "the NVML test double was not picked up"
    yield pynvml
    sys.modules.pop("pynvml", None)


@pytest.fixture
def other_user() -> Iterator[str]:
    """A real second Unix user of this machine (``useradd``, as root), removed after the test,
    also when it fails: someone who shares the box and must reach none of our work."""
    reason = None
    if os.geteuid() != 0:
        reason = "making a second Unix user needs root"
    elif not (shutil.which("useradd") and shutil.which("runuser") and shutil.which("userdel")):
        reason = "useradd, runuser and userdel are needed"
    if reason:
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SERVICES_ENV}=1)", pytrace=False)
        pytest.skip(reason)
    from .unix_users import account_change

    name = f"jiyu{secrets.token_hex(3)}"
    account_change(["useradd", "-M", "-N", "-g", "nogroup", "-s", "/bin/sh", name])
    try:
        yield name
    finally:
        account_change(["userdel", name], check=False)


@pytest.fixture
def artifacts() -> Path:
    """Where tests leave screenshots and plots for people to look at (test-artifacts/)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def ip():
    """A real IPython shell with the extension loaded, as ``%load_ext jiyu_magics`` does."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jiyu_magics")
    yield shell
    shell.run_line_magic("unload_ext", "jiyu_magics")
    # A new session empties ``In``: reset(new_session=False) kept it and the execution count, and
    # the next test's %%train --nproc replayed every earlier test's cells in its ranks, as cells
    # run before %load_ext (a rank of test_gpu_queue wrote test_train_nproc's seen_rank0.txt into
    # the work tree).
    shell.reset(new_session=True)
    history = shell.__dict__.get("_jiyu_cell_history")  # %%train --nproc replays what it recorded:
    if history is not None:  # the next test's shell starts with none
        history.close()


@pytest.fixture
def torchrun_tmp(tmp_path, monkeypatch) -> Path:
    """torchrun leaves torchelastic_* folders in TMPDIR: each test gets its own (the test's
    tmp_path), and one thread per rank, since two cores are shared by ranks and kernels."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


@pytest.fixture
def jp_server_config():
    """pytest-jupyter's server config for the server tests: the extension enabled and every
    route closed to anonymous requests (a test parametrizes it to change JiyuApp settings).
    Imported here, not at the top: the GPU machine runs conftest without jupyter_server."""
    from .server_fixtures import server_config

    return server_config()


SCHEDULER_TOOLS = frozenset({"sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo", "sacct", "kubectl"})


@pytest.fixture
def no_schedulers(monkeypatch, tmp_path_factory):
    """A PATH without Slurm's and Kubernetes' clients, as on a workstation (specs are written and
    printed, not submitted), whatever this machine has installed: every other program on PATH
    stays reachable through a folder of links."""
    farm = tmp_path_factory.mktemp("path_without_schedulers")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for program in Path(folder).iterdir() if Path(folder).is_dir() else ():
            link = farm / program.name
            if program.name not in SCHEDULER_TOOLS and not link.exists() and os.access(program, os.X_OK):
                link.symlink_to(program)
    monkeypatch.setenv("PATH", str(farm))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    return farm


REQUIRE_SERVICES_ENV = "JIYU_REQUIRE_SERVICES"  # set by `make test`: a missing service fails, not skips


def _start_slurm(nodes: int):
    """A real Slurm of ``nodes`` nodes (tests/slurm_cluster.py), or the test skipped with the
    reason where it cannot run here, failed with it under ``make test`` (JIYU_REQUIRE_SERVICES=1)."""
    from .slurm_cluster import SlurmCluster, unavailable

    reason = unavailable(nodes)
    if reason:
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SERVICES_ENV}=1)", pytrace=False)
        pytest.skip(reason)
    return SlurmCluster.start(nodes=nodes)


def _stop_slurm(cluster, name: str) -> None:
    began = time.monotonic()
    cluster.stop()
    _note_timing(f"{name}_stop_s", time.monotonic() - began)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node Slurm, started once for every Slurm test and stopped and removed
    after the last."""
    cluster = _start_slurm(1)
    _note_timing("slurm_cluster_start_s", cluster.started_in)
    yield cluster
    _stop_slurm(cluster, "slurm_cluster")


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    """This test sees the test cluster (``SLURM_CONF``) and starts on an idle node; whatever
    jobs it leaves are cancelled after it."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


@pytest.fixture(scope="session")
def slurm_nodes_cluster():
    """A real two-node Slurm on this machine (nodes n1 and n2, each a slurmd with its own
    loopback address, hostname and /etc/hosts), beside the one-node cluster: its own ports,
    state and log folders, the same munged."""
    cluster = _start_slurm(2)
    _note_timing("slurm_nodes_start_s", cluster.started_in)
    yield cluster
    _stop_slurm(cluster, "slurm_nodes")


@pytest.fixture
def slurm_nodes(slurm_nodes_cluster, monkeypatch):
    """This test sees the two-node cluster and starts with both nodes idle and resolving names
    as configured; after it, its jobs are cancelled, a slurmd it killed is back in service and
    each node's hosts file is restored."""
    cluster = slurm_nodes_cluster
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()
    for node in cluster.nodes:
        cluster.set_hosts(node.name)
        cluster.restart_slurmd(node.name)
    cluster.end_orphaned_steps()


def _note_timing(name: str, seconds: float) -> None:
    """Timings people ask about (how long the Slurm cluster takes to start), kept in
    test-artifacts/timings.json rather than asserted."""
    path = ARTIFACTS / "timings.json"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[name] = round(seconds, 2)
    path.write_text(json.dumps(data, indent=2))
