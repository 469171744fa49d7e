"""Multi-turn findings of an audit, each pinned: the lower bound is a floor when tool calls run
through updates, a dropped trajectory's queued tool call gets no sandbox, a rebuilt trace row
keeps its tool-output tokens, and two bad inputs are named in one line.

Costs (tests/conftest.py): a batch-1 decode step is step_fixed_s + weight_read_s = 2 s, an update train_fix = 10 s
plus train_per_token per token where a test sets it.

Run: pytest tests/test_agentic_findings.py
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sortedrl.errors import TraceError
from sortedrl.policies.registry import make_policy
from sortedrl.realrun.run_trace import _span_turns, _turn_fields
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import lower_bound, simulate
from sortedrl.timeline import Timeline
from sortedrl.timeline_file import read_timeline, write_npz
from sortedrl.traces import read_trace, write_trace
from sortedrl.traces.importers import import_framework
from sortedrl.traces.io import BUNDLED
from sortedrl.traces.synth import synthesize
from tests.conftest import tiny_cluster
from tests.turns_helpers import make_turn_trace

# -- lower_bound_s with turns ------------------------------------------------------------------


def _small_cluster():
    """The audit's c_small.json: 2 engines of 8 slots, 4 sandboxes, a 20,000-token KV budget."""
    return dataclasses.replace(preset("h100-llama3.1-8b-2gpu-8seq"), tool_pool=4,
                               kv_budget_tokens=20_000)


def _long_call_trace():
    """agentic-retool (8 prompts x 4, 4 steps) with sample 5's first tool call made 3000 s."""
    trace = synthesize("agentic-retool", prompts=8, group_size=4, steps=4)
    first = int(trace.turn_offsets[5])
    assert trace.turn_offsets[6] - first > 1  # sample 5 has a tool call to lengthen
    trace.turn_tool_s = trace.turn_tool_s.copy()
    trace.turn_tool_s[first] = 3000.0
    return trace


def test_a_tool_call_through_an_update_stays_above_the_lower_bound():
    # partial pauses sample 5 during its 3000 s call and trains the others meanwhile (the call
    # runs on through those updates), so the run beats chain + every update: that sum (3037.96 s)
    # was the old bound and gave efficiency 1.004. The bound is now the chain plus only the
    # update that must train sample 5 after its last token.
    trace, cluster = _long_call_trace(), _small_cluster()
    r = simulate(trace, make_policy("partial", [], trace), cluster, regen="same")
    s = r.summary
    assert s["makespan_s"] == 3025.657457  # its last update's end (no sync after it)
    assert s["lower_bound_s"] == 3005.594912
    assert s["efficiency"] == 0.993369 and s["efficiency"] <= 1.0


def test_the_lower_bound_with_turns_by_hand():
    # colocated, train_per_token 1 s. Sample 0: turns of 2 and 6 tokens (prompt 2) around a 40 s
    # tool call; sample 1: 3 tokens (prompt 2). GPU floor: chain (8 - 2) x 2 = 12 s (each turn's
    # first token comes from a prefill) plus one update on all 15 tokens, 10 + 15 = 25: 37. Sample 0's own chain: 8 - 2 = 6 decode steps,
    # 12 s, plus its 40 s call, then the update that trains it, 10 + 10 tokens: 72. The pool
    # (one sandbox): 40 s, then that update again: 60. The old bound added every update to the
    # chain: 52 + 25 = 77. Disaggregated keeps max(work, chains, pool, train) = 52.
    trace = make_turn_trace([[(2, 40.0, 2), (6, 0.0, 0)], [(3, 0.0, 0)]], prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(train_per_token=1.0), tool_pool=1)
    assert lower_bound(trace, cluster) == 72.0
    split = dataclasses.replace(cluster, placement="disaggregated", gpus=2, train_gpus=1)
    assert lower_bound(trace, split) == 52.0
    # a pool of sandboxes too small for the calls: 3 calls of 40 s in one sandbox, 120 s, then
    # the smallest update of a sample with a call (prompt 2 + 4 tokens: 16 s)
    three = make_turn_trace([[(2, 40.0, 1), (2, 0.0, 0)]] * 3, prompt_lens=[2, 2, 2])
    assert lower_bound(three, cluster) == 120.0 + 16.0


