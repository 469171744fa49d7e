"""Whether the first bytes of an input can be text: shared by the readers of files
(:mod:`sortedrl.jsonio`, the trace reader) and of read-once inputs (:mod:`sortedrl.streams`), so
that a binary file is refused before it is read whole and UTF-16 is named as such.
"""

from __future__ import annotations

import codecs
import re

TEXT_HEAD = 1 << 16  # bytes of a text input checked before the rest is read


# a compressed file's first bytes (magic numbers), named where a text file was expected
COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
              (b"PK\x03\x04", "zip"))  # (bzip2's BZh is text: its whole header, below)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")


def compression(head: bytes) -> str | None:
    """The compression (``gzip``, ``bzip2``, ``xz``, ``zstd``, ``zip``) of a file that starts
    with ``head``, by its magic number; None when it starts as none does."""
    if _BZIP2.match(head):
        return "bzip2"
    return next((kind for magic, kind in COMPRESSED if head.startswith(magic)), None)


def not_text(head: bytes) -> str | None:
    """Why a file that starts with ``head`` is no text (``bzip2-compressed: decompress it
    first``, a spreadsheet, ``binary data (a NUL byte at byte N)``, which no JSON, JSONL or CSV
    input holds, or ``not UTF-8 text (byte N)``); None when it may be. ``head`` may end inside a
    character. UTF-16 (Excel's "Unicode Text", PowerShell's ``>``) is named as such: its
    byte-order mark, or every other byte NUL."""
    if (utf16 := utf16_text(head)) is not None:
        return utf16
    packed = compression(head)
    if packed == "zip" and (b"[Content_Types].xml" in head[:4096]
                            or b"mimetypeapplication/vnd.oasis" in head[:128]):
        return "a spreadsheet (.xlsx or .ods: zipped XML), not text: save it as CSV"
    if packed is not None:
        return f"{packed}-compressed: decompress it first"
    nul = head.find(b"\0")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head[:nul] if nul >= 0 else head, final=False)
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte {e.start})"
    return None if nul < 0 else f"binary data (a NUL byte at byte {nul})"


def utf16_text(head: bytes) -> str | None:
    """Why ``head`` looks like UTF-16 (its byte-order mark, or every other byte of its first 64
    NUL), or None."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16 text (its byte-order mark), not UTF-8: save it as UTF-8"
    start = head[:64]
    if len(start) >= 8 and any(start) and (not any(start[1::2]) or not any(start[0::2])):
        return "UTF-16 text (every other byte NUL), not UTF-8: save it as UTF-8"
    return None
