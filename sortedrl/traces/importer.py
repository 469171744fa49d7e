"""Turning a public per-request table (e.g. an LLM-serving trace) into a length trace.

Public request logs such as the Azure LLM inference traces give a prompt length and a response
length per request, but no prompts, groups or caps. :func:`import_table` reads such a table (CSV
with a header, JSONL of objects, or Parquet; told apart by content, not extension), groups
consecutive rows into GRPO groups and applies a generation cap, so the simulator can replay real
length distributions. What was dropped or clipped is reported in an :class:`ImportReport`.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import ConfigError, TraceError
from sortedrl.limits import INT32_MAX, short_repr
from sortedrl.traces.schema import Trace, TraceMeta


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_table_with_report` did to the table's rows."""

    rows: int  # data rows read from the table
    prompts: int  # groups formed (prompt ids p000000, p000001, ...)
    dropped_rows: int  # trailing rows that did not fill a whole group
    clipped_rows: int  # rows whose response was above max_response_len (clipped, truncated)


def import_table(
    path: str | os.PathLike[str],
    prompt_len_col: str,
    response_len_col: str,
    group_size: int = 1,
    max_response_len: int | None = None,
    source: str | None = None,
) -> Trace:
    """Read a per-request table as a trace; see :func:`import_table_with_report`."""
    return import_table_with_report(
        path, prompt_len_col, response_len_col, group_size, max_response_len, source
    )[0]


def import_table_with_report(
    path: str | os.PathLike[str],
    prompt_len_col: str,
    response_len_col: str,
    group_size: int = 1,
    max_response_len: int | None = None,
    source: str | None = None,
) -> tuple[Trace, ImportReport]:
    """Read a per-request table as a trace, and report dropped and clipped rows.

    Consecutive rows form the ``group_size`` samples of one prompt; a trailing incomplete group is
    dropped. With ``max_response_len=None`` the cap is the longest kept response; responses above
    a given cap are clipped to it. Responses at the cap are ``truncated`` (finish reason
    ``length``), the others ``stop``.
    """
    p = Path(path)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"group_size must be a positive integer, got {group_size!r}")
    if max_response_len is not None and (
        isinstance(max_response_len, bool)
        or not isinstance(max_response_len, int)
        or max_response_len < 1
    ):
        raise ConfigError(f"max_response_len must be a positive integer, got {max_response_len!r}")
    if max_response_len is not None and max_response_len > INT32_MAX:  # 32-bit lengths in a run
        raise ConfigError(f"max_response_len must be at most {INT32_MAX:,}, got "
                          f"{max_response_len:,}")
    cols = (prompt_len_col, response_len_col)
    try:
        # (Parquet; a compressed file, which _read_text names)
        data = jsonio.read_text_bytes(p, TraceError, binary=(b"PAR1", *(magic for magic, _ in COMPRESSED)))
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, not a table") from None
    if data[:4] == b"PAR1":
        values, lines = _read_parquet(p, cols)
    else:
        values, lines = _read_text(p, data, cols)

    rows = len(lines)
    groups = rows // group_size
    if groups == 0:
        raise TraceError(f"{p}: {rows} data rows, fewer than group_size {group_size}")
    kept = groups * group_size
    prompt_len = np.array(values[0][:kept], dtype=np.int64)
    response_len = np.array(values[1][:kept], dtype=np.int64)
    cap = int(response_len.max()) if max_response_len is None else max_response_len
    over = response_len > cap
    clipped = int(np.count_nonzero(over))
    response_len[over] = cap
    truncated = response_len >= cap
    width = max(6, len(str(groups - 1)))
    ids = np.array([f"p{i:0{width}d}" for i in range(groups)])
    columns: dict[str, Any] = {
        "prompt_id": np.repeat(ids, group_size),
        "sample": np.tile(np.arange(group_size, dtype=np.int64), groups),
        "prompt_len": prompt_len,
        "response_len": response_len,
        "truncated": truncated,
        "finish_reason": np.where(truncated, "length", "stop"),
    }
    meta = TraceMeta(max_response_len=cap, group_size=group_size, source=source or p.name)
    trace = Trace.from_columns(columns, meta, where=str(p), rows=lines[:kept])
    return trace, ImportReport(rows, groups, rows - kept, clipped)


