"""Timeline files: the columnar ``timeline.npz`` the simulator writes, and the JSONL timeline
(``--timeline jsonl``, and what the real runner appends record by record, crash-safely).

Why NumPy's ``.npz`` for the columnar file: a timeline is ten tables of different lengths (spans,
prefills, updates...), and one ``.npz`` holds them all in one file, each column a plain array
written at disk speed (54-114 bytes a sample on the bundled math-16k, by policy, against 141-326
and several seconds of formatting a million samples as JSONL). It needs nothing beyond numpy, and
``np.load(path)`` reads it from any Python. Parquet and Arrow IPC hold one table per file.

Layout (``docs/metrics.md`` has the schema): ``format`` (the int 1), ``meta`` (the meta record
as UTF-8 JSON bytes) and, for each record kind and field of :data:`sortedrl.timeline.SCHEMA`,
``KIND.FIELD`` (one value per record); a sample-list field is ``KIND.FIELD.offsets`` and
``KIND.FIELD.values`` (record i's samples are ``values[offsets[i]:offsets[i+1]]``), a label field
is codes in ``KIND.FIELD`` and their strings in ``KIND.FIELD.labels``. A kind absent from the file
has no records. Files are read without pickle, and every check failure is one error naming the
file and the array.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.timeline import _LIST, SCHEMA, Labels, Ragged, Timeline, write_atomic
from sortedrl.timeline_columns import LATER_FIELDS, by_start, check_meta

FORMAT = 1
NAMES = ("timeline.npz", "timeline.jsonl")  # what a run directory holds, in order of preference


class TimelineError(SortedRLError):
    """A timeline file that cannot be read."""


def write_npz(tl: Timeline, path: str | Path) -> None:
    """Write ``tl`` as ``.npz``, atomically (a failure leaves any previous file untouched)."""
    write_atomic(path, lambda f: _savez(f, _arrays(tl)), "wb")


def _arrays(tl: Timeline) -> Iterator[tuple[str, np.ndarray]]:
    """The file's members in order, each field asked for only when it is written (a spilled
    timeline then holds one field at a time)."""
    yield "format", np.array(FORMAT)
    yield "meta", np.frombuffer(json.dumps(tl.meta, separators=(",", ":")).encode(), dtype=np.uint8)
    for kind, fields in SCHEMA.items():
        if not tl.count(kind):
            continue
        cols = tl.columns(kind)
        for name, _ in fields:
            col, key = cols[name], f"{kind}.{name}"
            if isinstance(col, Ragged):
                yield key + ".offsets", col.offsets
                yield key + ".values", col.values
            elif isinstance(col, Labels):
                yield key, col.codes
                yield key + ".labels", np.array(col.names, dtype=str)
            else:
                yield key, col
            del col


def _savez(f, arrays: Iterable[tuple[str, np.ndarray]]) -> None:
    """``np.savez``, with a fixed date on each member so that the same run gives the same bytes."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, array in arrays:
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
            del array  # before the next member is read


def read_npz(path: str | Path) -> Timeline:
    """Read a ``.npz`` timeline; a malformed file raises one :class:`TimelineError`."""
    path = Path(path)
    try:
        _check_sizes(path)
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        why = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
        raise TimelineError(f"{path}: not a readable timeline file ({why})") from None
    if "format" not in arrays or arrays["format"].shape != () or arrays["format"] != FORMAT:
        raise TimelineError(f"{path}: not a sortedrl timeline (array 'format' must be {FORMAT})")
    tl = Timeline(_meta(path, arrays.pop("meta", None)))
    del arrays["format"]
    for kind in SCHEMA:
        cols = _kind(path, tl, kind, arrays)
        if cols is not None:
            tl.set_columns(kind, cols)
    if arrays:
        raise TimelineError(f"{path}: unknown array {sorted(arrays)[0]!r}")
    return tl


# how many bytes a member can expand to a byte stored: deflate's limit is about 1032 (zlib's
# technical details); other methods are bounded by the size the archive claims alone
_EXPANDS = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: 1032}


