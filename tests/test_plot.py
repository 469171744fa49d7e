"""Timeline plots and the Perfetto export (issue 7): lanes, batch size, samples, step table.

Run: pytest tests/test_plot.py  (reports and the commands: tests/test_plot_report.py; in a real
browser: tests/test_plot_browser.py)
"""

from __future__ import annotations

import json
import re

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.colors import sample_colorscale
from plotly.offline import get_plotlyjs

from sortedrl.metrics import span_table, summarize, union_length
from sortedrl.plot import lanes as L
from sortedrl.plot.perfetto import EXPORT_BINS, assign_slots, trace_events, write_perfetto
from sortedrl.plot.timeline_plot import step_rows, timeline_figure, write_timeline_html
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from sortedrl.traces.synth import synthesize
from tests.conftest import write_run

SMALL_CLUSTER = "h100-llama3.1-8b-2gpu-8seq"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """sortedrl (harvests, aborts, 12 updates) on 128 samples over 2 engines x 8 slots; a
    harvest every 8 samples (the auto trigger would be a quarter of the 128-sample group)."""
    tr = synthesize("logic-8k", prompts=32, group_size=2, steps=2)
    r = simulate(tr, make_policy("sortedrl", ["update_batch=8"], tr), preset(SMALL_CLUSTER))
    return write_run(tmp_path_factory.mktemp("small") / "run", r), r, tr


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """sync on 20,000 samples: 33,836 spans, far above the detail limit."""
    tr = synthesize("logic-8k", prompts=10_000, group_size=2)
    r = simulate(tr, make_policy("sync", [], tr), preset("h100-llama3.1-8b-2gpu"))
    assert len(r.timeline.spans) > 10 * L.DETAIL_LIMIT
    return write_run(tmp_path_factory.mktemp("large") / "run", r), r


def names(fig) -> list[str]:
    return [t.name for t in fig.data]


def trace(fig, name: str):
    (t,) = [t for t in fig.data if t.name == name]
    return t


def hand_timeline() -> Timeline:
    """One engine with 2 slots, three spans, two prefills, one update and one sync."""
    tl = Timeline({"backend": "sim", "policy": "hand", "oracle": False, "params": {},
                   "trace": "hand-trace", "cluster": "hand-cluster", "seed": 0,
                   "placement": "colocated", "engines": 1, "max_num_seqs": 2, "kv_budget": 100,
                   "tp": 1, "gpus": 1, "trainer_gpus": 1, "group_size": 1, "samples_total": 3,
                   "lower_bound_s": 10.0})
    tl.spans += [(0.0, 10.0, 0, 0, 0, 0, 9, "finish"), (0.0, 4.0, 0, 1, 0, 0, 4, "finish"),
                 (12.0, 20.0, 0, 2, 0, 0, 7, "finish")]
    tl.prefills += [(0.0, 1.0, 0, [0, 1], 20, 0), (12.0, 13.0, 0, [2], 10, 0)]
    tl.trains.append((20.0, 25.0, 0, [0, 1, 2], 50))
    tl.syncs.append((25.0, 26.0, 1))
    return tl


def intervals(iv) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in zip(*iv, strict=True)]


# -- lanes ----------------------------------------------------------------------------------------


