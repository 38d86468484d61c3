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
        installed = run(str(JLPM), "install", "--immutable", cwd=LABEXT)
        assert installed.returncode == 0, installed.stdout + installed.stderr
    result = run(str(JLPM), "test", "--reporter=json", f"--outputFile={tmp_path / 'vitest.json'}", cwd=LABEXT)
    report = json.loads((tmp_path / "vitest.json").read_text())
    failed = [t["fullName"] for f in report["testResults"] for t in f["assertionResults"] if t["status"] != "passed"]
    assert result.returncode == 0 and not failed, failed or result.stdout + result.stderr
    assert report["numPassedTests"] >= 25


def test_typescript_lint_passes(tmp_path):
    """prettier and eslint (the JupyterLab extension template's lint), as `make test` runs them.
    eslint runs once, with a probe file holding a loose comparison beside the real sources: the
    probe must be flagged, so the lint is known to look, and nothing else may be."""
    if not (LABEXT / "node_modules" / ".bin" / "eslint").exists():
        installed = run(str(JLPM), "install", "--immutable", cwd=LABEXT)
        assert installed.returncode == 0, installed.stdout + installed.stderr
    formatted = run(str(JLPM), "prettier:check", cwd=LABEXT)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    probe = LABEXT / "src" / "zz_lint_probe.ts"
    probe.write_text("export function same(a: number, b: number): boolean {\n  return a == b;\n}\n")
    try:
        linted = run(str(JLPM), "eslint:check", "--format", "json", cwd=LABEXT)
    finally:
        probe.unlink()
    assert linted.stdout.lstrip().startswith("["), linted.stdout + linted.stderr
    flagged = {
        Path(f["filePath"]).relative_to(LABEXT).as_posix(): sorted({m["ruleId"] for m in f["messages"]})
        for f in json.loads(linted.stdout)
        if f["messages"]
    }
    assert linted.returncode != 0 and flagged == {"src/zz_lint_probe.ts": ["eqeqeq"]}, flagged


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


def test_the_venv_serves_the_front_end_built_from_these_sources():
    """`pip install -e` copies the built front-end into the venv once: a browser test would then
    drive old code after a change to labextension/src. `make setup` links it instead; this fails
    on a copy, and on a build older than its sources (then: `make setup` rebuilds it)."""
    served = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "jiyu-magics"
    built = ROOT / "jiyu_magics" / "labextension"
    assert served.resolve() == built.resolve(), (
        f"{served} is a copy, not a link to {built}: run `make setup` (jupyter labextension develop)"
    )
    bundle = built / "package.json"
    sources = [p for d in ("src", "style", "schema") for p in (LABEXT / d).rglob("*") if p.is_file()]
    newer = [str(p.relative_to(ROOT)) for p in sources if p.stat().st_mtime > bundle.stat().st_mtime]
    assert sources and not newer, f"changed since the front-end was built: {newer}: run `make setup`"