def _check_sizes(path: Path) -> None:
    """Each member's header against the bytes the member holds, before numpy allocates its
    array (a crafted header of shape (10**12,) had it ask for a terabyte)."""
    on_disk = path.stat().st_size
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(f)
                header = f.tell()
            holds = info.file_size
            if info.compress_type in _EXPANDS:
                stored = min(info.compress_size, on_disk)
                holds = min(holds, stored * _EXPANDS[info.compress_type])
            need = math.prod(shape) * dtype.itemsize
            if need > holds - header:
                raise TimelineError(
                    f"{path}: array {info.filename.removesuffix('.npy')!r}: its header claims "
                    f"shape {shape} ({need:,} bytes), more than the {max(0, holds - header):,} "
                    "bytes the file holds for it")


def read_timeline(path: str | Path) -> Timeline:
    """A timeline file of either format: by its extension (``.npz``, ``.jsonl``), else by its
    content (a zip archive is ``.npz``)."""
    path = Path(path)
    if path.suffix == ".npz":
        return _in_range(path, read_npz(path))
    if path.suffix != ".jsonl":
        with open(path, "rb") as f:
            if f.read(4) == b"PK\x03\x04":
                return _in_range(path, read_npz(path))
    try:
        return _in_range(path, read_jsonl_fast(path) or Timeline.read_jsonl(path))
    except UnicodeDecodeError:  # (read in chunks: its offset is not the file's)
        raise TimelineError(f"{path}: not UTF-8 text") from None


def _in_range(path: Path, tl: Timeline) -> Timeline:
    """``tl``, once every time is a finite number (a NaN made every figure NaN), every span is
    on one of the meta record's ``engines`` (the plots draw a lane each, the summary sums them),
    no record ends before it starts (the summary's unions rely on it), and every sample a
    record names is below its ``samples_total`` (the summary and the plots index per-sample
    arrays with them)."""
    total, engines = tl.meta.get("samples_total"), tl.meta.get("engines")
    for kind, fields in SCHEMA.items():
        cols = tl.columns(kind)
        for name, typ in fields:
            if typ == "f8" and len(cols.get(name, ())) and not np.isfinite(cols[name]).all():
                raise TimelineError(f"{path}: a {kind!r} record's {name!r} is not a finite number")
            if name == "t_end" and len(cols[name]) and (cols[name] < cols["t"]).any():
                raise TimelineError(f"{path}: a {kind!r} record ends before it starts (t_end < t)")
            on = cols[name] if kind == "span" and name == "engine" and engines else ()
            if len(on) and (int(on.min()) < 0 or int(on.max()) >= engines):
                raise TimelineError(f"{path}: a span names an engine outside 0..{engines - 1}")
            if total is None:
                continue
            if name not in ("sample", "samples") or not len(cols.get(name, ())):
                continue
            values = cols[name].values if typ == "samples" else cols[name]
            if values.size and int(values.max()) >= total:
                raise TimelineError(f"{path}: a {kind!r} record names sample {int(values.max())}, "
                                    f"but the meta record's samples_total is {total}")
    return tl


_ARROW = {"f8": "float64", "i4": "int64", "i8": "int64", "?": "bool_", "label": "string"}


