"""Invariants of every simulated run, over random traces and clusters (hypothesis).

- every sample finishes exactly once, and is trained exactly once;
- tokens are conserved: a sample's spans add up to its length; generated = useful + wasted;
- an engine never exceeds max_num_seqs or its KV budget (audited after every change);
- time is monotone: spans are ordered per sample, updates follow their samples' finishes.

Run: pytest tests/test_sim_invariants.py
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


@st.composite
def runs(draw):
    group = draw(st.sampled_from([1, 2, 4]))
    groups = draw(st.integers(1, 12))
    n = group * groups
    lengths = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    engines = draw(st.integers(1, 4))
    cap = draw(st.integers(1, 16))
    kv = draw(st.integers(max(prompts) + max(lengths) + 3, 3000))
    batch = draw(st.integers(1, groups))
    minibatches = draw(st.integers(1, 3))
    kv_read_s_per_token = draw(st.sampled_from([0.0, 1e-4, 1e-2]))
    compute_s_per_seq = draw(st.sampled_from([0.0, 0.05]))
    return lengths, prompts, group, engines, cap, kv, batch, minibatches, kv_read_s_per_token, compute_s_per_seq


@settings(max_examples=120, deadline=None)
@given(runs())
def test_run_invariants(case):
    lengths, prompts, group, engines, cap, kv, batch, minibatches, kv_read_s_per_token, compute_s_per_seq = case
    trace = make_trace(lengths, prompts, group_size=group, max_len=max(lengths))
    cluster = tiny_cluster(engines=engines, max_num_seqs=cap, kv=kv, watermark=0.01,
                           kv_read_s_per_token=kv_read_s_per_token, compute_s_per_seq=compute_s_per_seq,
                           prefill_s_per_token=1e-3, train_per_token=1e-4)
    assume(max(prompts) + max(lengths) + 1 <= cluster.kv_admit_budget)  # (the watermark's 1%)
    policy = make_policy("sync", [f"rollout_batch={batch}", f"minibatches={minibatches}"],
                         trace)
    r = simulate(trace, policy, cluster, audit=True)
    tl, s = r.timeline, r.summary

    finishes = defaultdict(int)
    tokens = defaultdict(int)
    per_sample = defaultdict(list)
    for t0, t1, e, i, _att, _ver, k, end in tl.spans:
        assert 0 <= e < engines and t0 <= t1 and k >= 0
        finishes[i] += end == "finish"
        tokens[i] += k
        per_sample[i].append((t0, t1))
    assert all(finishes[i] == 1 for i in range(len(trace)))
    assert [tokens[i] for i in range(len(trace))] == list(lengths)
    for spans in per_sample.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))

    trained = [i for tr in tl.trains for i in tr[3]]
    assert sorted(trained) == list(range(len(trace)))
    finish_time = {i: t1 for t0, t1, e, i, *_, end in tl.spans if end == "finish"}
    for t0, t1, _v, samples, _ in tl.trains:
        assert t0 <= t1 and all(finish_time[i] <= t0 for i in samples)
    starts = [tr[0] for tr in tl.trains] + [sy[0] for sy in tl.syncs]
    ends = [tr[1] for tr in tl.trains] + [sy[1] for sy in tl.syncs]
    order = sorted(range(len(starts)), key=lambda j: starts[j])
    assert all(ends[a] <= starts[b] for a, b in zip(order, order[1:], strict=False))  # trainer, then sync

    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"] == sum(lengths)
    assert s["samples_trained"] == s["samples_total"] == len(trace)
    assert 0.0 <= s["bubble_ratio"] <= 1.0 and 0.0 <= s["gpu_idle_ratio"] <= 1.0
    assert 0.0 < s["efficiency"] <= 1.0
    assert s["staleness_max"] <= minibatches - 1
    times = [rec.get("t") for rec in tl.records()[1:]]
    assert times == sorted(times)