def test_lanes_of_a_hand_built_timeline():
    ln = L.lanes(hand_timeline())
    assert ln.makespan == 26.0
    assert intervals(ln.rollout[0]) == [(1.0, 10.0), (13.0, 20.0)]
    assert intervals(ln.prefill[0]) == [(0.0, 1.0), (12.0, 13.0)]
    assert intervals(ln.idle[0]) == [(10.0, 12.0), (20.0, 26.0)]
    assert intervals(ln.train) == [(20.0, 25.0)]
    assert intervals(ln.sync) == [(25.0, 26.0)]
    assert intervals(ln.trainer_idle) == [(0.0, 20.0)]
    t, n = L.running_steps(ln.spans["t0"], ln.spans["t1"])
    assert list(zip(t.tolist(), n.tolist(), strict=True))[1:] == [
        (0.0, 2), (4.0, 1), (10.0, 0), (12.0, 1), (20.0, 0)]
    edges = np.array([0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0])
    assert L.occupancy(ln.spans["t0"], ln.spans["t1"], edges).tolist() == [1.8, 1.0, 0.6, 1.0, 0, 0]
    # binned at 13 s: each state's share of a bin is its bar's thickness, stacked across the lane
    edges = np.array([0.0, 13.0, 26.0])
    r, p, i = L.binned_bars([ln.rollout[0], ln.prefill[0], ln.idle[0]], edges, lane=0)
    assert (r.base.tolist(), r.length.tolist()) == ([0.0, 13.0], [13.0, 13.0])
    assert np.allclose(r.thickness, [0.8 * 9 / 13, 0.8 * 7 / 13])
    assert (p.base.tolist(), p.length.tolist()) == ([0.0], [13.0])  # 0-1 s and 12-13 s
    assert np.allclose(p.thickness, [0.8 * 2 / 13])
    assert np.allclose(i.thickness, [0.8 * 2 / 13, 0.8 * 6 / 13])
    assert np.allclose(r.y, 0.4 - r.thickness / 2)  # from the lane's bottom edge (reversed axis)
    assert np.allclose(p.y, 0.4 - r.thickness[0] - p.thickness / 2)
    assert np.allclose(i.y - i.thickness / 2, -0.4)  # the last state reaches the top edge
    assert [r.time(), p.time(), i.time()] == pytest.approx([16.0, 2.0, 8.0], abs=1e-4)
    full = L.binned_bars([ln.train, ln.sync, ln.trainer_idle], np.linspace(0, 26, 27), lane=1)
    assert (full[2].base.tolist(), full[2].length.tolist()) == ([0.0], [20.0])  # one merged run
    # by start, then end: sample 1 (0-4 s) takes slot 0, sample 0 slot 1, sample 2 slot 0 again
    slots = assign_slots(ln.spans["t0"], ln.spans["t1"])  # the span table is in canonical order
    assert dict(zip(ln.spans["sample"].tolist(), slots.tolist(), strict=True)) == {0: 1, 1: 0, 2: 0}


@pytest.mark.parametrize("size", ["small", "large"])
def test_lane_bars_partition_the_run_and_match_the_spans(size, request):
    tl = request.getfixturevalue(size)[1].timeline
    fig = timeline_figure(tl)
    sp = span_table(tl)
    makespan = summarize(tl)["makespan_s"]
    E = tl.meta["engines"]

    tol = 1e-4 + 1e-6 * makespan  # bars are written with 6 decimals

    def on_lane(name: str, lane: int) -> float:  # seconds of that state on that lane
        t = trace(fig, name)
        on = np.abs(np.asarray(t.y) - lane) < 0.5
        thickness = np.broadcast_to(np.asarray(t.width), on.shape)
        return float(np.sum(np.asarray(t.x)[on] * thickness[on]) / L.BAND)

    for e in range(E):
        rollout, prefill = on_lane(f"engine {e}: rollout", e), on_lane(f"engine {e}: prefill", e)
        idle = on_lane("idle", e)
        assert rollout + prefill + idle == pytest.approx(makespan, abs=tol)
        # busy = holding a span or prefilling (a sample aborted as it is admitted leaves a
        # prefill without a span)
        pf = np.array([(a, b) for a, b, en, *_ in tl.prefills if en == e]).reshape(-1, 2)
        mine = sp[sp["engine"] == e]
        busy = union_length(np.r_[mine["t0"], pf[:, 0]], np.r_[mine["t1"], pf[:, 1]])
        assert rollout + prefill == pytest.approx(busy, abs=tol)
        assert rollout == pytest.approx(busy - prefill, abs=tol)
        assert prefill == pytest.approx(sum(b - a for a, b, en, *_ in tl.prefills if en == e),
                                        abs=tol)
    assert on_lane("trainer: train", E) == pytest.approx(sum(b - a for a, b, *_ in tl.trains),
                                                         abs=tol)
    assert on_lane("trainer: sync", E) == pytest.approx(sum(b - a for a, b, _ in tl.syncs),
                                                        abs=tol)


# -- the timeline figure --------------------------------------------------------------------------


def test_small_run_figure_has_a_lane_per_engine_and_trainer_and_units(small):
    _, r, _ = small
    fig = timeline_figure(r.timeline, r.summary)
    assert names(fig) == ["engine 0: rollout", "engine 0: prefill", "engine 1: rollout",
                          "engine 1: prefill", "trainer: train", "trainer: sync",
                          "engines: offload", "engines: onload", "idle",
                          "running samples (total)", "slots (2 x 8)", "engine 0 running",
                          "engine 1 running", "sample spans", "policy version"]
    lay = fig.layout
    assert list(lay.yaxis.ticktext) == ["engine 0", "engine 1", "trainer", "offload/onload"]
    assert [lay.xaxis.title.text, lay.xaxis2.title.text, lay.xaxis3.title.text] == ["time (s)"] * 3
    assert [lay.yaxis2.title.text, lay.yaxis3.title.text] == ["running samples", "sample (id)"]
    s = r.summary
    assert lay.title.text == (f"sortedrl on logic-8k ({SMALL_CLUSTER})<br>makespan "
                              f"{s['makespan_s']:,.1f} s | bubble {s['bubble_ratio']:.1%} | "
                              f"{s['tokens_per_s']:,.0f} useful tokens/s")
    # the legends name their panels
    assert [lay.legend.title.text, lay.legend2.title.text] == ["lanes", "batch size"]


