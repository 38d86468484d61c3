"""Reading a growing log in chunks, by byte offset, without splitting a character.

The log view asks for ``offset``; it gets the text after it and the offset to ask for next.
A chunk that ends inside a multi-byte UTF-8 character stops before it, so the next chunk
starts on a character boundary and the browser never shows a replacement glyph for text that
was merely cut. The text comes without terminal colour codes (``core.text.without_ansi``:
a rank's coloured IPython traceback showed as ``[0;31m`` in the panel's Logs), and a chunk that
ends inside such a code stops before it too, so no half of one reaches the view.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ..core.runs.model import RunStatus
from ..core.text import ansi_cut, without_ansi
from .http_errors import RequestError

ANSI_TAIL = 512  # the longest terminal code a chunk is stretched to finish


class LogReply(TypedDict):
    """``GET /jiyu/api/runs/{id}/log``: text from the offset asked for, and the run's state."""

    text: str
    offset: int  # where the next request starts
    size: int  # the log's size when read
    active: bool  # false: the run has ended, no more will come
    status: RunStatus


@dataclass
class LogChunk:
    text: str
    offset: int  # where the next request starts
    size: int  # the log's size when read

    def reply(self, status: RunStatus) -> LogReply:
        return LogReply(text=self.text, offset=self.offset, size=self.size, active=status.active, status=status)


def read_chunk(path: Path, offset: int, limit: int, final: bool = False) -> LogChunk:
    """Up to ``limit`` bytes from ``offset`` (a few more to finish a terminal code the limit
    cut). ``final`` (the writer has ended) decodes a torn last character with a replacement
    instead of waiting for the rest of it forever."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if offset > size:
                raise RequestError(f"'offset' {offset} is past the end of the log ({size} bytes)")
            f.seek(offset)
            data = f.read(limit)
            while ansi_cut(data[-ANSI_TAIL:].decode("utf-8", "replace")) is not None and len(data) < limit + ANSI_TAIL:
                more = f.read(64)
                if not more:
                    break
                data += more
    except FileNotFoundError:
        if offset:
            raise RequestError(f"'offset' {offset} is past the end of the log (0 bytes)") from None
        return LogChunk("", 0, 0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    at_end = offset + len(data) == size
    text = decoder.decode(data, final=final and at_end)
    pending, _ = decoder.getstate()
    next_offset = offset + len(data) - len(pending)
    cut = None if final and at_end else ansi_cut(text)
    if cut is not None:  # a code still being written: it comes whole with the next chunk
        next_offset -= len(text[cut:].encode("utf-8"))
        text = text[:cut]
    return LogChunk(without_ansi(text), next_offset, size)
