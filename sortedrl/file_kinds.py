"""sortedrl's own files, told apart when one is given where another kind goes.

The output of one command is the input of the next, and a file of the wrong kind was read as
what was expected: a trace model re-saved with its keys sorted (``jq -S``) was read as a JSONL
trace (its first line, ``{``, "bad JSON"), a profile or a ``tune.json`` given to ``--trace``
likewise, and a ``timeline.npz`` as "not UTF-8 text". :func:`json_document` reads a file that
is one JSON document (not JSONL: a JSONL file's first line is a whole value, so the parse stops
there), only up to a size no JSONL trace worth parsing is under and none of our documents is
over, so it costs nothing on a large trace.
"""

from __future__ import annotations

import json
import os

from sortedrl import jsonio, streams

MAX_DOCUMENT = 16 << 20  # bytes: a summary, profile, model or tune.json is far smaller


def head(path: str | os.PathLike[str], size: int = MAX_DOCUMENT + 1) -> bytes | None:
    """The first ``size`` bytes of the file (a pipe's kept bytes: :mod:`sortedrl.streams`), or
    None when it cannot be read (its reader says why)."""
    try:
        data = streams.peek(path)
        if data is not None:
            return data[:size]
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return None


def json_document(data: bytes | None, limit: int = MAX_DOCUMENT) -> object | None:
    """The JSON value that ``data`` (a file's bytes, from :func:`head`) is, when it is one JSON
    document of at most ``limit`` bytes; None otherwise (JSONL, CSV, binary, too long)."""
    if data is None or len(data) > limit or not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"[")):
        return None
    try:
        return jsonio.loads(jsonio.text(data))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
