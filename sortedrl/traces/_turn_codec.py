"""How the turn columns of a trace are spelled in each file format.

Kept apart from the format modules so that those stay about rows, and so that the three formats
share one set of structural checks for turns. The values themselves (non-negative, the last turn
without a tool call, the sum equal to ``response_len``) are checked by :mod:`turns`.

* JSONL: one field ``turns`` per row, a list of ``{"gen": int, "tool_s": float,
  "tool_tokens": int}`` objects.
* CSV: three columns ``turn_gen``, ``turn_tool_s``, ``turn_tool_tokens``, each a space-separated
  list with one value per turn (floats written with ``repr``, so they read back bit for bit).
* Parquet: the same three columns as ``list<int64>``, ``list<float64>``, ``list<int64>``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.tables import counted
from sortedrl.traces.schema import Trace
from sortedrl.traces.turns import TURN_FIELDS, per_row

JSONL_FIELD = "turns"
JSONL_KEYS = {"turn_gen": "gen", "turn_tool_s": "tool_s", "turn_tool_tokens": "tool_tokens"}
CSV_COLUMNS = TURN_FIELDS
_JSONL_KEY_SET = set(JSONL_KEYS.values())


# -- JSONL -----------------------------------------------------------------------------------


def jsonl_turns_of(turns: dict[str, np.ndarray]) -> list[str]:
    """The encoded ``turns`` value of every row of the turn columns ``turns`` (offsets from 0;
    a chunk of a trace's rows, :func:`sortedrl.traces._text.row_chunks`)."""
    gen = per_row(turns["turn_offsets"], turns["turn_gen"])
    tool_s = per_row(turns["turn_offsets"], turns["turn_tool_s"])
    tool_tokens = per_row(turns["turn_offsets"], turns["turn_tool_tokens"])
    return [
        "["
        + ", ".join(
            f'{{"gen": {g}, "tool_s": {s!r}, "tool_tokens": {k}}}'
            for g, s, k in zip(gs, ss, ks, strict=True)
        )
        + "]"
        for gs, ss, ks in zip(gen, tool_s, tool_tokens, strict=True)
    ]


def jsonl_columns(path: Path, rows: list[Any], lines: list[int]) -> dict[str, list[list[Any]]]:
    """Per-row turn columns from the ``turns`` values of a JSONL file (structure checked here)."""
    out: dict[str, list[list[Any]]] = {c: [] for c in TURN_FIELDS}
    for i, turns in enumerate(rows):
        where = f"{path}: line {lines[i]}: field '{JSONL_FIELD}'"
        if type(turns) is not list:
            raise TraceError(f"{where}: {turns!r} is not a list of turns")
        for col in TURN_FIELDS:
            out[col].append([])
        for k, turn in enumerate(turns, 1):
            if type(turn) is not dict or set(turn) != _JSONL_KEY_SET:
                raise TraceError(
                    f"{where}: turn {k}: expected an object with keys gen, tool_s, tool_tokens, "
                    f"got {turn!r}"
                )
            for col, key in JSONL_KEYS.items():
                v = turn[key]
                if isinstance(v, str) or v is None:
                    raise TraceError(f"{where}: turn {k}: '{key}': {v!r} is not a number")
                out[col][-1].append(v)
    return out


_SCHEMA_FIELD = re.compile(r"field '(turn_gen|turn_tool_s|turn_tool_tokens)'(: turn \d+)?")


def jsonl_message(msg: str) -> str:
    """Rename the schema's turn fields in an error message to their JSONL spelling."""

    def sub(m: re.Match[str]) -> str:
        if m.group(2) is None:
            return f"field '{JSONL_FIELD}'"
        return f"field '{JSONL_FIELD}'{m.group(2)}: '{JSONL_KEYS[m.group(1)]}'"

    return _SCHEMA_FIELD.sub(sub, msg, count=1)


# -- CSV -------------------------------------------------------------------------------------


def csv_cells_of(turns: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """The three CSV turn columns (space-separated values per row) of the turn columns
    ``turns`` (offsets from 0; a chunk of a trace's rows), or ``{}`` for none."""
    if not turns:
        return {}
    out = {}
    for col in CSV_COLUMNS:
        fmt = repr if col == "turn_tool_s" else str
        out[col] = [" ".join(map(fmt, row)) for row in per_row(turns["turn_offsets"], turns[col])]
    return out


def csv_columns(path: Path, columns: dict[str, list[str]], lines: list[int]) -> None:
    """Parse the CSV turn columns of ``columns`` in place into per-row lists of numbers."""
    for col in CSV_COLUMNS:
        if col not in columns:
            continue
        parse = float if col == "turn_tool_s" else int
        what = "numbers" if col == "turn_tool_s" else "integers"
        parsed: list[list[Any]] = []
        for i, cell in enumerate(columns[col]):
            try:
                parsed.append([parse(v) for v in cell.split()])
            except ValueError:
                raise TraceError(
                    f"{path}: line {lines[i]}: field '{col}': {cell!r} is not a space-separated "
                    f"list of {what}"
                ) from None
        columns[col] = parsed


# -- Parquet ---------------------------------------------------------------------------------


def arrow_columns(trace: Trace, pa: Any) -> list[tuple[Any, Any]]:
    """``(field, array)`` pairs for the three list columns, or ``[]`` without turns."""
    if trace.turn_offsets is None:
        return []
    offsets = pa.array(trace.turn_offsets.astype(np.int32), type=pa.int32())
    out = []
    for col in TURN_FIELDS:
        typ = pa.float64() if col == "turn_tool_s" else pa.int64()
        values = pa.array(getattr(trace, col), type=typ)
        arr = pa.ListArray.from_arrays(offsets, values)
        out.append((pa.field(col, pa.list_(pa.field("item", typ, nullable=False)), nullable=False), arr))
    return out


def arrow_read(path: Path, table: Any, pa: Any) -> dict[str, Any]:
    """Flat turn columns (with ``turn_offsets``) from a Parquet table's list columns."""
    present = [c for c in TURN_FIELDS if c in table.column_names]
    if not present:
        return {}
    out: dict[str, Any] = {}
    offsets = None
    for col in present:
        arr = table.column(col).combine_chunks()
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            raise TraceError(f"{path}: column '{col}' must be a list column, got {arr.type}")
        if arr.null_count:
            i = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            raise TraceError(f"{path}: row {i + 1}: field '{col}' is null")
        values = arr.flatten()
        offs = arr.offsets.to_numpy().astype(np.int64)
        offs -= offs[0]
        if values.null_count:  # named by row and turn, as every other turn error is
            j = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
            i = int(np.searchsorted(offs, j, side="right")) - 1
            raise TraceError(f"{path}: row {i + 1}: field '{col}': turn {j - int(offs[i]) + 1} is null")
        if offsets is None:
            offsets = offs
        elif not np.array_equal(offs, offsets):
            i = int(np.flatnonzero(np.diff(offs) != np.diff(offsets))[0])
            raise TraceError(
                f"{path}: row {i + 1}: field '{col}': {counted(int(offs[i + 1] - offs[i]), 'turn')}, but "
                f"'{present[0]}' has {int(offsets[i + 1] - offsets[i])}"
            )
        out[col] = values.to_numpy(zero_copy_only=False)
    out["turn_offsets"] = offsets
    return out


# -- the fast path's Arrow reading of the text formats (``_fast``) ---------------------------


TEXT_COLUMNS = (JSONL_FIELD, *CSV_COLUMNS)


def arrow_jsonl_types(pa: Any) -> dict[str, Any]:
    item = pa.struct([("gen", pa.int64()), ("tool_s", pa.float64()), ("tool_tokens", pa.int64())])
    return {JSONL_FIELD: pa.list_(item)}


def arrow_csv_types(pa: Any) -> dict[str, Any]:
    return {col: pa.string() for col in CSV_COLUMNS}


def arrow_text_turns(table: Any) -> dict[str, np.ndarray] | None:
    """Flat turn columns of a table pyarrow parsed from JSONL or CSV; ``{}`` without turns, None
    when a value needs the standard-library reader (which names its line)."""
    names = set(table.column_names)
    if JSONL_FIELD in names:
        return _arrow_jsonl(table.column(JSONL_FIELD))
    if names & set(CSV_COLUMNS):
        return _arrow_csv(table, [c for c in CSV_COLUMNS if c in names])
    return {}


def _offsets(arr: Any) -> np.ndarray:
    offs = arr.offsets.to_numpy().astype(np.int64)
    return offs - offs[0]


def _arrow_jsonl(column: Any) -> dict[str, np.ndarray] | None:
    arr = column.combine_chunks()
    if arr.null_count:
        return None
    items = arr.flatten()
    out = {"turn_offsets": _offsets(arr)}
    for col, key in JSONL_KEYS.items():
        field = items.field(key)
        if field.null_count:  # a turn without this key
            return None
        out[col] = field.to_numpy(zero_copy_only=False)
    return out


def _arrow_csv(table: Any, present: list[str]) -> dict[str, np.ndarray] | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, np.ndarray] = {}
    for col in present:
        parts = pc.split_pattern(table.column(col).combine_chunks(), " ")
        values = parts.flatten()
        if len(values) and pc.any(pc.equal(values, "")).as_py():  # an empty cell, two spaces
            return None
        try:
            typed = pc.cast(values, pa.float64() if col == "turn_tool_s" else pa.int64())
        except pa.ArrowInvalid:
            return None
        offsets = _offsets(parts)
        if "turn_offsets" in out and not np.array_equal(offsets, out["turn_offsets"]):
            return None  # rows whose columns disagree on their turn count: named by the slow path
        out["turn_offsets"] = offsets
        out[col] = typed.to_numpy(zero_copy_only=False)
    return out
