"""Engines and trainer sharing a host's cores: the simulator against hand-computed timelines.

Run: pytest tests/test_sim_contention.py
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from sortedrl.errors import ConfigError
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import load_cluster
from sortedrl.sim.contention import slowed
from sortedrl.sim.profile import profile_cluster
from sortedrl.sim.run import simulate
from tests.conftest import costs, make_trace, tiny_cluster


def one_step_off(lengths, placement="disaggregated", **cost_kw):
    trace = make_trace(lengths, steps=list(range(len(lengths))))
    cluster = tiny_cluster(engines=1, **cost_kw)
    if placement == "disaggregated":
        cluster = dataclasses.replace(cluster, gpus=2, placement=placement, train_gpus=1)
    policy = "one_step_off" if placement == "disaggregated" else "sync"
    return simulate(trace, make_policy(policy, [], trace), cluster)


def test_engines_and_trainer_slow_each_other_while_both_compute():
    # step = prefill = step_fixed_s + weight_read_s = 2 s, update 10 s, sync 5 s. One sample a step: 3, then 9 tokens.
    # Batch 0: prefill 0-2, 2 steps -> 6. At 6 one_step_off admits batch 1 (its prefill 6-8 is
    # planned at full speed) and trains batch 0 beside it: 10 s x 1.5 = 15 -> 21. From 8 the
    # engine steps at 2 x 2 = 4 s: 8-12, 12-16, 16-20, 20-24 (the step in flight when the update
    # ends finishes at the slow speed), then the last 4 of its 8 decode steps at 2 s -> 32.
    # Sync 32-37; update 1 starts with the engine idle: 10 s -> 47.
    r = one_step_off([3, 9], engine_contention=2.0, train_contention=1.5)
    spans = sorted((s[0], s[1], s[6]) for s in r.timeline.spans)
    assert spans == [(0.0, 6.0, 3), (6.0, 32.0, 9)]
    assert [t[:2] for t in r.timeline.trains] == [(6.0, 21.0), (37.0, 47.0)]
    assert r.timeline.syncs == [(32.0, 37.0, 1)]
    assert r.summary["makespan_s"] == 47.0
    plain = one_step_off([3, 9])  # separate devices: 6-24 rollout beside a 10 s update
    assert [t[:2] for t in plain.timeline.trains] == [(6.0, 16.0), (29.0, 39.0)]
    assert plain.summary["makespan_s"] == 39.0


def test_colocated_engines_never_compute_beside_the_trainer():
    a = one_step_off([3, 9], placement="colocated", engine_contention=2.0, train_contention=1.5)
    b = one_step_off([3, 9], placement="colocated")
    assert a.summary == b.summary


def test_a_slowed_engine_scales_every_engine_term():
    c = costs(kv_read_s_per_token=0.5, compute_s_per_seq=0.25, prefill_s_per_token=0.1, prefill_s_per_pair=0.01,
              step_s_per_seq=0.2, admit_s_per_request=0.3, admit_step_s=0.4, step_table=(1.0, 3.0))
    s = slowed(c, 2.0)
    assert s.decode_step(2, 10) == 2 * c.decode_step(2, 10)
    assert s.decode_time(5, 2, 10) == pytest.approx(2 * c.decode_time(5, 2, 10))
    assert s.prefill(30, 400, 2) == pytest.approx(2 * c.prefill(30, 400, 2))
    assert (s.train_fix, s.sync_s, s.update([5, 9])) == (c.train_fix, c.sync_s, c.update([5, 9]))


def test_a_profile_rejects_a_contention_below_one():
    raw = {"sortedrl_profile": 1, "device": "cpu", "model": "m", "engine": "vllm-cpu",
           "engine_version": "0", "engine_config": {"max_num_seqs": 4, "kv_budget_tokens": 100},
           "costs": {**{k: 0.0 for k in ("weight_read_s", "kv_read_s_per_token", "compute_s_per_seq",
                                         "prefill_s_per_token", "prefill_s_per_pair", "train_per_token", "sync_s")},
                     "step_fixed_s": 0.01, "train_fix": 1.0, "engine_contention": 0.8}}
    with pytest.raises(ConfigError, match=r"p\.json: field 'costs.engine_contention': expected a factor >= 1"):
        profile_cluster(raw, "p.json", "p")
    raw["costs"]["engine_contention"] = 1.7
    assert profile_cluster(raw, "p.json", "p").costs.engine_contention == 1.7
    for term, bad, says in (("engine_contention_one", 0.5, "a factor >= 1 (or 0: not measured)"),
                            ("peer_step_factor", 0.9, "a factor >= 1"),
                            ("step_overhead_s", -0.1, "a finite number >= 0"), ("train_contention_one", "x", "a finite number >= 0"),
                            ("step_overhead_one_s", float("nan"), "a finite number >= 0")):
        with pytest.raises(ConfigError, match=rf"p\.json: field 'costs\.{term}': expected {re.escape(says)}"):
            profile_cluster({**raw, "costs": {**raw["costs"], term: bad}}, "p.json", "p")
    raw["costs"]["engine_contention_one"] = 0.0  # not measured: as with every engine busy
    assert profile_cluster(raw, "p.json", "p").costs.engine_contention_one == 0.0


def test_one_busy_engine_beside_the_trainer_uses_its_own_factors():
    # As above, but the one engine is measured at x1.5 beside an update (x2 with every engine
    # busy) and the update at x1.25 beside it: update 0 takes 12.5 s (6-18.5); from 8 the engine
    # steps at 3 s: 8-11, 11-14, 14-17, 17-20 (in flight at 18.5), then 4 steps at 2 s -> 28.
    r = one_step_off([3, 9], engine_contention=2.0, train_contention=1.5,
                     engine_contention_one=1.5, train_contention_one=1.25)
    assert sorted((s[0], s[1], s[6]) for s in r.timeline.spans) == [(0.0, 6.0, 3), (6.0, 28.0, 9)]
    assert [t[:2] for t in r.timeline.trains] == [(6.0, 18.5), (33.0, 43.0)]


def two_engines(**cost_kw):
    trace = make_trace([3, 9])
    return simulate(trace, make_policy("sync", [], trace), tiny_cluster(engines=2, **cost_kw))


def test_engines_in_rounds_slow_each_other_only_while_both_are_busy():
    # One sample per engine (3 and 9 tokens); a step or prefill takes 2 s alone. Both busy: x1.5
    # plus the driver's 0.25 s = 3.25 s. Prefills 0-3.25 (first token), engine 0's 2 steps end at
    # 9.75; engine 1 (its step ends then too) has 6 of its 8 steps left, alone: x1 plus the
    # driver's time with one busy, unmeasured here, so as with both (0.25 s): 2.25 s -> 23.25.
    r = two_engines(peer_step_factor=1.5, step_overhead_s=0.25)
    assert sorted((s[2], s[0], s[1], s[6]) for s in r.timeline.spans) == [(0, 0.0, 9.75, 3), (1, 0.0, 23.25, 9)]
    assert [t[:2] for t in r.timeline.trains] == [(23.25, 33.25)]
    # the driver's time measured with one busy, 0.125 s: 6 x 2.125 -> 22.5
    r = two_engines(peer_step_factor=1.5, step_overhead_s=0.25, step_overhead_one_s=0.125)
    assert sorted((s[2], s[1]) for s in r.timeline.spans) == [(0, 9.75), (1, 22.5)]
    plain = two_engines()  # separate devices: prefill 2, then 2 and 8 steps of 2 s
    assert sorted((s[2], s[1]) for s in plain.timeline.spans) == [(0, 6.0), (1, 18.0)]


HOST_TERMS = dict(peer_step_factor=1.5, step_overhead_s=0.5, step_overhead_one_s=0.25, engine_contention=2.0,
                  engine_contention_one=1.5, train_contention=1.5, train_contention_one=1.25)


@pytest.mark.parametrize("policy", ["sortedrl", "async", "one_step_off", "partial", "sync"])
def test_engines_recosted_by_busy_count_keep_their_bookkeeping(policy):
    # Whole-second steps make changes of different engines land on the same instant, and a
    # policy event's host time (policy_event_s) moves an engine's base past its change: the re-costing must
    # wait for every change due by then (it once re-costed past a tied engine's pending change).
    import numpy as np

    disagg = policy in ("async", "one_step_off")
    for seed in range(6):
        rng = np.random.default_rng(seed)
        n, engines = 24, 2 + seed % 2
        trace = make_trace(rng.integers(1, 12, n), group_size=4, steps=np.repeat(np.arange(3), 8))
        cluster = tiny_cluster(engines=engines, max_num_seqs=3, policy_event_s=0.5 * (seed % 3 != 0), **HOST_TERMS)
        if disagg:
            cluster = dataclasses.replace(cluster, gpus=engines + 1, placement="disaggregated", train_gpus=1)
        r = simulate(trace, make_policy(policy, [], trace), cluster, audit=True)
        assert r.summary["samples_trained"] == n and r.summary["updates"] >= 1


@pytest.mark.parametrize("table", [True, False])
def test_the_per_step_overhead_lengthens_a_prefill_pass_of_its_own_with_or_without_a_step_table(table):
    """A prefill that stalls the engine is a step of its own, so the driver's per-step time is
    added to it too; with a step table (a calibrated profile) it was added to the decode steps'
    entries only, and the prefill pass, which reads ``step_fixed_s``, kept its old length."""
    base = load_cluster(str(Path(__file__).parent / "fixtures" / "cpu-profile.json"))
    cost = base.costs if table else dataclasses.replace(base.costs, step_table=None, step_fixed_s=0.001)
    trace = make_trace([40, 60, 80, 100], prompt_lens=[30] * 4)
    passes = {}
    for overhead in (0.0, 0.05):
        cl = dataclasses.replace(base, chunked_prefill=False, costs=dataclasses.replace(
            cost, prefill_in_step=False, step_overhead_s=overhead, step_overhead_one_s=overhead))
        timeline = simulate(trace, make_policy("sync", [], trace), cl).timeline
        passes[overhead] = [end - start for start, end, *_ in timeline.rows("prefill")]
    assert len(passes[0.05]) == len(passes[0.0]) >= 1
    assert [b - a for a, b in zip(passes[0.0], passes[0.05], strict=True)] == pytest.approx(
        [0.05] * len(passes[0.0]), abs=1e-12)
