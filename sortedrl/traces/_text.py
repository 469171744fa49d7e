"""JSONL and CSV trace files: the two human-readable formats.

Both readers parse every line with the standard library (``json`` / ``csv``), then turn clean
columns into numpy arrays in bulk; a column with an odd value is handed to
:meth:`Trace.from_columns` as a list so that its error names the file line at fault. Floats are
written with ``repr`` so that they read back bit for bit.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import TraceError
from sortedrl.traces import _turn_codec
from sortedrl.traces._codec import (
    CSV_META_PREFIX,
    INT_COLUMNS,
    MAGIC,
    STR_COLUMNS,
    build,
    check_header,
    int_array,
    meta_dict,
    no_gc,
    parse_meta,
)
from sortedrl.traces.schema import COLUMNS, Trace

CHUNK_ROWS = 65_536  # rows turned into Python values at a time by the writers


def row_chunks(trace: Trace) -> Iterator[tuple[dict[str, list[Any]], dict[str, np.ndarray]]]:
    """The trace ``CHUNK_ROWS`` rows at a time: its columns as Python lists, and the turn
    columns of those rows (offsets from 0). The writers turned every column into a list at
    once, 3.6 GiB for an 8M-row CSV against 1.6 GiB for Parquet; a chunk at a time their memory
    stays that of the trace, and the bytes written are the same."""
    columns, turns = trace.columns(), trace.turn_columns()
    for a in range(0, len(trace), CHUNK_ROWS):
        b = min(a + CHUNK_ROWS, len(trace))
        chunk_turns = {}
        if turns:
            off = turns["turn_offsets"][a:b + 1]
            lo, hi = int(off[0]), int(off[-1])
            chunk_turns = {c: v[lo:hi] for c, v in turns.items() if c != "turn_offsets"}
            chunk_turns["turn_offsets"] = off - lo
        yield {k: v[a:b].tolist() for k, v in columns.items()}, chunk_turns


def write_jsonl(trace: Trace, f: IO[str]) -> None:
    f.write(json.dumps(meta_dict(trace.meta)) + "\n")
    names = list(trace.columns())
    if trace.has_turns:
        names.append(_turn_codec.JSONL_FIELD)  # already JSON, written as is
    quoted: dict[str, str] = {}  # a prompt's id repeats over its group; cleared every chunk

    def q(s: str) -> str:
        out = quoted.get(s)
        if out is None:
            out = quoted[s] = json.dumps(s)
        return out

    fmt: list[Callable[[Any], str]] = []
    for name in names:
        if name in STR_COLUMNS:
            fmt.append(q)
        elif name == "truncated":
            fmt.append(lambda v: "true" if v else "false")
        elif name == "reward":
            fmt.append(repr)  # repr round-trips floats exactly (and json.loads reads it back)
        else:
            fmt.append(str)
    keys = [json.dumps(n) + ": " for n in names]
    for cols, turns in row_chunks(trace):
        quoted.clear()
        if turns:
            cols[_turn_codec.JSONL_FIELD] = _turn_codec.jsonl_turns_of(turns)
        f.write("".join(
            "{" + ", ".join(k + g(v) for k, g, v in zip(keys, fmt, row, strict=True)) + "}\n"
            for row in zip(*cols.values(), strict=True)))


def read_jsonl(path: Path, f: IO[str]) -> Trace:
    given: dict[str, Any] = {}
    objs: list[Any] = []
    lines: list[int] = []
    raw_decode = json.JSONDecoder().raw_decode
    add_obj, add_line = objs.append, lines.append
    with no_gc():  # a million small dicts would otherwise trigger many useless GC passes
        for lineno, text in enumerate(f, 1):
            try:
                obj, end = raw_decode(text)
                if end != len(text) and not text[end:].isspace():
                    raise ValueError
            except (ValueError, RecursionError):  # leading blanks, a blank line, trailing data
                # or bad JSON (nested too deeply, a number too long): jsonio.loads names it
                if not text.strip():
                    continue
                try:
                    obj = jsonio.loads(text.rstrip("\r\n"))
                except json.JSONDecodeError as e:
                    msg = f"bad JSON: {e.msg} (column {e.pos + 1})"
                    if lineno == 1 and "," in text and not text.lstrip().startswith(("{", "[")):
                        msg += "; it reads like a CSV header: a CSV trace's name ends in .csv"
                    raise TraceError(f"{path}: line {lineno}: {msg}") from None
            add_obj(obj)
            add_line(lineno)
    if not objs:
        raise TraceError(f"{path}: empty file")
    kinds = set(map(type, objs))
    if kinds != {dict}:
        i = next(i for i, o in enumerate(objs) if type(o) is not dict)
        got = type(objs[i]).__name__
        raise TraceError(f"{path}: line {lines[i]}: expected a JSON object, got {got}")
    if MAGIC in objs[0]:
        given = parse_meta(objs[0], f"{path}: line {lines[0]}")
        del objs[0], lines[0]
        if not objs:
            raise TraceError(f"{path}: no data rows after the metadata line")

    names = list(objs[0])
    check_header(path, names, f"line {lines[0]}", COLUMNS + (_turn_codec.JSONL_FIELD,))
    nkeys = len(names)
    columns: dict[str, Any] = {}
    for name in names:
        try:
            columns[name] = [o[name] for o in objs]
        except KeyError:
            i = next(i for i, o in enumerate(objs) if name not in o)
            where = f"{path}: line {lines[i]}"
            if MAGIC in objs[i]:
                raise TraceError(f"{where}: metadata is only allowed on the first line") from None
            raise TraceError(
                f"{where}: missing field '{name}' (present in line {lines[0]})"
            ) from None
    if set(map(len, objs)) != {nkeys}:  # every row has the first row's keys, so these have more
        i = next(i for i, o in enumerate(objs) if len(o) != nkeys)
        extra = next(k for k in objs[i] if k not in columns)
        where = f"{path}: line {lines[i]}"
        if extra == MAGIC:
            raise TraceError(f"{where}: metadata is only allowed on the first line")
        known = COLUMNS + (_turn_codec.JSONL_FIELD,)
        what = "unknown" if extra not in known else f"absent from line {lines[0]}"
        raise TraceError(f"{where}: field {extra!r} is {what}")
    del objs  # the columns hold the values; free the per-row dicts before building arrays
    turns = columns.pop(_turn_codec.JSONL_FIELD, None)
    typed = _typed(path, columns, lines)
    if turns is None:
        return build(path, typed, given, lines)
    typed.update(_turn_codec.jsonl_columns(path, turns, lines))
    try:
        return build(path, typed, given, lines)
    except TraceError as e:
        raise TraceError(_turn_codec.jsonl_message(str(e))) from None


_JSON_KIND = {"truncated": "a boolean", "reward": "a number"}


def _typed(path: Path, columns: dict[str, list[Any]], lines: list[int]) -> dict[str, Any]:
    """Turn clean columns into numpy arrays; leave odd ones as lists for from_columns to judge."""
    out: dict[str, Any] = {}
    for name, vals in columns.items():
        kinds = set(map(type, vals))
        if type(None) in kinds:
            i = vals.index(None)
            raise TraceError(f"{path}: line {lines[i]}: field '{name}' is null")
        if str in kinds and name not in STR_COLUMNS:  # JSON has numbers and booleans for these
            i = next(i for i, v in enumerate(vals) if type(v) is str)
            what = _JSON_KIND.get(name, "an integer")
            raise TraceError(f"{path}: line {lines[i]}: field '{name}': {vals[i]!r} is not {what}")
        arr: np.ndarray | None = None
        if name in INT_COLUMNS:
            arr = int_array(vals, kinds)
        elif name == "truncated":
            if kinds == {bool}:
                arr = np.array(vals, dtype=bool)
        elif name == "reward":
            if kinds <= {float, int}:
                arr = np.array(vals, dtype=np.float64)
        elif kinds == {str} and "\x00" not in "".join(vals):
            arr = np.array(vals, dtype=str)
        out[name] = vals if arr is None else arr
    return out


# -- CSV -------------------------------------------------------------------------------------


def write_csv(trace: Trace, f: IO[str]) -> None:
    f.write(CSV_META_PREFIX + json.dumps(meta_dict(trace.meta)) + "\n")
    w = csv.writer(f, lineterminator="\n")
    # QUOTE_MINIMAL quotes only the "\n" of our line terminator, so a bare "\r" would end the
    # record on reading: every field of a row that holds one is quoted.
    quote_all = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writerow(list(trace.columns()) + (list(_turn_codec.CSV_COLUMNS) if trace.has_turns else []))
    for cols, turns in row_chunks(trace):
        cols.update(_turn_codec.csv_cells_of(turns))
        if "truncated" in cols:
            cols["truncated"] = ["true" if v else "false" for v in cols["truncated"]]
        if "reward" in cols:
            cols["reward"] = [repr(v) for v in cols["reward"]]
        rows = zip(*cols.values(), strict=True)
        if not any("\r" in "".join(cols[c]) for c in STR_COLUMNS if c in cols):
            w.writerows(rows)
            continue
        for row in rows:
            (quote_all if any("\r" in v for v in row if isinstance(v, str)) else w).writerow(row)


def read_csv(path: Path, f: IO[str]) -> Trace:
    lineno = 0
    first = ""
    while not first.strip():
        first = f.readline()
        lineno += 1
        if not first:
            raise TraceError(f"{path}: empty file")
    given: dict[str, Any] = {}
    if first.startswith("#"):
        where = f"{path}: line {lineno}"
        if not first.startswith(CSV_META_PREFIX):
            raise TraceError(f"{where}: expected '{CSV_META_PREFIX}{{...}}' metadata or a header")
        try:
            raw = jsonio.loads(first[len(CSV_META_PREFIX) :])
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: bad metadata JSON: {e.msg}") from None
        if type(raw) is not dict:
            raise TraceError(f"{where}: metadata must be a JSON object")
        given = parse_meta(raw, where)
        base, text = lineno, f.read()  # file line = reader.line_num + base
    else:
        base, text = lineno - 1, first + f.read()
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] = []
    consumed = 0  # records read up to the header, blank ones included
    for header in reader:
        consumed += 1
        if header:
            break
    if not header:
        raise TraceError(f"{path}: no header line after the metadata")
    header_line = reader.line_num
    check_header(path, header, f"line {header_line + base}")
    width = len(header)
    with no_gc():
        records = list(reader)
    if reader.line_num == header_line + len(records) and set(map(len, records)) == {width}:
        first_line = header_line + base + 1  # one physical line per record, no blank lines
        lines = list(range(first_line, first_line + len(records)))
    else:
        records, lines = _csv_records_slow(path, text, consumed, base, width)
    if not records:
        raise TraceError(f"{path}: no data rows after the header")
    columns: dict[str, Any] = {}
    for j, name in enumerate(header):
        vals = [r[j] for r in records]
        if "" in vals:
            i = vals.index("")
            raise TraceError(f"{path}: line {lines[i]}: field '{name}' is empty")
        columns[name] = vals
    turns = {c: columns.pop(c) for c in _turn_codec.CSV_COLUMNS if c in columns}
    _turn_codec.csv_columns(path, turns, lines)
    return build(path, {**_typed_csv(columns), **turns}, given, lines)


def _csv_records_slow(
    path: Path, text: str, skip: int, base: int, width: int
) -> tuple[list[list[str]], list[int]]:
    """Records with the file line each starts on, for files with blank or multi-line records."""
    reader = csv.reader(io.StringIO(text, newline=""))
    for _ in range(skip):
        next(reader)
    records: list[list[str]] = []
    lines: list[int] = []
    prev = reader.line_num
    for rec in reader:
        start = prev + 1 + base
        prev = reader.line_num
        if not rec:
            continue
        if len(rec) != width:
            raise TraceError(f"{path}: line {start}: expected {width} fields, got {len(rec)}")
        records.append(rec)
        lines.append(start)
    return records, lines


def _typed_csv(columns: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, vals in columns.items():
        arr: np.ndarray | None = None
        if name in INT_COLUMNS:
            arr = int_array(vals)
        elif name == "truncated":
            kinds = set(vals)
            if kinds <= {"true", "false"}:
                arr = np.array(vals) == "true"
        elif name == "reward":
            try:
                arr = np.array([float(v) for v in vals], dtype=np.float64)
            except ValueError:
                arr = None
        elif "\x00" not in "".join(vals):
            arr = np.array(vals, dtype=str)
        out[name] = vals if arr is None else arr
    return out
