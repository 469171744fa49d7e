"""Inputs that can be read only once: a pipe, a FIFO, ``/dev/stdin``, ``<(zcat run.jsonl.gz)``.

An input file is read by several readers in turn: ``--trace`` is peeked at by
:func:`~sortedrl.traces.model.is_trace_model` (a trace model?), then ``read_trace`` sniffs its
format and parses it (and its fast parser may hand the file to the reference one, which starts
again). A regular file can be opened as often as each reader likes; a pipe's bytes are gone once
read (the next reader saw an empty file), and a FIFO's writer is gone once the first reader
closes it (the next open waited for a writer forever).

So an input that is neither a regular file nor a directory is read whole, once, into memory, and
its bytes are handed to every reader, kept for the rest of the process: :func:`peek` and
:func:`take` alike. (``take`` forgot them after the reader it took for the last, so the same
FIFO given to two options, ``trace fit ff --drift-from ff``, was opened again and waited for a
writer forever, and ``/dev/stdin`` twice read as an empty file.) The key is the input's device
and inode, so ``/dev/stdin`` and ``/dev/fd/0`` are the same input. A regular file is never read
here (``None``): its readers keep their own, faster, paths.

Such an input is also named here. A descriptor's path (``<(...)`` is ``/dev/fd/63``) says
nothing of what came through it, and the shell gives the same number to every such argument:
:func:`label` names it by the trace's own metadata (``source``), else ``stdin`` or ``pipe``, for
the summary's ``trace`` and a default run directory; :func:`digest` tells two of them apart by
their bytes, for a run directory's marker (another trace piped in is a run with other options,
the same bytes piped again a re-run).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import PurePath

from sortedrl.errors import SortedRLError
from sortedrl.text_check import utf16_text

_kept: dict[tuple[int, int], bytes] = {}


def _key(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The input's key, or None for a regular file, a directory or a path that is not there
    (their readers say what is wrong)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return st.st_dev, st.st_ino


def peek(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of a read-once input, kept for every later reader; None for a regular file."""
    key = _key(path)
    if key is None:
        return None
    if key not in _kept:
        _kept[key] = _read(path)
    return _kept[key]


def take(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of a read-once input for a reader that parses them (as :func:`peek`: they stay
    kept for any other reader of the same input); None for a regular file."""
    return peek(path)


def digest(path: str | os.PathLike[str]) -> str | None:
    """``sha256:HEX`` of a read-once input's bytes (read and kept now); None for a regular file."""
    data = peek(path)
    return None if data is None else f"sha256:{hashlib.sha256(data).hexdigest()}"


def is_descriptor(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an open file by its number (``/dev/fd/63``, ``/proc/self/fd/0``)."""
    p = PurePath(path)
    return p.name.isdigit() and p.parent.name == "fd"


def label(path: str | os.PathLike[str], source: object = None) -> str:
    """What an input read from ``path`` is called: its file name (``t.jsonl``, a FIFO's own name,
    ``stdin``); a descriptor's is the first word of the trace's own ``source`` (``run.jsonl``,
    ``synth:math-16k``; of a path, its file name), else ``stdin`` for descriptor 0 and ``pipe`` for any other."""
    if not is_descriptor(path):
        return PurePath(path).name
    words = source.split() if isinstance(source, str) else []
    name = PurePath(words[0]).name if words else ""  # (a path's file name)
    if name.strip("."):  # (not '..' of a source "../")
        return name
    return "stdin" if PurePath(path).name == "0" else "pipe"


HEAD = 1 << 16  # bytes read before the rest, to tell binary data
# the binary inputs a reader takes (a Parquet trace; gzip and zip): no others hold a NUL byte
BINARY = (b"PAR1", b"\x1f\x8b", b"PK\x03\x04")


def _read(path: str | os.PathLike[str]) -> bytes:
    """The input's bytes; binary data that no reader takes (a NUL byte in its first :data:`HEAD`
    bytes, not after one of :data:`BINARY`'s magic numbers) is one error before the rest is read:
    ``/dev/zero`` never ends. (Its head alone was handed on once, and a reader that takes NUL
    bytes, the csv module, read a cut input as a whole one.)"""
    with open(path, "rb") as f:
        head = f.read(HEAD)
        nul = head.find(b"\0")
        if nul >= 0 and not head.startswith(BINARY):
            why = utf16_text(head) or f"binary data (a NUL byte at byte {nul}), not text"
            raise SortedRLError(f"{path}: {why}")
        return head + f.read()


__all__ = ["digest", "is_descriptor", "label", "peek", "take"]
