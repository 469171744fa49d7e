"""Colocated engines step aside for each update: offload before it, onload before rollout resumes.

Hand-computed with round costs (``tests/conftest.py``): prefill 2 s, decode steps 2 s, an update
10 s, a weight sync 5 s, offload 3 s and onload 4 s.

Run: pytest tests/test_sim_offload.py
"""

from __future__ import annotations

import json

from sortedrl.metrics import summarize
from sortedrl.plot.perfetto import perfetto_json
from sortedrl.plot.timeline_plot import timeline_figure
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from tests.conftest import make_trace, tiny_cluster


def run(**costs):
    trace = make_trace([4, 4], prompt_lens=[10, 10], steps=[0, 1])
    return simulate(trace, make_policy("sync", [], trace), tiny_cluster(**costs), audit=True)


def test_offload_and_onload_lanes_around_each_colocated_update():
    # step 0: rollout 0-8; offload 8-11; update 11-21; sync 21-26; onload 26-30, so step 1's
    # prefill starts at 30: rollout 30-38; offload 38-41; update 41-51. Nothing is left to roll
    # out after the last update, so no sync and no onload follow it.
    r = run(offload_s=3.0, onload_s=4.0)
    tl = r.timeline
    assert tl.offloads == [(8.0, 11.0, 0), (38.0, 41.0, 1)]
    assert tl.onloads == [(26.0, 30.0, 1)]
    assert [t[:3] for t in tl.trains] == [(11.0, 21.0, 0), (41.0, 51.0, 1)]
    assert [s[:2] for s in tl.spans] == [(0.0, 8.0), (30.0, 38.0)]
    assert r.summary["offload_s"] == 10.0
    assert r.summary["makespan_s"] == 51.0
    assert r.summary["gpu_idle_ratio"] == 0.0  # moving weights keeps the GPUs busy
    base = run()
    assert base.summary["offload_s"] == 0.0 and base.summary["makespan_s"] == 51.0 - 10.0
    assert base.timeline.offloads == base.timeline.onloads == []


def test_offload_records_round_trip_and_show_as_lanes(tmp_path):
    r = run(offload_s=3.0, onload_s=4.0)
    r.timeline.write_jsonl(tmp_path / "t.jsonl")
    back = Timeline.read_jsonl(tmp_path / "t.jsonl")
    assert back.offloads == r.timeline.offloads and back.onloads == r.timeline.onloads
    assert summarize(back) == r.summary
    fig = timeline_figure(back, r.summary)
    bars = {t.name: t for t in fig.data}
    assert list(bars["engines: offload"].base) == [8.0, 38.0]
    assert list(bars["engines: offload"].x) == [3.0, 3.0]
    assert list(bars["engines: onload"].base) == [26.0] and list(bars["engines: onload"].x) == [4.0]
    assert list(fig.layout.yaxis.ticktext)[-1] == "offload/onload"
    events = json.loads(perfetto_json(back))["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") in ("offload", "onload")] == [
        "offload (version 0)", "offload (version 1)", "onload (version 1)"]
