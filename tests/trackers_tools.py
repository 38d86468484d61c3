"""The trackers' own readers and servers for the tracking tests: TensorBoard's
``EventAccumulator`` and ``tensorboard --logdir``, ``MlflowClient`` and ``mlflow server`` on an
SQLite store, all real and on 127.0.0.1; each server is ended by its pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port

BIN = Path(sys.executable).parent


def wait_for(what: Callable[[], object], timeout: float = 60.0, every: float = 0.2, message: str = ""):
    """``what()`` once it is truthy; fails after ``timeout`` seconds with ``message``."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s: {message}")
        time.sleep(every)


def tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of one TensorBoard run folder, as TensorBoard's reader sees it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def tb_folder(logdir: Path) -> Path:
    folders = [p for p in Path(logdir).iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def mlflow_run(uri: str, jiyu_run_id: str, experiment: str = "jiyu"):
    """The MLflow run of a jiyu run (its tag ``jiyu.run_id``), through MlflowClient."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return client, None
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.`jiyu.run_id` = '{jiyu_run_id}'")
    return client, runs[0] if runs else None


def mlflow_finished(uri: str, jiyu_run_id: str):
    client, run = mlflow_run(uri, jiyu_run_id)
    return (client, run) if run is not None and run.info.status != "RUNNING" else None


def get_json(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


@dataclass
class Server:
    url: str
    process: subprocess.Popen


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextmanager
def _server(
    cmd: list[str], probe: str, port: int, timeout: float, log: Path, env: dict | None = None
) -> Iterator[Server]:
    with open(log, "ab") as out:
        process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not _answers(url + probe):
            assert process.poll() is None, f"{cmd[0]} exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"{cmd[0]} did not answer in {timeout:g} s: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        yield Server(url, process)
    finally:
        _end(process)


def _end(process: subprocess.Popen) -> None:
    """The server's whole process group (mlflow server runs uvicorn workers), by its pid."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@contextmanager
def tensorboard_server(logdir: Path, log: Path) -> Iterator[Server]:
    port = free_port()
    cmd = [str(BIN / "tensorboard"), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)]
    with _server(cmd + ["--reload_interval", "1"], "/data/runs", port, 90, log) as server:
        yield server


@contextmanager
def mlflow_server(store: Path, log: Path) -> Iterator[Server]:
    """``mlflow server`` on an SQLite store, its job workers off: 30-60 s to answer under load."""
    port = free_port()
    cmd = [
        str(BIN / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{store}",
        "--default-artifact-root",
        str(store.parent / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with _server(cmd, "/health", port, 240, log, env) as server:
        yield server


@contextmanager
def chromium_page(width: int = 1400, height: int = 900):
    from playwright.sync_api import sync_playwright

    from .lab_runner import launch_chromium

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            context.set_default_timeout(120_000)  # the trackers' web apps draw slowly on 2 busy cores
            yield context.new_page()
        finally:
            browser.close()


class TcpGate:
    """A tracker server's outage, staged in front of the real one: a TCP relay on 127.0.0.1
    that clients connect to instead of the server. ``down()`` resets every connection and
    every new one at once (counted in ``refused``: a client's failed attempt), ``up()`` relays
    again; the server behind it runs on and keeps what it got. Threads only: no process."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.open, self.refused = True, 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="tcp-gate", daemon=True).start()

    def down(self) -> None:
        with self._lock:
            self.open = False
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    def up(self) -> None:
        with self._lock:
            self.open = True

    def close(self) -> None:
        self.down()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if not self.open:
                    self.refused += 1
                    _reset(client)
                    continue
                try:
                    server = socket.create_connection(self.target, timeout=10)
                except OSError:
                    _reset(client)
                    continue
                self._pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _reset(sock: socket.socket) -> None:
    """Closed with an RST (SO_LINGER 0): the peer's next read or write fails at once."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass
