"""Turning a public per-request table (e.g. an LLM-serving trace) into a length trace.

Public request logs such as the Azure LLM inference traces give a prompt length and a response
length per request, but no prompts, groups or caps. :func:`import_table` reads such a table (CSV
with a header, JSONL of objects, or Parquet; told apart by content, not extension), groups
consecutive rows into GRPO groups and applies a generation cap, so the simulator can replay real
length distributions. A user's own rollout dump may name each row's training step, prompt and
reward too (``step_col``, ``prompt_id_col``, ``reward_col``): its rows are then grouped by
prompt within each step (:mod:`sortedrl.traces.importer_groups`). What was dropped or clipped
is reported in an :class:`ImportReport`.
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
from sortedrl.errors import ConfigError, TraceError, not_found
from sortedrl.limits import INT32_MAX, short_repr
from sortedrl.text_check import COMPRESSED, TEXT_HEAD, compression, not_text
from sortedrl.traces.importer_groups import group_rows, mixed_prompt_lengths
from sortedrl.traces.schema import Trace, TraceMeta


@dataclass(frozen=True)
class ImportReport:
    """What :func:`import_table_with_report` did to the table's rows."""

    rows: int  # data rows read from the table
    prompts: int  # groups formed (prompt ids p000000, p000001, ..., or the prompt id column's)
    dropped_rows: int  # rows that did not fill a whole group (trailing ones, a step's last ones)
    clipped_rows: int  # rows whose response was above max_response_len (clipped, truncated)
    steps: int = 0  # distinct steps (0: no step column)
    dropped_groups: int = 0  # with a prompt id column: groups whose size is no multiple of group_size
    mixed_groups: int = 0  # groups whose rows have different prompt lengths
    unread: tuple[tuple[str, str], ...] = ()  # (column, option): one that looks like a step, id, reward
    split_groups: int = 0  # with a prompt id column: groups of k x group_size rows split into k


# columns a user's own dump names so, and the option that would read each
LOOKS_LIKE = {"step": "--step-col", "global_step": "--step-col", "training_step": "--step-col",
              "uid": "--prompt-id-col", "prompt_id": "--prompt-id-col", "prompt_uid": "--prompt-id-col",
              "reward": "--reward-col", "score": "--reward-col"}


def import_table(
    path: str | os.PathLike[str],
    prompt_len_col: str,
    response_len_col: str,
    group_size: int = 1,
    max_response_len: int | None = None,
    source: str | None = None,
    **columns: str | None,
) -> Trace:
    """Read a per-request table as a trace; see :func:`import_table_with_report`."""
    return import_table_with_report(
        path, prompt_len_col, response_len_col, group_size, max_response_len, source, **columns
    )[0]


