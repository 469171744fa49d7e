"""Dynamic sampling (DAPO's ``filter_groups``): a hand-computed filtered group, conservation of
tokens and samples with filtering on (hypothesis, every policy), the errors, and the synthetic
traces' per-prompt pass rates."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import cluster_for
from sortedrl.errors import ConfigError, PolicyError
from sortedrl.policies.base import EventKind, Filter
from sortedrl.policies.controller import Controller
from sortedrl.policies.registry import BUILTIN, make_policy
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from sortedrl.traces import write_trace
from sortedrl.traces.schema import Trace, TraceMeta
from sortedrl.traces.synth import synthesize
from tests.conftest import make_trace, tiny_cluster


def rewarded_trace(lengths, rewards, group_size, steps=None) -> Trace:
    n = len(lengths)
    cols = {"prompt_id": np.array([f"p{i // group_size}" for i in range(n)]),
            "sample": np.arange(n) % group_size, "prompt_len": np.full(n, 10),
            "response_len": np.asarray(lengths), "truncated": np.zeros(n, dtype=bool),
            "reward": np.asarray(rewards, dtype=float)}
    if steps is not None:
        cols["step"] = np.asarray(steps)
    return Trace.from_columns(cols, TraceMeta(max(lengths), group_size, "test"), name="test")


def test_sync_filters_a_flat_group_and_refills_from_the_dataloader():
    # groups of 2, 2 prompts per step. Step 0 runs g0 [1, 0] and g1 [1, 1]: g1 is filtered and
    # g2 [0, 1] is generated in its place; the update trains g0 + g2. Step 1 runs g3 [0, 0] only
    # (the dataloader is empty): it is filtered and nothing is left to train.
    trace = rewarded_trace([3, 5, 2, 4, 6, 1, 2, 2], [1, 0, 1, 1, 0, 1, 0, 0], group_size=2,
                           steps=[0, 0, 0, 0, 1, 1, 1, 1])
    policy = make_policy("sync", ["filter_groups=true", "rollout_batch=2"], trace)
    r = simulate(trace, policy, tiny_cluster(engines=1, max_num_seqs=4))
    s, tl = r.summary, r.timeline
    assert [t[3] for t in tl.trains] == [[0, 1, 4, 5]]
    assert [f[1] for f in tl.filters] == [[2, 3], [6, 7]]
    assert [a[2] for a in tl.admits] == [[0, 1, 2, 3], [4, 5], [6, 7]]
    assert s["filtered_groups"] == 2 and s["filtered_tokens"] == 2 + 4 + 2 + 2
    assert s["useful_tokens"] == s["learnable_tokens"] == 3 + 5 + 6 + 1
    assert s["wasted_tokens"] == s["filtered_tokens"]
    assert s["samples_trained"] == 4 and s["updates"] == 1


def test_controller_refuses_to_filter_a_group_with_a_reward_spread():
    trace = rewarded_trace([1, 1], [1, 0], group_size=2)
    tl = Timeline({})
    backend = SimBackend(trace, tiny_cluster(), tl)

    class Greedy(type(make_policy("sync", [], trace))):
        def on_event(self, event, view):
            if event.kind == EventKind.ENGINE_IDLE:
                return [Filter((0,))]
            return super().on_event(event, view)

    ctl = Controller(Greedy(), trace.prompt_id, trace.prompt_len.tolist(), 2, backend, tl,
                     rewards=trace.reward.tolist())
    with pytest.raises(PolicyError, match="filter of group 0, whose rewards are not all equal"):
        ctl.run()


def test_filter_groups_without_rewards_is_one_error_line(tmp_path):
    trace = make_trace([3, 4, 5, 6], group_size=2)
    with pytest.raises(ConfigError, match="filter_groups=true needs a reward column"):
        make_policy("sync", ["filter_groups=true"], trace)
    path = tmp_path / "plain.jsonl"
    write_trace(trace, path)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--trace", str(path), "--policy", "sync",
                                 "--set", "filter_groups=true", "--out", str(out)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "filter_groups=true needs a reward column" in lines[0] and not out.exists()


@pytest.mark.parametrize("name, sets, message", [
    ("sortedrl", ["harvest=samples"], "filter_groups needs harvest=groups"),
    ("async", ["whole_groups=false"], "filter_groups needs whole_groups=true"),
    ("oracle_sorted", ["whole_groups=false"], "filter_groups needs whole_groups=true"),
])
def test_filter_groups_needs_whole_groups(name, sets, message):
    trace = rewarded_trace([3, 4, 5, 6], [1, 0, 1, 1], group_size=2)
    with pytest.raises(ConfigError, match=message):
        make_policy(name, sets + ["filter_groups=true"], trace)


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(BUILTIN)))
    group = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.integers(1, 8))
    steps = draw(st.integers(1, 3))
    n = group * groups * steps
    lengths = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    rewards = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n))
    engines = draw(st.integers(1, 3))
    cap = draw(st.integers(1, 8))
    return name, lengths, rewards, group, groups, engines, cap, draw(st.booleans())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_tokens_and_samples_are_conserved_with_filtering_on(case):
    name, lengths, rewards, group, groups, engines, cap, disagg = case
    steps = [i // (group * groups) for i in range(len(lengths))]
    trace = rewarded_trace(lengths, rewards, group, steps)
    base = dataclasses.replace(tiny_cluster(engines=engines + 1, max_num_seqs=cap, kv=2000,
                                            kv_read_s_per_token=1e-3, prefill_s_per_token=1e-2, train_per_token=1e-3),
                               train_gpus=1, placement="disaggregated" if disagg else "colocated")
    policy = make_policy(name, ["filter_groups=true"], trace)
    r = simulate(trace, policy, cluster_for(policy.placements, base), audit=True)
    tl, s = r.timeline, r.summary
    trained = Counter(i for t in tl.trains for i in t[3])
    filtered = [i for f in tl.filters for i in f[1]]
    discarded = [i for d in tl.discards for i in d[1]]
    assert max(trained.values(), default=1) == 1
    assert sorted(list(trained) + filtered + discarded) == list(range(len(lengths)))
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]
    assert s["filtered_tokens"] <= s["wasted_tokens"]
    reward = np.asarray(rewards).reshape(-1, group)
    flat = {g for g in range(len(reward)) if len(set(reward[g])) == 1}
    assert {i // group for i in filtered} == flat  # exactly the flat groups, all of each
    assert s["filtered_groups"] == len(flat)
    assert s["samples_in_split_groups"] == 0


@pytest.mark.parametrize("preset", ["logic-8k", "math-16k"])
def test_synthetic_prompts_have_beta_pass_rates(preset):
    t = synthesize(preset, prompts=1000, group_size=8, seed=0)
    r = t.reward.reshape(-1, 8)
    flat = float(np.mean(r.min(1) == r.max(1)))
    p = t.reward.mean()
    independent = p ** 8 + (1 - p) ** 8  # all-equal share if every response were independent
    assert flat > 0.2 > 3 * independent  # U-shaped Beta pass rates: many all-0 or all-1 groups
