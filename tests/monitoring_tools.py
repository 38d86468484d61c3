"""Prometheus and promtool from Debian's ``prometheus`` package (``make test-system-deps``
installs it), and a real Prometheus server for the scrape test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .ports import free_port

MONITORING = Path(__file__).resolve().parents[1] / "images" / "monitoring"
REQUIRE_SERVICES_ENV = "JIYU_REQUIRE_SERVICES"


def program(name: str, installed_by: str = "Debian's prometheus package: make test-system-deps") -> str:
    """The path of ``name``; skips where it is missing, fails under ``make test``."""
    candidates = [Path(sys.executable).with_name(name), Path("/usr/bin") / name]  # this venv's, Debian's
    found = shutil.which(name) or next((str(c) for c in candidates if os.access(c, os.X_OK)), None)
    if found is None:
        reason = f"{name} is not installed ({installed_by})"
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SERVICES_ENV}=1)", pytrace=False)
        pytest.skip(reason)
    return found


def promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess:
    return subprocess.run([program("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


class Prometheus:
    """``prometheus`` on a free loopback port with its own data folder, scraping every second."""

    def __init__(self, folder: Path, target: str, metrics_path: str, token: str):
        self.port = free_port()
        token_file = folder / "token"
        token_file.write_text(token)
        config = folder / "prometheus.yml"
        config.write_text(
            json.dumps(
                {  # JSON is YAML
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "jiyu",
                            "metrics_path": metrics_path,
                            "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                            "static_configs": [{"targets": [target]}],
                        }
                    ],
                }
            )
        )
        self.log = open(folder / "prometheus.log", "w")
        self.process = subprocess.Popen(
            [
                program("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def api(self, path: str, **query) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.loads(reply.read())["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
