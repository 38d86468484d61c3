"""A magic's options split as a shell splits them.

IPython's ``parse_argstring`` splits without POSIX rules, so quotes stay in the values:
``--name "my run"`` named the run ``"my run"`` (quotes included), ``--ckpt-dir "/a b"`` made a
folder named ``"``, and ``-p amp "'off'"`` passed the text ``'off'`` with its quotes, unlike
``jiyu submit`` in a shell. Here quotes group words and go, as in the shell, so the commands jiyu
prints (``%train --resume last --name 'my run'``) work when pasted back, and an unclosed quote is
one line instead of a traceback.
"""

from __future__ import annotations

import re
from argparse import Namespace

from IPython.core.error import UsageError
from IPython.utils.process import arg_split

from ..core.did_you_mean import with_suggestion


def parse_line(magic, line: str) -> Namespace:
    """``magic``'s ``@magic_arguments`` options parsed from ``line`` (errors: one ``UsageError``)."""
    try:
        argv = arg_split(line, posix=True, strict=True)
    except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the options: {str(error).lower()} in {line.strip()!r}") from None
    try:
        options: Namespace = magic.parser.parse_args(argv)
        return options
    except UsageError as error:  # argparse's message, with the option meant where one is close
        raise UsageError(with_suggestion(str(error), _option_strings(magic.parser))) from None


def _option_strings(parser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


BRACED = re.compile(r"\{([^{}]+)\}")
SIMPLE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*$")


def raw_magic_line(shell, magic: str, line: str) -> str | None:
    """The magic's ``line`` as typed in the cell being run, before IPython put in the values of
    its ``{name}`` parts; None where the shell keeps no history (a job's headless shell), or the
    cell holds no line with braces that expands to ``line`` (the magic was called from code)."""
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None)
    cell = raw[-1] if raw else ""
    for text in cell.splitlines():
        stripped = text.strip()
        for prefix in (f"%%{magic}", f"%{magic}"):
            rest = stripped[len(prefix) :].strip()
            if stripped.startswith(prefix) and BRACED.search(rest) and _expands_to(rest, line.strip()):
                return rest
    return None


def _expands_to(raw: str, line: str) -> bool:
    """Whether ``line`` is ``raw`` with its ``{...}`` parts replaced by something (or left)."""
    pattern = "".join(re.escape(part) if i % 2 == 0 else ".*?" for i, part in enumerate(re.split(r"(\{[^{}]+\})", raw)))
    return re.fullmatch(pattern, line, re.DOTALL) is not None


def check_braced(magic: str, line: str, raw: str | None, namespace: dict) -> None:
    """A ``{name}`` in a magic line that is not set, or is None, in one line that names it.

    IPython leaves the whole line as typed when one ``{...}`` fails (``--epochs {epochs}``
    then reads ``{epochs}``: "invalid int value"), and turns None into the text ``None``
    (``--amp None``: "invalid choice"); neither says which name to fix."""
    for expression in BRACED.findall(line):  # left as typed: some part failed
        if not SIMPLE.match(expression):
            continue
        try:
            eval(expression, namespace)  # a name or attribute: nothing runs
        except NameError as error:
            name = getattr(error, "name", None) or expression.strip()
            raise UsageError(
                f"{{{expression.strip()}}} in the %{magic} line: {name} is not defined; run the cell "
                f"that sets it (the parameters cell?) first"
            ) from None
        except Exception as error:
            raise UsageError(
                f"{{{expression.strip()}}} in the %{magic} line: {type(error).__name__}: {error}"
            ) from None
    for expression in BRACED.findall(raw or ""):
        if not SIMPLE.match(expression):
            continue
        try:
            value = eval(expression, namespace)
        except Exception:
            continue
        if value is None:
            raise UsageError(
                f"{{{expression.strip()}}} in the %{magic} line is None: set {expression.strip()} to a value "
                f"(in the parameters cell), or leave its option out"
            )
