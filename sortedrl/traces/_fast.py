"""The fast path for reading trace files: pyarrow's C++ parsers for the usual, clean file.

Why: the standard-library readers in ``_text`` cost about 10 s of CPU per million JSONL rows
(one ``json`` call and one dict per line) and 4 s per million CSV rows; pyarrow parses the same
bytes in about 1 s and 0.3 s. The standard-library readers stay the reference: this path accepts
only a file whose every value has the one obvious reading, and returns ``None`` for anything
else (a blank line, a quoted CSV field, a value of an unexpected type, a null, an escaped lone
surrogate...), so that the caller reads the file again the slow way and reports the exact line.
A :class:`~sortedrl.errors.TraceError` raised here (say, a negative length) is also re-checked by
the slow path, which names the same row by its file line. So both paths give the same trace, or
the same error, for every file.

A new column is one entry in :data:`ARROW_TYPES`; a column missing there sends the file down the
slow path, so a column added to the schema works before it is added here. The ragged turn
columns have their Arrow types and their flattening in ``_turn_codec``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from sortedrl.traces import _turn_codec
from sortedrl.traces._codec import CSV_META_PREFIX, MAGIC, build, check_header, parse_meta
from sortedrl.traces.schema import Trace

# The Arrow type each column must have, by the name of its pyarrow type factory.
ARROW_TYPES = {
    "prompt_id": "string",
    "sample": "int64",
    "prompt_len": "int64",
    "response_len": "int64",
    "truncated": "bool_",
    "step": "int64",
    "reward": "float64",
    "finish_reason": "string",
}
_BOM = b"\xef\xbb\xbf"
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB]")  # pyarrow would replace it; Python keeps it


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.csv  # noqa: F401
        import pyarrow.json  # noqa: F401
    except ImportError:
        return None
    return pa


def _schema(pa: Any, names: list[str], turns: dict[str, Any] | None = None) -> Any | None:
    """The explicit schema of these columns; ``turns`` gives the Arrow types of the format's
    turn columns (``_turn_codec``), read in bulk and flattened by :func:`_build`."""
    turns = turns or {}
    if any(n not in ARROW_TYPES and n not in turns for n in names) or len(set(names)) != len(names):
        return None
    return pa.schema([pa.field(n, turns[n] if n in turns else getattr(pa, ARROW_TYPES[n])())
                      for n in names])


def read_jsonl_fast(path: Path, data: bytes) -> Trace | None:
    """The trace in JSONL ``data``, or None when the file needs the slow path."""
    pa = _pyarrow()
    data = data.removeprefix(_BOM)
    if pa is None or not data.startswith(b"{"):
        return None
    if b"\\u" in data and _LONE_SURROGATE.search(data):
        return None
    end = data.find(b"\n") + 1 or len(data)
    first = _json_object(data[:end])
    if first is None:
        return None
    given: dict[str, Any] = {}
    start, line = 0, 1
    if MAGIC in first:
        given = parse_meta(first, f"{path}: line 1")
        start, line = end, 2
        first = _json_object(data[start : data.find(b"\n", start) + 1 or len(data)])
        if first is None:
            return None
    schema = _schema(pa, list(first), _turn_codec.arrow_jsonl_types(pa))
    if schema is None:
        return None
    try:
        table = pa.json.read_json(
            pa.BufferReader(pa.py_buffer(memoryview(data)[start:])),
            read_options=pa.json.ReadOptions(use_threads=False, block_size=1 << 24),
            parse_options=pa.json.ParseOptions(explicit_schema=schema,
                                               unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != _line_count(data, start):  # a blank line, or two objects on one line
        return None
    return _build(path, table, given, line)


def read_csv_fast(path: Path, data: bytes) -> Trace | None:
    """The trace in CSV ``data``, or None when the file needs the slow path."""
    pa = _pyarrow()
    data = data.removeprefix(_BOM)
    if pa is None or b"\r" in data:
        return None
    given: dict[str, Any] = {}
    start, line = 0, 1
    if data.startswith(b"#"):
        end = data.find(b"\n") + 1
        if not end or not data.startswith(CSV_META_PREFIX.encode()):
            return None
        raw = _json_object(data[len(CSV_META_PREFIX) : end])
        if raw is None:
            return None
        given = parse_meta(raw, f"{path}: line 1")
        start, line = end, 2
    header_end = data.find(b"\n", start) + 1
    if not header_end or data.find(b'"', start) >= 0:  # quoting: the csv module's rules
        return None
    names = data[start : header_end - 1].decode("utf-8", "replace").split(",")
    check_header(path, names, f"line {line}")
    schema = _schema(pa, names, _turn_codec.arrow_csv_types(pa))
    if schema is None:
        return None
    csv = pa.csv
    try:
        table = csv.read_csv(
            pa.BufferReader(pa.py_buffer(memoryview(data)[header_end:])),
            read_options=csv.ReadOptions(use_threads=False, block_size=1 << 24, column_names=names),
            parse_options=csv.ParseOptions(quote_char=False, double_quote=False),
            convert_options=csv.ConvertOptions(
                column_types=schema, null_values=[], true_values=["true", "True", "TRUE", "1"],
                false_values=["false", "False", "FALSE", "0"], strings_can_be_null=False),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != _line_count(data, header_end):
        return None
    return _build(path, table, given, line + 1)


def arrow_columns(table: Any) -> dict[str, np.ndarray] | None:
    """The columns of an Arrow table as numpy arrays, or None if one is not of its expected
    type, holds a null, or a string with a NUL (numpy would drop a trailing one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name)
        want = ARROW_TYPES.get(name)
        if want is None or col.type != getattr(pa, want)() or col.null_count:
            return None
        if want == "string":
            if pc.any(pc.match_substring(col, "\x00")).as_py():
                return None
            out[name] = _strings(col)
        else:
            out[name] = col.to_numpy()
    reward = out.get("reward")
    if reward is not None and np.signbit(reward[reward == 0]).any():
        return None  # JSON's -0 is Python's int 0 (so +0.0), but Arrow's -0.0
    return out


def _strings(col: Any) -> np.ndarray:
    """A string column as numpy unicode, converting each distinct value once (a prompt id
    repeats group-size times, a finish reason a million times)."""
    coded = col.combine_chunks().dictionary_encode()
    distinct = np.array(coded.dictionary.to_pylist(), dtype=str)
    return distinct[coded.indices.to_numpy()]


def _build(path: Path, table: Any, given: dict[str, Any], first_line: int) -> Trace | None:
    turns = _turn_codec.arrow_text_turns(table)  # flat turn columns, {} without turns
    if turns is None:
        return None
    columns = arrow_columns(table.select([n for n in table.column_names
                                          if n not in _turn_codec.TEXT_COLUMNS]))
    if columns is None:
        return None
    columns.update(turns)
    lines = range(first_line, first_line + table.num_rows)
    return build(path, columns, given, lines)  # type: ignore[arg-type]


def _json_object(line: bytes) -> dict | None:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # the reference reader names what is wrong
        return None
    return obj if type(obj) is dict else None


def _line_count(data: bytes, start: int) -> int:
    """Lines from ``start`` on (the last one may lack its newline)."""
    if start >= len(data):
        return 0
    return data.count(b"\n", start) + (not data.endswith(b"\n"))
