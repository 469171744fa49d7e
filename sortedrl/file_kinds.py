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


# -- what a file is, when it is no trace --------------------------------------------------------

_RUN_TRACE = "a `sortedrl run` directory's trace is its trace.jsonl"
_KINDS = {  # what each file is, and where it goes
    "profile": "a calibrated profile (`sortedrl calibrate`), not a trace; give it to --cluster",
    "cluster": "a cluster file, not a trace; give it to --cluster",
    "model": "a trace model (`sortedrl trace fit`), not a trace; give it to --trace-model",
    "tune": "a `sortedrl tune` result (tune.json), not a trace; give it to `sortedrl export`, "
            "or its directory to `sortedrl report`",
    "compare": "a `sortedrl compare` result (compare.json), not a trace; give its directory to "
               "`sortedrl report`",
    "validate": "a `sortedrl validate` result (validate.json), not a trace",
    "summary": f"a run's summary (summary.json), not a trace; give its directory to `sortedrl plot` ({_RUN_TRACE})",
    "timeline": f"a run's timeline, not a trace; give its directory to `sortedrl plot` ({_RUN_TRACE})",
}


def not_a_trace(path: str | os.PathLike[str]) -> str | None:
    """The error for a file of sortedrl's own given where a trace goes (``PATH: is a calibrated
    profile, not a trace; give it to --cluster``), or None when it is none of them (what the
    trace reader found wrong is then the error). For a reader's error path: it reads the file."""
    kind = own_kind(head(path))
    return None if kind is None else f"{path}: is {_KINDS[kind]}"


def own_kind_name(path: str | os.PathLike[str]) -> str | None:
    """What a file of sortedrl's own is (``a cluster file``, ``a `sortedrl tune` result
    (tune.json)``), for a reader that got another kind; None when it is none of them."""
    kind = own_kind(head(path))
    return None if kind is None else _KINDS[kind].partition(", not a trace")[0]


def not_a_cluster(path: str | os.PathLike[str]) -> str | None:
    """The error for a file given to ``--cluster`` that is another of sortedrl's own files, or a
    JSONL trace (``PATH: is a trace model (`sortedrl trace fit`), not a cluster file or profile;
    give it to --trace-model``, where it said "unknown field 'sortedrl_trace_model'"); None when
    it may be a cluster file or profile (their reader's errors are then the error)."""
    data = head(path)
    kind = own_kind(data)
    if kind in ("profile", "cluster"):
        return None
    if kind is None:
        first = json_document(data.split(b"\n", 1)[0]) if data else None
        if isinstance(first, dict) and _row(first) and json_document(data) is None:
            return f"{path}: is a trace (JSON lines), not a cluster file or profile; give it to --trace"
        return None
    what, _, where = _KINDS[kind].partition(", not a trace")
    return f"{path}: is {what}, not a cluster file or profile{where}"


# a trace row's columns (traces.schema.REQUIRED but truncated, which a row may lack and still be
# one; sortedrl_trace: a trace's metadata line): an object holding one is a trace's, never ours
_TRACE_KEYS = frozenset({"prompt_id", "sample", "prompt_len", "response_len", "sortedrl_trace"})


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# what each of our JSON documents holds: keys, and a check of their values (a one-line JSONL
# trace holding ``gpus`` and ``tp``, or ``makespan_s`` and ``samples_total``, is still a trace)
_DOCUMENTS = (
    ("profile", lambda d: "sortedrl_profile" in d),
    ("model", lambda d: "sortedrl_trace_model" in d),
    ("tune", lambda d: isinstance(d.get("trials"), list) and "best" in d),
    ("validate", lambda d: {"steps_compared", "real", "sim"} <= d.keys()),
    ("summary", lambda d: _number(d.get("makespan_s")) and _count(d.get("samples_total"))),
    ("cluster", lambda d: isinstance(d.get("preset"), str)),
    ("cluster", lambda d: _count(d.get("gpus")) and _count(d.get("tp"))),
)


def own_kind(data: bytes | None) -> str | None:
    """Which of sortedrl's own files ``data`` (a file's bytes) is (a key of :data:`_KINDS`). An
    object holding a trace's column is a trace's row (a one-line JSONL trace is one JSON
    document): none of ours, so the trace reader's own error is the error."""
    if data is None:
        return None
    if data.startswith(b"PK\x03\x04") and b"format.npy" in data[:64]:  # (timeline_file's first member)
        return "timeline"
    doc = json_document(data)
    if doc is None:  # JSONL: a JSONL timeline opens with its meta record
        first = json_document(data.split(b"\n", 1)[0])
        return "timeline" if isinstance(first, dict) and first.get("kind") == "meta" and not _row(first) else None
    if isinstance(doc, list):
        return "compare" if doc and all(isinstance(d, dict) and "label" in d and "makespan_s" in d
                                        and not _row(d) for d in doc) else None
    if not isinstance(doc, dict) or _row(doc):
        return None
    return next((kind for kind, holds in _DOCUMENTS if holds(doc)), None)


def _row(obj: dict) -> bool:
    return not _TRACE_KEYS.isdisjoint(obj)
