"""``did you mean --lr?`` for an option argparse did not recognise, in the magics and the CLI;
``did you mean lr?`` for a ``-p`` name a notebook's parameters cell does not set (the CLI, the
magics and the panel's Submit dialog, through the one export check).

argparse suggests close matches itself from Python 3.14 (``suggest_on_error``); the project
runs on 3.11, so the parsers' error paths add the suggestion to argparse's own message with
``difflib``, as 3.14 does.
"""

from __future__ import annotations

import difflib
import re

UNRECOGNISED = re.compile(r"unrecognized arguments: (?P<words>.+)$")
INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.+)\)")


def with_suggestion(message: str, options: list[str], commands: list[str] | None = None) -> str:
    """argparse's ``message``, followed by ``(did you mean --lr?)`` when an unknown option (or
    an invalid sub-command, among ``commands``) is close to a known one."""
    found = UNRECOGNISED.search(message)
    if found is not None:
        for word in found["words"].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("-"):
                match = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
                if match:
                    return f"{message} (did you mean {match[0]}?)"
        return message
    choice = INVALID_CHOICE.search(message)
    if choice is not None:
        choices = commands or [c.strip(" '") for c in choice["choices"].split(",")]
        match = difflib.get_close_matches(choice["word"], choices, n=1, cutoff=0.6)
        if match:
            return f"{message} (did you mean {match[0]}?)"
    return message


def suggestion(words: list[str], known: set[str] | list[str]) -> str:
    """`` (did you mean lr?)`` for the first of ``words`` close to one of ``known``, else ``""``."""
    for word in words:
        match = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
        if match:
            return f" (did you mean {match[0]}?)"
    return ""
