"""Reading and writing length traces as JSONL, CSV or Parquet files.

Traces are produced by one tool (the synthesizer, the importer, a real run) and consumed by
another (the simulator, ``trace stats``), so the file format is the contract between them. This
module is its public face: format choice, atomic writes and the file-level errors (no such file,
not UTF-8). The formats themselves live in ``_text`` (JSONL, CSV) and ``_parquet``; the rules they
share (metadata, inference, column typing) in ``_codec``; ``_fast`` reads clean JSONL and CSV
files with pyarrow's parsers, about ten times faster, and hands every other file to ``_text``.
A pipe or FIFO is read once, whole, and every reader parses those bytes (:mod:`sortedrl.streams`).

Formats (chosen by extension on write; by extension, then by content, on read):

* ``.jsonl``: first line ``{"sortedrl_trace": 1, "max_response_len": ..., "group_size": ...,
  "source": ...}``, then one JSON object per sample.
* ``.csv``: first line ``# sortedrl_trace {same JSON}``, then a header, then one row per sample.
* ``.parquet``: the same JSON under the schema-metadata key ``sortedrl_trace`` (needs pyarrow).

Round trips are exact: ``read_trace(p) == t`` after ``write_trace(t, p)``, floats included.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sortedrl import file_kinds, jsonio, streams
from sortedrl.aside import aside
from sortedrl.errors import TraceError, not_found
from sortedrl.text_check import TEXT_HEAD, not_text
from sortedrl.traces import _fast, _parquet, _text
from sortedrl.traces._codec import CSV_META_PREFIX, MAGIC, pyarrow_modules, refuse_compressed
from sortedrl.traces.schema import Trace

FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
BUNDLED = Path(__file__).parent / "data"  # the traces shipped with the package (data/README.md)


# What each bundled trace holds, for the --trace help (tests/test_traces_io.py checks it against
# the files): logic-8k is one step without groups, the paper's bubble figure, not a training run.
BUNDLED_SHAPES = {"logic-8k": "1 step of 512 samples", "math-16k": "4 steps of 64 prompts x 8"}


def bundled_help() -> str:
    """The bundled traces by name, each with its shape: ``logic-8k (1 step of 512 samples), ...``."""
    return ", ".join(f"{name} ({BUNDLED_SHAPES[name]})" if name in BUNDLED_SHAPES else name
                     for name in bundled_names())


def bundled_names() -> list[str]:
    """The bundled traces' names (``math-16k``, ...), which ``--trace`` accepts as they are."""
    return sorted(p.stem for p in BUNDLED.glob("*.jsonl"))


def resolve_bundled(path: Path) -> Path:
    """``path``, or the bundled trace it names when no such file exists: a bare name such as
    ``math-16k`` or ``math-16k.jsonl`` reaches the package's copy from any directory. Only a
    file of that name is read instead (README), with a note on stderr saying so: a directory of
    that name does not hide it."""
    shadowed = path.exists() and not path.is_dir()
    bare = path.parent == Path(".") and not path.name.startswith(".")
    if shadowed and bare and path.name.removesuffix(".jsonl") in bundled_names():
        print(f"note: {path}: reading the file in this directory, not the bundled trace of that "
              "name (rename the file to reach the bundled one)", file=sys.stderr)
    if shadowed or not bare:
        return path
    stem = path.name.removesuffix(".jsonl")
    return BUNDLED / f"{stem}.jsonl" if stem in bundled_names() else path


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_current_umask()


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file; the format comes from the extension, else from the content.

    Missing metadata is inferred: ``group_size = max(sample) + 1``,
    ``max_response_len = max(response_len)`` and ``source`` = the file name. A pipe or FIFO
    (``<(zcat run.jsonl.gz)``, ``/dev/stdin``) is read once, whole, and parsed from memory. A
    file of sortedrl's own that is no trace (a profile, a ``summary.json``, a timeline...) is
    said to be what it is (:func:`sortedrl.file_kinds.not_a_trace`), not a malformed trace.
    """
    try:
        return _read(Path(path))
    except TraceError:
        what = file_kinds.not_a_trace(path)
        if what is None:
            raise
        raise TraceError(what) from None


def _read(p: Path) -> Trace:
    fmt = FORMATS.get(p.suffix.lower())
    data = None
    try:
        data = streams.take(p)
        if fmt is None:
            fmt = _sniff(p, data)
        if fmt == "parquet":
            return _parquet.read_parquet(p, data)
        _check_text_head(p, data)
        trace = _read_fast(p, fmt, data)
        if trace is not None:
            return trace
        if data is not None:
            f = io.StringIO(jsonio.text(data), newline="")
            return _text.read_jsonl(p, f) if fmt == "jsonl" else _text.read_csv(p, f)
        with open(p, encoding="utf-8-sig", newline="") as f:
            return _text.read_jsonl(p, f) if fmt == "jsonl" else _text.read_csv(p, f)
    except FileNotFoundError:
        raise TraceError(not_found(p)) from None
    except IsADirectoryError:
        held = [p / f"trace{suffix}" for suffix in FORMATS if (p / f"trace{suffix}").is_file()]
        hint = f" (it holds {held[0]}: give that)" if held else ""  # (a run directory's trace)
        raise TraceError(f"{p}: is a directory, not a trace file{hint}") from None
    except UnicodeDecodeError:  # (the offset of a chunk's error is within that chunk)
        raise TraceError(f"{p}: not UTF-8 text (byte {_first_bad_byte(p, data)})") from None
    except csv.Error as e:
        raise TraceError(f"{p}: bad CSV: {e}") from None
    finally:
        _release_arrow_memory()


def _check_text_head(path: Path, data: bytes | None) -> None:
    """Refuse a file whose first bytes are no text (:func:`~sortedrl.text_check.not_text`) before it
    is parsed: a model's weights given by mistake (``model.safetensors``, 16 GB) were read whole,
    into memory, to say so. A compressed file (``run.jsonl.gz``) is said to be one."""
    if data is None:
        with open(path, "rb") as f:
            head = f.read(TEXT_HEAD)
    else:
        head = data[:TEXT_HEAD]
    refuse_compressed(path, head, " (a trace is JSONL, CSV or Parquet)")  # (as trace import names it)
    why = not_text(head)
    if why is not None:
        raise TraceError(f"{path}: {why}" + (", not a JSONL or CSV trace" if why.startswith("binary") else ""))


def _first_bad_byte(path: Path, data: bytes | None) -> int:
    """The offset in the file of its first byte that is not UTF-8 (``data``: its bytes, when
    already read), read in chunks."""
    if data is None:
        decoder, at = codecs.getincrementaldecoder("utf-8")(), 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                pending = len(decoder.getstate()[0])  # a character's start, carried from the last chunk
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as e:  # (its offsets count the carried bytes first)
                    return at - pending + e.start
                at += len(chunk)
            pending = len(decoder.getstate()[0])
            try:  # (a character cut short at the end)
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as e:
                return at - pending + e.start
        return 0  # (not reached: the file had such a byte)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return 0  # (not reached: the file had such a byte)


def _release_arrow_memory() -> None:
    """Hand pyarrow's freed buffers back to the system: its allocator keeps them otherwise, and
    after reading a 10M-sample trace that is over a GB held through the whole simulation."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()


