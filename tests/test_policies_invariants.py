"""Invariants of every built-in policy, over random traces, clusters and knobs (hypothesis).

- no sample is trained twice, and every sample ends trained or discarded;
- every token generated is either useful (trained) or counted as wasted;
- staleness never exceeds the policy's bound (sync: minibatches - 1, sortedrl: 0 on-policy or
  max_span, async: eta, one_step_off: 1, tail_batch and oracle_sorted: 0, partial: max_span,
  0 with keep_partial=false, which takes max_span=0 only);
- the engines never exceed max_num_seqs or their KV budget (audited after every change).

Run: pytest tests/test_policies_invariants.py
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sortedrl.compare import cluster_for
from sortedrl.policies.registry import BUILTIN, make_policy
from sortedrl.sim.attempts import AttemptLengths
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


def partial_keep(d) -> list[str]:
    """keep_partial and max_span: a max_span above 0 only with keep_partial=true (without, there
    is nothing to age, and partial refuses it)."""
    keep = d(st.booleans())
    return [f"keep_partial={keep}", f"max_span={d(st.integers(0, 2)) if keep else 0}"]


# each knob is drawn from values the trace can hold (P prompts, S samples): a batch beyond it
# is refused (test_a_batch_beyond_the_trace_is_refused_naming_the_knob)
KNOBS = {
    "sync": lambda d, P, S: [f"minibatches={d(st.integers(1, 3))}"],
    "sortedrl": lambda d, P, S: [f"mode={d(st.sampled_from(['on_policy', 'partial']))}",
                           f"harvest={d(st.sampled_from(['samples', 'groups']))}",
                           f"update_batch={d(st.integers(1, min(12, S)))}",
                           f"oversubscribe={d(st.sampled_from([1.0, 1.5, 3.0]))}",
                           f"max_span={d(st.integers(0, 2))}",
                           f"group_prompts={d(st.integers(0, 6))}"],
    "partial": lambda d, P, S: [f"over_sample={d(st.sampled_from([1.0, 2.0, 3.0]))}",
                          *partial_keep(d), f"rollout_batch={d(st.integers(0, min(4, P)))}"],
    "tail_batch": lambda d, P, S: [f"eta={d(st.sampled_from([1.0, 1.25, 2.0]))}",
                             f"rollout_batch={d(st.integers(0, min(4, P)))}"],
    "async": lambda d, P, S: [f"eta={d(st.integers(0, 3))}", f"batch={d(st.integers(0, min(10, S)))}",
                        f"recompute_on_sync={d(st.booleans())}",
                        f"max_concurrent={d(st.integers(0, 6))}"],
    "one_step_off": lambda d, P, S: [f"rollout_batch={d(st.integers(0, min(4, P)))}"],
    "oracle_sorted": lambda d, P, S: [f"predictor={d(st.sampled_from(['oracle', 'history']))}",
                                f"update_batch={d(st.integers(0, min(9, S)))}"],
}
assert set(KNOBS) == set(BUILTIN)


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(BUILTIN)))
    group = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.integers(1, 10))
    steps = draw(st.integers(1, 3))
    n = group * groups * steps
    lengths = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    step_col = [i // (group * groups) for i in range(n)]
    engines = draw(st.integers(1, 3))
    cap = draw(st.integers(1, 8))
    kv = draw(st.integers(max(prompts) + max(lengths) + 3, 1500))
    disagg = draw(st.booleans())
    sets = KNOBS[name](draw, groups * steps, n)
    return name, sets, lengths, prompts, group, step_col, engines, cap, kv, disagg


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_policy_keeps_its_invariants(case):
    name, sets, lengths, prompts, group, step_col, engines, cap, kv, disagg = case
    trace = make_trace(lengths, prompts, group_size=group, steps=step_col)
    base = dataclasses.replace(
        tiny_cluster(engines=engines + 1, max_num_seqs=cap, kv=kv, watermark=0.0, kv_read_s_per_token=1e-3,
                     prefill_s_per_token=1e-2, train_per_token=1e-3),
        train_gpus=1, placement="disaggregated" if disagg else "colocated")
    policy = make_policy(name, sets, trace)
    cluster = cluster_for(policy.placements, base)
    r = simulate(trace, policy, cluster, audit=True)
    tl, s = r.timeline, r.summary

    trained = Counter(i for t in tl.trains for i in t[3])
    discarded = {i for d in tl.discards for i in d[1]}
    assert all(c == 1 for c in trained.values()), "a sample was trained twice"
    assert set(trained) | discarded == set(range(len(trace))), "a sample neither trained nor discarded"
    assert not set(trained) & discarded
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]
    last = {}  # each sample's last attempt; its length is that attempt's draw (--regen resample)
    for span in tl.spans:
        last[span[3]] = max(last.get(span[3], 0), span[4])
    draw = AttemptLengths(trace, seed=0)
    assert s["useful_tokens"] == sum(draw.length(i, last[i]) for i in trained)
    bound = policy.staleness_bound()
    if bound is not None:
        assert s["staleness_max"] <= bound, (name, sets, s["staleness_max"], bound)
    assert s["oracle"] == (name == "oracle_sorted" and "predictor=oracle" in sets)


def test_async_bounds_admission_and_trains_what_outlives_eta_unless_told_to_drop_it():
    # AReaL's staleness manager and verl's fully-async trainer bound admission by eta and train
    # every response that finishes, however many updates it outlived; drop_stale=true also
    # bounds the trained tokens by regenerating those responses (the former default).
    from sortedrl.sim.cluster import preset
    from sortedrl.traces.synth import synthesize
    trace = synthesize("logic-8k", prompts=16, group_size=4, steps=8, seed=0)
    cluster = cluster_for(("disaggregated",), preset("h100-qwen3-0.6b-4gpu-16seq"))
    runs = {}
    for drop in (False, True):
        policy = make_policy("async", ["eta=1", f"drop_stale={str(drop).lower()}"], trace)
        runs[drop] = simulate(trace, policy, cluster).summary
        assert policy.staleness_bound() == (1 if drop else None)
    kept, dropped = runs[False], runs[True]
    assert kept["wasted_tokens"] == 0 and kept["staleness_max"] > 1
    assert dropped["wasted_tokens"] > 0 and dropped["staleness_max"] <= 1
    assert kept["samples_trained"] == dropped["samples_trained"] == len(trace)
