"""Turns of a multi-turn (agentic) trajectory: the optional ragged columns of a trace.

An agentic rollout alternates generation with tool calls: the model generates a turn, stops, a
tool runs for some seconds, its output is appended to the context as tokens, and the next turn
is generated. A trace row may carry that structure as three per-turn columns, stored flat with
one offsets array (the CSR layout), because trajectories have different numbers of turns:

* ``turn_offsets`` (int64, rows + 1): the turns of row ``i`` are ``turn_offsets[i]`` up to
  ``turn_offsets[i + 1]``;
* ``turn_gen`` (int64, >= 1): tokens the model generated in the turn;
* ``turn_tool_s`` (float64, >= 0): seconds of the tool call that follows the turn (0 after the last);
* ``turn_tool_tokens`` (int64, >= 0): tool-output tokens appended to the context after the turn
  (0 after the last). They are context: prefilled, never decoded, never trained on.

``response_len == sum(turn_gen)`` per row: the response is what the model generated. A trace
without turns has all four set to ``None``. This module validates raw turn columns (given flat
with offsets, or per row as lists) and reorders them with the rows; :mod:`schema` calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.limits import INT32_MAX, INT64_MAX
from sortedrl.tables import counted

TURN_FIELDS = ("turn_gen", "turn_tool_s", "turn_tool_tokens")
MAX_TOOL_S = 1e9  # s, one tool call
TURN_COLUMNS = ("turn_offsets", *TURN_FIELDS)
_MINIMUM = {"turn_gen": 1, "turn_tool_tokens": 0}

Turns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # offsets, gen, tool_s, tool_tokens


def check_turns(
    columns: dict[str, Any],
    n: int,
    response_len: np.ndarray,
    where: str,
    line: Callable[[int], int],
) -> Turns | None:
    """Validate the turn columns of ``columns`` (``n`` rows); None when the trace has no turns.

    The fields come either flat, with ``turn_offsets``, or per row (a sequence of ``n``
    sequences, one per row) without it. Errors name the row, the field and the 1-based turn.
    """
    present = [c for c in TURN_COLUMNS if columns.get(c) is not None]
    if not present:
        return None
    for col in TURN_FIELDS:
        if columns.get(col) is None:
            raise TraceError(
                f"{where}: missing column '{col}' (a trace with turns needs "
                f"{', '.join(TURN_FIELDS)})"
            )
    if columns.get("turn_offsets") is not None:
        offsets = _offsets(columns["turn_offsets"], n, where)
        flat = {c: columns[c] for c in TURN_FIELDS}
        for col, vals in flat.items():
            if len(vals) != int(offsets[-1]):
                raise TraceError(
                    f"{where}: column '{col}' has {counted(len(vals), 'turn')}, turn_offsets says {int(offsets[-1])}"
                )
    else:
        offsets, flat = _flatten(columns, n, where, line)
    row_of = _row_finder(offsets)

    def at(j: int, col: str) -> str:
        i = row_of(j)
        return f"{where}: row {line(i)}: field '{col}': turn {j - int(offsets[i]) + 1}"

    gen = _ints(flat["turn_gen"], "turn_gen", at)
    tool_tokens = _ints(flat["turn_tool_tokens"], "turn_tool_tokens", at)
    tool_s = _floats(flat["turn_tool_s"], at)
    last = offsets[1:] - 1
    for col, arr in (("turn_tool_s", tool_s), ("turn_tool_tokens", tool_tokens)):
        bad = np.flatnonzero(arr[last] != 0)
        if bad.size:
            j = int(last[bad[0]])
            v = arr[j].item()
            raise TraceError(
                at(j, col) + f": {v!r} after the last turn (no tool call follows it; use 0)"
            )
    sums = np.add.reduceat(gen, offsets[:-1]) if gen.size else np.zeros(n, np.int64)
    off = np.flatnonzero(sums != response_len)
    if off.size:
        i = int(off[0])
        raise TraceError(
            f"{where}: row {line(i)}: field 'turn_gen': the turns sum to {int(sums[i])} tokens, "
            f"but response_len is {int(response_len[i])}"
        )
    return offsets, gen, tool_s, tool_tokens


def reorder(turns: Turns, order: np.ndarray) -> Turns:
    """The turns of the rows in ``order`` (row ``order[k]`` becomes row ``k``)."""
    offsets, gen, tool_s, tool_tokens = turns
    counts = np.diff(offsets)[order]
    new_offsets = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    take = np.repeat(offsets[:-1][order] - new_offsets[:-1], counts) + np.arange(
        int(new_offsets[-1]), dtype=np.int64
    )
    return new_offsets, gen[take], tool_s[take], tool_tokens[take]


def per_row(offsets: np.ndarray, values: np.ndarray) -> list[list[Any]]:
    """The flat ``values`` split into one Python list per row (for the file writers)."""
    flat = values.tolist()
    bounds = offsets.tolist()
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


# -- validation helpers --------------------------------------------------------------------


def _offsets(raw: Any, n: int, where: str) -> np.ndarray:
    arr = np.asarray(raw)
    if arr.dtype.kind not in "iu" or arr.shape != (n + 1,):
        raise TraceError(f"{where}: turn_offsets must be {n + 1} integers (rows + 1)")
    arr = arr.astype(np.int64)
    if arr[0] != 0:
        raise TraceError(f"{where}: turn_offsets must start at 0, got {int(arr[0])}")
    empty = np.flatnonzero(np.diff(arr) < 1)
    if empty.size:
        i = int(empty[0])
        raise TraceError(f"{where}: row {i + 1}: field 'turn_gen': no turns (a row has at least one)")
    return arr


def _flatten(
    columns: dict[str, Any], n: int, where: str, line: Callable[[int], int]
) -> tuple[np.ndarray, dict[str, list[Any]]]:
    counts = None
    flat: dict[str, list[Any]] = {}
    for col in TURN_FIELDS:
        rows: Sequence[Any] = columns[col]
        if len(rows) != n:
            raise TraceError(f"{where}: column '{col}' has {len(rows)} rows, expected {n}")
        lens = np.empty(n, dtype=np.int64)
        out: list[Any] = []
        for i, row in enumerate(rows):
            if isinstance(row, np.ndarray):
                row = row.tolist()
            if not isinstance(row, (list, tuple)):
                raise TraceError(f"{where}: row {line(i)}: field '{col}': {row!r} is not a list of turns")
            lens[i] = len(row)
            out.extend(row)
        if counts is None:
            counts = lens
            empty = np.flatnonzero(lens == 0)
            if empty.size:
                i = int(empty[0])
                raise TraceError(
                    f"{where}: row {line(i)}: field '{col}': no turns (a row has at least one)"
                )
        else:
            diff = np.flatnonzero(lens != counts)
            if diff.size:
                i = int(diff[0])
                raise TraceError(
                    f"{where}: row {line(i)}: field '{col}': {counted(int(lens[i]), 'turn')}, but "
                    f"'turn_gen' has {int(counts[i])}"
                )
        flat[col] = out
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, flat


def _row_finder(offsets: np.ndarray) -> Callable[[int], int]:
    return lambda j: int(np.searchsorted(offsets, j, side="right")) - 1


def _ints(raw: Any, col: str, at: Callable[[int, str], str]) -> np.ndarray:
    minimum = _MINIMUM[col]
    if isinstance(raw, np.ndarray) and raw.dtype.kind in "iu":
        arr = raw.astype(np.int64)
    else:
        vals = raw.tolist() if isinstance(raw, np.ndarray) else list(raw)
        for j, v in enumerate(vals):
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
            if not ok and isinstance(v, (float, np.floating)) and float(v).is_integer():
                vals[j], ok = int(v), True
            if not ok:
                raise TraceError(at(j, col) + f": {v!r} is not an integer")
            if vals[j] > INT64_MAX:
                raise TraceError(at(j, col) + f": {v!r} is out of range")
        arr = np.array(vals, dtype=np.int64)
    low = np.flatnonzero(arr < minimum)
    if low.size:
        j = int(low[0])
        v = int(arr[j])
        raise TraceError(at(j, col) + f": {v} is {'negative' if v < 0 else f'below {minimum}'}")
    high = np.flatnonzero(arr > INT32_MAX)  # (a tool output of 3e9 tokens was a traceback in the run)
    if high.size:
        j = int(high[0])
        raise TraceError(at(j, col) + f": {int(arr[j]):,} is above {INT32_MAX:,}, the largest length "
                         "(lengths are 32-bit in a run)")
    return arr


def _floats(raw: Any, at: Callable[[int, str], str]) -> np.ndarray:
    col = "turn_tool_s"
    if isinstance(raw, np.ndarray) and raw.dtype.kind in "fiu":
        arr = raw.astype(np.float64)
    else:
        vals = raw.tolist() if isinstance(raw, np.ndarray) else list(raw)
        arr = np.empty(len(vals), dtype=np.float64)
        for j, v in enumerate(vals):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TraceError(at(j, col) + f": {v!r} is not a number")
            arr[j] = float(v) if not isinstance(v, int) or abs(v) < 2**1023 else math.inf  # (no OverflowError)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0) | (arr > MAX_TOOL_S))
    if bad.size:
        j = int(bad[0])
        v = float(arr[j])
        what = "negative" if v < 0 else "not finite" if not np.isfinite(v) else (
            f"above {MAX_TOOL_S:g} s (no tool call takes decades; the simulated clock would "
            "overflow)")
        raise TraceError(at(j, col) + f": {v!r} is {what}")
    return arr


def trajectory_tokens(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a trace with turns: (generated tokens, tool-output tokens) over its turns, the
    context a recorded trajectory reaches beyond its prompt (both stay in the KV cache)."""
    off = np.asarray(trace.turn_offsets, dtype=np.int64)
    gen, tool = (np.concatenate([[0], np.cumsum(col, dtype=np.int64)])
                 for col in (trace.turn_gen, trace.turn_tool_tokens))
    return gen[off[1:]] - gen[off[:-1]], tool[off[1:]] - tool[off[:-1]]
