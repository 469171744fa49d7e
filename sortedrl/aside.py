"""Names for what is built beside an output before it is renamed into place.

An output is written to a hidden sibling first (``.NAME.tmp-XXXXXXXX``, ``.NAME.XXXXXXXX.tmp``),
the previous one moved to another (``.NAME.old-PID``), a long run's work kept in a third
(``.NAME.scratch-XXXXXXXX``). Those add up to 22 bytes to the output's name, and a file name may
hold 255: a valid name of 238 bytes or more could not be written at all (``--out`` of 240
letters: ``cannot write (File name too long)``). So the name of a long output is shortened in
its asides: its first bytes (whole UTF-8 characters), ``~`` and 8 hex digits of a hash of the
whole name, so that two long names that begin alike never share an aside. A name that leaves
room (up to 221 bytes, whatever the tag) keeps its asides as they always were.
"""

from __future__ import annotations

import hashlib
import os

NAME_MAX = 255  # bytes in one file name (Linux, macOS; and most filesystems)
ROOM = 24  # bytes left after a prefix: mkstemp's 8 random characters, a suffix of up to 16 bytes
SUFFIX_MAX = 16  # a longer suffix is not kept on an aside (kept: .npz, .json, .html, ...)


def aside(name: str, tag: str) -> str:
    """The prefix of an aside of the output called ``name``: ``.NAME.TAG`` (TAG such as
    ``tmp-``, ``old-``, ``scratch-``), NAME shortened where the whole would leave less than
    :data:`ROOM` bytes of the name's 255 for what follows."""
    full = f".{name}.{tag}"
    if len(os.fsencode(full)) + ROOM <= NAME_MAX:
        return full
    raw = os.fsencode(name)
    digest = hashlib.sha256(raw).hexdigest()[:8]
    keep = NAME_MAX - ROOM - len(os.fsencode(tag)) - len(digest) - 3  # ('.', '~' and '.')
    return f".{os.fsdecode(_whole_characters(raw[:keep]))}~{digest}.{tag}"


def suffix(path_suffix: str) -> str:
    """``path_suffix`` (a temporary file keeps its output's: ``numpy.savez`` adds ``.npz`` to a
    name without it), or none where it is longer than :data:`SUFFIX_MAX` bytes."""
    return path_suffix if len(os.fsencode(path_suffix)) <= SUFFIX_MAX else ""


def _whole_characters(cut: bytes) -> bytes:
    """``cut`` without the UTF-8 character its end split, if it split one."""
    start = len(cut)
    while start and cut[start - 1] & 0xC0 == 0x80:  # continuation bytes
        start -= 1
    if start and cut[start - 1] >= 0xC0:  # the lead byte of the last character: its length
        lead = cut[start - 1]
        if len(cut) - start + 1 < (2 if lead < 0xE0 else 3 if lead < 0xF0 else 4):
            return cut[:start - 1]
    return cut
