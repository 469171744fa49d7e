"""Whole GRPO groups: the learnable-token metrics, each policy's whole-group default, the real
runner's advantages from trained attempts only, and SortedRL's defaults on a large cluster."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.compare import cluster_for
from sortedrl.metrics import summarize
from sortedrl.policies.placement import spread
from sortedrl.policies.registry import BUILTIN, make_policy
from sortedrl.realrun.trainer import GroupRewards, Rollout
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from sortedrl.traces.synth import synthesize

META = {"samples_total": 6, "engines": 1, "max_num_seqs": 6, "tp": 1, "gpus": 1,
        "trainer_gpus": 1, "lower_bound_s": 1.0, "group_size": 2, "policy": "hand",
        "params": {}, "trace": "t", "cluster": "c", "seed": 0}


def test_learnable_tokens_hand_computed():
    # groups of 2: group 0 trained whole in update 0; group 1 split over updates 0 and 1;
    # group 2 filtered (dynamic sampling). Sample 3's first attempt (7 tokens) was dropped.
    tl = Timeline(META)
    for t1, i, att, tok in ((1.0, 0, 0, 10), (2.0, 1, 0, 20), (1.5, 2, 0, 30), (0.5, 3, 0, 7),
                            (3.0, 3, 1, 40), (1.0, 4, 0, 5), (1.0, 5, 0, 6)):
        tl.spans.append((0.0, t1, 0, i, att, 0, tok, "finish"))
    tl.aborts.append((0.5, [3], False))
    tl.filters.append((1.0, [4, 5]))
    tl.trains += [(2.0, 2.5, 0, [0, 1, 2], 99), (3.0, 3.5, 1, [3], 50)]
    s = summarize(tl)
    assert s["generated_tokens"] == 118 and s["useful_tokens"] == 100
    assert s["wasted_tokens"] == 18 == 7 + 5 + 6
    assert s["groups_trained_whole"] == 1
    assert s["samples_in_split_groups"] == 2
    assert s["learnable_tokens"] == 10 + 20 + 40  # sample 2 was trained before its group's last
    assert s["learnable_tokens_per_s"] == pytest.approx(70 / 3.5)
    assert s["filtered_groups"] == 1 and s["filtered_tokens"] == 11


def test_samples_trained_counts_a_sample_trained_twice_twice():
    """docs/metrics.md: `samples_trained` counts the train records' sample entries. No policy can
    train a sample twice (the controller refuses it); a timeline written elsewhere can."""
    tl = Timeline(META)
    for i in range(2):
        tl.spans.append((0.0, 1.0, 0, i, 0, 0, 10, "finish"))
    tl.trains += [(1.0, 1.5, 0, [0, 1], 20), (1.5, 2.0, 1, [0], 10)]
    s = summarize(tl)
    assert s["samples_trained"] == 3 and s["updates"] == 2
    assert s["staleness_max"] == 1  # sample 0 counts in its last update, from version 1


def _small_trace(group_size=4):
    return synthesize("math-16k", prompts=8, group_size=group_size, steps=3, seed=3)


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_builtin_policy_trains_whole_groups_by_default(name):
    trace = _small_trace()
    cluster = dataclasses.replace(preset("h100-llama3.1-8b-2gpu-16seq"), name="small")
    policy = make_policy(name, [], trace)
    s = simulate(trace, policy, cluster_for(policy.placements, cluster)).summary
    assert s["samples_in_split_groups"] == 0
    assert s["learnable_tokens"] == s["useful_tokens"] > 0
    assert s["groups_trained_whole"] == len(trace) // 4 - s["filtered_groups"]
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]


@pytest.mark.parametrize("name, sets", [("sortedrl", ["harvest=samples"]),
                                        ("async", ["whole_groups=false"]),
                                        ("oracle_sorted", ["whole_groups=false"])])
def test_opting_out_spreads_groups_and_loses_learnable_tokens(name, sets):
    trace = _small_trace()
    cluster = dataclasses.replace(preset("h100-llama3.1-8b-2gpu-16seq"), name="small")
    policy = make_policy(name, sets, trace)
    s = simulate(trace, policy, cluster_for(policy.placements, cluster)).summary
    assert s["samples_in_split_groups"] > 0
    assert s["learnable_tokens"] < s["useful_tokens"]
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]


def _rollout(sample, reward, n=4):
    return Rollout(sample, sample // n, [1], [2], [0.0], [0], reward)


def test_real_runner_advantage_ignores_a_dropped_attempt():
    book = GroupRewards(group_size=4)
    book.finished(0, 1.0)
    book.finished(1, 1.0)  # this attempt is dropped (aborted without tokens) ...
    book.finished(1, 0.0)  # ... and regenerated: only the new reward may count
    book.finished(2, 0.0)
    book.finished(3, 1.0)  # never trained (discarded): not in any baseline
    adv = book.advantages([_rollout(0, 1.0), _rollout(1, 0.0), _rollout(2, 0.0)])
    # baseline over the trained rewards [1, 0, 0]: mean 1/3, sample std sqrt((4/9 + 2/9) / 2)
    std = 1 / np.sqrt(3)
    assert adv == pytest.approx([(2 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4),
                                 (-1 / 3) / (std + 1e-4)], rel=1e-12)


def test_real_runner_split_group_uses_earlier_trained_rewards():
    book = GroupRewards(group_size=4)
    for i, r in enumerate([1.0, 0.0, 1.0, 1.0]):
        book.finished(i, r)
    assert book.advantages([_rollout(0, 1.0)]) == [0.0]  # a lone member has no baseline yet
    adv = book.advantages([_rollout(1, 0.0), _rollout(2, 1.0)])
    mean, std = 2 / 3, 1 / np.sqrt(3)  # trained rewards [1, 0, 1], sample std (n - 1)
    assert adv == pytest.approx([(0 - mean) / (std + 1e-4), (1 - mean) / (std + 1e-4)], rel=1e-12)
    with pytest.raises(ValueError, match="sample 3"):
        book.advantages([_rollout(3, 0.0)])  # not the reward its last attempt got


def test_real_runner_advantages_use_the_sample_std():
    # TRL, verl, slime and AReaL divide by n - 1 (torch.std): [1, 1, 0, 0] has std sqrt(1/3)
    book = GroupRewards(group_size=4)
    for i, r in enumerate([1.0, 1.0, 0.0, 0.0]):
        book.finished(i, r)
    adv = book.advantages([_rollout(i, r) for i, r in enumerate([1.0, 1.0, 0.0, 0.0])])
    a = 0.5 / (np.sqrt(1 / 3) + 1e-4)
    assert a == pytest.approx(0.86588, abs=1e-5)
    assert adv == pytest.approx([a, a, -a, -a], rel=1e-12)


def test_real_runner_group_of_one_is_trained_on_its_raw_reward():
    # verl's convention for a one-sample group (mean 0, std 1): with --group-size 1 the
    # advantage is the reward, not 0 (which would train nothing)
    book = GroupRewards(group_size=1)
    for i, r in enumerate([1.0, 0.0, 0.5]):
        book.finished(i, r)
    adv = book.advantages([_rollout(i, r, n=1) for i, r in enumerate([1.0, 0.0, 0.5])])
    assert adv == [1.0 / (1 + 1e-4), 0.0, 0.5 / (1 + 1e-4)]


def test_sortedrl_defaults_keep_its_behaviour_on_a_large_cluster():
    # issue 10: on 2,048 slots the old defaults admitted the whole loading group at once and
    # made 2 updates of 4,096 samples, identical in both modes. Now the 4,096-sample window is
    # half the 8,192-sample group: the first harvest trains a quarter of it (the short ones)
    # while the rest waits to be admitted, and the group's drain trains the remainder
    trace = synthesize("logic-8k", prompts=128, group_size=8, steps=8, seed=0)
    cluster = preset("h100-llama3.1-8b")
    runs = [simulate(trace, make_policy("sortedrl", [f"mode={m}"], trace), cluster)
            for m in ("on_policy", "partial")]
    for r in runs:
        assert [len(samples) for _, _, _, samples, _ in r.timeline.trains] == [2048, 6144]
    on, part = (r.summary for r in runs)
    assert on["makespan_s"] != part["makespan_s"]
    assert on["wasted_tokens"] > part["wasted_tokens"]  # on-policy regenerates the unfinished
    assert on["staleness_max"] == 0 < part["staleness_max"] <= 2
    for s in (on, part):
        assert s["samples_trained"] == 8192 and s["samples_in_split_groups"] == 0


def test_whole_groups_are_dealt_nearest_the_equal_share():
    # 17 groups of 8 on 8 idle engines: each engine's block ends at the group start nearest its
    # share's running total (17, 34, ...), so one engine takes 3 groups and seven take 2. The
    # old rule (move on once a block holds its share) gave 24 x 5, 16 and nothing to 2 engines.
    blocks = spread(list(range(136)), [0] * 8, 8)
    assert [(e, len(b)) for e, b in blocks] == [(0, 16), (1, 16), (2, 16), (3, 24), (4, 16),
                                                (5, 16), (6, 16), (7, 16)]
    assert [i for _, b in blocks for i in b] == list(range(136))
    # one group goes to the least loaded engine (its share: 5 of 8), not the first with a share
    assert spread(list(range(8)), [5, 0, 3], 8) == [(1, list(range(8)))]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(0, 30), min_size=1, max_size=9), st.integers(2, 8))
def test_group_blocks_stay_within_a_group_of_the_water_fill(groups, loads, size):
    samples = list(range(groups * size))
    blocks = spread(samples, loads, size)
    assert [i for _, b in blocks for i in b] == samples  # contiguous, in order, each once
    assert all(b[0] % size == 0 for _, b in blocks)  # cut only where a group starts
    plain = dict(spread(samples, loads, 1))  # the water-fill without groups
    got = dict(blocks)
    for e in range(len(loads)):
        assert abs(len(got.get(e, [])) - len(plain.get(e, []))) <= size