def import_table_with_report(
    path: str | os.PathLike[str],
    prompt_len_col: str,
    response_len_col: str,
    group_size: int = 1,
    max_response_len: int | None = None,
    source: str | None = None,
    step_col: str | None = None,
    prompt_id_col: str | None = None,
    reward_col: str | None = None,
) -> tuple[Trace, ImportReport]:
    """Read a per-request table as a trace, and report dropped and clipped rows.

    Consecutive rows form the ``group_size`` samples of one prompt (within each step's rows,
    with ``step_col``); a trailing incomplete group is dropped. With ``prompt_id_col`` the rows
    of one prompt id (in one step) form a group wherever they lie; a group of k x ``group_size``
    rows (a prompt drawn k times) is split into k (ids ``id``, ``id#2``, ...), one of any other
    size is dropped. With ``max_response_len=None`` the cap is the longest kept response; responses
    above a given cap are clipped to it. Responses at the cap are ``truncated`` (finish reason
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
    named = {"step": step_col, "prompt_id": prompt_id_col, "reward": reward_col}
    cols = (prompt_len_col, response_len_col, *(c for c in named.values() if c is not None))
    parsers = (_length, _length, *(PARSERS[k] for k, c in named.items() if c is not None))
    options = {f"--{k.replace('_', '-')}-col": c for k, c in named.items()}  # (--step-col: step_col)
    _distinct({"--prompt-len-col": prompt_len_col, "--response-len-col": response_len_col, **options})
    try:
        # (Parquet; a compressed file, which _read_text names)
        data = jsonio.read_text_bytes(p, TraceError, binary=(b"PAR1", b"BZh", *(magic for magic, _ in COMPRESSED)))
    except FileNotFoundError:
        raise TraceError(not_found(p)) from None
    except IsADirectoryError:
        raise TraceError(f"{p}: is a directory, not a table") from None
    if data[:4] == b"PAR1":
        values, lines, names = _read_parquet(p, cols, parsers)
    else:
        values, lines, names = _read_text(p, data, cols, parsers)
    unread = tuple((n, LOOKS_LIKE[n]) for n in names if n in LOOKS_LIKE and options[LOOKS_LIKE[n]] is None)

    rows = len(lines)
    extra = dict(zip((k for k, c in named.items() if c is not None), values[2:], strict=True))
    grouped = group_rows(p, lines, group_size, extra.get("step"), extra.get("prompt_id"))
    groups = len(grouped.rows) // group_size
    if groups == 0 and prompt_id_col is None and step_col is None or rows < group_size:
        raise TraceError(f"{p}: {rows} data rows, fewer than group_size {group_size}")
    if groups == 0:
        where = "prompt id" + (" in one step" if step_col else "") if prompt_id_col else "step"
        hint = "".join(f"; column {c!r} was not read: give {o} {c}?" for c, o in unread if o == "--step-col")
        raise TraceError(f"{p}: no {where} has {group_size} rows, the group size (--group-size){hint}")
    take = grouped.rows
    prompt_len = np.array(values[0], dtype=np.int64)[take]
    response_len = np.array(values[1], dtype=np.int64)[take]
    cap = int(response_len.max()) if max_response_len is None else max_response_len
    over = response_len > cap
    clipped = int(np.count_nonzero(over))
    response_len[over] = cap
    truncated = response_len >= cap
    columns: dict[str, Any] = {
        "prompt_id": grouped.prompt_id,
        "sample": grouped.sample,
        "prompt_len": prompt_len,
        "response_len": response_len,
        "truncated": truncated,
        "finish_reason": np.where(truncated, "length", "stop"),
    }
    if "step" in extra:
        columns["step"] = np.array(extra["step"], dtype=np.int64)[take]
    if "reward" in extra:
        columns["reward"] = np.array(extra["reward"], dtype=np.float64)[take]
    meta = TraceMeta(max_response_len=cap, group_size=group_size, source=source or p.name)
    trace = Trace.from_columns(columns, meta, where=str(p), rows=np.asarray(lines)[take].tolist())
    steps = len(np.unique(columns["step"])) if "step" in extra else 0  # (the kept rows')
    return trace, ImportReport(rows, groups, grouped.dropped_rows, clipped, steps, grouped.dropped_groups,
                               mixed_prompt_lengths(prompt_len, group_size), unread, grouped.split_groups)


def _distinct(flags: dict[str, str | None]) -> None:
    """One column given to two options is an error naming both (the two length options may name
    one column, as they always could: a table of equal lengths)."""
    seen: dict[str, str] = {}
    for flag, col in flags.items():
        if col is not None and col in seen and flag != "--response-len-col":
            raise ConfigError(f"{seen[col]} and {flag} both name column {col!r}; a column has one role")
        if col is not None:
            seen[col] = flag


def _read_text(p: Path, data: bytes, cols: tuple[str, ...], parsers: tuple) -> tuple[list[list], list[int], list[str]]:
    """A CSV with a header, or JSONL of objects (told apart by the first character): the
    columns' values, each row's line and the columns the table has (JSONL: its first row's)."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        if compression(data) is not None:  # (named as not_text names it: a spreadsheet, or the compression)
            raise TraceError(f"{p}: {not_text(data[:TEXT_HEAD])} (a table import reads CSV, JSONL or "
                             "Parquet)") from None
        raise TraceError(f"{p}: not UTF-8 text (byte {bom + e.start})") from None
    head = text.lstrip()
    if not head:
        raise TraceError(f"{p}: empty file")
    try:
        return (_read_jsonl if head[0] == "{" else _read_csv)(p, text, cols, parsers)
    except csv.Error as e:
        raise TraceError(f"{p}: bad CSV: {e}") from None


def _length(p: Path, at: str, col: str, v: Any) -> int:
    """A positive integer length from a table cell, or a TraceError naming file, line (a
    Parquet file's row), column; at most INT32_MAX, as lengths are 32-bit in a run."""
    return _integer(p, at, col, v, 1, "a positive integer")


def _step(p: Path, at: str, col: str, v: Any) -> int:
    """A training step: an integer >= 0."""
    return _integer(p, at, col, v, 0, "a step (an integer >= 0)")


def _integer(p: Path, at: str, col: str, v: Any, least: int, what: str) -> int:
    """An integer cell (``12``, ``12.0``, ``"12"``) of at least ``least`` and at most INT32_MAX."""
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
    if out is None or out < least:
        raise TraceError(f"{p}: {at}: column {col!r}: {short_repr(v)} is not {what}")
    if out > INT32_MAX:
        raise TraceError(f"{p}: {at}: column {col!r}: {out:,} is above {INT32_MAX:,}, the "
                         "largest " + ("length (lengths are 32-bit in a run)" if least else "step"))
    return out


def _prompt_id(p: Path, at: str, col: str, v: Any) -> str:
    """A prompt id: text or an integer, as text."""
    if isinstance(v, str) and v.strip() or isinstance(v, int) and not isinstance(v, bool):
        return str(v).strip()
    if v is None:
        raise TraceError(f"{p}: {at}: column {col!r} is null")
    raise TraceError(f"{p}: {at}: column {col!r}: {short_repr(v)} is not a prompt id (text or an integer)")


def _reward(p: Path, at: str, col: str, v: Any) -> float:
    """A reward: a finite number."""
    out = None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        out = float(v)
    elif isinstance(v, str):
        try:
            out = float(v.strip())
        except ValueError:
            out = None
    if v is None:
        raise TraceError(f"{p}: {at}: column {col!r} is null")
    if out is None or not np.isfinite(out):
        raise TraceError(f"{p}: {at}: column {col!r}: {short_repr(v)} is not a finite number")
    return out


PARSERS = {"step": _step, "prompt_id": _prompt_id, "reward": _reward}


def _missing(p: Path, col: str, available: list[str]) -> TraceError:
    """The names quoted (repr), so that a space or a control character in one shows."""
    shown = ", ".join(repr(a) for a in available)
    return TraceError(f"{p}: no column {col!r}; available columns: {shown}")


def _twice(p: Path, at: str, col: str) -> TraceError:
    return TraceError(f"{p}: {at}column {col!r} appears twice (rename one of them)")


def _read_csv(p: Path, text: str, cols: tuple[str, ...], parsers: tuple) -> tuple[list[list], list[int], list[str]]:
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
    values: list[list] = [[] for _ in cols]
    lines: list[int] = []
    prev = reader.line_num
    for rec in reader:
        start, prev = prev + 1, reader.line_num
        if not rec:
            continue
        if len(rec) != len(names):
            raise TraceError(f"{p}: line {start}: expected {len(names)} fields, got {len(rec)}")
        for k, parse in enumerate(parsers):
            values[k].append(parse(p, f"line {start}", cols[k], rec[idx[k]]))
        lines.append(start)
    if not lines:
        raise TraceError(f"{p}: no data rows after the header")
    return values, lines, names


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


def _read_jsonl(p: Path, text: str, cols: tuple[str, ...], parsers: tuple) -> tuple[list[list], list[int], list[str]]:
    values: list[list] = [[] for _ in cols]
    lines: list[int] = []
    names: list[str] = []
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
            values[k].append(parsers[k](p, f"line {lineno}", col, obj[col]))
        if not lines:
            names = list(obj)
        lines.append(lineno)
    return values, lines, names


def _read_parquet(p: Path, cols: tuple[str, ...], parsers: tuple) -> tuple[list[list], list[int], list[str]]:
    """The named columns of a Parquet table; rows are named by their 1-based number."""
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
    values = [[parse(p, f"row {i + 1}", col, v) for i, v in enumerate(column)]
              for col, column, parse in zip(cols, columns, parsers, strict=True)]
    if not values[0]:
        raise TraceError(f"{p}: no data rows")
    return values, list(range(1, len(values[0]) + 1)), names
