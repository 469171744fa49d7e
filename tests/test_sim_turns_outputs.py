"""Tool calls in what a multi-turn run writes: the timeline file, the plot's lanes, Perfetto.

The run is the hand-computed one of tests/test_sim_turns.py with a pool of one sandbox: both
trajectories leave at 5 s; sample 0's call runs 5-10 while sample 1 waits for the sandbox, then
runs 10-15.

Run: pytest tests/test_sim_turns_outputs.py
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from sortedrl.metrics import summarize
from sortedrl.plot import lanes as L
from sortedrl.plot.perfetto import trace_events
from sortedrl.plot.timeline_plot import timeline_figure
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from tests.conftest import tiny_cluster
from tests.turns_helpers import make_turn_trace


@pytest.fixture(scope="module")
def run():
    trace = make_turn_trace([[(2, 5.0, 4), (3, 0.0, 0)]] * 2, prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5), tool_pool=1)
    return simulate(trace, make_policy("sync", [], trace), cluster)


def test_the_timeline_file_keeps_the_tool_calls(run, tmp_path):
    path = tmp_path / "timeline.jsonl"
    run.timeline.write_jsonl(path)
    tools = [json.loads(line) for line in path.read_text().splitlines() if '"kind":"tool"' in line]
    assert tools == [
        {"kind": "tool", "t": 5.0, "t_start": 5.0, "t_end": 10.0, "engine": 0, "sample": 0,
         "attempt": 0, "turn": 0, "tokens": 4},
        {"kind": "tool", "t": 5.0, "t_start": 10.0, "t_end": 15.0, "engine": 0, "sample": 1,
         "attempt": 0, "turn": 0, "tokens": 4}]
    back = Timeline.read_jsonl(path)
    assert json.dumps(summarize(back), sort_keys=True) == json.dumps(run.summary, sort_keys=True)


def test_the_plot_has_a_tool_lane_and_the_away_count(run):
    ln = L.lanes(run.timeline)
    assert L.total(ln.sandbox_full) == 5.0  # 5-10: sample 1 waits, the pool is full
    assert L.total(ln.tool) == 5.0  # 10-15: a call runs and nobody waits
    assert ln.away[1].max() == 2 and ln.makespan == 32.0  # the update ends it (no sync after)
    fig = timeline_figure(run.timeline, run.summary)
    names = {t.name for t in fig.data}
    assert {"tools: calls running", "tools: pool full, calls queue", "away on tool calls"} <= names
    assert "tool calls" in fig.layout.yaxis.ticktext


def test_perfetto_shows_sandboxes_and_waits(run):
    doc = trace_events(run.timeline)
    tools_pid = next(e["pid"] for e in doc["traceEvents"]
                     if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == "tools")
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "tool"]
    assert [(e["name"], e["ts"], e["dur"], e["args"]["waited_s"]) for e in calls] == [
        ("sample 0 turn 0", 5e6, 5e6, 0.0), ("sample 1 turn 0", 10e6, 5e6, 5.0)]
    assert {e["pid"] for e in calls} == {tools_pid}
    waits = [(e["ts"], e["args"]["waiting"]) for e in doc["traceEvents"]
             if e["ph"] == "C" and e["name"] == "waiting for a sandbox"]
    assert waits == [(0.0, 0), (5e6, 1), (10e6, 0)]


def test_a_tool_pool_of_zero_is_one_error_line_exit_2_and_nothing_written(tmp_path):
    from typer.testing import CliRunner

    from sortedrl.cli import app
    from tests.test_cli import LOGIC

    cluster = tmp_path / "pool0.json"
    cluster.write_text(json.dumps({"preset": "h100-llama3.1-8b", "tool_pool": 0}))
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--trace", LOGIC, "--policy", "sync", "--cluster",
                                 str(cluster), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"error: {cluster}: field 'tool_pool': must be >= 1, got 0"
    assert not out.exists()
