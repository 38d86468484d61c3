"""The reference pages, generated from the code when the docs are built, so they cannot fall
behind it: the ``jiyu`` CLI from its argparse parsers (``parser.format_help()`` per subcommand,
what ``jiyu COMMAND --help`` prints), the magics from their docstrings (what ``%magic?`` shows),
the REST routes from ``server.handlers.ROUTES`` and their handlers' docstrings, the records from
the JSON Schema of ``server.rest_schema``, the server settings from ``JiyuApp``'s traitlets, the
environment variables from ``core.environment``, and the troubleshooting findings from running
the doctor itself on the situations it knows.

Each generator returns MyST Markdown; ``builder-inited`` writes them under ``docs/_generated/``
(ignored by git, excluded from the toctree) where the reference pages ``{include}`` them.
``python docs/_ext/jiyu_reference.py DIR`` writes them without Sphinx.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
GENERATED = DOCS / "_generated"
HELP_WIDTH = "100"  # argparse wraps help at $COLUMNS: the same text on every machine


def fenced(text: str, language: str = "text") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{language}\n{text.rstrip()}\n{fence}\n"


# --- the jiyu CLI ------------------------------------------------------------------------------


def cli_reference() -> str:
    """One section per subcommand, in the order ``jiyu --help`` lists them."""
    os.environ["COLUMNS"] = HELP_WIDTH
    from jiyu_magics.cli import build_parser

    parser = build_parser()
    parts = ["## `jiyu`\n", fenced(parser.format_help())]
    for name, sub in _subcommands(parser):
        parts += [f"## `jiyu {name}`\n", fenced(sub.format_help())]
        for child_name, child in _subcommands(sub):
            parts += [f"### `jiyu {name} {child_name}`\n", fenced(child.format_help())]
    return "\n".join(parts)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias maps to the same parser
                    seen.add(id(sub))
                    found.append((name, sub))
    return found


# --- the magics --------------------------------------------------------------------------------


def magics_reference() -> str:
    """Each jiyu magic's docstring, as ``%magic?`` shows it, from a real IPython shell with the
    extension loaded."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jiyu_magics")
    table = shell.magics_manager.lsmagic()
    seen: dict[str, tuple[str, Callable]] = {}
    for kind, prefix in (("cell", "%%"), ("line", "%")):
        for name, fn in sorted(table[kind].items()):
            if getattr(fn, "__module__", "").startswith("jiyu_magics") and name not in seen:
                seen[name] = (prefix, fn)
    parts = []
    for name, (prefix, fn) in sorted(seen.items()):
        both = name in table["cell"] and name in table["line"]
        title = f"`%%{name}` and `%{name}`" if both else f"`{prefix}{name}`"
        text = "\n".join(line for line in inspect.cleandoc(fn.__doc__ or "").splitlines() if line != "::")
        parts += [f"## {title}\n", fenced(text.strip("\n"))]
    return "\n".join(parts)


# --- the REST API ------------------------------------------------------------------------------


def rest_routes() -> str:
    """A table of every route and verb, with the handler's docstring."""
    from jiyu_magics.server.handlers import ROUTES

    rows = ["| route | verb | what it answers |", "|---|---|---|"]
    for pattern, handler in ROUTES:
        route = pattern.replace("(?P<run_id>[^/]+)", "{id}")
        for verb in ("get", "post", "put", "delete"):
            method = handler.__dict__.get(verb)
            if method is None:
                continue
            doc = _unwrapped(method).__doc__ or handler.__dict__.get("__doc__")
            if not doc:
                raise ValueError(f"{handler.__name__}.{verb} has no docstring: the REST reference is made of them")
            rows.append(f"| `{route}` | {verb.upper()} | {_one_line(doc)} |")
    return "\n".join(rows) + "\n"


def _unwrapped(fn: Callable) -> Callable:
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _one_line(doc: str) -> str:
    return " ".join(doc.split()).replace("|", "\\|")