def read_jsonl_fast(path: Path) -> Timeline | None:
    """A JSONL timeline through pyarrow's JSON reader (about 5x faster), or None when the file
    is not clean (a bad line, a field of the wrong type, a record missing a field...): then
    :meth:`Timeline.read_jsonl`, the reference, reads it and names the line at fault."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json  # noqa: F401
        data = path.read_bytes()
    except (ImportError, OSError):
        return None
    end = data.find(b"\n") + 1
    try:
        first = json.loads(data[:end])
    except (ValueError, RecursionError):  # the reference reader names what is wrong
        return None
    if not end or not isinstance(first, dict) or first.get("kind") != "meta":
        return None
    fields = {"kind": pa.string()}
    for cols in SCHEMA.values():
        for name, typ in cols:
            fields[name] = pa.list_(pa.int64()) if typ == "samples" else getattr(pa, _ARROW[typ])()
    try:
        table = pa.json.read_json(
            pa.BufferReader(pa.py_buffer(memoryview(data)[end:])),
            read_options=pa.json.ReadOptions(use_threads=False, block_size=1 << 24),
            parse_options=pa.json.ParseOptions(explicit_schema=pa.schema(fields),
                                               unexpected_field_behavior="error"))
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != data.count(b"\n", end) + (not data.endswith(b"\n")):
        return None  # a blank line, or two records on one line
    tl = Timeline({k: v for k, v in first.items() if k != "kind"})
    try:
        check_meta(tl.meta)
    except ValueError:
        return None  # the reference reader names the field
    kinds = table.column("kind")
    known = 0
    for kind in SCHEMA:
        rows = table.filter(pc.equal(kinds, kind))
        known += rows.num_rows
        if rows.num_rows:
            typed = _arrow_kind(tl, kind, rows)
            if typed is None:
                return None
            tl.set_columns(kind, typed)
    if known != table.num_rows:
        return None  # a null or unknown kind
    by_start(tl, _LIST)  # the real runner appends records as they complete, not by t
    return tl


def _arrow_kind(tl: Timeline, kind: str, rows) -> dict | None:
    out = {}
    for name, typ in SCHEMA[kind]:
        col = rows.column(name).combine_chunks()
        if col.null_count:
            return None
        if typ == "samples":
            values = col.values.to_numpy()
            if values.size and (values.min() < 0 or values.max() > _I4.max):
                return None  # the reference reader names what is wrong
            out[name] = Ragged(col.offsets.to_numpy().astype(np.int64), values.astype(np.int32))
        elif typ == "label":
            strings = col.to_pylist()
            table = tl.labels(kind, name)
            for label in sorted(set(strings) - set(table)):
                table.append(label)
            code = {label: i for i, label in enumerate(table)}
            out[name] = Labels(np.fromiter(map(code.__getitem__, strings), dtype=np.uint8,
                                           count=len(strings)), table)
        else:
            values = col.to_numpy(zero_copy_only=False)
            if typ in ("i4", "i8") and values.size and (
                    values.min() < 0 or (typ == "i4" and values.max() > _I4.max)):
                return None  # the reference reader names what is wrong
            out[name] = values.astype(typ)
    return out


_I4 = np.iinfo(np.int32)


def find_timeline(rundir: Path, default: str = NAMES[0]) -> Path:
    """The timeline file of a run directory (``timeline.npz``, else ``timeline.jsonl``), or
    ``rundir / default`` when there is neither."""
    for name in NAMES:
        if (rundir / name).is_file():
            return rundir / name
    return rundir / default


FORMATS = {"npz": "timeline.npz", "jsonl": "timeline.jsonl"}


def file_name(fmt: str) -> str:
    """The run directory's timeline file for ``--timeline FORMAT``."""
    if fmt not in FORMATS:
        raise ConfigError(f"--timeline {fmt!r}: use npz (columnar, the default) or jsonl (text)")
    return FORMATS[fmt]


def writer(tl: Timeline, fmt: str) -> Callable[[Path], None]:
    """What writes ``tl`` in format ``fmt`` to the path it is given (for ``Outputs.write``)."""
    return (lambda path: write_npz(tl, path)) if fmt == "npz" else tl.write_jsonl


def _meta(path: Path, raw: np.ndarray | None) -> dict:
    if raw is None:
        raise TimelineError(f"{path}: no array 'meta'")
    try:
        meta = json.loads(raw.astype(np.uint8, casting="safe").tobytes())
    except (TypeError, ValueError, RecursionError):
        raise TimelineError(f"{path}: array 'meta' is not UTF-8 JSON") from None
    if not isinstance(meta, dict):
        raise TimelineError(f"{path}: array 'meta' is not a JSON object")
    try:
        check_meta(meta)
    except ValueError as e:
        raise TimelineError(f"{path}: array 'meta': {e}") from None
    return meta


