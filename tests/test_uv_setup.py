"""`make setup` installs with uv, handing it pip's configuration (scripts/uv_with_pip_config.py).

A machine's pip configuration can hold what the install needs (this one's CPU torch wheel in a
local folder, a constraint file capping torch); uv does not read it, so a lost setting would
resolve a different torch. The tests run pip for real, reading no configuration file
(PIP_CONFIG_FILE=/dev/null) and only the PIP_* variables each one sets.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "scripts" / "uv_with_pip_config.py"


def _script_module():
    """The script as a module, loaded from its file: scripts/ is not a package, and putting it
    on sys.path would change imports for every later test of the worker."""
    spec = importlib.util.spec_from_file_location("uv_with_pip_config", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _uv_environment(pip_environment: dict[str, str]) -> dict[str, str]:
    """The environment the script hands its command (`env`), given pip's variables."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "UV_"))}
    clean.update(pip_environment, PIP_CONFIG_FILE=os.devnull)
    listing = subprocess.run(
        [sys.executable, str(SCRIPT), "env", "-0"], env=clean, capture_output=True, text=True, check=True
    ).stdout
    return dict(entry.split("=", 1) for entry in listing.split("\0") if entry)


def test_pips_wheels_constraints_and_indexes_reach_uv(tmp_path: Path) -> None:
    for folder in ("wheels", "more-wheels", "one", "two"):
        (tmp_path / folder).mkdir()
    uv = _uv_environment(
        {
            "PIP_FIND_LINKS": f"{tmp_path}/wheels {tmp_path}/more-wheels https://wheels.example/",
            "PIP_CONSTRAINT": "/etc/caps.txt",
            "PIP_INDEX_URL": "https://mirror.example/simple",
            "PIP_EXTRA_INDEX_URL": f"file://{tmp_path}/one file://{tmp_path}/two",
            "PIP_DEFAULT_TIMEOUT": "180",
        }
    )

    assert uv["UV_FIND_LINKS"] == f"{tmp_path}/wheels,{tmp_path}/more-wheels,https://wheels.example/"
    assert uv["UV_CONSTRAINT"] == "/etc/caps.txt"
    assert uv["UV_DEFAULT_INDEX"] == "https://mirror.example/simple"
    assert uv["UV_INDEX"] == f"file://{tmp_path}/one file://{tmp_path}/two"
    assert uv["UV_HTTP_TIMEOUT"] == "180"  # a slow mirror: pip waited this long, so does uv
    # pip takes the best version across its indexes: so must uv, or a local index shadows PyPI
    assert uv["UV_INDEX_STRATEGY"] == "unsafe-best-match"


def test_local_wheels_and_indexes_that_are_not_there_are_left_out_as_pip_passes_over_them(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    uv = _uv_environment(
        {
            "PIP_FIND_LINKS": f"{tmp_path}/gone {tmp_path}/wheels",
            "PIP_EXTRA_INDEX_URL": f"file://{tmp_path}/no-index",
        }
    )

    assert uv["UV_FIND_LINKS"] == f"{tmp_path}/wheels"
    assert "UV_INDEX" not in uv and "UV_INDEX_STRATEGY" not in uv


def test_without_those_settings_uv_gets_nothing_of_pips() -> None:
    uv = _uv_environment({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_COLOR": "1"})

    assert not [key for key in uv if key.startswith("UV_")]


@pytest.mark.parametrize("file_first", [True, False])
def test_pips_environment_wins_over_its_files_and_lines_of_several_values_split(file_first: bool) -> None:
    lines = [
        "global.find-links='/from/file'",
        "global.extra-index-url='\\nfile:///local/one\\nfile:///local/two'",
        ":env:.find-links='/from/environment'",
    ]
    listing = "\n".join(lines if file_first else lines[::-1])

    assert _script_module().pip_settings(listing) == {
        "find-links": ["/from/environment"],
        "extra-index-url": ["file:///local/one", "file:///local/two"],
    }
