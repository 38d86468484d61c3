"""A real ``jupyter lab`` server and a real headless Chromium for the browser tests.

JupyterLab runs from this virtual environment exactly as a user's does after ``pip install``:
the prebuilt labextension and the server-extension config come from the package's shared
data, nothing is passed on the command line to enable them. Only the GPU side goes through
the NVML test double (the machine has no driver) so the screenshots show GPU cards.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .conftest import NVML_DOUBLE_DIR, ROOT
from .ports import free_port

CHROMIUM = Path(os.environ.get("JIYU_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
QUIET_NOTIFICATIONS = {"fetchNews": "false", "checkForUpdates": False}


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    home: Path
    process: subprocess.Popen

    @property
    def entry(self) -> str:
        return f"{self.url}lab?token={self.token}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "JIYU_HOME": str(self.home)}


def write_user_settings(folder: Path, panel: dict) -> None:
    """User settings as JupyterLab stores them: no news toast over the screenshots, and a fast
    panel refresh so the test sees progress without long waits."""
    for plugin, values in (
        ("@jupyterlab/apputils-extension/notification", QUIET_NOTIFICATIONS),
        ("jiyu-magics/panel", panel),
    ):
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@contextmanager
def jupyter_lab(
    workdir: Path,
    panel_settings: dict,
    timeout: float = 90,
    env: dict | None = None,
    args: tuple[str, ...] = (),
    app: str = "jupyterlab",
) -> Iterator[Lab]:
    """``env`` adds to the server's environment (e.g. the NVML double's shared-box settings),
    ``args`` to its command line (e.g. ``--JiyuApp.kernel_idle_warning=0``); ``app="notebook"``
    starts Notebook 7 (the same front-end extension system) instead of JupyterLab, and
    ``app="jupyter_server"`` the bare server (no front-end: what the REST API alone needs)."""
    root, home, jupyter = workdir / "root", workdir / "jiyu_home", workdir / "jupyter"
    for folder in (root, home, jupyter / "config", jupyter / "runtime"):
        folder.mkdir(parents=True, exist_ok=True)
    write_user_settings(jupyter / "settings", panel_settings)
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JIYU_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(jupyter / "config"),
        "JUPYTER_RUNTIME_DIR": str(jupyter / "runtime"),
        "PYTHONPATH": os.pathsep.join([str(NVML_DOUBLE_DIR), str(ROOT)]),
        **(env or {}),
    }
    klass = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    front_end = [
        f"--{klass}.user_settings_dir={jupyter / 'settings'}",
        f"--{klass}.workspaces_dir={jupyter / 'workspaces'}",
        f"--{klass}.expose_app_in_browser=True",
    ]
    command = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--allow-root",
        f"--port={port}",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        *(front_end if app != "jupyter_server" else []),
        *args,
    ]
    log = open(workdir / "jupyter_lab.log", "wb")
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(f"http://127.0.0.1:{port}/", token, root, home, process)
    try:
        wait_for_status(lab, timeout, workdir / "jupyter_lab.log")
        yield lab
    finally:
        stop_process(process)
        log.close()


def wait_for_status(lab: Lab, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {lab.process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            request = urllib.request.Request(f"{lab.url}api/status", headers={"Authorization": f"token {lab.token}"})
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop_process(process: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM to the process group (the server and its kernels), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)
    except ProcessLookupError:
        pass


TRAINING_NOTEBOOK_CELLS = [
    "%load_ext jiyu_magics",
    "steps = 150\npace = 0.2",
    "import time, torch\nfrom sklearn.datasets import load_digits\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "x, y = load_digits(return_X_y=True)\n"
    "data = TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y))\n"
    "def train_step(model, batch):  # from an earlier cell: %%train names it in its header\n"
    "    time.sleep(pace)  # paced, so the panel's progress visibly moves\n"
    "    inputs, targets = batch\n"
    "    return torch.nn.functional.cross_entropy(model(inputs), targets)",
    "%%train --max-steps {steps} --refresh 1 --seed 0 --name {name}\n"
    "model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))\n"
    "optimizer = torch.optim.AdamW(model.parameters(), 3e-3)\n"
    "train_loader = DataLoader(data, batch_size=32, shuffle=True)",
]


def training_notebook(folder: Path, name: str, train_options: str = "") -> Path:
    """A real %%train notebook (digits MLP) with a ``parameters`` cell (steps, pace);
    ``train_options`` go at the end of its ``%%train`` line (``--resume last``)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell(source.replace("{name}", name)) for source in TRAINING_NOTEBOOK_CELLS]
    if train_options:
        first, rest = cells[-1].source.split("\n", 1)
        cells[-1].source = f"{first} {train_options}\n{rest}"
    cells[1].metadata["tags"] = ["parameters"]
    path = folder / f"{name}.ipynb"
    nbformat.write(
        new_notebook(
            cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
        ),
        path,
    )
    return path


@dataclass
class TrainingJob:
    run_id: str
    name: str


def submit_training_job(
    lab: Lab,
    name: str,
    steps: int = 150,
    pace: float = 0.2,
    tmp: Path | None = None,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    train_options: str = "",
) -> TrainingJob:
    """A background job as a user submits one (``jiyu submit`` with ``options``, e.g. a Slurm
    backend) into the lab's run store; ``train_options`` go on the notebook's ``%%train`` line."""
    env = {**lab.env(), **(env or {}), "PYTHONPATH": str(ROOT)}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    jiyu = Path(sys.executable).with_name("jiyu")
    done = subprocess.run(
        [
            str(jiyu),
            "submit",
            str(training_notebook(lab.root, name, train_options)),
            "--name",
            name,
            "-p",
            "steps",
            str(steps),
            "-p",
            "pace",
            str(pace),
            *options,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=lab.root,
    )
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    return TrainingJob(words[2] if words[0] == "Submitted" else words[1], name)


def painted(page) -> None:
    """Waits for two animation frames: what changed before is laid out and painted (the event
    a screenshot waits for, rather than a fixed time)."""
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def wait_for_theme(page, selector: str, dark: bool, timeout: float = 30_000) -> None:
    """Waits until a theme switch is over: JupyterLab's splash (shown while the theme loads) gone,
    the first ``selector``'s background a dark (or light) theme's, and that painted. Events, not
    a guess at how long it takes."""
    luminance = "(0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255"
    page.wait_for_function(
        f"() => {{ const node = document.querySelector({selector!r});"
        f" if (!node || document.getElementById('jupyterlab-splash')) return false;"
        f" const c = getComputedStyle(node).backgroundColor.match(/[0-9.]+/g).map(Number);"
        f" return c.length === 3 || c[3] > 0 ? {luminance} {'< 0.3' if dark else '> 0.8'} : false; }}",
        timeout=timeout,
    )
    painted(page)


def launch_chromium(playwright):
    if not CHROMIUM.exists():
        raise RuntimeError(
            f"Chromium not found at {CHROMIUM}: run `make test` (installs it) or "
            "`apt-get install -y chromium`, or point JIYU_CHROMIUM at a Chromium binary"
        )
    # Its own temporary folder: its singleton socket under a test's TMPDIR passed the 107 bytes of a
    # Unix socket path (an xdist worker's folders are longer), and Chromium aborted at start
    env = {**os.environ, "TMPDIR": "/tmp"}
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, env=env)
