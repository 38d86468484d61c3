"""One option declaration behind every door: ``fit``/``%%train``, ``%submit``/``jiyu submit``/the
REST API and ``%ranks start`` declare their options as ``OptionSpec``s (one class, in
``core.options``), and an option two doors take is declared once. Checked through the real
parsers: each door's flags, types, defaults and help come from the one declaration, so
changing an option in one place changes it everywhere, and declaring it a second time fails here."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re

import pytest

from jiyu_magics.cli import build_parser
from jiyu_magics.core.options import run_options
from jiyu_magics.core.options.option_spec import OptionSpec
from jiyu_magics.jobs import submit_options
from jiyu_magics.magics import ranks_magic
from jiyu_magics.magics.job_magics import JobMagics
from jiyu_magics.magics.train_magic import NPROC_OPTION, TrainMagics
from jiyu_magics.server import validation
from jiyu_magics.train import fit_options

from .conftest import ROOT

PACKAGE = ROOT / "jiyu_magics"
# Options more than one door takes. A new share joins here; an option that stops being shared
# (declared again, differently, at one door) fails the test below.
SHARED = {"name", "device", "stall_timeout", "gpus", "backend", "nnodes", "partition", "time", "gpus_per_node"}
# Two options of one name: fit's --track is one call's trackers (a comma list, str), a
# submission's the run owner's list of them (list); each door's help says which.
NOT_SHARED = {"track"}
# What a door may say of a shared option itself: what its default means there, and whether a
# REST request may set it. %ranks start narrows --backend to local and slurm and spells
# --nnodes as --nodes (its own flag since the pool began); nothing else differs.
OWN = {"default_text", "request"}
RESPELLED = {("%ranks start", "nnodes"): ("--nodes",)}


def submit_cli_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["submit"]


def doors() -> dict[str, tuple[list[OptionSpec], argparse.ArgumentParser, bool]]:
    """Each door: the options it declares, its real parser, and whether an absent flag parses
    to None ("not given": %%train fills in fit's declared default itself)."""
    submit = submit_options.option_specs()
    return {
        "%%train": (fit_options.option_specs(), TrainMagics.train.parser, True),
        "%submit": (submit, JobMagics.submit.parser, False),
        "jiyu submit": (submit, submit_cli_parser(), False),
        "%ranks start": (ranks_magic.START_OPTIONS, ranks_magic.START, False),
    }


def drift(declared: dict[str, tuple[list[OptionSpec], argparse.ArgumentParser, bool]]) -> list[str]:
    """Where the doors disagree about an option they share, or a parser differs from its door's
    declaration; [] when they agree."""
    problems = []
    first: dict[str, tuple[str, OptionSpec]] = {}
    for door, (specs, parser, unset) in declared.items():
        actions = {action.dest: action for action in parser._actions}
        for spec in specs:
            problems += parsed_as_declared(door, spec, actions.get(spec.name), unset)
            if spec.name in NOT_SHARED:
                continue
            if spec.name not in first:
                first[spec.name] = (door, spec)
                continue
            other_door, other = first[spec.name]
            for attribute in ("type", "default", "help", "bounds", "flags", "choices", "metavar", "repeatable"):
                mine, theirs = getattr(spec, attribute), getattr(other, attribute)
                if attribute == "flags" and (door, spec.name) in RESPELLED:
                    theirs = RESPELLED[door, spec.name]
                if attribute == "choices" and mine is not None and theirs is not None and set(mine) <= set(theirs):
                    continue
                if mine != theirs:
                    problems.append(f"{spec.name}: {attribute} {mine!r} at {door}, {theirs!r} at {other_door}")
    # %submit and jiyu submit are one declaration: an option is shared when another door takes it
    names = {spec.name for specs, _, _ in declared.values() for spec in specs}
    takers = {name: {door for door, d in declared.items() if name in {s.name for s in d[0]}} for name in names}
    shared = {name for name, at in takers.items() if len(at - {"jiyu submit"}) > 1} - NOT_SHARED
    if shared != SHARED or not NOT_SHARED <= set(takers):
        problems.append(f"shared options {sorted(shared)}, expected {sorted(SHARED)}")
    return problems


def parsed_as_declared(door: str, spec: OptionSpec, action: argparse.Action | None, unset: bool) -> list[str]:
    if action is None:
        return [f"{door} has no {spec.name} ({spec.flag})"]
    wanted = spec.argparse_kwargs(unset=unset)
    found = {
        "flags": tuple(action.option_strings),
        "type": action.type,
        "default": action.default,
        "help": action.help,
        "choices": tuple(action.choices) if action.choices else None,
    }
    expected = {
        "flags": spec.flags,
        "type": wanted.get("type"),
        "default": wanted.get("default"),
        "help": wanted["help"],
        "choices": tuple(wanted["choices"]) if wanted.get("choices") else None,
    }
    return [
        f"{door} {spec.flag}: {key} {found[key]!r}, declared {expected[key]!r}"
        for key in found
        if found[key] != expected[key]
    ]


def test_shared_options_are_one_declaration_at_every_door():
    assert drift(doors()) == []
    for specs, _, _ in doors().values():  # what each door says of --name is only its own
        (name,) = [spec for spec in specs if spec.name == "name"]
        assert dataclasses.replace(name, default_text=None, request=False) == run_options.NAME
    fit = {spec.name: spec for spec in fit_options.option_specs()}
    assert dataclasses.replace(fit["device"], default_text=None) == run_options.DEVICE
    assert run_options.DEVICE in ranks_magic.START_OPTIONS
    for spec in (fit["stall_timeout"], submit_options.option_spec("stall_timeout")):
        assert dataclasses.replace(spec, default_text=None, request=False) == run_options.STALL_TIMEOUT
    # --nproc: ranks per node at both doors (bounds, --nproc-per-node); absent, %%train stays in the kernel
    assert dataclasses.replace(submit_options.option_spec("nproc"), request=False) == run_options.NPROC
    assert NPROC_OPTION.but(default=1, help=run_options.NPROC.help) == run_options.NPROC


def test_the_pool_takes_nproc_as_a_job_does():
    (positional,) = [a for a in ranks_magic.START._actions if a.dest == "nproc"]
    nproc = submit_options.option_spec("nproc")
    assert (positional.type, positional.help) == (nproc.type, nproc.help)
    assert ranks_magic.START.parse_args(["2"]).nproc == 2


@pytest.mark.parametrize(
    "door, name, change",
    [
        ("%%train", "name", dict(help="Another name.")),  # fit declares its own --name again
        ("%ranks start", "gpus", dict(type=float)),  # the pool's --gpus typed by hand
        ("%submit", "backend", dict(default="slurm")),
        ("%ranks start", "backend", dict(choices=("local", "kubernetes", "other"))),
    ],
)
def test_a_door_that_declares_a_shared_option_its_own_way_is_drift(door, name, change):
    declared = doors()
    specs, _, unset = declared[door]
    changed = [spec.but(**change) if spec.name == name else spec for spec in specs]
    parser = argparse.ArgumentParser(add_help=False)
    for spec in changed:
        parser.add_argument(*spec.flags, **spec.argparse_kwargs(unset=unset))
    declared[door] = (changed, parser, unset)
    assert any(problem.startswith(f"{name}: ") for problem in drift(declared)), drift(declared)


def test_a_parser_that_differs_from_its_declaration_is_drift():
    declared = doors()
    specs, _, unset = declared["%ranks start"]
    parser = argparse.ArgumentParser(add_help=False)
    for spec in specs:
        kwargs = spec.argparse_kwargs(unset=unset)
        parser.add_argument(*spec.flags, **(kwargs | dict(type=float) if spec.name == "gpus" else kwargs))
    declared["%ranks start"] = (specs, parser, unset)
    assert drift(declared) == ["%ranks start --gpus: type <class 'float'>, declared <class 'int'>"]


def class_definitions(name: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name == name:
                found.append(str(path.relative_to(ROOT)))
    return found


def test_there_is_one_option_spec_class():
    assert class_definitions("OptionSpec") == ["jiyu_magics/core/options/option_spec.py"]
    assert class_definitions("NoSuchClass") == []
    for specs in (fit_options.option_specs(), submit_options.option_specs(), ranks_magic.START_OPTIONS):
        assert specs and all(type(spec) is OptionSpec for spec in specs)


def hand_declared_flags(flags: set[str]) -> list[str]:
    """``add_argument("--gpus", ...)`` or ``@argument("--gpus", ...)`` written out by hand."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            literal = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for flag in sorted(set(literal) & flags if called in ("add_argument", "argument") else ()):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {flag}")
    return found


def test_no_parser_declares_a_shared_flag_by_hand():
    flags = {flag for name in SHARED for flag in submit_options_flags(name)} | {"--nodes"}
    # %%ranks' own --stall-timeout: seconds after a peer finished before the cell says where
    # each rank waits (a cell's, not a run's: another option of the same name)
    found = [
        place for place in hand_declared_flags(flags) if not re.match(r"\S+/ranks_magic.py:\d+ --stall-timeout$", place)
    ]
    assert found == []
    own = hand_declared_flags({"--replace-dead"})  # the pool's own flag, written out: the scan finds it
    assert [place.split(":")[0] for place in own] == ["jiyu_magics/magics/ranks_magic.py"]


def submit_options_flags(name: str) -> tuple[str, ...]:
    specs = {spec.name: spec for spec in [*submit_options.option_specs(), run_options.DEVICE]}
    return specs[name].flags


def test_a_submission_takes_every_request_option_by_its_declared_name(tmp_path):
    (tmp_path / "train.ipynb").write_text("{}")
    requested = [spec for spec in submit_options.option_specs() if spec.request]
    assert submit_options.request_fields() == [spec.name for spec in requested] + ["slurm"]
    body = {"notebook": "train.ipynb", "priority": 5, "preemptible": True, "nnodes": 1, "name": "by-name"}
    submission = validation.submission(body, tmp_path, submit_options.request_fields())
    options = submit_options.SubmitOptions.from_request(submission.options, {})
    assert (options.priority, options.preemptible, options.name) == (5, True, "by-name")
    with pytest.raises(Exception, match="unknown field\\(s\\) 'max_restarts'; a submission takes notebook, "):
        validation.submission({**body, "max_restarts": 2}, tmp_path, submit_options.request_fields())
