"""A magic's options split as a shell splits them.

IPython's ``parse_argstring`` splits without POSIX rules, so quotes stay in the values:
``--name "my run"`` named the run ``"my run"`` (quotes included), ``--ckpt-dir "/a b"`` made a
folder named ``"``, and ``-p amp "'off'"`` passed the text ``'off'`` with its quotes, unlike
``jiyu submit`` in a shell. Here quotes group words and go, as in the shell, so the commands jiyu
prints (``%train --resume last --name 'my run'``) work when pasted back, and an unclosed quote is
one line instead of a traceback.
"""

from __future__ import annotations

from argparse import Namespace

from IPython.core.error import UsageError
from IPython.utils.process import arg_split


def parse_line(magic, line: str) -> Namespace:
    """``magic``'s ``@magic_arguments`` options parsed from ``line`` (errors: one ``UsageError``)."""
    try:
        argv = arg_split(line, posix=True, strict=True)
    except ValueError as error:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the options: {str(error).lower()} in {line.strip()!r}") from None
    return magic.parser.parse_args(argv)
