"""The simulator against cases small enough to compute by hand from the cost model.

Run: pytest tests/test_sim_handcomputed.py
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


def run(trace, cluster, sets=()):
    return simulate(trace, make_policy("sync", list(sets), trace), cluster)


def test_two_samples_one_engine_exact_makespan():
    # step cost = step_fixed_s + weight_read_s = 2 s, prefill = step_fixed_s + weight_read_s = 2 s,
    # train = 10 s, sync = 5 s, but none after the last update (no engine runs its weights).
    # Both admitted together: one prefill (2 s) gives each its first token; the 3-token sample
    # needs 2 more decode steps (4 s), the 5-token one 4 more (8 s).
    r = run(make_trace([3, 5]), tiny_cluster())
    spans = sorted(r.timeline.spans, key=lambda s: s[3])
    assert [(s[0], s[1], s[6], s[7]) for s in spans] == [(0.0, 6.0, 3, "finish"), (0.0, 10.0, 5, "finish")]
    assert r.timeline.trains[0][:2] == (10.0, 20.0)
    assert r.timeline.syncs == []
    s = r.summary
    assert s["makespan_s"] == 20.0
    assert s["rollout_s"] == 10.0
    # busy slot-seconds 6 + 10 = 16 over 4 slots x 10 s
    assert s["bubble_ratio"] == pytest.approx(1 - 16 / 40)
    assert s["generated_tokens"] == s["useful_tokens"] == 8
    assert (s["updates"], s["samples_trained"], s["staleness_max"]) == (1, 2, 0)


def test_kv_memory_term_grows_with_context():
    # kv_read_s_per_token = 0.5 s per KV token: one sample, prompt 2, 3 tokens.
    # prefill 2 s (step_fixed_s + weight_read_s); after it kv = 3; steps read kv 3 then 4: 1+1+1.5, 1+1+2.
    tr = make_trace([3], prompt_lens=[2])
    r = run(tr, tiny_cluster(kv_read_s_per_token=0.5))
    (span,) = r.timeline.spans
    assert span[1] == 2.0 + 3.5 + 4.0


def test_compute_bound_branch():
    # compute_s_per_seq = 3 s per sequence: with 2 sequences compute (6 s) beats memory (1 s).
    r = run(make_trace([2, 2]), tiny_cluster(compute_s_per_seq=3.0))
    # prefill max(weight_read_s, 0) + step_fixed_s = 2 s; one decode step = 1 + max(1, 6) = 7 s
    assert [s[1] for s in r.timeline.spans] == [9.0, 9.0]


def test_max_num_seqs_queues_the_rest():
    # capacity 1: samples run one after the other; each: prefill 2 s + (L-1) steps of 2 s.
    r = run(make_trace([2, 3]), tiny_cluster(max_num_seqs=1))
    spans = [(s[3], s[0], s[1]) for s in r.timeline.spans]
    assert spans == [(0, 0.0, 4.0), (1, 4.0, 10.0)]


def test_kv_budget_preempts_the_newest_and_recomputes():
    # K = 10 tokens; prompts 1. Two samples of 5 tokens admitted: kv after prefill 2+2 = 4.
    # Steps run while kv + 2 <= 10: kv 4 -> 6 -> 8 -> 10 (3 steps, 4 tokens each... at kv 10 the
    # next step cannot run: sample 1 (newest) is preempted with 4 tokens, then re-admitted
    # after sample 0 finishes, recomputing 4 tokens.
    r = run(make_trace([5, 5], prompt_lens=[1, 1]), tiny_cluster(kv=10))
    ends = [(s[3], s[7], s[6]) for s in r.timeline.spans]
    assert ends[0] == (1, "preempt", 4)
    assert (0, "finish", 5) in ends and (1, "finish", 1) in ends
    assert r.summary["recomputed_tokens"] == 4
    assert r.summary["preemptions"] == 1
    assert r.summary["generated_tokens"] == r.summary["useful_tokens"] == 10


def test_minibatches_make_later_updates_stale():
    r = run(make_trace([2, 2, 2, 2]), tiny_cluster(), sets=["minibatches=2"])
    assert [t[2] for t in r.timeline.trains] == [0, 1]
    s = r.summary
    assert (s["updates"], s["staleness_max"], s["staleness_mean"]) == (2, 1, 0.5)


def test_lower_bound_charges_a_cached_group_prompt_once():
    # Two groups of 4 with 100-token prompts; prefill costs prefill_s_per_token = 0.01 s a token and nothing
    # else, one engine. Without prefix caching the bound's prefill is 8 x 100 tokens (8 s);
    # with it each group's prompt once plus the last prompt token of each other member:
    # 2 x 100 + 6 = 206 tokens (2.06 s). Decode: 7 tokens at batch 4 (2 s a step, peak 2 tok/s
    # a slot... 4 / 2 = 2 tok/s): (8 x 3 - 8) / 2 = 8 s; chain 2 x 2 = 4 s; train 10 s.
    from sortedrl.sim.run import lower_bound, prefill_tokens_floor
    trace = make_trace([3] * 8, prompt_lens=[100] * 8, group_size=4)
    cached = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.01), prefix_caching=True)
    plain = dataclasses.replace(cached, prefix_caching=False)
    assert prefill_tokens_floor(trace, True) == 206
    assert prefill_tokens_floor(trace, False) == 800
    assert lower_bound(trace, plain) == pytest.approx(8 + 8 + 10)
    assert lower_bound(trace, cached) == pytest.approx(8 + 2.06 + 10)
    assert run(trace, cached).summary["lower_bound_s"] == pytest.approx(8 + 2.06 + 10)


def test_efficiency_stays_within_1_when_long_prompts_are_cached():
    # The audit's case: long shared prompts and short responses on a GPU preset (prefix caching
    # on by default). The bound charged every member's prompt, which the engines prefill once a
    # group, so sync, which discards nothing, reached efficiency 1.09.
    from sortedrl.sim.cluster import preset
    lengths = [20 + (7 * i) % 45 for i in range(512)]
    trace = make_trace(lengths, prompt_lens=[6000] * 512, group_size=8, max_len=64)
    s = run(trace, preset("h100-llama3.1-8b-2gpu")).summary
    assert s["samples_trained"] == 512 and s["wasted_tokens"] == 0
    assert 0.9 < s["efficiency"] <= 1.0


def test_a_span_aborted_in_its_prefill_adds_no_staleness():
    # Sample 2 (one token) is paused in its prefill under version 0 with no token made, then
    # makes its token under version 1 and trains from version 1: every useful token is
    # on-policy, so the maximum staleness is 0 (it was 1, from the empty span).
    trace = make_trace([14, 9, 1, 18], prompt_lens=[11, 4, 12, 7], group_size=2)
    sets = ["mode=partial", "max_span=1", "update_batch=2", "group_prompts=2"]
    r = simulate(trace, make_policy("sortedrl", sets, trace), tiny_cluster(max_num_seqs=1, kv=165),
                 regen="same")
    spans = [(s[0], s[1], s[5], s[6], s[7]) for s in r.timeline.spans if s[3] == 2]
    assert spans == [(46.0, 46.0, 0, 0, "abort"), (63.0, 65.0, 1, 1, "finish")]
    s = r.summary
    assert (s["staleness_mean"], s["staleness_p95"], s["staleness_max"]) == (0.0, 0, 0)


def test_the_weights_are_pushed_between_steps_not_after_the_last():
    # the run above twice: step 0 ends its update at 20 and pushes version 1 (20-25) for step 1,
    # which rolls out 25-35 and trains 35-45; nothing runs version 2, so it is not pushed
    r = run(make_trace([3, 5, 3, 5], steps=[0, 0, 1, 1]), tiny_cluster())
    assert [t[:2] for t in r.timeline.trains] == [(10.0, 20.0), (35.0, 45.0)]
    assert r.timeline.syncs == [(20.0, 25.0, 1)]
    assert (r.summary["makespan_s"], r.summary["sync_s"]) == (45.0, 5.0)


def test_the_bound_takes_the_fastest_step_of_a_step_table_that_dips():
    # A hand-written step table slower at batch 1 (1 s) than at 2-4 (0.25 s). Two samples of 5
    # tokens (4 decode steps each: the prefill yields the first) on one engine of 4 slots: the
    # chain floor is 4 steps of the fastest step, 1.0 s (it took batch 1's 4 s, which sync beat:
    # a bound of 14 s, efficiency 1.27); work 8 tokens at the peak of 4 / 0.25 s, 0.5 s; training 10 s.
    table = (1.0, 0.25, 0.25, 0.25)
    cl = tiny_cluster(weight_read_s=0.0, step_fixed_s=0.0, step_table=table)
    assert cl.cost().fastest_step(4) == 0.25 and cl.cost().fixed(1) == 1.0
    r = run(make_trace([5, 5], prompt_lens=[1, 1]), cl)
    assert r.summary["lower_bound_s"] == 1.0 + 10.0
    assert r.summary["makespan_s"] == 1.0 + 10.0  # both run at batch 2 throughout: 4 x 0.25 s
    assert r.summary["efficiency"] == 1.0


def test_a_step_table_never_falls_past_its_end():
    # its last slope goes on past the table, but not down: a dip at the end stays flat (it went
    # on falling, to a negative step at a batch of 5)
    cl = tiny_cluster(step_table=(1.0, 0.5))
    assert [cl.cost().fixed(b) for b in (1, 2, 3, 5)] == [1.0, 0.5, 0.5, 0.5]
    rising = tiny_cluster(step_table=(1.0, 1.5))
    assert rising.cost().fixed(4) == 2.5


def test_an_moe_chunk_reads_the_experts_its_prompt_tokens_route_to():
    # 4 experts, 1 per token, 1 s an expert: a step of b tokens reads 4·(1 − (3/4)^b) experts.
    # 5 prompt tokens in chunks of 3 beside 1 decoding sequence (2 mixed steps: 3 + 2 tokens):
    # (W(4) − W(1)) + (W(3) − W(1)) = 4·((3/4)^1 − (3/4)^4) + 4·((3/4)^1 − (3/4)^3) s
    c = dataclasses.replace(tiny_cluster(weight_read_s=0.0).cost(), expert_read=1.0, experts=4,
                            experts_per_token=1)
    want = 4 * (0.75 - 0.75**4) + 4 * (0.75 - 0.75**3)
    assert abs(c.chunk_expert_read(1, 5, 3, 2) - want) < 1e-12
    assert c.chunk_expert_read(1, 0, 3, 0) == 0.0
    assert tiny_cluster().cost().chunk_expert_read(1, 5, 3, 2) == 0.0  # dense: read whole anyway


def test_an_moe_chunked_prefill_is_no_cheaper_than_its_experts_read():
    # a 200-token prompt alone on a Qwen3-30B-A3B engine: its chunked prefill took 3.6 ms, less
    # than reading the weights its tokens need (10.9 ms by the same cost model)
    from sortedrl.sim.cluster import preset

    cl = preset("h100-qwen3-30b-a3b-2gpu")
    tr = make_trace([50], prompt_lens=[200])
    r = run(tr, cl)
    t0, t1 = r.timeline.prefills[0][:2]
    assert t1 - t0 >= cl.cost().weight_read(200)


@pytest.mark.parametrize("size", [5, 300])
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_an_updates_attention_pairs_are_the_sum_of_each_samples(size, data):
    """CostModel.train_pairs: L·(L+1)/2 per sample of length L, summed exactly, a Python int; a
    batch of 256 or more is summed in int64 where that cannot overflow (lengths near 2**31 would:
    summed in Python)."""
    lengths = data.draw(st.lists(st.integers(1, 40_000) if data.draw(st.booleans()) else
                                 st.integers(1, 2**31 - 1), min_size=size, max_size=size))
    pairs = tiny_cluster().costs.train_pairs(lengths)
    assert pairs == sum(n * (n + 1) // 2 for n in lengths) and type(pairs) is int
