"""Pieces shared by the trace file formats: the metadata contract and column typing.

Kept apart from the format modules so that JSONL, CSV and Parquet apply exactly the same rules
(metadata fields, inference of missing metadata, which columns are known) and so produce the same
error messages for the same mistakes.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sortedrl import streams
from sortedrl.errors import TraceError
from sortedrl.limits import INT64_MAX
from sortedrl.text_check import TEXT_HEAD, compression, not_text
from sortedrl.traces.columns import as_int, plain
from sortedrl.traces.schema import COLUMNS, REQUIRED, Trace, TraceMeta
from sortedrl.traces.turns import TURN_FIELDS

MAGIC = "sortedrl_trace"
VERSION = 1
META_FIELDS = (MAGIC, "max_response_len", "group_size", "source")
CSV_META_PREFIX = f"# {MAGIC} "
INT_COLUMNS = ("sample", "prompt_len", "response_len", "step")
STR_COLUMNS = ("prompt_id", "finish_reason")


def refuse_compressed(path: Path, head: bytes, hint: str = "") -> None:
    """One error naming the compression of a file that starts with ``head``, when it is no text
    (:func:`~sortedrl.text_check.not_text`): ``gzip-compressed: decompress it first``, with
    ``hint`` (trace import and every trace read: it was a bare "not UTF-8 text (byte 1)")."""
    kind = compression(head)
    if kind is not None and not_text(head[:TEXT_HEAD]) is not None:
        raise TraceError(f"{path}: {kind}-compressed: decompress it first{hint}")


def meta_dict(meta: TraceMeta) -> dict[str, Any]:
    return {
        MAGIC: VERSION,
        "max_response_len": meta.max_response_len,
        "group_size": meta.group_size,
        "source": meta.source,
    }


def parse_meta(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a metadata dict; return the fields it sets (others are inferred later)."""
    for key in raw:
        if key not in META_FIELDS:
            known = ", ".join(META_FIELDS[1:])
            raise TraceError(f"{where}: unknown metadata field {key!r} (known: {known})")
    version = raw.get(MAGIC)
    if type(version) is not int or version != VERSION:
        raise TraceError(f"{where}: unsupported {MAGIC} version {version!r} (expected {VERSION})")
    out: dict[str, Any] = {}
    for key in ("max_response_len", "group_size"):
        if key in raw:
            v = raw[key]
            if type(v) is not int or v < 1:
                raise TraceError(f"{where}: metadata '{key}' must be a positive integer, got {v!r}")
            if v > INT64_MAX:  # the trace's columns are int64
                raise TraceError(f"{where}: metadata '{key}' must be below 2**63, got an integer "
                                 f"of {len(str(v))} digits")
            out[key] = v
    if "source" in raw:
        if not isinstance(raw["source"], str):
            raise TraceError(f"{where}: metadata 'source' must be a string, got {raw['source']!r}")
        out["source"] = raw["source"]
    return out


def int_array(values: list[Any], kinds: set[type] | None = None) -> np.ndarray | None:
    """The values as int64 if every one is a plain int or integer literal, else None."""
    kinds = set(map(type, values)) if kinds is None else kinds
    try:
        if kinds == {int}:
            return np.array(values, dtype=np.int64)
        if kinds == {str}:
            return np.array([int(v) for v in values], dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    return None


def _largest(values: Any) -> int | None:
    """The largest value of an integer column as :meth:`Trace.from_columns` will read it: an
    integral float such as ``10.0`` (pandas' ``to_json``) counts as 10 (None: no such value).
    A column of a metadata field's values must infer that field as a clean one does."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return int(values.max()) if values.size else None
    ints = [v for v in map(as_int, plain(values)) if v is not None]
    return max(ints) if ints else None


def build(
    path: Path,
    columns: dict[str, Any],
    given: dict[str, Any],
    rows: list[int],
    unit: str = "line",
) -> Trace:
    """Infer missing metadata, then validate via :meth:`Trace.from_columns`.

    ``rows`` holds the file line (or, for ``unit="row"``, the data row) of every input row;
    from_columns calls them "row N", which is rewritten to "line N" for text files.
    """
    where = str(path)
    for col in REQUIRED:
        if col not in columns:
            raise TraceError(f"{where}: missing required column '{col}'")
    inferred = {}
    for key, col, extra in (("group_size", "sample", 1), ("max_response_len", "response_len", 0)):
        if key not in given:
            top = _largest(columns[col])
            # a malformed value makes from_columns raise before the placeholder 1 is used
            inferred[key] = max(1, top + extra) if top is not None else 1
    meta = TraceMeta(
        max_response_len=given.get("max_response_len", inferred.get("max_response_len", 1)),
        group_size=given.get("group_size", inferred.get("group_size", 1)),
        source=given.get("source", streams.label(path)),
    )
    try:
        return Trace.from_columns(columns, meta, where=where, rows=rows, owned=True,
                                  name=streams.label(path, given.get("source")))
    except TraceError as e:
        if unit == "row":
            raise
        msg = str(e).replace(f"{where}: row ", f"{where}: {unit} ", 1)
        raise TraceError(msg.replace("(first at row ", f"(first at {unit} ", 1)) from None


def check_header(
    path: Path, names: list[str], what: str, known: tuple[str, ...] = COLUMNS + TURN_FIELDS
) -> None:
    seen: set[str] = set()
    for name in names:
        if name not in known:
            raise TraceError(
                f"{path}: {what}: unknown column {name!r} (known: {', '.join(known)})"
            )
        if name in seen:
            raise TraceError(f"{path}: {what}: duplicate column {name!r}")
        seen.add(name)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def pyarrow_modules(path: Path) -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError(
            f"{path}: Parquet needs pyarrow; install the 'parquet' extra "
            "(pip install 'sortedrl[parquet]') or use .jsonl/.csv"
        ) from None
    return pq, pa
