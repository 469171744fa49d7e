"""A timeline's compacted columns kept on disk while a long run records, read back one field at a time.

Why this exists: a 10M-sample ``sortedrl`` run makes about 54M spans, 24M prefills and 28M
admissions, over 4 GB of columns, and held them all in memory to the end of the run and through
its summary. A :class:`Spill` takes each compacted chunk of a kind (:mod:`sortedrl.timeline`)
and appends every field to its own raw file, so the run holds only the records since the last
compaction; a reader then loads a field whole, with one read into one array (no chunks to merge),
and lets it go when done with it (:class:`SpilledColumns` keeps a field only while someone holds
it). The summary and the timeline writers ask for the fields they need, one after the other.

A spill directory is scratch: the caller makes it (``sortedrl simulate`` beside its run directory)
and removes it when the timeline has been written. Nothing in it is an output.
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from sortedrl.timeline_columns import Labels, Ragged

# the raw dtype of each column type (timeline.SCHEMA); Ragged fields have two files
_LABEL_CODES = np.dtype(np.uint8)
_OFFSETS, _VALUES = np.dtype(np.int64), np.dtype(np.int32)


class Spill:
    """Append-only files of compacted columns, one per field, under ``root`` (which exists)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.records: dict[str, int] = {}  # kind -> records spilled
        self._values: dict[tuple[str, str], int] = {}  # a Ragged field's values spilled

    def append(self, kind: str, cols: dict) -> None:
        """Append one compacted chunk of ``kind`` (``Timeline._typed``'s columns)."""
        for name, col in cols.items():
            if isinstance(col, Ragged):
                base = self._values.get((kind, name), 0)
                self._write(kind, f"{name}.offsets", col.offsets[1:] - col.offsets[0] + base)
                self._write(kind, f"{name}.values", col.values)
                self._values[(kind, name)] = base + col.values.size
            elif isinstance(col, Labels):
                self._write(kind, name, col.codes)
            else:
                self._write(kind, name, col)
        self.records[kind] = self.records.get(kind, 0) + len(next(iter(cols.values())))

    def drop(self, kind: str) -> None:
        """Forget the records of ``kind`` (their files are removed)."""
        for path in self.root.glob(f"{kind}.*"):
            path.unlink()
        self.records.pop(kind, None)
        for key in [k for k in self._values if k[0] == kind]:
            del self._values[key]

    def counts(self, kind: str) -> tuple[int, dict[str, int]]:
        """The records of ``kind`` spilled so far, and the values of each of its Ragged fields."""
        return self.records[kind], {name: v for (k, name), v in self._values.items() if k == kind}

    def load(self, kind: str, name: str, typ: str, labels: list[str],
             counts: tuple[int, dict[str, int]]):
        """The first ``counts`` (see :meth:`counts`) of one field of ``kind``: an array, a
        Ragged or a Labels (``labels``: its table)."""
        n, values_of = counts
        if typ == "samples":
            offsets = np.zeros(n + 1, dtype=_OFFSETS)
            self._read(kind, f"{name}.offsets", offsets[1:])
            values = np.empty(values_of[name], dtype=_VALUES)
            self._read(kind, f"{name}.values", values)
            return Ragged(offsets, values)
        if typ == "label":
            codes = np.empty(n, dtype=_LABEL_CODES)
            self._read(kind, name, codes)
            return Labels(codes, labels)
        out = np.empty(n, dtype=np.dtype(typ))
        self._read(kind, name, out)
        return out

    def _write(self, kind: str, name: str, array: np.ndarray) -> None:
        path = self.root / f"{kind}.{name}"
        try:
            with open(path, "ab") as f:
                f.write(np.ascontiguousarray(array).data)
        except OSError as e:  # a full disk, most likely: say what the file was for
            raise OSError(e.errno, f"{e.strerror} (the run's timeline, kept there while it runs)",
                          str(path)) from None

    def _read(self, kind: str, name: str, out: np.ndarray) -> None:
        path = self.root / f"{kind}.{name}"
        with open(path, "rb") as f:  # (the file may hold more: records spilled since)
            got = f.readinto(out.data.cast("B"))
        if got != out.nbytes:
            raise OSError(errno.EIO, f"{got} bytes, expected {out.nbytes} (the scratch directory "
                          "was changed while the run used it)", str(path))


class SpilledColumns(Mapping):
    """Every field of a spilled kind, loaded when asked for and kept only while a caller holds it
    (so a summary that has finished with a field frees it; asking again reads it again). Like
    an in-memory chunk it is a snapshot: records spilled after it was made are not in it."""

    def __init__(self, spill: Spill, kind: str, schema: tuple, labels) -> None:
        self._spill, self._kind, self._labels = spill, kind, labels
        self._types = dict(schema)
        self._counts = spill.counts(kind)
        # plain references, no callback: a WeakValueDictionary ran its callback (Python code)
        # each time a field was freed, constantly while the outputs are written, and a Ctrl-C
        # that lands in a callback is printed as "Exception ignored" and dropped, so the run
        # went on to replace its outputs. A dead reference is replaced when the field is asked
        # for again; there are at most as many as the kind has fields.
        self._held: dict[str, weakref.ref] = {}

    def __getitem__(self, name: str):
        ref = self._held.get(name)
        col = ref() if ref is not None else None
        if col is None:
            typ = self._types[name]  # KeyError for an unknown field, as a dict
            col = self._spill.load(self._kind, name, typ, self._labels(self._kind, name),
                                   self._counts)
            self._held[name] = weakref.ref(col)
        return col

    def __contains__(self, name: object) -> bool:  # (Mapping's would read the field)
        return name in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)
