"""Invariants of every built-in policy on traces with turns (hypothesis).

- every sample ends trained or discarded, none twice; generated = useful + wasted tokens, and a
  trained sample's spans on its last attempt add up to that attempt's length;
- no span of a sample overlaps its tool calls, and the span before each call ends with ``tool``
  when the call is asked for;
- a slot is never held during a tool call unless the cluster says so (``tool_holds_slot``): then
  running samples plus trajectories away on a tool call (until it returns, or until a policy
  pauses them) never exceed an engine's ``max_num_seqs`` (without it they may: the case below);
- the sandbox pool is never exceeded, and sandboxes go first come first served;
- a recorded trajectory's tool calls take the trace's latencies, one per turn boundary;
- staleness stays within the policy's bound (counted per token across turns).

Run: pytest tests/test_sim_turns_invariants.py
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sortedrl.compare import cluster_for
from sortedrl.policies.registry import BUILTIN, make_policy
from sortedrl.sim.attempts import AttemptLengths
from sortedrl.sim.run import simulate
from tests.conftest import tiny_cluster
from tests.test_policies_invariants import KNOBS
from tests.turns_helpers import make_turn_trace


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(BUILTIN)))
    group = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.integers(1, 6))
    steps = draw(st.integers(1, 3))
    n = group * groups * steps
    turns = [[(draw(st.integers(1, 40)), draw(st.sampled_from([0.0, 0.5, 3.0, 17.0])),
               draw(st.integers(0, 20))) for _ in range(draw(st.integers(1, 3)))] for _ in range(n)]
    prompts = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    longest = max(prompts) + max(sum(g for g, _, _ in row) + sum(k for _, _, k in row[:-1])
                                 for row in turns)
    cluster = dataclasses.replace(
        tiny_cluster(engines=draw(st.integers(1, 3)) + 1, max_num_seqs=draw(st.integers(1, 8)),
                     kv=draw(st.integers(longest + 3, longest + 400)), kv_read_s_per_token=1e-3, prefill_s_per_token=1e-2,
                     train_per_token=1e-3),
        train_gpus=1, placement=draw(st.sampled_from(["colocated", "disaggregated"])),
        tool_pool=draw(st.sampled_from([1, 2, 4, 64])), prefix_caching=draw(st.booleans()),
        tool_holds_slot=draw(st.booleans()))
    return name, KNOBS[name](draw, groups * steps, n), turns, prompts, group, steps, cluster


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_policy_keeps_its_invariants_with_turns(case):
    name, sets, turns, prompts, group, steps, cluster = case
    n = len(turns)
    trace = make_turn_trace(turns, prompts, group_size=group,
                            steps=[i * steps // n for i in range(n)])
    policy = make_policy(name, sets, trace)
    r = simulate(trace, policy, cluster_for(policy.placements, cluster), audit=True)
    tl, s = r.timeline, r.summary

    trained = Counter(i for t in tl.trains for i in t[3])
    discarded = {i for d in tl.discards for i in d[1]}
    assert all(c == 1 for c in trained.values()), "a sample was trained twice"
    assert set(trained) | discarded == set(range(n)) and not set(trained) & discarded
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]
    last, tokens = {}, defaultdict(int)
    for span in tl.spans:
        last[span[3]] = max(last.get(span[3], 0), span[4])
    for span in tl.spans:
        if span[4] == last[span[3]]:
            tokens[span[3]] += span[6]
    draw = AttemptLengths(trace, seed=0)
    assert all(tokens[i] == draw.length(i, last[i]) for i in trained)

    _no_decoding_during_a_tool_call(tl)
    peak = _peak_slots_with_tool_calls(tl, cluster.engines)
    if cluster.tool_holds_slot:
        assert peak <= cluster.max_num_seqs, "a trajectory's held slot was given to another"
    _sandbox_pool_respected(tl, cluster.tool_pool)
    for _t, t_start, t_end, _e, i, attempt, turn, tokens in tl.tools:
        if attempt == 0:
            assert abs((t_end - t_start) - turns[i][turn][1]) < 1e-9
            assert tokens == turns[i][turn][2]  # the record carries the call's output tokens
    for i in trained:
        if last[i] == 0:  # the recorded trajectory: one tool call after each turn but the last
            calls = sorted(row[6] for row in tl.tools if row[4] == i and row[5] == 0)
            assert calls == list(range(len(turns[i]) - 1))
    bound = policy.staleness_bound()
    if bound is not None:
        assert s["staleness_max"] <= bound, (name, sets, s["staleness_max"], bound)


def _no_decoding_during_a_tool_call(tl):
    spans = defaultdict(list)
    for t0, t1, _e, i, a, _v, _k, end in tl.spans:
        spans[i].append((t0, t1, a, end))
    for t, _ts, t_end, _e, i, a, _turn, _tokens in tl.tools:
        assert any(t1 == t and att == a and end == "tool" for _, t1, att, end in spans[i])
        for t0, t1, att, _ in spans[i]:  # (a dropped attempt's call may outlive it)
            assert att != a or t1 <= t or t0 >= t_end, f"sample {i} held a slot during its tool call"


@pytest.mark.parametrize("holds, peak", [(False, 2), (True, 1)])
def test_a_freed_slot_is_filled_during_a_tool_call_and_a_held_one_is_not(holds, peak):
    # the bound above is no tautology: one slot, two trajectories; with the slot freed the second
    # runs while the first is away on its tool call
    trace = make_turn_trace([[(2, 5.0, 4), (3, 0.0, 0)]] * 2, [2, 2])
    cluster = dataclasses.replace(tiny_cluster(max_num_seqs=1, prefill_s_per_token=0.5), tool_holds_slot=holds)
    r = simulate(trace, make_policy("sync", [], trace), cluster, audit=True)
    assert _peak_slots_with_tool_calls(r.timeline, 1) == peak


def _peak_slots_with_tool_calls(tl, engines):
    """Most of one engine's slots taken at once by running samples and trajectories away on a
    tool call (from leaving at ``t`` until the call returns, or a policy pauses them first)."""
    paused = defaultdict(list)
    for t, samples, _keep in tl.aborts:
        for i in samples:
            paused[i].append(t)
    edges = [(t0, 1, e) for t0, _t1, e, *_ in tl.spans] + [(t1, -1, e) for _t0, t1, e, *_ in tl.spans]
    for t, _ts, t_end, e, i, _a, _turn, _tokens in tl.tools:
        end = min([t_end] + [p for p in paused[i] if p >= t])
        edges += [(t, 1, e), (end, -1, e)]
    busy, peak = [0] * engines, 0
    for _, d, e in sorted(edges, key=lambda x: (x[0], x[1])):  # a slot freed at t is free at t
        busy[e] += d
        peak = max(peak, busy[e])
    return peak


def _sandbox_pool_respected(tl, pool):
    edges = sorted([(ts, 1) for _, ts, _, *_ in tl.tools] + [(te, -1) for _, _, te, *_ in tl.tools],
                   key=lambda e: (e[0], e[1]))  # a sandbox freed at t is free for a call at t
    busy = 0
    for _, d in edges:
        busy += d
        assert busy <= pool, "more tool calls ran at once than the pool has sandboxes"
    started = [ts for _, ts in sorted((t, ts) for t, ts, *_ in tl.tools)]
    assert started == sorted(started), "sandboxes were not handed out first come first served"
