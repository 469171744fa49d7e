"""The timeline: one event log of everything that happened in a run, simulated or real.

Both backends and the controller append to a :class:`Timeline`; :mod:`sortedrl.metrics` computes
every reported number from it alone, so a timeline read back from its file gives the same
summary as the one in memory. Records arrive as tuples (the simulator appends them to
``spans`` and ``prefills`` directly, in its hot path; everything else goes through the record
methods), or as columns already (:meth:`Timeline.add_columns`: the simulator's compiled loop).
A million-sample run makes millions of them, so every ``COMPACT_ROWS`` records of a kind are
moved into typed numpy columns and the list is emptied in place (``list.clear()``: the
simulator holds the lists). Given a ``spill_dir``, those columns go to files there instead
(:mod:`sortedrl.timeline_spill`), so a 10M-sample run holds only its last records. Readers take :meth:`Timeline.columns` (whole columns, compacted and
pending rows together) or :meth:`Timeline.rows` (tuples, for the small kinds), never the lists.

Record kinds (``docs/metrics.md`` defines each field and the two file formats):

- ``meta``: the run's configuration: cluster shape, policy, params, trace, seed, lower bound;
- ``span``: one stretch of decoding of one sample on one engine under one policy version, written
  when it ends; ``end`` says how: ``finish``, ``preempt`` (KV cache full; recomputed later),
  ``abort`` (a policy action) or ``sync`` (the engine stopped for a weight push);
- ``prefill``: the prefill of newly admitted samples, engine-wide or in chunks beside the running
  batch (``recomputed`` counts tokens that had been generated before and are recomputed);
- ``admit``, ``abort``, ``discard``: the controller's decisions; ``filter``: finished groups
  dropped by dynamic sampling (all rewards equal, so no GRPO signal);
- ``train``: one update from ``version`` to ``version + 1``; ``sync``: one weight push;
- ``offload`` / ``onload``: colocated placement only: the engines move their weights and KV
  cache out of GPU memory before an update (vLLM sleep) and back before rollout resumes (wake);
- ``tool``: multi-turn traces: one tool call between two turns of a trajectory: the sample left
  ``engine`` at ``t``, got a sandbox at ``t_start`` and its result, ``tokens`` tokens of tool
  output, came back at ``t_end`` (``turn`` is the turn it follows). A span that ends with
  ``end`` = ``tool`` is that turn.

A new record kind is one entry in :data:`SCHEMA` (its fields and column types) and
:data:`_LIST` (its list attribute, created by ``Timeline.__init__``), both in
:mod:`sortedrl.timeline_columns` and importable from here, plus a record method that calls
:meth:`Timeline.add`; the files, the compaction and the accessors follow from the schema. The
JSONL form of a timeline (its writer, its reference reader, :func:`record_line`) is
:mod:`sortedrl.timeline_jsonl`; the columnar file, :mod:`sortedrl.timeline_file`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sortedrl import timeline_jsonl
from sortedrl.timeline_columns import (  # noqa: F401  (SCHEMA .. Ragged: re-exported)
    _LIST,
    FIELDS,
    KINDS,
    LABEL_VALUES,
    SCHEMA,
    Column,
    Labels,
    Ragged,
    concat_chunks,
)
from sortedrl.timeline_jsonl import record_line, write_atomic  # noqa: F401  (re-exported)
from sortedrl.timeline_spill import Spill, SpilledColumns

_RECORD = {kind: np.dtype([(name, "O" if typ in ("samples", "label") else typ)
                           for name, typ in cols]) for kind, cols in SCHEMA.items()}
# the position of the sample list in a record of each kind recorded through add()
_SAMPLES_AT = {kind: [name for name, _ in cols].index("samples") for kind, cols in SCHEMA.items()
               if kind != "prefill" and any(typ == "samples" for _, typ in cols)}
COMPACT_ROWS = 1 << 17  # a pending list this long is moved into columns
_CHECK_EVERY = 1024  # record-method calls between looks at the simulator's lists


class Timeline:
    """In-memory event log; see the module docstring for the record kinds and the accessors."""

    sink = None  # optional callable(kind, row), set by the real runner (see record_line)

    def __init__(self, meta: dict | None = None, spill_dir: Path | None = None) -> None:
        self.meta: dict = dict(meta or {})
        # compacted chunks go to files there, not memory (timeline_spill; None: memory)
        self._spill = Spill(spill_dir) if spill_dir is not None else None
        self.spans: list[tuple] = []  # (t0, t1, engine, sample, attempt, version, tokens, end)
        self.prefills: list[tuple] = []  # (t0, t1, engine, samples, tokens, recomputed)
        self.admits: list[tuple] = []  # (t, engine, samples)
        self.aborts: list[tuple] = []  # (t, samples, keep_tokens)
        self.discards: list[tuple] = []  # (t, samples)
        self.filters: list[tuple] = []  # (t, samples): dynamic sampling dropped these groups
        self.trains: list[tuple] = []  # (t0, t1, version, samples, tokens)
        self.syncs: list[tuple] = []  # (t0, t1, version)
        self.offloads: list[tuple] = []  # (t0, t1, version)
        self.onloads: list[tuple] = []  # (t0, t1, version)
        self.tools: list[tuple] = []  # (t, t_start, t_end, engine, sample, attempt, turn, tokens)
        self._chunks: dict[str, list[dict[str, Column]]] = {kind: [] for kind in SCHEMA}
        self._labels: dict[tuple[str, str], list[str]] = {}
        self._cache: dict[str, tuple[tuple[int, int], dict[str, Column]]] = {}
        self._until_check = _CHECK_EVERY
        self._held = dict.fromkeys(_SAMPLES_AT, 0)  # samples in each kind's pending sample lists
        # records added as columns (add_columns), pending before each kind's list: their count,
        # and the finishes and latest end among such spans (see progress)
        self._blocks: dict[str, list[dict[str, Column]]] = {kind: [] for kind in SCHEMA}
        self._block_rows = dict.fromkeys(SCHEMA, 0)
        self._block_finished, self._block_last_t = 0, 0.0
        self._finished, self._last_t = 0, 0.0  # in compacted spans (see progress)

    def __getstate__(self) -> dict:
        """For a worker process's result (``compare --workers``): the columns read so far are
        a cache, not state (a spilled timeline's hold weak references, which do not pickle)."""
        return {**self.__dict__, "_cache": {}}

    # -- recording ---------------------------------------------------------------------------
    # The simulator appends to ``spans`` and ``prefills`` directly (hot path); every other
    # record goes through :meth:`add`, which also streams it to ``sink`` (crash-safe logs) and
    # now and then compacts long lists.

    def add(self, kind: str, *row) -> None:
        rows = getattr(self, _LIST[kind])
        rows.append(row)
        if kind in self._held:
            self._held[kind] += len(row[_SAMPLES_AT[kind]])
        if self.sink is not None:
            self.sink(kind, row)
        self._until_check -= 1
        if not self._until_check:
            self._until_check = _CHECK_EVERY
            self.compact(min_rows=COMPACT_ROWS)

    def add_columns(self, kind: str, cols: dict[str, Column]) -> None:
        """Append records already in columns (every field of ``SCHEMA[kind]``, a label as codes
        into :meth:`labels`' table) after the pending rows of ``kind``, as if appended row by
        row: the simulator's compiled loop makes its spans and prefills so. No ``sink`` hears
        them (the simulator has none)."""
        if not len(cols["t"]):
            return
        rows = getattr(self, _LIST[kind])
        if rows:  # (they came first)
            self._pend(kind, self._typed(kind, rows))
            rows.clear()
            if kind in self._held:
                self._held[kind] = 0
        self._pend(kind, cols)

    def _pend(self, kind: str, cols: dict[str, Column]) -> None:
        self._blocks[kind].append(cols)
        self._block_rows[kind] += len(cols["t"])
        if kind == "span":
            self._block_last_t = float(cols["t_end"][-1])
            self._block_finished += int(np.count_nonzero(cols["end"] == "finish"))

    def admit(self, t: float, engine: int, samples: list[int]) -> None:
        self.add("admit", t, engine, list(samples))

    def abort(self, t: float, samples: list[int], keep_tokens: bool) -> None:
        self.add("abort", t, list(samples), keep_tokens)

    def discard(self, t: float, samples: list[int]) -> None:
        self.add("discard", t, list(samples))

    def filter(self, t: float, samples: list[int]) -> None:
        self.add("filter", t, list(samples))

    def train(self, t0: float, t1: float, version: int, samples: list[int], tokens: int) -> None:
        self.add("train", t0, t1, version, list(samples), tokens)
        self.compact(min_rows=COMPACT_ROWS)  # once an update: the spans of a step, at most
        # the few, long sample lists of the decisions hold a Python int per sample: compacted by
        # samples held, so a long run does not keep every sample's int alive to its end
        for kind, held in self._held.items():
            if held >= COMPACT_ROWS:
                self._compact(kind)

    def sync(self, t0: float, t1: float, version: int) -> None:
        self.add("sync", t0, t1, version)

    def offload(self, t0: float, t1: float, version: int) -> None:
        self.add("offload", t0, t1, version)

    def onload(self, t0: float, t1: float, version: int) -> None:
        self.add("onload", t0, t1, version)

    def tool(self, t: float, t_start: float, t_end: float, engine: int, sample: int, attempt: int,
             turn: int, tokens: int) -> None:
        self.add("tool", t, t_start, t_end, engine, sample, attempt, turn, tokens)

    def compact(self, min_rows: int = 1) -> None:
        """Move each list of at least ``min_rows`` pending records into typed columns, and
        empty it in place."""
        for kind, name in _LIST.items():
            if len(getattr(self, name)) + self._block_rows[kind] >= min_rows:
                self._compact(kind)

    def _compact(self, kind: str) -> None:
        rows, parts = getattr(self, _LIST[kind]), self._blocks[kind]
        if rows or not parts:
            parts.append(self._typed(kind, rows))
        cols = parts[0] if len(parts) == 1 else concat_chunks(SCHEMA[kind], parts)
        self._blocks[kind], self._block_rows[kind] = [], 0
        if kind == "span":
            self._block_finished = 0  # (before the packed count grows: a poll may miss them once)
            self._finished += int(np.count_nonzero(cols["end"] == "finish"))
            self._last_t = float(cols["t_end"][-1])
        if self._spill is not None and not self._chunks[kind]:  # (a kind set by a reader
            self._spill.append(kind, cols)  # stays in memory: a kind is on disk or not)
        else:
            self._chunks[kind].append(cols)
        rows.clear()
        if kind in self._held:
            self._held[kind] = 0

    def progress(self) -> tuple[int, float]:
        """Spans that ended in a finish so far, and the end of the latest span (s): how far a
        run being recorded has got. Safe to call from another thread while it records."""
        # the count of rows already packed first, then a snapshot of those not yet (the simulator
        # keeps appending): a packing in between is missed for one poll, never counted twice
        packed, last_t = self._finished, self._last_t
        blocked = self._block_finished
        if self._block_rows["span"]:  # (spans added as columns come after the packed ones)
            last_t = self._block_last_t
        pending = list(self.spans)
        finished = packed + blocked + sum(1 for row in pending if row[7] == "finish")
        return finished, float(pending[-1][1]) if pending else last_t

    # -- reading -------------------------------------------------------------------------------

    def count(self, kind: str) -> int:
        """How many records of ``kind``."""
        chunks = self._chunks[kind]
        done = sum(len(next(iter(c.values()))) for c in chunks) if chunks else 0
        spilled = self._spill.records.get(kind, 0) if self._spill is not None else 0
        return done + spilled + self._block_rows[kind] + len(getattr(self, _LIST[kind]))

    def columns(self, kind: str) -> Mapping[str, Column]:
        """Every record of ``kind`` as columns, in recording order (from a JSONL file: by t):
        numpy arrays, :class:`Ragged` / :class:`Labels` for sample lists and labels (SCHEMA). A
        dict; for a kind spilled to disk, a mapping that reads each field when asked for and
        frees it when no one holds it (a caller keeps a field it uses twice in a name)."""
        rows = getattr(self, _LIST[kind])
        if self._blocks[kind]:  # (records added as columns: packed with the rows after them)
            self._compact(kind)
        if self._spill is not None and kind in self._spill.records:
            if rows:
                self._compact(kind)
            key = (-1, self._spill.records[kind])  # one mapping, so that a held field is shared
            cached = self._cache.get(kind)
            if cached is None or cached[0] != key:
                cached = self._cache[kind] = (key, SpilledColumns(self._spill, kind, SCHEMA[kind],
                                                                  self.labels))
            return cached[1]
        chunks = self._chunks[kind]
        if chunks and rows:  # a long run (compacted before): compact the rest too
            self._compact(kind)
        if len(chunks) > 1:  # merge, so that the data is held once
            self._cache.pop(kind, None)  # (it may hold a chunk: let each field go once merged)
            parts = chunks[:]
            chunks.clear()
            chunks.append(concat_chunks(SCHEMA[kind], parts))
        key = (len(chunks), len(rows))
        cached = self._cache.get(kind)
        if cached is not None and cached[0] == key:
            return cached[1]
        cols = chunks[0] if chunks else self._typed(kind, rows)
        self._cache[kind] = (key, cols)
        return cols

    def rows(self, kind: str) -> list[tuple]:
        """Every record of ``kind`` as a tuple (sample lists as lists, labels as strings), in
        recording order. For the small kinds (updates, syncs); use :meth:`columns` for spans."""
        cols = self.columns(kind)
        return list(zip(*(c.tolist() for c in cols.values()), strict=True))

    def ends(self, kind: str) -> np.ndarray:
        """The time each record of ``kind`` ends: ``t_end`` where it has one, else ``t``."""
        cols = self.columns(kind)
        return cols["t_end"] if "t_end" in cols else cols["t"]

    def set_columns(self, kind: str, cols: dict[str, Column]) -> None:
        """Replace the records of ``kind`` (a file reader's entry point)."""
        getattr(self, _LIST[kind]).clear()
        if kind in self._held:
            self._held[kind] = 0
        self._blocks[kind], self._block_rows[kind] = [], 0
        if kind == "span":
            self._block_finished, self._block_last_t = 0, 0.0
        if self._spill is not None:
            self._spill.drop(kind)
        self._chunks[kind] = [cols]
        self._cache.pop(kind, None)

    def labels(self, kind: str, field: str) -> list[str]:
        """The label table of a label field: the values it is known to take first
        (LABEL_VALUES), then any other as it is recorded or read."""
        table = self._labels.get((kind, field))
        if table is None:
            table = self._labels[(kind, field)] = list(LABEL_VALUES.get((kind, field), ()))
        return table

    def _typed(self, kind: str, rows: list[tuple]) -> dict[str, Column]:
        """``rows`` as columns: one pass of ``np.fromiter`` into a record array (the sample
        lists and labels as Python objects), then one array per field."""
        table = np.fromiter(rows, dtype=_RECORD[kind], count=len(rows))
        out: dict[str, Column] = {}
        for name, typ in SCHEMA[kind]:
            col = table[name]
            if typ == "samples":
                out[name] = Ragged.from_lists(col.tolist())
            elif typ == "label":
                names, values = self.labels(kind, name), col.tolist()
                for label in sorted(set(values) - set(names)):
                    names.append(label)
                code = {label: i for i, label in enumerate(names)}
                out[name] = Labels(np.fromiter(map(code.__getitem__, values), np.uint8, len(values)), names)
            else:
                out[name] = np.ascontiguousarray(col)
        return out

    # -- JSONL (sortedrl.timeline_jsonl) -------------------------------------------------------

    def records(self) -> list[dict]:
        """All records as JSON-ready dicts, ordered by start time (ties: kind, then insertion)."""
        return timeline_jsonl.records(self)

    def jsonl_lines(self):
        """The JSONL lines: meta first, then every record by start time (ties: kind, then
        insertion). Each line ends with a newline."""
        return timeline_jsonl.jsonl_lines(self)

    def write_jsonl(self, path: str | Path) -> None:
        """Write atomically: a failure leaves any previous file untouched."""
        timeline_jsonl.write_jsonl(self, path)

    @classmethod
    def read_jsonl(cls, path: str | Path) -> Timeline:
        return timeline_jsonl.read_jsonl(cls(), path, COMPACT_ROWS)
