"""The image's files without a Docker engine: hadolint and ShellCheck, the Dockerfile's promises
(non-root, tini, healthcheck, NVIDIA variables, versions), compose.yaml's structure, .dockerignore."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from .image_runner import ENTRYPOINT, IMAGES, ROOT, VENV_BIN

DOCKERFILES = sorted(IMAGES.glob("**/Dockerfile*"))
HADOLINT_CONFIG = IMAGES / ".hadolint.yaml"
COMPOSE = IMAGES / "compose.yaml"


def hadolint(*paths: Path | str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "hadolint"), "--no-color", "-c", str(HADOLINT_CONFIG), *map(str, paths)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in dockerfile.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            logical.append(current.strip())
            current = ""
    return [(text.split(" ", 1)[0].upper(), text.split(" ", 1)[1]) for text in logical]


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def build_args(dockerfile: Path) -> dict[str, str]:
    return dict(arg.split("=", 1) for op, arg in instructions(dockerfile) if op == "ARG" and "=" in arg)


def env_of(dockerfile: Path) -> dict[str, str]:
    values = {}
    for op, arg in final_stage(dockerfile):
        if op == "ENV":
            values.update(word.split("=", 1) for word in shlex.split(arg))
    return values


def defaulted(value: str) -> str:
    """compose's ${NAME:-default} with nothing set, as on a fresh machine."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_passes(dockerfile):
    result = hadolint(dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_at_the_configured_threshold():
    """The lint can fail: a warning (unpinned tag), and an info-level finding that a
    `--failure-threshold warning` would let through (two consecutive RUNs)."""
    assert yaml.safe_load(HADOLINT_CONFIG.read_text())["failure-threshold"] == "style"
    unpinned = hadolint("-", stdin="FROM ubuntu:latest\nUSER 1000\n")
    assert unpinned.returncode == 1 and "DL3007" in unpinned.stdout
    info_only = "FROM ubuntu:24.04\nRUN echo a\nRUN echo b\nUSER 1000\n"
    assert hadolint("-", stdin=info_only).returncode == 1
    assert (
        subprocess.run(
            [str(VENV_BIN / "hadolint"), "--failure-threshold", "warning", "-"],
            input=info_only,
            capture_output=True,
            text=True,
        ).returncode
        == 0
    )


def test_every_ignored_rule_has_a_written_reason():
    assert yaml.safe_load(HADOLINT_CONFIG.read_text())["ignored"] == []
    for dockerfile in DOCKERFILES:
        lines = dockerfile.read_text().splitlines()
        for number, line in enumerate(lines):
            if "hadolint ignore=" in line:
                reason = lines[number - 1].strip() if number else ""
                assert reason.startswith("#") and len(reason) > 20 and "hadolint" not in reason, (
                    f"{dockerfile.name}:{number + 1} ignores a rule without a reason on the line above"
                )


def test_shellcheck_passes_on_the_scripts():
    scripts = [ENTRYPOINT, IMAGES / "profile.sh"]
    result = subprocess.run(
        [str(VENV_BIN / "shellcheck"), "--severity=style", *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_runs_as_uid_1000_under_tini_with_a_healthcheck(dockerfile):
    stage = final_stage(dockerfile)
    ops = dict(stage)  # the last of each instruction
    assert ops["USER"] == "1000:1000"
    assert ops["ENTRYPOINT"] == '["tini", "-g", "--", "jiyu-entrypoint"]'
    assert ops["HEALTHCHECK"].endswith('CMD ["jiyu-healthcheck"]')
    assert set(ops["EXPOSE"].split()) == {"8888", "2222"}
    env = env_of(dockerfile)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(","))
    for op, arg in stage:
        if op == "COPY" and "--from=" not in arg:
            sources = [word for word in shlex.split(arg) if not word.startswith("--")][:-1]
            assert all((ROOT / source).exists() for source in sources), arg


def test_the_entrypoint_defaults_are_the_image_paths():
    """The entrypoint's defaults (used when a variable is unset) agree with the image's ENV."""
    defaults = dict(re.findall(r'^: "\$\{(\w+):=([^}]*)\}"', ENTRYPOINT.read_text(), re.MULTILINE))
    env = env_of(IMAGES / "Dockerfile")
    shared = defaults.keys() & env.keys()
    assert {"JIYU_WORKSPACE", "JIYU_SSH_HOST_KEY_DIR", "SSH_PORT", "JUPYTER_PORT"} <= shared
    assert {name: defaults[name] for name in shared} == {name: env[name] for name in shared}


def test_the_versions_in_labels_readme_and_compose_agree():
    args = build_args(IMAGES / "Dockerfile")
    pytorch, cuda, cudnn, lab = (
        args[k] for k in ("PYTORCH_VERSION", "CUDA_VERSION", "CUDNN_VERSION", "JUPYTERLAB_VERSION")
    )
    base = f"pytorch/pytorch:{pytorch}-cuda{cuda}-cudnn{cudnn}-runtime"
    assert re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], args["BASE_IMAGE"]) == base
    labels = " ".join(arg for op, arg in final_stage(IMAGES / "Dockerfile") if op == "LABEL")
    for name in ("pytorch", "cuda", "cudnn", "jupyterlab"):
        assert f"ai.jiyu.{name}.version=" in labels
    readme = (ROOT / "docs" / "guide" / "image.md").read_text()
    for text in (
        base,
        f"| PyTorch | {pytorch} |",
        f"| CUDA | {cuda} |",
        f"| cuDNN | {cudnn}",
        f"| JupyterLab | {lab} |",
    ):
        assert text in readme, text
    service = yaml.safe_load(COMPOSE.read_text())["services"]["lab"]
    assert service["image"].endswith(f":{pytorch}-cuda{cuda}")


