"""The column types of a compacted timeline that are not plain NumPy arrays.

A timeline's records become columns (:mod:`sortedrl.timeline`): numbers are NumPy arrays, and two
kinds of field need more: a list of sample indices per record (an admission, an update), kept as
one ragged column (:class:`Ragged`: int64 offsets into int32 values), and a short label per
record (a span's end, ``finish`` or ``preempt``), kept as codes into a table (:class:`Labels`).
The columnar files (:mod:`sortedrl.timeline_file`) store exactly these arrays. The record kinds
and each one's fields and column types (:data:`SCHEMA`) are defined here, for the timeline and
both file formats, and the meta record's fields are checked here too (:func:`check_meta`), for
every reader of either format.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from sortedrl.jsonio import finite
from sortedrl.limits import INT32_MAX, MAX_GPUS, MAX_NUM_SEQS


class Ragged:
    """One list of sample indices per record: ``values[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self.offsets, self.values = offsets, values

    @classmethod
    def from_lists(cls, lists: tuple | list) -> Ragged:
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter(chain.from_iterable(lists), dtype=np.int32, count=int(offsets[-1]))
        return cls(offsets, values)

    @classmethod
    def concat(cls, parts: list[Ragged]) -> Ragged:
        shifts = np.cumsum([0] + [p.values.size for p in parts[:-1]])
        offsets = np.concatenate([parts[0].offsets[:1]]
                                 + [p.offsets[1:] + s for p, s in zip(parts, shifts, strict=True)])
        return cls(offsets, np.concatenate([p.values for p in parts]))

    @classmethod
    def from_runs(cls, values: np.ndarray, first: np.ndarray, lengths: np.ndarray) -> Ragged:
        """Record i's samples are ``values[first[i]:first[i] + lengths[i]]``."""
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not np.array_equal(first, offsets[:-1]):  # (not back to back: gathered)
            shift = np.repeat(offsets[:-1] - first, lengths)
            values = values[np.arange(offsets[-1], dtype=np.int64) - shift]
        return cls(offsets, values[:offsets[-1]].astype(np.int32))

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def record_of_value(self) -> np.ndarray:
        """The record index of every value."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths())

    def take(self, order: np.ndarray) -> Ragged:
        """The records in ``order`` (indices)."""
        lengths = self.lengths()[order]
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shift = np.repeat(offsets[:-1] - self.offsets[:-1][order], lengths)
        return Ragged(offsets, self.values[np.arange(offsets[-1], dtype=np.int64) - shift])

    def tolist(self) -> list[list[int]]:
        values, offsets = self.values.tolist(), self.offsets.tolist()
        return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


class Labels:
    """Short strings as codes into ``names`` (``labels == "preempt"`` gives a mask)."""

    def __init__(self, codes: np.ndarray, names: list[str]) -> None:
        self.codes, self.names = codes, names

    def __len__(self) -> int:
        return self.codes.size

    def __eq__(self, name: object) -> np.ndarray:  # type: ignore[override]
        if name not in self.names:
            return np.zeros(self.codes.size, dtype=bool)
        return self.codes == self.names.index(name)

    __hash__ = None  # type: ignore[assignment]

    def strings(self) -> np.ndarray:
        return np.array(self.names or [""], dtype=str)[self.codes]

    def tolist(self) -> list[str]:
        names = self.names
        return [names[c] for c in self.codes.tolist()]


Column = np.ndarray | Ragged | Labels
Fields = tuple[tuple[str, str], ...]  # a record kind's (name, column type): SCHEMA

# Column types: a numpy dtype; "samples" (a list of sample indices per record, kept ragged:
# int64 offsets + int32 values) or "label" (a short string, kept as a code into a table of
# labels). Per-sample numbers are int32 (a span's tokens, sample indices), so that ten million
# samples take about 0.5 GB; sums are taken in int64.
SCHEMA: dict[str, Fields] = {
    "admit": (("t", "f8"), ("engine", "i4"), ("samples", "samples")),
    "prefill": (("t", "f8"), ("t_end", "f8"), ("engine", "i4"), ("samples", "samples"),
                ("tokens", "i8"), ("recomputed", "i8")),
    "span": (("t", "f8"), ("t_end", "f8"), ("engine", "i4"), ("sample", "i4"), ("attempt", "i4"),
             ("version", "i4"), ("tokens", "i4"), ("end", "label")),
    "abort": (("t", "f8"), ("samples", "samples"), ("keep_tokens", "?")),
    "discard": (("t", "f8"), ("samples", "samples")),
    "filter": (("t", "f8"), ("samples", "samples")),
    "train": (("t", "f8"), ("t_end", "f8"), ("version", "i4"), ("samples", "samples"),
              ("tokens", "i8")),
    "sync": (("t", "f8"), ("t_end", "f8"), ("version", "i4")),
    "offload": (("t", "f8"), ("t_end", "f8"), ("version", "i4")),
    "onload": (("t", "f8"), ("t_end", "f8"), ("version", "i4")),
    "tool": (("t", "f8"), ("t_start", "f8"), ("t_end", "f8"), ("engine", "i4"), ("sample", "i4"),
             ("attempt", "i4"), ("turn", "i4"), ("tokens", "i4")),
}
# the values a label field takes, first in its table in this order: so a table (and the codes
# written) never depends on where a long run's records were packed into chunks (a new label a
# file or a policy brings goes after them)
LABEL_VALUES: dict[tuple[str, str], tuple[str, ...]] = {
    ("span", "end"): ("finish", "preempt", "abort", "sync", "tool")}
KINDS = ("meta", *SCHEMA)
FIELDS = {kind: tuple(name for name, _ in cols) for kind, cols in SCHEMA.items()}
_LIST = {"span": "spans", "prefill": "prefills", "admit": "admits", "abort": "aborts",
         "discard": "discards", "filter": "filters", "train": "trains", "sync": "syncs",
         "offload": "offloads", "onload": "onloads", "tool": "tools"}


def by_start(tl, lists: dict[str, str]) -> None:
    """Put the records of each kind of a timeline ``tl`` just read in order of ``t`` (stable:
    equal times keep their order), as the JSONL readers do; ``lists`` names each kind's list of
    pending records (kept a list, sorted in place, when it holds them all). The real runner
    appends a record when it is complete, so its file is not in that order: a span is written
    when it ends, after the records of whatever started while it ran."""
    for kind, name in lists.items():
        rows = getattr(tl, name)
        if len(rows) == tl.count(kind):  # (nothing read is cached yet)
            rows.sort(key=lambda row: row[0])
            continue
        cols = tl.columns(kind)
        t = cols["t"]
        if (t[1:] < t[:-1]).any():
            order = np.argsort(t, kind="stable")
            tl.set_columns(kind, {name: _take(c, order) for name, c in cols.items()})


def _take(col: Column, order: np.ndarray) -> Column:
    if isinstance(col, Ragged):
        return col.take(order)
    return Labels(col.codes[order], col.names) if isinstance(col, Labels) else col[order]


# Fields added to a record kind after timeline files were first written (format 1), and the
# value each has in an older file that lacks it: such files still read, with what they meant.
LATER_FIELDS: dict[str, dict[str, int]] = {"tool": {"tokens": 0}}  # (tool output: unrecorded)


def check_counts(fields: Fields, cols: dict[str, Column]) -> None:
    """Raise ValueError when a count or index (an integer field) of a kind is negative."""
    for name, typ in fields:
        col = cols[name]
        values = col.values if isinstance(col, Ragged) else col
        if typ in ("samples", "i4", "i8") and values.size and values.min() < 0:  # type: ignore[union-attr]
            raise ValueError(f"field {name!r} has a negative value")


def concat_chunks(fields: Fields, parts: list[dict[str, Column]]) -> dict[str, Column]:
    """One chunk of ``parts``, field by field; ``parts`` (the caller gives up the list) lets go
    of each field once it is merged, so a 10M-sample run holds one field twice, not all."""
    out: dict[str, Column] = {}
    for name, typ in fields:
        cols = [p[name] for p in parts]
        parts[:] = [{k: v for k, v in p.items() if k != name} for p in parts]
        if typ == "samples":
            out[name] = Ragged.concat(cols)  # type: ignore[arg-type]
        elif typ == "label":
            out[name] = Labels(np.concatenate([c.codes for c in cols]), cols[-1].names)  # type: ignore[union-attr]
        else:
            out[name] = np.concatenate(cols)  # type: ignore[arg-type]
    return out


# the meta record's integer fields: name -> least value; a field may be absent. The counts that
# size a reader's arrays stay below 2**31 (as the records' int32 fields); a seed or a KV budget
# sizes nothing, and any integer the simulator was given must read back; a cluster has a GPU
# and a trainer GPU at least (the summary divides by gpus: 0 raised ZeroDivisionError)
_META_INTS = {"engines": 1, "max_num_seqs": 1, "tp": 1, "gpus": 1, "trainer_gpus": 1,
              "group_size": 1, "samples_total": 0, "kv_budget": 0, "seed": None}
_META_UNBOUNDED = ("kv_budget", "seed")
# a cluster's shape has tighter bounds (sim/cluster_spec.py): a reader loops over engines and lanes
_META_MOST = {"engines": MAX_GPUS, "gpus": MAX_GPUS, "trainer_gpus": MAX_GPUS, "tp": MAX_GPUS,
              "max_num_seqs": MAX_NUM_SEQS}
_META_FLOATS = ("lower_bound_s", "regen_sigma")
_META_TYPES = {"backend": str, "policy": str, "trace": str, "cluster": str, "placement": str,
               "regen": str, "oracle": bool, "params": dict, "auto_params": dict, "run": dict}


def check_meta(meta: dict) -> None:
    """Raise ValueError naming the first meta field of the wrong type or range."""
    for key, least in _META_INTS.items():
        v = meta.get(key, 0 if least is None else least)
        bounded = key not in _META_UNBOUNDED
        most = _META_MOST.get(key, INT32_MAX)
        if (not isinstance(v, int) or isinstance(v, bool) or (least is not None and v < least)
                or (bounded and v > most)):
            at_least = "" if least is None else f" >= {least}"
            below = "" if not bounded else (" and below 2**31" if most == INT32_MAX
                                            else f" and at most {most:,}")
            raise ValueError(f"field {key!r}: expected an integer{at_least}{below}, got {v!r}")
    for key in _META_FLOATS:
        v = meta.get(key, 0.0)
        if not finite(v) or v < 0:
            raise ValueError(f"field {key!r}: expected a number >= 0, got {v!r}")
    for key, typ in _META_TYPES.items():
        if key in meta and meta[key] is not None and not isinstance(meta[key], typ):
            raise ValueError(f"field {key!r}: expected {'an object' if typ is dict else typ.__name__}, "
                             f"got {meta[key]!r}")
