"""Chunked prefill inside decode steps, hand-computed (vLLM V1's ``max_num_batched_tokens``).

Costs are round numbers: a decode step (or a mixed step) costs ``step_fixed_s + weight_read_s = 2 s`` plus
``prefill_s_per_token = 0.01 s`` per prompt token it carries.

Run: pytest tests/test_sim_prefill.py
"""

from __future__ import annotations

import dataclasses

import pytest

from sortedrl.errors import ConfigError
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


def chunked(cluster, budget):
    return dataclasses.replace(cluster, chunked_prefill=True, max_num_batched_tokens=budget)


def spans(result):
    return sorted((s[3], round(s[0], 9), round(s[1], 9), s[6], s[7]) for s in result.timeline.spans)


def test_running_samples_decode_beside_a_chunked_prefill():
    # A (prompt 2, 10 tokens) and B (prompt 2, 2 tokens) are admitted together: one mixed step
    # of 2 + 0.04 s. B finishes after one more step (4.04). C (prompt 30) then joins beside A:
    # 11 prompt tokens per step (budget 12 - 1 running) -> 3 mixed steps of 2 s + 0.30 s of
    # prefill compute, ending at 10.34, during which A decodes 3 tokens (it is not stalled).
    trace = make_trace([10, 2, 3], prompt_lens=[2, 2, 30])
    cluster = chunked(tiny_cluster(max_num_seqs=2, prefill_s_per_token=0.01), budget=12)
    r = simulate(trace, make_policy("sync", ["rollout_batch=3"], trace), cluster, audit=True)
    # A: 1 token at 2.04, 2 at 4.04, 5 at 10.34, then 5 steps -> 20.34
    # C: first token at 10.34, 2 more steps -> 14.34
    assert spans(r) == [(0, 0.0, 20.34, 10, "finish"), (1, 0.0, 4.04, 2, "finish"),
                        (2, 4.04, 14.34, 3, "finish")]
    prefills = [(round(a, 9), round(b, 9), e, s, k) for a, b, e, s, k, _ in r.timeline.prefills]
    assert prefills == [(0.0, 2.04, 0, [0, 1], 4), (4.04, 10.34, 0, [2], 30)]
    # the same run with the engine-wide stall: A waits through C's prefill (2 + 0.3 s) and
    # finishes later
    stall = simulate(trace, make_policy("sync", ["rollout_batch=3"], trace),
                     tiny_cluster(max_num_seqs=2, prefill_s_per_token=0.01), audit=True)
    assert spans(stall)[0][2] > 20.34


def test_an_admission_waits_when_its_chunks_would_outlast_the_next_finish():
    # at 4.04 B has finished and A has 2 of its 3 tokens: C's 30 prompt tokens at 11 per step
    # need 3 mixed steps, more than A's 1 step left, so C waits for A's finish
    trace = make_trace([3, 2, 3], prompt_lens=[2, 2, 30])
    cluster = chunked(tiny_cluster(max_num_seqs=2, prefill_s_per_token=0.01), budget=12)
    r = simulate(trace, make_policy("sync", ["rollout_batch=3"], trace), cluster, audit=True)
    # A: 1 token at 2.04, 3 at 6.04 (finish). C admitted at 6.04 alone: ceil(30/12) = 3 steps of
    # 2 s + 0.3 s -> first token at 12.34, 2 more steps -> 16.34
    assert spans(r) == [(0, 0.0, 6.04, 3, "finish"), (1, 0.0, 4.04, 2, "finish"),
                        (2, 6.04, 16.34, 3, "finish")]


def test_presets_chunk_by_default_and_the_budget_is_checked():
    assert preset("h100-llama3.1-8b").chunked_prefill
    assert preset("h100-llama3.1-8b").max_num_batched_tokens == 8192
    assert not tiny_cluster().chunked_prefill  # explicit cost models keep their own prefill
    bad = dataclasses.replace(preset("h100-llama3.1-8b"), max_num_batched_tokens=100)
    with pytest.raises(ConfigError, match="field 'max_num_batched_tokens': must be > max_num_seqs"):
        bad.validate("x.json")


# -- prefix caching ---------------------------------------------------------------------------


def test_a_group_prompt_is_prefilled_and_held_once():
    # one group of 3 with a 10-token prompt on one engine with 20 KV tokens. Shared: the prompt
    # is prefilled once (10 tokens, + the last prompt token of each sibling: 12) and held once,
    # so all three run together: prefill 1 + 0.1 x 12 = 2.2 s, then 2 steps of 2 s -> 6.2.
    # Unshared, a second 10-token prompt does not fit beside the first (11 + 10 + 1 + 2 > 20):
    # the three run one after another, each 2 s of prefill + 2 steps: 6, 12, 18.
    trace = make_trace([3, 3, 3], prompt_lens=[10, 10, 10], group_size=3)
    base = tiny_cluster(max_num_seqs=4, kv=20, prefill_s_per_token=0.1)
    sync = make_policy("sync", [], trace)
    shared = simulate(trace, sync, base, audit=True)
    assert spans(shared) == [(0, 0.0, 6.2, 3, "finish"), (1, 0.0, 6.2, 3, "finish"),
                             (2, 0.0, 6.2, 3, "finish")]
    assert [(round(a, 9), round(b, 9), s, k) for a, b, _, s, k, _ in shared.timeline.prefills] == [
        (0.0, 2.2, [0, 1, 2], 12)]
    alone = simulate(trace, make_policy("sync", [], trace),
                     dataclasses.replace(base, prefix_caching=False), audit=True)
    assert [s[2] for s in spans(alone)] == [6.0, 12.0, 18.0]
    assert sum(p[4] for p in alone.timeline.prefills) == 30


def long_prompt_trace(groups=32, n=16, prompt=4096):
    from sortedrl.traces.synth import synthesize

    trace = synthesize("math-16k", prompts=groups, group_size=n, steps=1, seed=3)
    return dataclasses.replace(trace, prompt_len=trace.prompt_len * 0 + prompt)


def test_long_shared_prompts_prefill_once_per_engine_and_finish_sooner():
    # 32 prompts of 4k tokens x 16 responses on 8 H100 engines: the default placement keeps
    # each group on one engine, so caching prefills 4,096 + 15 tokens per group, not 16 x 4,096
    trace = long_prompt_trace()
    cluster = preset("h100-llama3.1-8b")
    runs = {}
    for caching in (True, False):
        policy = make_policy("sync", [], trace)
        runs[caching] = simulate(trace, policy, dataclasses.replace(cluster, prefix_caching=caching))
    on, off = runs[True], runs[False]
    assert sum(p[4] for p in on.timeline.prefills) == 32 * (4096 + 15)
    assert sum(p[4] for p in off.timeline.prefills) == 512 * 4096
    assert on.summary["makespan_s"] < off.summary["makespan_s"]
    assert on.summary["useful_tokens"] == off.summary["useful_tokens"]
    engines = {e for _, _, e, samples, _, _ in on.timeline.prefills for _ in samples}
    assert len(engines) == 8
    for g in range(32):  # every group's members on one engine
        assert len({s[2] for s in on.timeline.spans if s[3] // 16 == g}) == 1
