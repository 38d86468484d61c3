"""Reading a growing log in chunks, by byte offset, without splitting a character.

The log view asks for ``offset``; it gets the text after it and the offset to ask for next.
A chunk that ends inside a multi-byte UTF-8 character stops before it, so the next chunk
starts on a character boundary and the browser never shows a replacement glyph for text that
was merely cut.
"""

from __future__ import annotations

import codecs
from dataclasses import asdict, dataclass
from pathlib import Path

from .http_errors import RequestError


@dataclass
class LogChunk:
    text: str
    offset: int  # where the next request starts
    size: int  # the log's size when read

    def to_dict(self) -> dict:
        return asdict(self)


def read_chunk(path: Path, offset: int, limit: int, final: bool = False) -> LogChunk:
    """Up to ``limit`` bytes from ``offset``. ``final`` (the writer has ended) decodes a torn
    last character with a replacement instead of waiting for the rest of it forever."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if offset > size:
                raise RequestError(f"'offset' {offset} is past the end of the log ({size} bytes)")
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        if offset:
            raise RequestError(f"'offset' {offset} is past the end of the log (0 bytes)") from None
        return LogChunk("", 0, 0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    at_end = offset + len(data) == size
    text = decoder.decode(data, final=final and at_end)
    pending, _ = decoder.getstate()
    return LogChunk(text, offset + len(data) - len(pending), size)
