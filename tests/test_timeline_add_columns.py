"""Records added as columns (``Timeline.add_columns``, the simulator's compiled loop) are the
records added as rows: the same columns, counts, progress and files, wherever they are packed.

Run: pytest tests/test_timeline_add_columns.py
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl import timeline as timeline_mod
from sortedrl.timeline import SCHEMA, Labels, Ragged, Timeline
from sortedrl.timeline_columns import LABEL_VALUES
from sortedrl.timeline_file import _arrays, _savez
from tests.test_timeline_files import _same_columns

ENDS = LABEL_VALUES[("span", "end")]


def _span_rows(draw, n: int) -> list[tuple]:
    ends = draw(st.lists(st.sampled_from(ENDS), min_size=n, max_size=n))
    return [(float(k), float(k) + 0.5, k % 3, k, 0, 1, 7 + k, end) for k, end in enumerate(ends)]


def _prefill_rows(draw, n: int) -> list[tuple]:
    sizes = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    return [(float(k), float(k) + 0.25, k % 2, list(range(10 * k, 10 * k + m)), 3 * m, m) for k, m in enumerate(sizes)]


def _as_columns(tl: Timeline, kind: str, rows: list[tuple]) -> dict:
    """``rows`` as add_columns takes them (a label's codes into ``tl``'s table)."""
    names = [name for name, _ in SCHEMA[kind]]
    cols = {}
    for k, (name, typ) in enumerate(SCHEMA[kind]):
        values = [row[k] for row in rows]
        if typ == "samples":
            firsts = np.cumsum([0] + [len(v) for v in values[:-1]]).astype(np.int64)
            cols[name] = Ragged.from_runs(np.array([i for v in values for i in v] or [0], dtype=np.int64),
                                          firsts, np.array([len(v) for v in values], dtype=np.int64))
        elif typ == "label":
            table = tl.labels(kind, name)
            cols[name] = Labels(np.array([table.index(v) for v in values], dtype=np.uint8), table)
        else:
            cols[name] = np.array(values, dtype=typ)
    assert list(cols) == names
    return cols


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([3, 1 << 17]))
def test_rows_and_columns_interleaved_are_the_rows(data, compact_rows):
    # batches of spans and prefills, each added as rows or as columns, in any order and with
    # packing into chunks after every few records or never: the same columns, counts and progress
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        mp.setattr(timeline_mod, "COMPACT_ROWS", compact_rows)
        rows_only, mixed, spilled = Timeline(), Timeline(), Timeline(spill_dir=Path(tmp))
        for _ in range(data.draw(st.integers(1, 6))):
            kind = data.draw(st.sampled_from(["span", "prefill"]))
            batch = (_span_rows if kind == "span" else _prefill_rows)(data.draw, data.draw(st.integers(0, 5)))
            getattr(rows_only, timeline_mod._LIST[kind]).extend(batch)
            as_columns = data.draw(st.booleans())
            for tl in (mixed, spilled):  # (a spilled timeline packs its chunks to files)
                if as_columns:
                    tl.add_columns(kind, _as_columns(tl, kind, batch))
                else:
                    getattr(tl, timeline_mod._LIST[kind]).extend(batch)
                assert tl.progress() == rows_only.progress()
            for tl in (rows_only, mixed, spilled):
                tl.train(0.0, 1.0, 0, [0], 1)  # (compacts lists of COMPACT_ROWS records)
        for kind in SCHEMA:
            assert mixed.count(kind) == spilled.count(kind) == rows_only.count(kind)
        _same_columns(mixed, rows_only)
        _same_columns(spilled, rows_only)
        files = []
        for tl in (rows_only, mixed, spilled):
            buf = io.BytesIO()
            _savez(buf, _arrays(tl))  # (timeline.npz's bytes)
            files.append(buf.getvalue())
        assert files[0] == files[1] == files[2]  # (label tables in a fixed order: the same codes)


def test_a_label_table_starts_with_its_known_values_in_any_order_of_arrival():
    tl = Timeline()
    tl.spans.append((0.0, 1.0, 0, 0, 0, 0, 1, "sync"))
    tl.compact()
    tl.spans.append((1.0, 2.0, 0, 1, 0, 0, 1, "finish"))
    tl.spans.append((1.0, 2.0, 0, 2, 0, 0, 1, "later"))
    tl.compact()
    assert tl.labels("span", "end") == [*ENDS, "later"]
    assert tl.columns("span")["end"].tolist() == ["sync", "finish", "later"]


def test_ragged_from_runs_gathers_runs_that_are_not_back_to_back():
    values = np.array([5, 6, 7, 8, 9, 10], dtype=np.int64)
    back_to_back = Ragged.from_runs(values, np.array([0, 2, 2]), np.array([2, 0, 3]))
    assert back_to_back.tolist() == [[5, 6], [], [7, 8, 9]] and back_to_back.values.dtype == np.int32
    gathered = Ragged.from_runs(values, np.array([4, 0, 1]), np.array([2, 1, 3]))
    assert gathered.tolist() == [[9, 10], [5], [6, 7, 8]]
    assert gathered.offsets.tolist() == [0, 2, 3, 6]
