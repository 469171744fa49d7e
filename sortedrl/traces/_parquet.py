"""Parquet trace files (optional: needs pyarrow, the ``parquet`` extra).

Columns are stored with fixed Arrow types (int64, bool, float64, string) and the metadata JSON
under the schema-metadata key ``sortedrl_trace``, so a round trip is exact. Row numbers in error
messages are 1-based data rows (Parquet has no lines). A file whose columns all have their
expected types (what ``write_trace`` writes) is converted to numpy in bulk (``_fast``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import TraceError
from sortedrl.traces import _turn_codec
from sortedrl.traces._codec import (
    MAGIC,
    build,
    check_header,
    meta_dict,
    parse_meta,
    pyarrow_modules,
)
from sortedrl.traces._fast import arrow_columns
from sortedrl.traces.schema import Trace
from sortedrl.traces.turns import TURN_FIELDS


def to_arrow(trace: Trace, pa: Any) -> Any:
    types = {
        "prompt_id": pa.string(),
        "finish_reason": pa.string(),
        "truncated": pa.bool_(),
        "reward": pa.float64(),
    }
    arrays, fields = [], []
    for name, col in trace.columns().items():
        typ = types.get(name, pa.int64())
        arrays.append(pa.array(col.tolist() if col.dtype.kind == "U" else col, type=typ))
        fields.append(pa.field(name, typ, nullable=False))
    for field, arr in _turn_codec.arrow_columns(trace, pa):
        arrays.append(arr)
        fields.append(field)
    schema = pa.schema(fields, metadata={MAGIC: json.dumps(meta_dict(trace.meta))})
    return pa.Table.from_arrays(arrays, schema=schema)


def read_parquet(path: Path, data: bytes | None = None) -> Trace:
    """The trace in the Parquet file ``path`` (``data``: its bytes, when already read: a pipe's)."""
    pq, pa = pyarrow_modules(path)
    if (path.stat().st_size if data is None else len(data)) == 0:  # (FileNotFoundError: read_trace's)
        raise TraceError(f"{path}: empty file")
    try:
        table = pq.read_table(path if data is None else pa.BufferReader(data))
    except (pa.ArrowException, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TraceError(f"{path}: not a readable Parquet file: {msg}") from None
    given: dict[str, Any] = {}
    raw_meta = (table.schema.metadata or {}).get(MAGIC.encode())
    if raw_meta is not None:
        try:
            raw = jsonio.loads(raw_meta)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise TraceError(f"{path}: schema metadata '{MAGIC}' is not valid JSON") from None
        if type(raw) is not dict:
            raise TraceError(f"{path}: schema metadata '{MAGIC}' must be a JSON object")
        given = parse_meta(raw, f"{path}: schema metadata")
    check_header(path, list(table.column_names), "schema")
    if table.num_rows == 0:
        raise TraceError(f"{path}: no data rows")
    rows = range(1, table.num_rows + 1)
    turns = _turn_codec.arrow_read(path, table, pa)  # list columns, flattened in bulk
    rest = table.select([n for n in table.column_names if n not in TURN_FIELDS])
    clean = arrow_columns(rest)  # the usual file: every column of its expected type
    if clean is not None:
        del table, rest  # the Arrow copy: freed before validation (the peak of a big read)
        return build(path, {**clean, **turns}, given, rows, unit="row")  # type: ignore[arg-type]
    columns: dict[str, Any] = dict(turns)
    for name in table.column_names:
        if name in TURN_FIELDS:
            continue
        col = table.column(name)
        if col.null_count:
            i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise TraceError(f"{path}: row {i + 1}: field '{name}' is null")
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_floating(t):
            vals = col.to_numpy()
            if pa.types.is_floating(t) and name != "reward":
                vals = vals.tolist()  # from_columns accepts integral floats, names the rest
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            vals = col.to_pylist()  # from_columns checks for empty strings and NULs
        else:
            vals = col.to_pylist()
        columns[name] = vals
    return build(path, columns, given, rows, unit="row")  # type: ignore[arg-type]