def test_compose_reserves_gpus_shm_ports_and_volumes():
    compose = yaml.safe_load(COMPOSE.read_text())
    lab = compose["services"]["lab"]
    devices = lab["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] and d["count"] == "all" for d in devices)
    size = defaulted(lab["shm_size"]).lower()
    number, unit = re.fullmatch(r"(\d+)([kmg])b?", size).groups()
    assert int(number) * {"k": 2**10, "m": 2**20, "g": 2**30}[unit] >= 8 * 2**30
    published = {defaulted(port).rsplit(":", 1)[1]: defaulted(port) for port in lab["ports"]}
    assert published == {"8888": "127.0.0.1:8888:8888", "2222": "127.0.0.1:2222:2222"}
    targets = {}
    for volume in lab["volumes"]:
        source, target = (volume["source"], volume["target"]) if isinstance(volume, dict) else volume.split(":")[:2]
        targets[target] = defaulted(source)
    env = env_of(IMAGES / "Dockerfile")
    assert {"/workspace/code", "/workspace/data", "/workspace/checkpoints", env["JIYU_SSH_HOST_KEY_DIR"]} <= set(
        targets
    )
    assert env["JIYU_HOME"].startswith("/workspace/checkpoints/")  # the run store outlives the container
    named = {source for source in targets.values() if "/" not in source and source != ".."}
    assert named <= set(compose["volumes"]) and len(named) == 3
    assert (COMPOSE.parent / lab["build"]["context"]).resolve() == ROOT
    assert (ROOT / lab["build"]["dockerfile"]).is_file()
    assert {k: defaulted(v) for k, v in lab["environment"].items()} == {
        "JUPYTER_TOKEN": "",
        "SSH_PUBLIC_KEY": "",
        "JIYU_METRICS_TOKEN": "",
    }


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(path, p)
        or fnmatch.fnmatch(path, f"{p}/*")
        or (p.startswith("**/") and (fnmatch.fnmatch(path, p[3:]) or fnmatch.fnmatch(path, f"{p[3:]}/*")))
        for p in patterns
    )


def test_dockerignore_keeps_what_the_build_needs_and_drops_local_state():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in (
        "pyproject.toml",
        "README.md",
        "jiyu_magics/__init__.py",
        "images/entrypoint.sh",
        "images/healthcheck.py",
        "notebooks/01_quickstart.ipynb",
    ):
        assert not _ignored(needed, patterns), needed
    for local in (
        ".git/HEAD",
        ".venv/bin/python",
        "images/.env",
        ".env",
        "labextension/node_modules/x.js",
        "labextension/.yarn/cache/x.zip",
        "test-artifacts/a.png",
        "jiyu_magics/__pycache__/cli.cpython-311.pyc",
        "jiyu_magics/labextension/package.json",
        "tests/test_docs.py",
        "docs/index.md",
    ):
        assert _ignored(local, patterns), local
