"""The JSONL timeline: one record a line, the reference writer and reader.

Why this is apart from :mod:`sortedrl.timeline`: the in-memory log (recording, compaction,
columns) does not depend on any file format, and the JSONL form is the one a person reads and
the real runner appends as it goes (:func:`record_line`, a ``Timeline.sink``), crash-safely. The
columnar ``.npz`` and the fast JSONL reader are in :mod:`sortedrl.timeline_file`;
:meth:`Timeline.read_jsonl` (:func:`read_jsonl` here) is the reference reader, the one that
names the line at fault. :func:`write_atomic` writes either format.

``Timeline.records``, ``jsonl_lines``, ``write_jsonl`` and ``read_jsonl`` stay methods of the
timeline, calling these; ``record_line`` and ``write_atomic`` are importable from
:mod:`sortedrl.timeline` as before.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sortedrl import jsonio
from sortedrl.aside import aside
from sortedrl.errors import SortedRLError
from sortedrl.timeline_columns import (
    _LIST,
    FIELDS,
    KINDS,
    LATER_FIELDS,
    SCHEMA,
    by_start,
    check_counts,
    check_meta,
)

if TYPE_CHECKING:
    from sortedrl.timeline import Timeline

_ORDER = {k: i for i, k in enumerate(KINDS)}


def records(tl: Timeline) -> list[dict]:
    """All records as JSON-ready dicts, ordered by start time (ties: kind, then insertion)."""
    return [json.loads(line) for line in jsonl_lines(tl)]


def jsonl_lines(tl: Timeline):
    """The JSONL lines: meta first, then every record by start time (ties: kind, then
    insertion). Each line ends with a newline."""
    yield _dumps({"kind": "meta", **tl.meta}) + "\n"
    kinds = [k for k in SCHEMA if tl.count(k)]
    starts = [tl.columns(k)["t"] for k in kinds]
    if not kinds:
        return
    t = np.concatenate(starts)
    kind_of = np.concatenate([np.full(s.size, _ORDER[k], dtype=np.int8)
                              for k, s in zip(kinds, starts, strict=True)])
    index = np.concatenate([np.arange(s.size) for s in starts])
    order = np.lexsort((index, kind_of, t))
    rows = {_ORDER[k]: tl.rows(k) for k in kinds}
    names = {_ORDER[k]: k for k in kinds}
    for o, i in zip(kind_of[order].tolist(), index[order].tolist(), strict=True):
        yield record_line(names[o], rows[o][i])


def write_jsonl(tl: Timeline, path: str | Path) -> None:
    """Write atomically: a failure leaves any previous file untouched."""
    def emit(f) -> None:
        buf: list[str] = []
        for line in jsonl_lines(tl):
            buf.append(line)
            if len(buf) >= 8192:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
    write_atomic(path, emit, "w")


def read_jsonl(tl: Timeline, path: str | Path, compact_rows: int) -> Timeline:
    """Read the file at ``path`` into ``tl`` (a new, empty timeline), compacting every
    ``compact_rows`` records of a kind; a malformed file raises one error naming its line."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = jsonio.loads(line)
                kind = r["kind"]
                if kind == "meta":
                    tl.meta = {k: v for k, v in r.items() if k != "kind"}
                    try:
                        check_meta(tl.meta)
                    except ValueError as e:
                        raise SortedRLError(f"{path}: line {n}: meta record's {e}") from None
                elif kind in FIELDS:
                    r = {**LATER_FIELDS.get(kind, {}), **r}  # (an older file lacks them)
                    rows = getattr(tl, _LIST[kind])
                    rows.append(tuple(r[f] for f in FIELDS[kind]))
                    if len(rows) >= compact_rows:
                        tl._compact(kind)
                else:
                    raise SortedRLError(f"{path}: line {n}: unknown record kind {kind!r}")
            except json.JSONDecodeError as e:
                raise SortedRLError(f"{path}: line {n}: not valid JSON ({e.msg})") from None
            except KeyError as e:
                raise SortedRLError(f"{path}: line {n}: missing field {e.args[0]!r}") from None
            except (TypeError, AttributeError, ValueError, OverflowError):
                raise SortedRLError(f"{path}: line {n}: not a timeline record") from None
    for kind in SCHEMA:  # type and range-check every record, as a columnar file is
        rows = getattr(tl, _LIST[kind])
        try:
            typed = tl._chunks[kind] + ([tl._typed(kind, rows)] if rows else [])
        except (TypeError, AttributeError, ValueError, OverflowError) as e:
            raise SortedRLError(f"{path}: a record has a field of the wrong type "
                                f"({kind}: {e})") from None
        for cols in typed:
            try:
                check_counts(SCHEMA[kind], cols)
            except ValueError as e:
                raise SortedRLError(f"{path}: a {kind!r} record's {e}") from None
    by_start(tl, _LIST)  # the real runner appends records as they complete, not by t
    return tl


def write_atomic(path: str | Path, emit, mode: str) -> None:
    """Call ``emit(file)`` on a temp file beside ``path``, then rename it into place; on any
    failure (Ctrl-C included) remove the temp file and leave ``path`` as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=aside(path.name, ""), suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
    try:
        with os.fdopen(fd, mode) as f:
            emit(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _record(kind: str, row: tuple) -> dict:
    return {"kind": kind, **dict(zip(FIELDS[kind], row, strict=True))}


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def record_line(kind: str, row: tuple) -> str:
    """One JSONL line; spans take a fast path."""
    if kind == "span":
        t0, t1, e, i, a, v, k, end = row
        return (f'{{"kind":"span","t":{float(t0)!r},"t_end":{float(t1)!r},"engine":{e},"sample":{i},'
                f'"attempt":{a},"version":{v},"tokens":{k},"end":"{end}"}}\n')
    return _dumps(_record(kind, row)) + "\n"

