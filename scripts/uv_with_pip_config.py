"""Run a command (uv) with pip's configuration as uv's environment variables, for `make setup`.

`make setup` installs with uv, which takes half of pip's time (a fresh venv: 96 s against
202 s), but uv does not read pip's configuration. A machine may keep what it
needs there: a local wheel (this one's CPU torch), a constraint file, a local index. Without
them uv would resolve differently from pip (e.g. fetch CUDA torch), so they are handed over.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

# pip's option -> (uv's variable, the separator uv expects between several values)
_UV_NAMES = {
    "index-url": ("UV_DEFAULT_INDEX", " "),
    "extra-index-url": ("UV_INDEX", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
    "timeout": ("UV_HTTP_TIMEOUT", " "),  # pip's --timeout, as a file names it
    "default-timeout": ("UV_HTTP_TIMEOUT", " "),  # the same, as PIP_DEFAULT_TIMEOUT names it
}
# `pip config list` prints one `section.key=repr(value)` a line; ":env:" is its PIP_* variables
_LINE = re.compile(r"""^(?P<section>[^.]*)\.(?P<key>[\w-]+)=(?P<value>'.*'|".*")$""")


def pip_settings(listing: str) -> dict[str, list[str]]:
    """pip's effective options: its environment variables (section ":env:") win over files."""
    by_key: dict[str, tuple[int, list[str]]] = {}
    for line in listing.splitlines():
        match = _LINE.match(line)
        if not match or match["key"] not in _UV_NAMES:
            continue
        rank = 1 if match["section"] == ":env:" else 0
        if rank >= by_key.get(match["key"], (-1, []))[0]:
            by_key[match["key"]] = (rank, ast.literal_eval(match["value"]).split())
    return {key: values for key, (_, values) in by_key.items()}


def _present(location: str) -> bool:
    """pip passes over a local wheel folder or index that is not there (a warning); uv fails."""
    path = location.removeprefix("file://")
    return ("://" in path) or os.path.exists(path)


def uv_environment(settings: dict[str, list[str]]) -> dict[str, str]:
    environment = {}
    for key, values in settings.items():
        name, separator = _UV_NAMES[key]
        if key in ("index-url", "extra-index-url", "find-links"):
            values = [value for value in values if _present(value)]
        if values:
            environment[name] = separator.join(values)
    if "UV_DEFAULT_INDEX" in environment or "UV_INDEX" in environment:
        # pip takes the best version across all its indexes; uv stops at the first by default
        environment["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return environment


def main(command: list[str]) -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    os.execvpe(command[0], command, {**os.environ, **uv_environment(pip_settings(listing))})


if __name__ == "__main__":
    main(sys.argv[1:])
