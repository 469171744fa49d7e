"""The summary's interval unions (issue 12: a 10M-sample summary within 4 GiB): the union from
separately sorted starts and ends is the one from start-ordered pairs, bit for bit; the engines'
busy time taken a few engines at a time is each engine's own union, summed; a timeline file
whose record ends before it starts is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl import metrics
from sortedrl.metrics import _engine_busy, exact_sum, sorted_union, union_length


def merge_intervals(t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference union: intervals in the order of their starts, each merged into the
    segment before it while it starts no later than that segment's furthest end."""
    order = np.argsort(t0)
    a, b = t0[order], t1[order]
    reach = np.maximum.accumulate(b)
    brk = np.flatnonzero(a[1:] > reach[:-1]) + 1  # a new merged segment starts here
    return np.concatenate(([a[0]], a[brk])), np.concatenate((reach[brk - 1], [reach[-1]]))


# starts on a coarse grid, so that ties, touching and nested intervals are common
_interval = st.tuples(st.integers(0, 40), st.integers(0, 12)).map(
    lambda p: (p[0] * 0.25, p[0] * 0.25 + p[1] * 0.125))


@settings(max_examples=300, deadline=None)
@given(st.lists(_interval, min_size=1, max_size=60))
def test_sorted_union_is_the_start_ordered_merge(intervals):
    t0 = np.array([a for a, _ in intervals])
    t1 = np.array([b for _, b in intervals])
    want = merge_intervals(t0, t1)
    got = sorted_union(np.sort(t0), np.sort(t1))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert union_length(t0, t1) == exact_sum(want[1] - want[0])


def test_sorted_union_across_blocks(monkeypatch):
    monkeypatch.setattr(metrics, "_BLOCK", 7)  # breaks found block by block
    rng = np.random.default_rng(5)
    t0 = np.round(rng.uniform(0, 100, 500), 1)
    t1 = t0 + np.round(rng.exponential(0.3, 500), 1)
    want = merge_intervals(t0, t1)
    got = sorted_union(np.sort(t0), np.sort(t1))
    assert len(want[0]) > 20
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _per_engine(sp: dict, pf: dict, makespan: float) -> float:
    """The reference: each engine's union on its own, shifted by e * (makespan + 1), summed."""
    engines = max(int(sp["engine"].max(initial=-1)), int(pf["engine"].max(initial=-1))) + 1
    lengths = []
    for e in range(engines):
        in_sp, in_pf = sp["engine"] == e, pf["engine"] == e
        shift = float(e) * (makespan + 1.0)
        start = np.concatenate((sp["t"][in_sp], pf["t"][in_pf])) + shift
        end = np.concatenate((sp["t_end"][in_sp], pf["t_end"][in_pf])) + shift
        if start.size:
            starts, ends = merge_intervals(start, end)
            lengths.append(ends - starts)
    return exact_sum(np.concatenate(lengths)) if lengths else 0.0


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.lists(st.tuples(_interval, st.integers(0, 39)), max_size=80),
       st.lists(st.tuples(_interval, st.integers(0, 39)), max_size=30))
def test_engine_busy_is_each_engines_union_summed(engines, spans, prefills):
    def cols(rows):
        return {"t": np.array([a for (a, _), _ in rows], dtype=float),
                "t_end": np.array([b for (_, b), _ in rows], dtype=float),
                "engine": np.array([e % engines for _, e in rows], dtype=np.int32)}
    sp, pf = cols(spans), cols(prefills)
    makespan = max([0.0, *sp["t_end"], *pf["t_end"]])
    assert _engine_busy(sp, pf, makespan) == _per_engine(sp, pf, makespan)


def test_a_record_that_ends_before_it_starts_is_refused(tmp_path):
    from sortedrl.timeline import Timeline
    from sortedrl.timeline_file import TimelineError, read_timeline, write_npz

    tl = Timeline({"engines": 1, "samples_total": 1})
    tl.spans.append((2.0, 1.0, 0, 0, 0, 0, 3, "finish"))
    write_npz(tl, tmp_path / "t.npz")
    with pytest.raises(TimelineError) as e:
        read_timeline(tmp_path / "t.npz")
    assert str(e.value) == f"{tmp_path / 't.npz'}: a 'span' record ends before it starts (t_end < t)"


@pytest.mark.parametrize("placement, rollout_s, bubble_tool", [("colocated", 6.0, 4 / 6),
                                                              ("disaggregated", 8.0, 6 / 8)])
def test_a_tool_call_through_an_update_is_rollout_time_only_beside_it(placement, rollout_s, bubble_tool):
    # One slot: a span 0-2 s, then a tool call 2-8 s across an update at 4-6 s. On a colocated
    # cluster rollout stops for the update, so those 2 s are the update's, not rollout's (they
    # were both: forecast's parts summed to more than the wall-clock).
    from sortedrl.metrics_tools import tool_summary
    from sortedrl.timeline import Timeline

    tl = Timeline({"engines": 1, "samples_total": 1, "placement": placement})
    tl.spans.append((0.0, 2.0, 0, 0, 0, 0, 2, "turn"))
    tl.tool(2.0, 2.0, 8.0, 0, 0, 0, 0, 0)
    tl.trains.append((4.0, 6.0, 0, [0], 10))
    sp = tl.columns("span")
    got = tool_summary(tl, sp["t"], sp["t_end"], 1, 2.0)
    assert got["rollout_s"] == rollout_s and got["tool_s"] == 6.0
    assert got["bubble_tool_ratio"] == pytest.approx(bubble_tool)


@settings(max_examples=200, deadline=None)
@given(st.lists(_interval, min_size=1, max_size=8), st.lists(_interval, max_size=5))
def test_the_parts_outside_the_windows_are_the_grid_points_outside(intervals, windows):
    from sortedrl.metrics_tools import outside
    t0, t1 = (np.array(x, dtype=np.float64) for x in zip(*intervals, strict=True))
    if windows:
        w0, w1 = sorted_union(*(np.sort(np.array(x, dtype=np.float64)) for x in zip(*windows, strict=True)))
    else:
        w0 = w1 = np.empty(0)
    p0, p1 = outside(t0, t1, w0, w1)
    grid = np.arange(0, 12, 1 / 32) + 1 / 64  # points between the 1/8-step edges

    def covered(a, b):
        return np.any((grid[:, None] > a) & (grid[:, None] < b), axis=1) if a.size else grid < -1

    assert np.array_equal(covered(p0, p1), covered(t0, t1) & ~covered(w0, w1))
    assert np.all(p1 >= p0)
