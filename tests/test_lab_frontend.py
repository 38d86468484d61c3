"""The front-end's own unit tests (vitest, labextension/test/) and its packaging, run from the
Python suite so `make test` and CI run everything with one command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

LABEXT = ROOT / "labextension"
JLPM = Path(sys.executable).with_name("jlpm")


def run(*command: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": os.pathsep.join([str(JLPM.parent), os.environ.get("PATH", "")])}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_vitest_unit_tests_pass(tmp_path):
    if not (LABEXT / "node_modules" / ".bin" / "vitest").exists():
        installed = run(str(JLPM), "install", cwd=LABEXT)
        assert installed.returncode == 0, installed.stdout + installed.stderr
    result = run(str(JLPM), "test", "--reporter=json", f"--outputFile={tmp_path / 'vitest.json'}", cwd=LABEXT)
    report = json.loads((tmp_path / "vitest.json").read_text())
    failed = [t["fullName"] for f in report["testResults"] for t in f["assertionResults"] if t["status"] != "passed"]
    assert result.returncode == 0 and not failed, failed or result.stdout + result.stderr
    assert report["numPassedTests"] >= 25


def test_pip_install_enabled_the_lab_and_server_extensions():
    """No `jupyter labextension install`, no `jupyter server extension enable`: installing the
    package is enough."""
    lab = run(sys.executable, "-m", "jupyter", "labextension", "list")
    assert "jiyu-magics v0.1.0 enabled OK" in _plain(lab.stdout + lab.stderr), lab.stdout + lab.stderr
    server = run(sys.executable, "-m", "jupyter", "server", "extension", "list")
    text = _plain(server.stdout + server.stderr)
    assert "jiyu_magics enabled" in text and "jiyu_magics 0.1.0 OK" in text, text


def _plain(text: str) -> str:
    """Without the terminal colour codes jupyter prints."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)
