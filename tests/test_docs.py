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
