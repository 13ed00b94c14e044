"""Text kept inside a PNG (its ``tEXt`` chunks, PNG specification 11.3.4.3): what a chart was drawn from, so that a
rerun with the same inputs can keep the file instead of drawing it again (drawing starts matplotlib, about a second).
Plain bytes work: this module imports neither matplotlib nor Pillow."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_AFTER_HEADER = len(PNG_SIGNATURE) + 8 + 13 + 4  # IHDR: length and type, its 13 bytes, its CRC


def png_with_text(png: bytes, key: str, text: str) -> bytes:
    """``png`` with a ``tEXt`` chunk ``key``: ``text`` right after its header chunk (latin-1, as the format says)."""
    if png[:8] != PNG_SIGNATURE or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    body = key.encode("latin-1") + b"\0" + text.encode("latin-1")
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    return png[:_AFTER_HEADER] + chunk + png[_AFTER_HEADER:]


def png_text(path: Path, limit: int = 65536) -> dict[str, str]:
    """The ``tEXt`` chunks ahead of the image data in the first ``limit`` bytes of the file at ``path``; empty where
    it is missing or not a PNG."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit)
    except OSError:
        return {}
    if data[:8] != PNG_SIGNATURE:
        return {}
    found: dict[str, str] = {}
    pos = len(PNG_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT" or pos + 12 + length > len(data):
            break
        if kind == b"tEXt":
            key, _, text = data[pos + 8:pos + 8 + length].partition(b"\0")
            found[key.decode("latin-1")] = text.decode("latin-1")
        pos += 12 + length
    return found
