"""Notebook paths sent by the browser, resolved inside the server's root directory.

A request names a notebook relative to the root Jupyter was started in (the Contents API's
paths); whatever it says, a job may only run a notebook under that root. Lexical escapes
(``..``, absolute paths, ``~``) are bad requests (400); a path that is lexically inside the
root but leaves it through a symlink is refused (403).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..core.text import BadPath, utf8_path
from .http_errors import Forbidden, RequestError

MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 4096  # Linux's NAME_MAX and PATH_MAX


def resolve_notebook(root: str | Path, relpath: object) -> Path:
    """The real path of the notebook ``relpath`` names, guaranteed to lie under ``root``."""
    pure = _relative(relpath)
    if pure.suffix != ".ipynb":
        raise RequestError(f"not a notebook (expected a .ipynb file): {relpath!r}")
    root = Path(root).resolve()
    try:
        target = (root / pure).resolve()
        if not target.is_relative_to(root):
            raise Forbidden(f"{relpath!r} leads outside the server root through a symlink")
        if not target.is_file():
            raise RequestError(f"no notebook at {relpath!r} under the server root")
    except OSError as error:  # a name the file system refuses (ENAMETOOLONG, ELOOP, ...)
        raise RequestError(f"the notebook path cannot be opened: {error.strerror or error}") from None
    return target


def _relative(relpath: object) -> PurePosixPath:
    if not isinstance(relpath, str) or not relpath.strip():
        raise RequestError("'notebook' must be a path relative to the server root, e.g. 'train.ipynb'")
    if "\x00" in relpath:
        raise RequestError("the notebook path contains a NUL character")
    try:  # a lone surrogate (JSON's "\udce9"): the bytes of a name that is not UTF-8
        utf8_path(relpath, "notebook")
    except BadPath as error:
        raise RequestError(str(error)) from None
    pure = PurePosixPath(relpath)
    if pure.is_absolute() or relpath.startswith("~"):
        raise RequestError(f"the notebook path must be relative to the server root, got {relpath!r}")
    if ".." in pure.parts:
        raise RequestError(f"the notebook path must not contain '..', got {relpath!r}")
    if len(relpath.encode()) > MAX_PATH_BYTES or any(len(part.encode()) > MAX_NAME_BYTES for part in pure.parts):
        raise RequestError(
            f"the notebook path is too long (names of at most {MAX_NAME_BYTES} bytes, {MAX_PATH_BYTES} in all)"
        )
    return pure