def test_the_gpu_chain_counts_no_decode_step_for_a_turns_first_token():
    # one trajectory of three 4-token turns around instant tool calls (prompt 2), colocated,
    # batch-1 step 2 s, update 10 s + 1 s a token: each turn's first token comes from the
    # prefill of its prompt or tool output, so the chain is 12 - 3 = 9 decode steps, 18 s, and
    # the bound 18 + (10 + 14) = 42 s (it counted 11 steps, 46 s); the run takes 50 s: three
    # 2 s prefills beside the 18 s, and its update on 16 tokens (the tool outputs included)
    trace = make_turn_trace([[(4, 0.0, 1), (4, 0.0, 1), (4, 0.0, 0)]], prompt_lens=[2])
    cluster = dataclasses.replace(tiny_cluster(train_per_token=1.0, sync_s=0.0), tool_pool=1)
    assert lower_bound(trace, cluster) == 42.0
    s = simulate(trace, make_policy("sync", [], trace), cluster).summary
    assert (s["makespan_s"], s["lower_bound_s"], s["efficiency"]) == (50.0, 42.0, 0.84)


@pytest.mark.parametrize("name, cluster, bound", [
    ("math-16k", "h100-llama3.1-8b-2gpu", 483.534194), ("math-16k", "h100-llama3.1-8b-2gpu-disagg", 741.756022),
    ("logic-8k", "h100-llama3.1-8b-2gpu", 189.10117), ("logic-8k", "h100-llama3.1-8b-2gpu-disagg", 266.558719)])
def test_single_turn_bounds_are_unchanged(name, cluster, bound):
    # the bundled traces' bounds as the summaries had them before turns changed the formula:
    # max(work, chain) + train colocated, max(work, chain, train) disaggregated
    assert round(lower_bound(read_trace(BUNDLED / f"{name}.jsonl"), preset(cluster)), 6) == bound


# -- a dropped trajectory's queued tool call ---------------------------------------------------


def test_a_dropped_attempts_queued_call_never_gets_a_sandbox():
    # sortedrl (on-policy) drops the unfinished trajectories at each update; one of 4 sandboxes
    # for 32 trajectories keeps calls queued when that happens. A queued call of a dropped
    # attempt is void: no tool record may start after its attempt was dropped. (update_batch=8,
    # half the 16 slots, for many harvests: the auto trigger is a quarter of the group, 32)
    trace = read_trace_rt2()
    r = simulate(trace, make_policy("sortedrl", ["update_batch=8"], trace), _small_cluster(),
                 regen="same")
    drops: dict[int, list[float]] = {}
    for t, samples, keep in r.timeline.rows("abort"):
        if not keep:
            for i in samples:
                drops.setdefault(i, []).append(t)
    queued = [row for row in r.timeline.rows("tool")
              if any(row[0] < t < row[1] for t in drops.get(row[4], []))]
    assert queued == []
    assert sum(len(v) for v in drops.values()) > 100  # the case has drops to test
    s = r.summary
    assert (s["tool_calls"], s["makespan_s"]) == (1381, 680.440775)  # (no sync after the last update)


def read_trace_rt2():
    """The audit's rt2.jsonl: ``trace synth agentic-retool --prompts 8 --group-size 4 --steps 4``."""
    return synthesize("agentic-retool", prompts=8, group_size=4, steps=4)


# -- the tool record's tokens ------------------------------------------------------------------