def _kind(path: Path, tl: Timeline, kind: str, arrays: dict) -> dict | None:
    """The columns of ``kind`` (popped from ``arrays``), checked; None if the file has none."""
    fields = SCHEMA[kind]
    keys = {f"{kind}.{name}" + (".offsets" if typ == "samples" else ""): (name, typ)
            for name, typ in fields}
    present = [k for k in keys if k in arrays]
    if not present:
        return None
    later = LATER_FIELDS.get(kind, {})  # fields an older file lacks: their default
    missing = [k for k in keys if k not in arrays and keys[k][0] not in later]
    if missing:
        raise TimelineError(f"{path}: has {present[0]!r} but no {missing[0]!r}")
    cols = {}
    n = None
    for key, (name, typ) in keys.items():
        if key not in arrays:
            continue
        col = _column(path, tl, kind, key, typ, arrays)
        if n is not None and len(col) != n:
            raise TimelineError(f"{path}: array {key!r} has {len(col)} records, expected {n}")
        n = len(col)
        cols[name] = col
    return {name: cols[name] if name in cols else np.full(n, later[name], dtype=typ)
            for name, typ in SCHEMA[kind]}


def _column(path: Path, tl: Timeline, kind: str, key: str, typ: str, arrays: dict):
    if typ == "samples":
        base = key.removesuffix(".offsets")
        # (as int64 first: an unsigned offset past it would wrap in np.diff and pass the checks)
        raw = _array(path, base + ".offsets", arrays, "i")
        offsets = _fit(path, base + ".offsets", raw, np.int64)
        values = _array(path, base + ".values", arrays, "i")
        if (offsets.size == 0 or offsets[0] != 0 or offsets[-1] != values.size
                or np.any(np.diff(offsets) < 0)):
            raise TimelineError(f"{path}: array {base + '.offsets'!r} does not index "
                                f"{base + '.values'!r}")
        return Ragged(offsets, _fit(path, base + ".values", values, np.int32))
    if typ == "label":
        codes = _array(path, key, arrays, "u")
        names = _array(path, key + ".labels", arrays, "U").tolist()
        if codes.size and int(codes.max()) >= len(names):
            raise TimelineError(f"{path}: array {key!r} has a code without a label")
        table = tl.labels(kind, key.split(".")[1])
        for name in names:
            if name not in table:
                table.append(name)
        if len(table) > 256:  # the codes are uint8
            raise TimelineError(f"{path}: array {key + '.labels'!r} has {len(names)} labels; a "
                                "column holds at most 256")
        remap = np.array([table.index(name) for name in names] or [0], dtype=np.uint8)
        return Labels(remap[codes], table)
    want = np.dtype(typ)
    return _fit(path, key, _array(path, key, arrays, want.kind), want)


def _fit(path: Path, key: str, col: np.ndarray, want) -> np.ndarray:
    """``col`` as ``want``; an integer that does not fit is an error, never wrapped."""
    want = np.dtype(want)
    if want.kind in "iu" and col.dtype.kind in "iu" and col.size:
        info = np.iinfo(want)
        if col.min() < info.min or col.max() > info.max:
            raise TimelineError(f"{path}: array {key!r} has a value past {want} "
                                f"({info.min}..{info.max})")
    return col.astype(want, copy=False)


def _array(path: Path, key: str, arrays: dict, kinds: str) -> np.ndarray:
    col = arrays.pop(key, None)
    if col is None:
        raise TimelineError(f"{path}: no array {key!r}")
    ok, what = _KINDS[kinds]
    if col.ndim != 1 or col.dtype.kind not in ok:
        raise TimelineError(f"{path}: array {key!r} is {col.dtype} of shape {col.shape}; "
                            f"expected a 1-D array of {what}")
    if kinds == "i" and col.size and col.min() < 0:
        raise TimelineError(f"{path}: array {key!r} has a negative value")
    return col


_KINDS = {"i": ("iu", "integers"), "u": ("u", "label codes (unsigned)"), "f": ("fiu", "numbers"),
          "b": ("b", "booleans"), "U": ("U", "strings")}
