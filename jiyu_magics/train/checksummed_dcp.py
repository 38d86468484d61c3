"""torch.distributed.checkpoint's ``FileSystemWriter``, keeping each file's SHA-256 beside it.

DCP writes every file through its writer's ``fs.create_stream`` (each rank its shards, rank 0
the ``.metadata`` as ``.metadata.tmp``, then ``fs.rename``). Here that stream hashes the bytes as
they go by (``HashingWriter``: no second pass over a shard) and, once DCP closed it whole,
writes ``<file>.sha256``; a rename takes the sum along. So every rank's sums are on disk when its
part of ``dcp.save`` returns, before rank 0 commits the checkpoint (``sharded_checkpoint``), and
a sum is never written for a file that was cut short.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, cast

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from .checkpoint_files import checksum_path
from .checkpoint_sums import HashingWriter, sum_line, write_sum


class _SummingFileSystem(FileSystem):
    @contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        path = Path(path)
        with super().create_stream(path, mode) as stream:
            hashing = HashingWriter(cast(BinaryIO, stream))  # DCP's file, opened binary for writing
            yield hashing
        write_sum(path, hashing.digest.hexdigest())

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)
        sums, new = checksum_path(Path(path)), Path(new_path)
        if sums.exists():
            digest = sums.read_text().split()[0]
            checksum_path(new).write_text(sum_line(digest, new.name))
            sums.unlink()


def checksummed_writer(folder: Path) -> FileSystemWriter:
    """DCP's own file writer for ``folder`` (its defaults: one file per rank, fsynced), its
    files summed as they are written."""
    writer = FileSystemWriter(folder)
    writer.fs = _SummingFileSystem()
    return writer
