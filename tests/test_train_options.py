"""``%%train``'s options are ``fit``'s, declared once (``FitOptions``): the magic's parser, the
keyword arguments it passes and the training guide's option list all follow that declaration."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from jiyu_magics.magics.train_magic import MAGIC_OPTIONS, TrainMagics, fit_kwargs, parse_options
from jiyu_magics.train.fit_options import FitOptions, option_specs

from .conftest import ROOT

SCRIPT = ROOT / "scripts" / "option_docs.py"
GUIDE = ROOT / "docs" / "guide" / "train.md"


def parser_actions() -> dict:
    return {action.dest: action for action in TrainMagics.train.parser._actions}


def test_every_fit_option_is_a_train_flag_with_its_declared_choices():
    actions = parser_actions()
    for spec in option_specs():
        action = actions[spec.name]
        assert action.option_strings == [spec.flag]
        assert action.default is None, "not given means fit's declared default, not a second default"
        assert action.choices == spec.choices
    assert {spec.name for spec in option_specs()} == {f.name for f in fields(FitOptions)}


def test_help_shows_each_declared_default():
    doc = " ".join(TrainMagics.train.__doc__.split())
    assert "--keep-ckpts N Keep the newest N checkpoints of this call. Default: 3." in doc
    assert "Default: cuda:LOCAL_RANK when CUDA is available, else cpu." in doc
    assert "The run's name in %jobs and the lab panel." in doc


def test_options_not_typed_are_fits_defaults():
    model = object()
    kwargs = fit_kwargs(
        parse_options("--max-steps 7 --no-ckpt --scheduler-interval epoch"),
        {"model": model, "optimizer": 1, "train_loader": 2},
    )
    defaults = {f.name: f.default for f in fields(FitOptions)}
    given = {"max_steps": 7, "save_ckpts": False, "scheduler_interval": "epoch"}
    assert {k: v for k, v in kwargs.items() if k in defaults} == {**defaults, **given}
    assert (kwargs["model"], kwargs["optimizer"], kwargs["train_data"]) == (model, 1, 2)


def test_a_bad_value_names_the_flag_the_user_typed():
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="^--log-interval must be seconds above 0 and at most 86400, got 0$"):
        fit_kwargs(parse_options("--log-interval 0"), {"model": 0, "optimizer": 1, "train_loader": 2})


def test_the_training_guide_lists_the_declared_options():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = GUIDE.read_text()
    for spec in option_specs():
        assert f"- `{spec.flag}" in page
    for flags, options in MAGIC_OPTIONS:
        assert f"- `{flags[0]}{'`' if 'action' in options else ' '}" in page


def test_a_stale_option_list_fails_the_check(tmp_path):
    stale = tmp_path / "train.md"
    stale.write_text(GUIDE.read_text().replace("Default: 3.", "Default: 5."))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--page", str(stale)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "stale" in done.stderr
    fixed = subprocess.run([sys.executable, str(SCRIPT), "--page", str(stale)], capture_output=True, text=True)
    assert fixed.returncode == 0 and stale.read_text() == GUIDE.read_text()
