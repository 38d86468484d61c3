"""``OptionSpec``: one option as every door declares it, and the dataclass fields made from it.

An options dataclass (``FitOptions``, ``SubmitOptions``) declares each field with ``option``
(its name and value type are the field's) or with ``OptionSpec.field`` (an option declared once,
in ``run_options``, that several doors take); ``specs_of`` reads the declarations back. From a
spec come the argparse keyword arguments of a magic or the CLI (``argparse_kwargs``), the help
and docs text (``described``) and the generic checks (``check``: bounds, choices, true/false),
so a flag, its help and its checks cannot disagree between ``%%train``, ``%submit``,
``jiyu submit``, the REST API and ``%ranks start``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, fields
from typing import Any

OPTION = "option"  # the metadata key of an option's declaration on a dataclass field


class BadOptionValue(ValueError):
    """A value its declaration refuses; ``str()`` is one line naming the option as labelled."""


@dataclass(frozen=True)
class OptionSpec:
    """One option: what a parser, the docs and a check need of it. ``type`` is the value's type
    (``int`` of ``int | None``, ``list`` of ``list[str]``, ``bool`` for a flag without a value);
    ``flags`` default to ``--the-name``; ``default_text`` says what the default means where
    ``default`` cannot (None: "the notebook's file name"); ``repeatable``: the flag adds to a
    comma list each time it is given; ``backend``: the scheduler the option is for;
    ``request``: a REST submission may set it."""

    name: str
    type: type
    default: Any
    help: str
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    bounds: tuple[int, int] | None = None
    default_text: str | None = None
    repeatable: bool = False
    backend: str | None = None
    request: bool = False

    def __post_init__(self) -> None:
        if not self.flags:
            object.__setattr__(self, "flags", ("--" + self.name.replace("_", "-"),))

    @property
    def flag(self) -> str:
        """The flag as help texts and error messages name it (the first)."""
        return self.flags[0]

    @property
    def is_switch(self) -> bool:
        """A flag without a value: ``--compile`` turns an off option on, ``--no-ckpt`` an on one off."""
        return self.type is bool

    def but(self, **changes: Any) -> OptionSpec:
        """This declaration with a door's own differences (what its default means, narrower
        choices, another spelling), everything else as declared."""
        return dataclasses.replace(self, **changes)

    def field(self, **changes: Any) -> Any:
        """A dataclass field declaring this option (``name: str | None = NAME.field()``)."""
        return _field(self.but(**changes))

    def described(self) -> str:
        """The help text with its default, as ``%%train?``, ``%submit?`` and the docs show it."""
        if self.is_switch:
            return self.help
        default = self.default_text or (
            None
            if self.default is None or self.default == []
            else f"{self.default:g}"
            if isinstance(self.default, float)
            else str(self.default)
        )
        return f"{self.help} Default: {default}." if default else self.help

    def argparse_kwargs(self, *, unset: bool = False) -> dict[str, Any]:
        """``add_argument`` keyword arguments (the flags are ``flags``). ``unset``: an absent
        flag parses to None ("not given"), for a door that fills in the declared default itself;
        else to the declared default. A repeatable option or a list parses to a list (None when
        absent: argparse would append to a shared default list)."""
        kwargs: dict[str, Any] = dict(dest=self.name, help=self.described().replace("%", "%%"))
        if self.is_switch:
            kwargs["action"] = "store_false" if self.default else "store_true"
            kwargs["default"] = None if unset else self.default
        elif self.type is list or self.repeatable:
            kwargs.update(action="append", metavar=self.metavar)
        else:
            kwargs.update(default=None if unset else self.default, metavar=self.metavar)
            if self.type in (int, float):
                kwargs["type"] = self.type
            if self.choices:
                kwargs["choices"] = self.choices
        return kwargs

    def check(self, value: Any, label: str) -> None:
        """The declaration's own checks of a value: true or false for a switch; unless None
        (not given), a whole number within ``bounds`` and one of ``choices``. ``label`` names the
        option as the user wrote it (``--nproc``, ``'nproc'``)."""
        if self.is_switch and not isinstance(value, bool):
            raise BadOptionValue(f"{label} must be true or false, got {value!r}")
        if value is None:
            return
        if self.bounds is not None:
            lowest, highest = self.bounds
            if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
                raise BadOptionValue(f"{label} {value!r:.40}: expected a whole number from {lowest} to {highest}")
        if self.choices is not None and value not in self.choices:
            raise BadOptionValue(f"{label} {value!r}: expected one of {', '.join(self.choices)}")


def option(default: Any, help: str, **declared: Any) -> Any:
    """A dataclass field declared as an option of its own (its name and value type are the
    field's); ``declared``: the other ``OptionSpec`` attributes."""
    return _field(dict(default=default, help=help, **declared))


def specs_of(cls: type) -> list[OptionSpec]:
    """The options an options dataclass declares, in declaration order (fields declared
    without ``option`` or ``OptionSpec.field`` are not options)."""
    return list(_specs_of(cls))


@functools.cache
def _specs_of(cls: type) -> tuple[OptionSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for f in fields(cls):
        declared = f.metadata.get(OPTION)
        if declared is None:
            continue
        value_type = _value_type(hints[f.name])
        if isinstance(declared, OptionSpec):
            if (declared.name, declared.type) != (f.name, value_type):
                raise TypeError(
                    f"{cls.__name__}.{f.name}: {value_type.__name__} field declared as option "
                    f"{declared.name!r} of {declared.type.__name__}"
                )
            specs.append(declared)
        else:
            specs.append(OptionSpec(name=f.name, type=value_type, **declared))
    return tuple(specs)


def _field(declared: OptionSpec | dict[str, Any]) -> Any:
    default = declared.default if isinstance(declared, OptionSpec) else declared["default"]
    if isinstance(default, list):
        return dataclasses.field(default_factory=list, metadata={OPTION: declared})
    return dataclasses.field(default=default, metadata={OPTION: declared})


def _value_type(hint: Any) -> type:
    """The value's type: ``int`` of ``int | None``, ``list`` of ``list[str]``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    value_type: type = typing.get_origin(hint) or hint
    return value_type