def _read_fast(path: Path, fmt: str, data: bytes | None = None) -> Trace | None:
    """The trace through pyarrow's parsers (``_fast``), or None: then the standard-library
    reader, the reference, reads it (and names the line of any error). ``data``: the file's
    bytes, when already read (a pipe's)."""
    read = _fast.read_jsonl_fast if fmt == "jsonl" else _fast.read_csv_fast
    try:
        return read(path, path.read_bytes() if data is None else data)
    except TraceError:
        return None


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` atomically in the format named by the extension of ``path``.

    Optional columns (step, reward, finish_reason) are written only when the trace has them.
    """
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        known = ", ".join(FORMATS)
        raise TraceError(f"{p}: unknown trace format {p.suffix!r}; use one of {known}")
    if fmt == "parquet":
        pq, pa = pyarrow_modules(p)
        table = _parquet.to_arrow(trace, pa)
        atomic_write(p, lambda tmp: pq.write_table(table, tmp))
        return
    writer = _text.write_jsonl if fmt == "jsonl" else _text.write_csv

    def emit(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            writer(trace, f)

    atomic_write(p, emit)


def atomic_write(path: str | os.PathLike[str], emit: Callable[[str], None]) -> None:
    """Call ``emit(tmp_path)`` to write a temp file next to ``path``, then rename it into place.

    On any failure the temp file is removed and ``path`` is left as it was (absent or old).
    """
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=aside(p.name, ""), suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise TraceError(f"{p}: cannot write: {e.strerror or e}") from None
    os.close(fd)
    try:
        emit(tmp)
        os.chmod(tmp, _FILE_MODE)  # mkstemp creates 0600; give the usual umask-based mode
        os.replace(tmp, p)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise TraceError(f"{p}: cannot write: {e.strerror or e}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def trace_label(path: str | os.PathLike[str]) -> str:
    """What the trace at ``path`` is called before it is read (a default run directory's name):
    as :func:`read_trace` will name it (:func:`sortedrl.streams.label`): a descriptor's
    (``<(zcat run.jsonl.gz)``) by the ``source`` of its JSONL or CSV metadata line."""
    if not streams.is_descriptor(path):
        return streams.label(path)
    data = streams.peek(path) or b""
    first = data[:65536].removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
    first = first.removeprefix(CSV_META_PREFIX)
    try:
        meta = json.loads(first)
    except ValueError:
        meta = None
    return streams.label(path, meta.get("source") if isinstance(meta, dict) and MAGIC in meta else None)


def _sniff(path: Path, data: bytes | None = None) -> str:
    """Guess the format of a file whose extension says nothing: Parquet, JSONL or CSV (from its
    first 4 KiB; ``data``: the file's bytes, when already read)."""
    if data is None:
        with open(path, "rb") as f:
            head = f.read(4096)
    else:
        head = data[:4096]
    if head.startswith(b"PAR1"):
        return "parquet"
    stripped = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    if not stripped:
        raise TraceError(f"{path}: empty file")
    return "jsonl" if stripped.startswith(b"{") else "csv"


__all__ = ["FORMATS", "atomic_write", "read_trace", "trace_label", "write_trace"]
