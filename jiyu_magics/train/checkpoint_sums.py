"""The SHA-256 of each checkpoint file, kept beside it, and the check that a checkpoint's files
still hold the bytes that were written.

Every file of a checkpoint gets its sum as it is written, with no second pass over its bytes
(``HashingWriter``): a file checkpoint (``step-00000120.pt``), and in a sharded one
(``step-00000120.dcp``) each rank's shard (``__<rank>_0.distcp``), DCP's ``.metadata`` and
jiyu's state file. Each sum lives in ``<file>.sha256`` in ``sha256sum``'s format, so
``sha256sum -c`` checks them too (in a sharded checkpoint: ``cd step-00000120.dcp && sha256sum
-c .metadata.sha256 *.sha256``).

``damage`` says in one line how a checkpoint is damaged (a file whose bytes changed, a shard
that is missing or has no sum where its checkpoint kept them), or None; a checkpoint from an
older jiyu, which kept no sums, is taken as it is. A sharded checkpoint's files can be checked
by several ranks at once, each taking its ``share``. No torch here: the CLI checks before it
imports torch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

from .checkpoint_files import STATE_FILE, checksum_path

READ_CHUNK = 8 * 1024 * 1024
METADATA = ".metadata"  # torch.distributed.checkpoint's, written by rank 0 once every shard is
SHARD_SUFFIX = ".distcp"


class HashingWriter:
    """The file a checkpoint's writer (``torch.save``, DCP's ``FileSystemWriter``) writes into,
    hashing the bytes on their way. Neither writer seeks back: they write, flush, ask for the
    position, fsync and close."""

    def __init__(self, file: BinaryIO):
        self.file, self.digest = file, hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.file.write(data)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.file.tell()

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed


def sum_line(digest: str, name: str) -> str:
    return f"{digest}  {name}\n"


def write_sum(path: Path, digest: str) -> None:
    """``path``'s sum into ``path.sha256``."""
    checksum_path(path).write_text(sum_line(digest, path.name))


def damage(path: Path, share: tuple[int, int] = (0, 1)) -> str | None:
    """How the checkpoint at ``path`` is damaged, in one line, or None. A sharded checkpoint's
    files are checked in a ``share`` (``(rank, ranks)``: every ``ranks``-th file from the
    ``rank``-th), so that the ranks of a resume read it once between them; a file checkpoint
    whole by each."""
    rank, ranks = share
    if path.is_dir():
        required = checksum_path(path / METADATA).exists()  # its writer kept sums: every file has one
        files = [(file, required, True) for file in sharded_files(path)[rank::ranks]]
    else:
        files = [(path, False, False)]  # each rank reads all of it anyway, from its own disk maybe
    for file, required, inside in files:
        try:
            problem = file_damage(file, required, inside)
        except OSError as error:
            return f"cannot read checkpoint {path}: {error.strerror or error}"
        if problem:
            return f"checkpoint {path} is damaged: {problem}"
    return None


def sharded_files(folder: Path) -> list[Path]:
    """The files of a sharded checkpoint that carry (or should carry) a sum: DCP's metadata,
    each shard, and jiyu's state file, whether the file or only its sum is there."""
    names = {STATE_FILE, METADATA}
    for entry in folder.iterdir():
        name = entry.name.removesuffix(".sha256")
        if name.endswith(SHARD_SUFFIX):
            names.add(name)
    return [folder / name for name in sorted(names)]


def file_damage(path: Path, required: bool, inside: bool = False) -> str | None:
    """What is wrong with one file (``its SHA-256 differs ...``; one of a folder's ``inside``
    it: ``the SHA-256 of its __1_0.distcp differs ...``), or None. A file without a sum is
    fine unless ``required``. ``OSError`` when it cannot be read."""
    sums = checksum_path(path)
    recorded = _recorded(sums)
    if not path.exists():
        return f"its {path.name} is missing" if recorded or required else None
    if recorded is None:
        return f"its {path.name} has no SHA-256 saved with it ({sums.name})" if required else None
    if file_digest(path) != recorded.lower():
        what = f"the SHA-256 of its {path.name}" if inside else "its SHA-256"
        return f"{what} differs from the one saved with it ({sums.name})"
    return None


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(READ_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _recorded(sums: Path) -> str | None:
    try:
        return sums.read_text().split()[0]
    except (OSError, IndexError):
        return None  # none saved: an older jiyu's checkpoint, or a crash between the two renames