def test_small_run_has_one_bar_per_span_coloured_by_version(small):
    _, r, _ = small
    tl = r.timeline
    bars = trace(timeline_figure(tl), "sample spans")
    sp = span_table(tl)
    assert len(bars.y) == len(tl.spans) == 359
    assert np.array_equal(np.asarray(bars.y), sp["sample"])
    assert np.allclose(np.asarray(bars.base), sp["t0"], atol=1e-6)
    assert np.allclose(np.asarray(bars.base) + np.asarray(bars.x), sp["t1"], atol=2e-6)
    palette = sample_colorscale("Viridis", [v / 11 for v in range(12)])
    assert list(bars.marker.color) == [palette[v] for v in sp["version"]]
    assert bars.textposition == "none"  # how a span ended: in the hover, not written on the bar
    scale = trace(timeline_figure(tl), "policy version")  # the colour bar, on the same scale
    assert scale.marker.colorbar.title.text == "policy version"
    assert (scale.marker.cmin, scale.marker.cmax) == (0, 11)
    assert scale.marker.colorscale == go.scatter.Marker(colorscale="Viridis").colorscale
    assert (scale.marker.colorbar.tick0, scale.marker.colorbar.dtick) == (0, 2)  # integers only


def test_batch_size_curve_is_the_exact_running_count(small):
    _, r, _ = small
    tl = r.timeline
    total = trace(timeline_figure(tl), "running samples (total)")
    x, y = np.asarray(total.x), np.asarray(total.y)
    sp = span_table(tl)
    for t in (5.0, 50.0, 200.0, 390.0):  # the count after the last change at or before t
        expect = int(np.sum((sp["t0"] <= t) & (sp["t1"] > t)))
        assert y[np.searchsorted(x, t, side="right") - 1] == expect
    assert y.max() <= 16


def test_large_run_aggregates_into_occupancy_curves_and_stays_small(large, tmp_path):
    rundir, r = large
    tl = r.timeline
    fig = timeline_figure(tl, r.summary)
    assert "sample spans" not in names(fig)
    versions = [t for t in fig.data if getattr(t, "stackgroup", None) == "versions"]
    assert [t.name for t in versions] == ["version 0"]  # one update: all spans at version 0
    for t in fig.data:  # every trace bounded by the bin count, never by the number of samples
        assert len(t.x) <= 3 * L.BINS + 2
    # the occupancy curve integrates to the span-seconds
    edges = np.asarray(versions[0].x)
    dt = edges[1] - edges[0]
    sp = span_table(tl)
    assert float(np.sum(np.asarray(versions[0].y)[:-1]) * dt) == pytest.approx(
        float(np.sum(sp["t1"] - sp["t0"])), rel=1e-5)
    out = write_timeline_html(tl, tmp_path / "t.html", r.summary)
    assert out.stat().st_size < len(get_plotlyjs()) + 600_000


