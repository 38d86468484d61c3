"""The README and the documentation's generated reference. `make docs` builds the site itself
(warnings, broken internal links, anchors and images fail it); these check what that build
cannot: the README stays short and its links lead somewhere, and each reference generator covers
everything the code has (a new subcommand, magic, route or doctor check appears in the docs)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from .conftest import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("jiyu_reference", DOCS / "_ext" / "jiyu_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_fits_on_a_screen_and_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    head = "\n".join(lines[:12])
    assert "\nmake demo   #" in head and "\nmake test   #" in head


def test_every_relative_link_of_the_readme_and_images_readme_exists():
    for page in (README, ROOT / "images" / "README.md"):
        targets = [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t) and t[0] != "#"]
        assert targets, page
        for target in targets:
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.name} links to {target}, which does not exist"


def test_the_readme_links_every_guide_page_i_wrote_and_one_screenshot():
    text = README.read_text()
    images = [t for t in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)]
    assert images == ["docs/img/lab_train_dashboard.png"]
    for page in ("gpus", "train", "ddp", "jobs", "sharing", "clusters", "lab-panel", "monitoring", "image"):
        assert f"(docs/guide/{page}.md)" in text, page


def test_the_cli_reference_has_every_subcommand_help(reference):
    from jiyu_magics.cli import build_parser

    text = reference.cli_reference()
    for name, sub in reference._subcommands(build_parser()):
        assert f"## `jiyu {name}`" in text
        assert sub.format_help().splitlines()[0] in text  # the usage line, as --help prints it


def test_the_magics_reference_is_each_magics_docstring(reference, ip):
    text = reference.magics_reference()
    magics = ip.magics_manager.lsmagic()
    ours = {name for kind in ("line", "cell") for name, fn in magics[kind].items() if fn.__module__.startswith("jiyu")}
    assert ours >= {"gpu_status", "gpu_doctor", "train", "submit", "jobs", "job", "runs"}
    for name in ours:
        assert re.search(rf"^## `%%?{name}`", text, re.MULTILINE), name
    assert "Run the cell, then train the model it defines" in text  # %%train's docstring, whole


def test_the_rest_reference_has_every_route_and_schema_definition(reference):
    from jiyu_magics.server.handlers import ROUTES
    from jiyu_magics.server.rest_schema import api_schema

    routes = reference.rest_routes()
    for pattern, _ in ROUTES:
        assert f"`{pattern.replace('(?P<run_id>[^/]+)', '{id}')}`" in routes
    schema = reference.rest_schema()
    for name in api_schema()["$defs"]:
        assert f"### `{name}`" in schema


def test_a_route_without_a_docstring_fails_the_reference(reference, monkeypatch):
    from jiyu_magics.server import handlers

    class Undocumented(handlers.JiyuHandler):
        async def get(self) -> None:
            pass

    monkeypatch.setattr(handlers, "ROUTES", [*handlers.ROUTES, (r"/jiyu/api/new", Undocumented)])
    with pytest.raises(ValueError, match="Undocumented.get has no docstring"):
        reference.rest_routes()


def test_troubleshooting_shows_every_doctor_check_that_can_fail(reference):
    """A check added to the doctor needs a situation in the docs' list, or this fails."""
    from jiyu_magics.core.gpu import doctor

    checks = {finding.check for finding in doctor.diagnose()}
    text = reference.doctor_findings()
    shown = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert shown == checks
    assert "/tmp" not in text  # the situations' folders read as /dev
    assert "**problem**: torch 2.13.0+cpu is a CPU-only build" in text


def test_the_server_settings_are_jiyuapps(reference):
    text = reference.server_settings()
    for name in ("refresh_interval", "metrics_token", "stop_grace", "gpu_busy_mib"):
        assert f"| `{name}` |" in text
    assert sys.modules["jiyu_magics.server.app"].JiyuApp.stop_grace.help.split()[0] in text


def test_make_demo_reports_a_cpu_box_without_a_make_error(tmp_path):
    """``make demo`` on a machine without a usable GPU ended its doctor step with ``make: [...]
    Error 1 (ignored)``, which reads as the demo failing: the doctor's findings, then a line
    saying the demo trains on the CPU. (Its GPU report part, as ``make demo`` runs it.)"""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's jiyu, not an NVML double
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "-o",
            "setup",
            "gpu-report",
            f"BIN={os.path.dirname(sys.executable)}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Error" not in said and "ignored" not in said, said
    doctor = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "jiyu"), "doctor"], capture_output=True, env=env, timeout=120
    )
    if doctor.returncode:  # this machine: no driver, CPU torch
        assert said.rstrip().endswith("(no usable GPU here: the demo trains on the CPU)"), said


def test_getting_starteds_code_blocks_fit_the_page_without_scrolling_sideways():
    """The first page a user reads: its code blocks scrolled sideways. Measured in Chromium on
    the built site (``make docs``): at a 1280 px window the theme's content column is 622 px,
    which holds 69 characters of its code font (a line of 71 scrolled); 68 leaves a margin."""
    longest = 68
    text, inside, over = (DOCS / "getting-started.md").read_text(), False, []
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and len(line) > longest:
            over.append(line)
    assert over == [], over
