"""``sortedrl export``: what each exported config makes the peer's own code do, checked against
that code (verl 0.9.1's fully_async_rollouter.py and llm_server.py, AReaL 1.0.4's
staleness_manager.py and its grouped rollouts, slime's dynamic sampling filter). An audit found
eta off by one in verl, partial_rollout the wrong way round, a dead verl key written for the
partial policies, AReaL's concurrency in the wrong unit, and filter_groups dropped silently.

Run: pytest tests/test_export_peers.py
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.export import SLIME_FILTER, NoEquivalent, export
from sortedrl.export_async import NO_DROP
from sortedrl.sim.cluster import load_cluster

runner = CliRunner()
REPRODUCE_VERL = ["export", "verl", "async", "--set", "eta=1", "--prompts", "128", "--group-size", "8"]
REPRODUCE_AREAL = ["export", "areal", "async", "--set", "max_concurrent=512", "--set",
                   "filter_groups=true", "--group-size", "8", "--prompts", "32"]


def overrides(args: list[str]) -> list[str]:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return [line for line in r.stdout.splitlines() if not line.startswith("#")]


def test_verl_async_is_eta_versions_with_one_update_of_b_per_sync() -> None:
    # was staleness_threshold=0.0 (synchronous in verl) and data.train_batch_size=128, which the
    # fully-async rollouter rejects (it asserts 0) and whose trainer takes ppo_mini_batch_size
    assert overrides(REPRODUCE_VERL) == [
        "async_training.staleness_threshold=1.0",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=1",
        "async_training.partial_rollout=true",
        "data.train_batch_size=0",
        "actor_rollout_ref.actor.ppo_mini_batch_size=128",
        "actor_rollout_ref.rollout.n=8"]
    got = export("verl", "async", ["eta=1"], prompts=128, group_size=8)
    assert got.caveats[:3] == [
        "staleness: ours (eta=1) counts policy versions; verl's rollouter may have "
        "(1 + staleness_threshold) x require_batches x ppo_mini_batch_size x "
        "trigger_parameter_sync_step prompts submitted per sync, AReaL's (eta + 1) x B: "
        "staleness_threshold = eta = 1 with one update per sync (verl's README: 0 is synchronous, "
        "1 about one-step-off, and it recommends below 1)",
        "an update trains require_batches x ppo_mini_batch_size = 128 prompts (x n samples), as our "
        "batch B",
        "rollout.total_rollout_steps (prompts to generate in all; 100 in "
        "fully_async_ppo_trainer.yaml, where the run stops) is not known here: set it to the run's "
        "prompts (the trace's samples / n)"]


def test_verl_async_sizes_from_a_run_and_a_cluster() -> None:
    got = export("verl", "async", ["batch=100"], load_cluster("h100-llama3.1-8b-16gpu"), 8,
                 samples=4096, auto={"max_concurrent": 3072})
    o = got.overrides
    assert (o["actor_rollout_ref.actor.ppo_mini_batch_size"], o["rollout.total_rollout_steps"],
            o["async_training.concurrent_samples_per_replica"]) == (13, 512, 32)
    assert got.caveats[2:6] == [
        "rollout.total_rollout_steps counts prompts: the simulated run's 4096 samples / n",
        "max_concurrent=0 (derived): the simulated run resolved it to 3072 samples",
        "concurrency: verl runs at most concurrent_samples_per_replica prompts on each of the 12 "
        "rollout replicas: 384 prompts / 12",
        "partial_rollout=true: verl aborts in-flight responses at each sync, frees the KV cache and "
        "resubmits each as its prompt + the tokens generated so far: it re-prefills the prefix, so "
        "the closest simulation is recompute_on_sync=true (this run kept the KV cache); "
        "partial_rollout=false would not continue them across the sync"]


@pytest.mark.parametrize("recompute, says", [
    ("false", "so the closest simulation is recompute_on_sync=true (this run kept the KV cache)"),
    ("true", "as this run simulated (recompute_on_sync=true)")])
def test_verl_async_always_continues_responses_and_says_it_re_prefills(recompute, says) -> None:
    got = export("verl", "async", [f"recompute_on_sync={recompute}"])
    assert got.overrides["async_training.partial_rollout"] is True  # was `not recompute_on_sync`
    assert [c for c in got.caveats if c.startswith("partial_rollout")] == [
        "partial_rollout=true: verl aborts in-flight responses at each sync, frees the KV cache and "
        f"resubmits each as its prompt + the tokens generated so far: it re-prefills the prefix, "
        f"{says}; partial_rollout=false would not continue them across the sync"]


@pytest.mark.parametrize("framework", ["verl", "areal"])
def test_drop_stale_says_neither_peer_drops_stale_responses(framework) -> None:
    assert NO_DROP == ("drop_stale=true: neither verl's fully-async recipe nor AReaL drops a response "
                       "whose oldest token is more than eta versions old (no such knob): both bound "
                       "admission only and train it, as drop_stale=false simulates (verl's V1 "
                       "trainer, in its colocate_async and separate_async modes, drops groups "
                       "sampled more than trainer.v1.sampler.max_off_policy_threshold steps ago)")
    assert export(framework, "async", ["drop_stale=true"], group_size=8).caveats[-1] == NO_DROP
    assert NO_DROP not in export(framework, "async", [], group_size=8).caveats


@pytest.mark.parametrize("policy, sets", [("partial", ["over_sample=4"]), ("sortedrl", ["oversubscribe=3"])])
def test_verl_partial_policies_write_no_dead_over_sample_rate(policy, sets) -> None:
    got = export("verl", policy, sets, prompts=64)
    assert got.overrides == {"data.train_batch_size": 64,  # was over_sample_rate=0.75 / 0.666667
                             "actor_rollout_ref.actor.ppo_mini_batch_size": 64}  # one update
    assert got.caveats[0].startswith("over-sampling: verl has no over-sampling with early stop: "
                                     "actor_rollout_ref.rollout.over_sample_rate is read by nothing")


def test_areal_async_counts_rollouts_of_n_samples() -> None:
    # was rollout.max_concurrent_rollouts=512 (samples, for a count of prompts) and no
    # consumer_batch_size (AReaL's default 1); the filter_groups caveat was missing
    assert overrides(REPRODUCE_AREAL) == [
        "rollout.max_head_offpolicyness=2",
        "train_dataset.batch_size=32",
        "rollout.consumer_batch_size=32",
        "rollout.max_concurrent_rollouts=64",
        "gconfig.n_samples=8",
        "actor.ppo_n_minibatches=1"]  # one update a batch (AReaL's default: 4)
    got = export("areal", "async", ["max_concurrent=512"], group_size=8, prompts=32)
    assert got.caveats[1] == ("units: AReaL's consumer_batch_size and max_concurrent_rollouts "
                              "count rollouts (one prompt's n samples), ours samples: ours / n, "
                              "rounded up")


def test_areal_async_batch_knob_is_its_batch_size_and_consumer_batch() -> None:
    got = export("areal", "async", ["batch=200"], group_size=8, prompts=64)
    o = got.overrides
    assert (o["train_dataset.batch_size"], o["rollout.consumer_batch_size"]) == (25, 25)
    assert got.caveats[-1] == ("--prompts 64: train_dataset.batch_size is the update batch too: "
                               "written as the batch knob's 25 prompts")


@pytest.mark.parametrize("cluster, window", [(None, None), ("h100-llama3.1-8b-16gpu", 384)])
def test_areal_async_without_a_run_sizes_the_window_from_the_cluster(cluster, window) -> None:
    got = export("areal", "async", [], load_cluster(cluster) if cluster else None, 8, 64)
    assert got.overrides.get("rollout.max_concurrent_rollouts") == window  # 12 engines x 256 / 8
    assert (("max_concurrent=0 (the rollout engines' total max_num_seqs): 3072 samples on this "
             "cluster") in got.caveats) == bool(cluster)


@pytest.mark.parametrize("framework, policy, key, value, caveat", [
    ("verl", "sync", "algorithm.filter_groups.enable", True,
     "filter_groups: verl's DAPO dynamic sampling drops groups whose rewards are all equal (metric "
     "acc: the score, where compute_score returns a number; one returning a dict must hold acc, or "
     "name another of its keys) and generates fresh prompts until data.train_batch_size groups "
     "remain; it needs a rule-based reward (or a reward model on its own resource pool)"),
    ("verl", "async", None, None,
     "filter_groups: verl's fully-async and one-step-off trainers do not read "
     "algorithm.filter_groups (only main_ppo's trainer does): groups whose rewards are all equal "
     "are trained, not replaced"),
    ("slime", "partial", "--dynamic-sampling-filter-path", SLIME_FILTER,
     "filter_groups: slime drops a group whose rewards have zero spread (check_reward_nonzero_std) "
     "and samples until --rollout-batch-size groups remain, in rounds of "
     "--over-sampling-batch-size prompts (default --rollout-batch-size), not one fresh prompt per "
     "dropped group"),
    ("slime", "one_step_off", "--dynamic-sampling-filter-path", SLIME_FILTER, None),
    ("areal", "async", None, None,
     "filter_groups: AReaL filters in the training script, not in its config: pass "
     "trainer.train(dynamic_filter_fn=...) a function that rejects a group whose rewards are all "
     "equal, and keep dynamic_bs=false (the default) so rejected groups are replaced from the "
     "dataloader"),
])
def test_filter_groups_is_mapped_or_caveated_never_dropped(framework, policy, key, value, caveat) -> None:
    got = export(framework, policy, ["filter_groups=true"])
    if key:
        assert got.overrides[key] == value
    if key == "algorithm.filter_groups.enable":  # (null by default, and verl refuses null: helper 209)
        assert got.overrides["algorithm.filter_groups.metric"] == "acc"  # (review: verl writes no seq_reward)
    assert SLIME_FILTER == "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
    written = [c for c in got.caveats if c.startswith("filter_groups")]
    assert len(written) == 1 and (caveat is None or written == [caveat])
    assert "algorithm.filter_groups.enable" not in export("verl", "one_step_off",
                                                          ["filter_groups=true"]).overrides


@pytest.mark.parametrize("framework", ["verl", "slime", "areal"])
@pytest.mark.parametrize("policy", ["sync", "partial", "sortedrl", "async", "one_step_off"])
def test_every_exported_filter_groups_leaves_a_trace(framework, policy) -> None:
    try:
        got = export(framework, policy, ["filter_groups=true"])
    except NoEquivalent:  # (AReaL: partial, sortedrl; slime: sortedrl)
        assert (framework, policy) in {("areal", "partial"), ("areal", "sortedrl"), ("slime", "sortedrl")}
        return
    assert any("filter" in k for k in got.overrides) or any(
        c.startswith("filter_groups") for c in got.caveats)