def test_step_table_has_one_row_per_update(small, tmp_path):
    _, r, _ = small
    tl = r.timeline
    rows = step_rows(tl)
    assert len(rows) == len(tl.trains) == 12
    for u, (row, (t0, t1, v, samples, tokens)) in enumerate(zip(rows, tl.trains, strict=True)):
        assert row == (u, v, t0, t1, t1 - t0, len(samples), tokens)
    text = write_timeline_html(tl, tmp_path / "t.html").read_text()
    body = re.search(r'<table class="data" id="steps">.*?<tbody>(.*?)</tbody>', text, re.S)[1]
    html_rows = re.findall(r"<tr>(.*?)</tr>", body)
    assert len(html_rows) == 12
    first = re.findall(r"<td[^>]*>(.*?)</td>", html_rows[0])
    t0, t1, v, samples, tokens = tl.trains[0]
    # the duration shown is the end shown less the start shown (12.437 to 14.859 is 2.422,
    # though the exact 2.4225 rounds to 2.423)
    assert first == ["0", str(v), f"{t0:,.3f}", f"{t1:,.3f}", f"{round(t1, 3) - round(t0, 3):,.3f}",
                     f"{len(samples):,}", f"{tokens:,}"]
    for row in html_rows:
        cells = [float(c.replace(",", "")) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        assert round(cells[2] + cells[4], 3) == cells[3]

# -- perfetto -------------------------------------------------------------------------------------


def x_events(doc: dict) -> dict[tuple[int, int], list[dict]]:
    out: dict[tuple[int, int], list[dict]] = {}
    for ev in doc["traceEvents"]:
        if ev["ph"] == "X":
            out.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    return out


def process_names(doc: dict) -> dict[int, str]:
    return {ev["pid"]: ev["args"]["name"] for ev in doc["traceEvents"]
            if ev["ph"] == "M" and ev["name"] == "process_name"}


def test_perfetto_small_run_has_a_track_per_slot_and_exact_events(small, tmp_path):
    _, r, _ = small
    tl = r.timeline
    path = write_perfetto(tl, tmp_path / "trace.json")
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ms"
    assert process_names(doc) == {1: "engine 0", 2: "engine 1", 3: "trainer"}
    xs = x_events(doc)
    sp = span_table(tl)
    for e in range(2):
        mine = sp[sp["engine"] == e]
        slots = [evs for (pid, tid), evs in xs.items() if pid == e + 1 and tid >= 1]
        assert sum(len(evs) for evs in slots) == mine.size
        assert len(slots) <= 8  # never more slot tracks than the engine has slots
        for evs in slots:  # a slot holds one span at a time
            evs = sorted(evs, key=lambda ev: ev["ts"])
            ends, starts = [a["ts"] + a["dur"] for a in evs[:-1]], [b["ts"] for b in evs[1:]]
            assert all(end <= start + 1e-3 for end, start in zip(ends, starts, strict=True))
        activity = xs[(e + 1, 0)]
        prefills = [ev for ev in activity if ev["name"] == "prefill"]
        assert len(prefills) == sum(1 for p in tl.prefills if p[2] == e)
        busy_us = sum(ev["dur"] for ev in activity)
        pf = np.array([(a, b) for a, b, en, *_ in tl.prefills if en == e]).reshape(-1, 2)
        busy = union_length(np.r_[mine["t0"], pf[:, 0]], np.r_[mine["t1"], pf[:, 1]])
        assert busy_us == pytest.approx(busy * 1e6, abs=1.0)
    assert len(xs[(3, 0)]) == len(tl.trains) == 12 and len(xs[(3, 1)]) == len(tl.syncs)
    first = xs[(3, 0)][0]
    assert first["name"] == "update 0"
    assert first["ts"] == round(tl.trains[0][0] * 1e6, 3)
    assert first["args"] == {"version": 0, "samples": len(tl.trains[0][3]),
                             "tokens": tl.trains[0][4]}


def test_perfetto_large_run_is_bounded(large, tmp_path):
    _, r = large
    tl = r.timeline
    path = write_perfetto(tl, tmp_path / "trace.json")
    assert path.stat().st_size < 2_000_000
    doc = json.loads(path.read_text())
    xs = x_events(doc)
    # no per-sample tracks; the trainer's threads: train and the one offload (colocated; one
    # update, so no sync: none follows the last update)
    assert sorted(xs) == [(1, 0), (2, 0), (3, 0), (3, 2)]
    assert all(len(evs) <= EXPORT_BINS for evs in xs.values())
    sp = span_table(tl)
    for e in range(2):
        running = [ev for ev in doc["traceEvents"] if ev["ph"] == "C" and ev["pid"] == e + 1
                   and ev["name"] == "running samples"]
        assert len(running) == EXPORT_BINS
        dt = (running[1]["ts"] - running[0]["ts"]) / 1e6
        mine = sp[sp["engine"] == e]
        assert sum(ev["args"]["running"] for ev in running) * dt == pytest.approx(
            float(np.sum(mine["t1"] - mine["t0"])), rel=1e-4)


def test_hand_built_timeline_perfetto_events():
    doc = trace_events(hand_timeline())
    xs = x_events(doc)
    assert [(ev["name"], ev["ts"], ev["dur"]) for ev in xs[(1, 0)]] == [
        ("rollout", 1e6, 9e6), ("rollout", 13e6, 7e6), ("prefill", 0.0, 1e6),
        ("prefill", 12e6, 1e6)]
    assert [ev["name"] for ev in xs[(1, 1)]] == ["sample 1", "sample 2"]
    assert [ev["name"] for ev in xs[(1, 2)]] == ["sample 0"]
    assert [(ev["name"], ev["ts"], ev["dur"]) for ev in xs[(2, 0)]] == [("update 0", 20e6, 5e6)]
    assert [(ev["name"], ev["ts"]) for ev in xs[(2, 1)]] == [("sync to version 1", 25e6)]