def rest_schema() -> str:
    """The records of ``server.rest_schema``: one table per definition, then the schema whole."""
    from jiyu_magics.server.rest_schema import api_schema

    schema = api_schema()
    parts = []
    for name, definition in schema["$defs"].items():
        parts.append(f"### `{name}`\n")
        if "description" in definition:
            parts.append(definition["description"] + "\n")
        if "enum" in definition:
            parts.append("One of: " + ", ".join(f"`{value}`" for value in definition["enum"]) + ".\n")
        elif "oneOf" in definition:
            parts.append(_events_table(definition["oneOf"]))
        else:
            parts.append(_object_table(definition))
    parts += ["### The schema\n", "`python -m jiyu_magics.server.rest_schema` (`make api-schema`) writes it:\n"]
    parts.append(fenced(json.dumps(schema, indent=2), "json"))
    return "\n".join(parts)


def _type_of(schema: dict) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_type_of(option) for option in schema["anyOf"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if schema.get("type") == "array":
        return f"list of {_type_of(schema['items'])}"
    return schema.get("type", "any")


def _object_table(definition: dict) -> str:
    required = set(definition.get("required", ()))
    rows = ["| field | type | always sent |", "|---|---|---|"]
    for field, schema in definition["properties"].items():
        rows.append(f"| `{field}` | {_type_of(schema)} | {'yes' if field in required else 'no'} |")
    return "\n".join(rows) + "\n"


def _events_table(kinds: list[dict]) -> str:
    rows = ["| `kind` | fields (besides the common ones) |", "|---|---|"]
    common = set.intersection(*(set(kind["properties"]) - {"kind"} for kind in kinds)) if kinds else set()
    for kind in kinds:
        fields = [name for name in kind["properties"] if name not in common and name != "kind"]
        rows.append(f"| `{kind['properties']['kind']['const']}` | {', '.join(f'`{f}`' for f in fields) or '—'} |")
    return f"Every event may carry {', '.join(f'`{name}`' for name in sorted(common))}.\n\n" + "\n".join(rows) + "\n"


def server_settings() -> str:
    """``JiyuApp``'s configurable traitlets: ``c.JiyuApp.<name>`` or ``--JiyuApp.<name>=``."""
    from jiyu_magics.server.app import JiyuApp

    rows = ["| setting | type | default | what it does |", "|---|---|---|---|"]
    for name, trait in sorted(JiyuApp.class_traits(config=True).items()):
        if trait.this_class is not JiyuApp:
            continue  # ExtensionApp's own settings are jupyter_server's to document
        default = trait.default_value_repr()
        rows.append(f"| `{name}` | {type(trait).__name__} | `{default}` | {_one_line(trait.help)} |")
    return "\n".join(rows) + "\n"


# --- the environment -------------------------------------------------------------------------


def environment_reference() -> str:
    """Every environment variable jiyu reads, from ``core.environment``."""
    from jiyu_magics.core.environment import table

    return "\n".join(table()) + "\n"


# --- troubleshooting: the doctor's findings ----------------------------------------------------

NVML_DOUBLE = DOCS.parent / "tests" / "nvml_double" / "pynvml.py"


def doctor_findings() -> str:
    """Every finding the doctor can report, from running ``doctor.diagnose`` on each situation.

    The situations are built as the tests build them: folders for /dev and /proc/modules, an
    environment, torch's build facts; a GPU host's driver is the NVML test double of
    tests/nvml_double (two GPUs), since the machine that builds the docs may have none.
    """
    from jiyu_magics.core.gpu import doctor
    from jiyu_magics.core.gpu.torch_versions import TorchFacts

    nvml = _nvml_double()
    cuda_torch = TorchFacts(version="2.13.0+cu130", cuda="13.0", cudnn="9.20.0", nccl="2.29.7")
    with tempfile.TemporaryDirectory() as folder:
        box = _gpu_box(Path(folder))
        situations = _situations(doctor, TorchFacts, cuda_torch, nvml, box, Path(folder))
        found: dict[tuple[str, str], doctor.Finding] = {}
        for situation in situations:
            for finding in doctor.diagnose(doctor.Probes(**situation)):
                if finding.level != doctor.OK:
                    found.setdefault((finding.check, finding.summary), finding)
        parts = []
        for check in dict.fromkeys(check for check, _ in found):
            parts.append(f"### {check}\n")
            for (name, _), finding in found.items():
                if name == check:
                    parts.append(f"**{finding.level}**: {finding.summary}\n\n*Fix:* {finding.fix}\n")
        # the situations' folders read as the real ones: <tmp>/empty/dev -> /dev
        return re.sub(re.escape(folder) + r"/[\w-]+", "", "\n".join(parts))


def _nvml_double():
    import importlib.util

    spec = importlib.util.spec_from_file_location("jiyu_docs_nvml_double", NVML_DOUBLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_box(folder: Path) -> dict:
    dev = folder / "box" / "dev"
    dev.mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    modules = folder / "modules"
    modules.write_text("nvidia 2 1 nvidia_uvm, Live 0x0\n")
    return {"dev_dir": dev, "proc_modules": modules, "env": {}, "shm_bytes": lambda path: 8 << 30}


def _situations(doctor, TorchFacts, cuda_torch, nvml, box: dict, folder: Path) -> list[dict]:
    """The situations, each a healthy 2-GPU box with one thing wrong."""
    no_driver = type("NoDriver", (), {"NVMLError": Exception})()

    def broken(*args):
        raise nvml.NVMLError_LibraryNotFound()

    no_driver.nvmlInit = broken
    no_driver.nvmlInitWithFlags = broken
    empty_dev = folder / "empty" / "dev"
    empty_dev.mkdir(parents=True)
    no_uvm = folder / "no-uvm" / "dev"
    no_uvm.mkdir(parents=True)
    (no_uvm / "nvidia0").touch()
    nouveau = folder / "nouveau-modules"  # read, not named, by the finding
    nouveau.write_text("nouveau 2334720 0 - Live 0x0\n")
    current = _with(nvml, nvmlSystemGetCudaDriverVersion=lambda: 13000)  # a driver for torch's CUDA 13.0
    old_driver = _with(nvml, nvmlSystemGetCudaDriverVersion=lambda: 12020)
    mig = _with(current, nvmlDeviceGetMigMode=lambda handle: (1, 1))
    healthy = {**box, "nvml": lambda: current, "torch": lambda: cuda_torch}
    return [
        {**healthy, "torch": lambda: TorchFacts(version="2.13.0+cpu", cuda=None)},
        {**healthy, "torch": lambda: None},
        {**healthy, "nvml": lambda: no_driver},
        {**healthy, "dev_dir": empty_dev},
        {**healthy, "dev_dir": no_uvm},
        {**healthy, "proc_modules": nouveau},
        {**healthy, "env": {"CUDA_VISIBLE_DEVICES": ""}},
        {**healthy, "env": {"CUDA_VISIBLE_DEVICES": "0,5"}},
        {**healthy, "env": {"CUDA_VISIBLE_DEVICES": "1"}},
        {**healthy, "nvml": lambda: old_driver},
        {**healthy, "torch": lambda: TorchFacts(version="2.13.0+cu130", cuda="13.0", cudnn="9.20.0", nccl=None)},
        {**healthy, "shm_bytes": lambda path: 64 << 20},
        {**healthy, "shm_bytes": lambda path: None},
        {**healthy, "torch": lambda: TorchFacts(**{**vars(cuda_torch), "cuda_initialized": True})},
        {**healthy, "nvml": lambda: mig},
    ]


def _with(module, **overrides):
    """The NVML double with some functions answering otherwise."""
    copy = type("NvmlWith", (), {})()
    for name in dir(module):
        if not name.startswith("__"):
            setattr(copy, name, getattr(module, name))
    for name, fn in overrides.items():
        setattr(copy, name, fn)
    return copy


GENERATORS: dict[str, Callable[[], str]] = {
    "cli.md": cli_reference,
    "magics.md": magics_reference,
    "rest_routes.md": rest_routes,
    "rest_schema.md": rest_schema,
    "server_settings.md": server_settings,
    "environment.md": environment_reference,
    "doctor_findings.md": doctor_findings,
}


def write_all(folder: Path = GENERATED) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, generate in GENERATORS.items():
        text = generate()
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:  # untouched: no rebuild
            path.write_text(text, encoding="utf-8")


def setup(app):
    app.connect("builder-inited", lambda app: write_all())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.path.insert(0, str(DOCS.parent))
    write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else GENERATED)