# a compressed file's first bytes, named when the file is not text
COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
              (b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip"))


def _read_text(p: Path, data: bytes, cols: tuple[str, str]) -> tuple[list[list[int]], list[int]]:
    """A CSV with a header, or JSONL of objects (told apart by the first character)."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        kind = next((kind for magic, kind in COMPRESSED if data.startswith(magic)), None)
        if kind is not None:
            raise TraceError(f"{p}: {kind}-compressed: decompress it first (a table import reads "
                             "CSV, JSONL or Parquet)") from None
        raise TraceError(f"{p}: not UTF-8 text (byte {bom + e.start})") from None
    head = text.lstrip()
    if not head:
        raise TraceError(f"{p}: empty file")
    try:
        return _read_jsonl(p, text, cols) if head[0] == "{" else _read_csv(p, text, cols)
    except csv.Error as e:
        raise TraceError(f"{p}: bad CSV: {e}") from None


def _length(p: Path, at: str, col: str, v: Any) -> int:
    """A positive integer length from a table cell, or a TraceError naming file, line (a
    Parquet file's row), column; at most INT32_MAX, as lengths are 32-bit in a run."""
    out: int | None = None
    if isinstance(v, bool):
        out = None
    elif isinstance(v, int):
        out = v
    elif isinstance(v, float) and v.is_integer():
        out = int(v)
    elif isinstance(v, str):
        s = v.strip()
        try:
            out = int(s)
        except ValueError:
            try:
                f = float(s)
                out = int(f) if f.is_integer() else None
            except (ValueError, OverflowError):
                out = None
    if v is None:
        raise TraceError(f"{p}: {at}: column {col!r} is null")
    if out is None or out < 1:
        raise TraceError(f"{p}: {at}: column {col!r}: {short_repr(v)} is not a positive integer")
    if out > INT32_MAX:
        raise TraceError(f"{p}: {at}: column {col!r}: {out:,} is above {INT32_MAX:,}, the "
                         "largest length (lengths are 32-bit in a run)")
    return out


def _missing(p: Path, col: str, available: list[str]) -> TraceError:
    """The names quoted (repr), so that a space or a control character in one shows."""
    shown = ", ".join(repr(a) for a in available)
    return TraceError(f"{p}: no column {col!r}; available columns: {shown}")


def _twice(p: Path, at: str, col: str) -> TraceError:
    return TraceError(f"{p}: {at}column {col!r} appears twice (rename one of them)")


def _read_csv(p: Path, text: str, cols: tuple[str, str]) -> tuple[list[list[int]], list[int]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] = []
    for header in reader:
        if header:
            break
    names = [h.strip() for h in header]  # (" prompt tokens" after "arrived at, ")
    idx = []
    for col in cols:
        name = col.strip()  # the name as the file spells it matches too: stripped alike
        if name not in names:
            raise _missing(p, col, names)
        if names.count(name) > 1:  # (another column given twice is not read: let it be)
            raise _twice(p, f"line {reader.line_num}: ", col)
        idx.append(names.index(name))
    values: list[list[int]] = [[], []]
    lines: list[int] = []
    prev = reader.line_num
    for rec in reader:
        start, prev = prev + 1, reader.line_num
        if not rec:
            continue
        if len(rec) != len(names):
            raise TraceError(f"{p}: line {start}: expected {len(names)} fields, got {len(rec)}")
        for k in (0, 1):
            values[k].append(_length(p, f"line {start}", cols[k], rec[idx[k]]))
        lines.append(start)
    if not lines:
        raise TraceError(f"{p}: no data rows after the header")
    return values, lines


class _Object(dict):
    """A JSON object that remembers the keys it was given twice (a dict keeps the last)."""

    twice: frozenset[str] = frozenset()


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        counts = Counter(k for k, _ in pairs)
        obj.twice = frozenset(k for k, n in counts.items() if n > 1)
    return obj


def _loads(raw: str) -> object:
    """``jsonio.loads`` (every malformed input a JSONDecodeError), objects as :class:`_Object`."""
    try:
        return json.loads(raw, object_pairs_hook=_pairs)
    except (RecursionError, ValueError) as e:
        if isinstance(e, json.JSONDecodeError):
            raise
        return jsonio.loads(raw)  # raises the JSONDecodeError jsonio makes of it


def _read_jsonl(p: Path, text: str, cols: tuple[str, str]) -> tuple[list[list[int]], list[int]]:
    values: list[list[int]] = [[], []]
    lines: list[int] = []
    for lineno, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = _loads(raw.rstrip("\r"))
        except json.JSONDecodeError as e:
            raise TraceError(
                f"{p}: line {lineno}: bad JSON: {e.msg} (column {e.pos + 1})"
            ) from None
        if not isinstance(obj, _Object):
            raise TraceError(f"{p}: line {lineno}: expected a JSON object")
        for k, col in enumerate(cols):
            if col not in obj:
                if not lines:
                    raise _missing(p, col, list(obj))
                raise TraceError(f"{p}: line {lineno}: missing column {col!r}")
            if col in obj.twice:  # (another key given twice is not read: let it be)
                raise _twice(p, f"line {lineno}: ", col)
            values[k].append(_length(p, f"line {lineno}", col, obj[col]))
        lines.append(lineno)
    return values, lines


def _read_parquet(p: Path, cols: tuple[str, str]) -> tuple[list[list[int]], list[int]]:
    """The two columns of a Parquet table; rows are named by their 1-based number."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(p).names
        for col in cols:
            if col not in names:
                raise _missing(p, col, names)
            if names.count(col) > 1:
                raise _twice(p, "", col)
        table = pq.read_table(p, columns=list(cols))
        columns = [table.column(c).to_pylist() for c in cols]
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TraceError(f"{p}: not a Parquet file: {first[:160]}") from None
    values = [[_length(p, f"row {i + 1}", col, v) for i, v in enumerate(column)]
              for col, column in zip(cols, columns, strict=True)]
    if not values[0]:
        raise TraceError(f"{p}: no data rows")
    return values, list(range(1, len(values[0]) + 1))
