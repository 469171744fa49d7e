"""Raw trace columns to typed arrays, each bad value one error naming its row and field.

A trace arrives from many readers (JSONL, CSV, Parquet, importers, generators) as columns that
may be NumPy arrays already or plain lists of whatever a file held. :meth:`Trace.from_columns
<sortedrl.traces.schema.Trace.from_columns>` turns each into its canonical dtype here: the
common case (a clean NumPy array) passes through without a Python loop; anything else is walked
value by value so that the first bad one is named. ``line(i)`` maps a row index to the row
number an error reports (the reader's line in its file).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.limits import INT32_MAX, INT64_MAX

Line = Callable[[int], int]


def plain(values: object) -> list[object]:
    """Plain Python values, so that error messages show ``'a'`` rather than ``np.str_('a')``."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)  # type: ignore[call-overload]


def _bad(where: str, line: Line, i: int, col: str, what: str) -> TraceError:
    return TraceError(f"{where}: row {line(i)}: field '{col}': {what}")


def int_column(raw: object, n: int, col: str, minimum: int, where: str, line: Line,
               length: bool = False) -> np.ndarray:
    """int64 values >= ``minimum``; integral floats and digit strings are accepted. A ``length``
    (``prompt_len``, ``response_len``) is at most INT32_MAX, as ``trace import`` refuses above it:
    lengths are 32-bit in a run (the policy's view and the timeline), where a larger one was an
    OverflowError traceback."""
    top = INT32_MAX if length else INT64_MAX
    if isinstance(raw, np.ndarray) and raw.dtype == np.uint64 and raw.size and raw.max() > INT64_MAX:
        big = int(np.flatnonzero(raw > INT64_MAX)[0])  # (it would wrap to a negative)
        raw = raw[: big + 1].tolist() + [0] * (n - big - 1)  # the loop below names it
    if isinstance(raw, np.ndarray) and raw.dtype.kind in "iu":
        out = raw.astype(np.int64, copy=False)  # the trace's reordering copies
        bad = np.flatnonzero((out < minimum) | (out > top)) if length else np.flatnonzero(out < minimum)
        if bad.size == 0:
            return out
        raw = out[: int(bad[0]) + 1].tolist() + [0] * (n - int(bad[0]) - 1)
    out = np.empty(n, dtype=np.int64)
    for i, value in enumerate(plain(raw)):
        v = as_int(value)
        if v is None:
            raise _bad(where, line, i, col, f"{value!r} is not an integer")
        if v < minimum:
            raise _bad(where, line, i, col, f"{v} is {'negative' if v < 0 else f'below {minimum}'}")
        if length and v > top:
            raise _bad(where, line, i, col, f"{v:,} is above {INT32_MAX:,}, the largest length "
                                            "(lengths are 32-bit in a run)")
        if v > INT64_MAX:
            raise _bad(where, line, i, col, f"{v} is out of range")
        out[i] = v
    return out


def as_int(v: object) -> int | None:
    """``v`` as an int, or None when it is not one (a bool, a fraction, text that is no number)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        try:  # isdigit() also accepts e.g. '²' and '--5', which int() rejects
            return int(v)
        except ValueError:
            return None
    return None


def bool_column(raw: object, n: int, col: str, where: str, line: Line) -> np.ndarray:
    """Booleans; 0/1 and the strings true/false/1/0 are accepted."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "b":
        return raw
    out = np.empty(n, dtype=bool)
    for i, v in enumerate(plain(raw)):
        if isinstance(v, (bool, np.bool_)):
            out[i] = bool(v)
        elif isinstance(v, (int, np.integer)) and v in (0, 1):
            out[i] = bool(v)
        elif isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
            out[i] = v.strip().lower() in ("true", "1")
        else:
            raise _bad(where, line, i, col, f"{v!r} is not a boolean")
    return out


def str_column(raw: object, col: str, where: str, line: Line) -> np.ndarray:
    """Non-empty strings without NUL characters (NumPy drops trailing NULs)."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "U":
        if np.flatnonzero(raw == "").size == 0:
            return raw
        raw = raw.tolist()
    for i, v in enumerate(plain(raw)):
        if not isinstance(v, (str, np.str_)) or v == "":
            raise _bad(where, line, i, col, f"{v!r} is not a non-empty string")
        if "\x00" in v:
            raise _bad(where, line, i, col, f"{v!r} contains a NUL character")
    return np.array([str(v) for v in raw], dtype=str)  # type: ignore[union-attr]


def float_column(raw: object, n: int, col: str, where: str, line: Line) -> np.ndarray:
    """Finite float64 values (not bools)."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "f" and np.isfinite(raw).all():
        return raw.astype(np.float64, copy=False)
    out = np.empty(n, dtype=np.float64)
    for i, v in enumerate(plain(raw)):
        try:
            if isinstance(v, bool) or v is None:
                raise ValueError
            out[i] = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            raise _bad(where, line, i, col, f"{v!r} is not a number") from None
        if not np.isfinite(out[i]):
            raise _bad(where, line, i, col, f"{v!r} is not finite")
    return out