def test_rebuilt_rows_keep_their_tool_tokens(tmp_path):
    # run_trace rebuilds a sample's turns from the timeline (spans and tool records); both file
    # formats carry each call's output tokens, so every row comes back as the trace has it
    trace = read_trace_rt2()
    r = simulate(trace, make_policy("sync", [], trace), _small_cluster(), regen="same")
    r.timeline.write_jsonl(tmp_path / "timeline.jsonl")
    write_npz(r.timeline, tmp_path / "timeline.npz")
    off = trace.turn_offsets
    for name in ("timeline.jsonl", "timeline.npz"):
        tl = read_timeline(tmp_path / name)
        for i in range(len(trace)):
            got = _turn_fields(_span_turns(tl, i, 0))
            assert got["turn_gen"] == trace.turn_gen[off[i]:off[i + 1]].tolist()
            assert got["turn_tool_tokens"] == trace.turn_tool_tokens[off[i]:off[i + 1]].tolist()
    assert int(trace.turn_tool_tokens.sum()) > 0


def test_an_older_timeline_without_tool_tokens_still_reads(tmp_path):
    # written before tool records carried tokens: each call reads as 0 tokens, as it did
    trace = make_turn_trace([[(2, 5.0, 4), (3, 0.0, 0)]] * 2, prompt_lens=[2, 2])
    r = simulate(trace, make_policy("sync", [], trace), dataclasses.replace(tiny_cluster(), tool_pool=2))
    r.timeline.write_jsonl(tmp_path / "new.jsonl")
    lines = (tmp_path / "new.jsonl").read_text().splitlines()
    old = []
    for line in lines:
        rec = json.loads(line)
        if rec["kind"] == "tool":
            assert rec.pop("tokens") == 4
        old.append(json.dumps(rec))
    (tmp_path / "old.jsonl").write_text("\n".join(old) + "\n")
    want = [(4.0, 4.0, 9.0, 0, 0, 0, 0, 0), (4.0, 4.0, 9.0, 0, 1, 0, 0, 0)]
    assert read_timeline(tmp_path / "old.jsonl").rows("tool") == want
    assert Timeline.read_jsonl(tmp_path / "old.jsonl").rows("tool") == want
    write_npz(r.timeline, tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz") as z:
        arrays = {k: z[k] for k in z.files if k != "tool.tokens"}
    np.savez(tmp_path / "old.npz", **arrays)
    assert read_timeline(tmp_path / "old.npz").rows("tool") == want
    assert _turn_fields(_span_turns(read_timeline(tmp_path / "old.npz"), 0, 0))[
        "turn_tool_tokens"] == [0, 0]


# -- bad inputs, one line each -----------------------------------------------------------------


def test_an_infinite_nemo_gym_latency_names_its_field(tmp_path):
    call = {"response_id": "a", "latency": float("inf"), "timestamp": "2025-01-01T00:00:02"}
    rollout = {"instance_id": "x", "resolved": True, "per_turn_metrics": {
        "response_latencies": [call],
        "token_usages": [{"response_id": "a", "prompt_tokens": 100, "completion_tokens": 20}],
        "action_execution_latencies": []}}
    path = tmp_path / "ng.jsonl"
    path.write_text(json.dumps(rollout) + "\n")  # (json writes Infinity)
    with pytest.raises(TraceError) as e:
        import_framework("nemo-gym", path)
    assert str(e.value) == (f"{path}: line 1: field 'per_turn_metrics.response_latencies[0]"
                            ".latency': expected seconds, got inf")


def test_a_null_turn_value_in_parquet_names_row_and_turn(tmp_path):
    trace = make_turn_trace([[(2, 5.0, 4), (3, 0.0, 0)], [(1, 1.0, 7), (2, 2.0, 8), (3, 0.0, 0)]],
                            prompt_lens=[2, 2])
    write_trace(trace, tmp_path / "good.parquet")
    table = pq.read_table(tmp_path / "good.parquet")
    rows = table.column("turn_tool_tokens").to_pylist()
    rows[1][1] = None
    col = table.schema.get_field_index("turn_tool_tokens")
    typ = pa.list_(pa.int64())
    bad = table.set_column(col, pa.field("turn_tool_tokens", typ), pa.array(rows, type=typ))
    pq.write_table(bad.replace_schema_metadata(table.schema.metadata), tmp_path / "bad.parquet")
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "bad.parquet")
    assert str(e.value) == f"{tmp_path / 'bad.parquet'}: row 2: field 'turn_tool_tokens': turn 2 is null"
