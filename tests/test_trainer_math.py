"""The real runner's GRPO loss on hand-set log-probs (no model): the log-ratio clamp and the
clip fraction, checked against verl's ``compute_policy_loss`` (core_algos.py), and the decoupled
objective against AReaL's ``ppo_actor_loss_fn`` with the proximal policy the trained weights."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the real runner's trainer needs the [cpu] extra")

from sortedrl.realrun.trainer import GRPOTrainer, Rollout  # noqa: E402


def _trainer(logps: list[float], objective: str = "bypass"):
    """A GRPOTrainer whose policy log-prob of sample i's one response token is ``logps[i]`` (a
    leaf tensor, so the update's gradient is visible) and whose optimizer steps nothing."""
    leaf = torch.tensor([[x] for x in logps], requires_grad=True)
    t = object.__new__(GRPOTrainer)
    t.torch, t.device, t.max_pairs = torch, torch.device("cpu"), 2**21
    t.clip, t.is_cap, t.kl_coef, t.ref, t.objective = 0.2, 2.0, 0.0, None, objective
    t.opt = torch.optim.SGD([leaf], lr=0.0)
    t._logps = lambda model, batch: (leaf[[r.sample for r in batch]],
                                     torch.ones((len(batch), 1)))
    t.model = None
    return t, leaf


def _batch(behaviour: list[float], version: int = 0) -> list[Rollout]:
    return [Rollout(i, i, [1], [5], [b], [version], 0.0) for i, b in enumerate(behaviour)]


def test_clip_fraction_counts_only_tokens_the_clip_removed():
    # verl's pg_clipfrac: ratio 1.3 with A > 0 and 0.7 with A < 0 are clipped (no gradient);
    # 1.3 with A < 0 and 0.7 with A > 0 are outside the band but keep theirs
    ratios, advs = [1.3, 1.3, 0.7, 0.7], [1.0, -1.0, 1.0, -1.0]
    t, leaf = _trainer([-2.0 + math.log(r) for r in ratios])
    m = t.update(_batch([-2.0] * 4), advs, 0)
    assert m["clip_fraction"] == 0.5
    assert [g == 0 for g in leaf.grad.flatten().tolist()] == [True, False, False, True]
    # loss: -(1.2 - 1.3 + 0.7 - 0.8) / 4
    assert m["loss"] == pytest.approx(0.05, rel=1e-6)


def test_log_ratio_is_clamped_before_exp():
    # behaviour log-prob -102 against the trainer's -2: exp(100) overflows float32 to inf and the
    # loss with it; verl clamps the log-ratio to [-20, 20]
    t, leaf = _trainer([-2.0, -2.0])
    m = t.update(_batch([-102.0, -2.0]), [-1.0, 1.0], 0)
    ratio = float(torch.exp(torch.tensor(20.0)))  # exp(20) in float32
    assert m["loss"] == pytest.approx((ratio - 1.0) / 2, rel=1e-6)
    assert leaf.grad.flatten().tolist() == [0.0, -0.5]  # the clamped token carries no gradient
    assert m["clip_fraction"] == 0.0  # A < 0 with a large ratio: the min kept the unclipped term


def test_capped_tokens_counts_the_stale_tokens_the_is_cap_masked():
    # stale tokens (sampled by version 0, trained at version 1) with ratios 3.0 and 1.5 against
    # is_cap 2.0: the first is capped (no gradient), the second is not; A < 0 so the PPO clip
    # keeps the unclipped (capped) term of both
    t, leaf = _trainer([-2.0 + math.log(3.0), -2.0 + math.log(1.5)])
    m = t.update(_batch([-2.0, -2.0]), [-1.0, -1.0], 1)
    assert m["stale_tokens"] == 2
    assert m["capped_tokens"] == 1
    assert [g == 0 for g in leaf.grad.flatten().tolist()] == [True, False]
    # the same tokens fresh (trained at the version that sampled them): nothing is capped
    t, leaf = _trainer([-2.0 + math.log(3.0), -2.0 + math.log(1.5)])
    m = t.update(_batch([-2.0, -2.0]), [-1.0, -1.0], 0)
    assert (m["stale_tokens"], m["capped_tokens"]) == (0, 0)
    assert [g == 0 for g in leaf.grad.flatten().tolist()] == [False, False]


def test_decoupled_weights_each_token_by_its_ratio_and_never_clips():
    # AReaL's decoupled loss, proximal = the trained weights: ratio to the proximal policy 1 (the
    # clip never binds), each token's gradient -w * A / tokens with w = exp(trainer - vLLM).
    # The same tokens under bypass lose the gradient of the two the clip removes (test above).
    ratios, advs = [1.3, 1.3, 0.7, 0.7], [1.0, -1.0, 1.0, -1.0]
    t, leaf = _trainer([-2.0 + math.log(r) for r in ratios], "decoupled")
    m = t.update(_batch([-2.0] * 4, version=0), advs, 1)  # stale: sampled by version 0
    assert m["clip_fraction"] == 0.0
    assert m["stale_tokens"] == 4 and m["capped_tokens"] == 0
    assert leaf.grad.flatten().tolist() == pytest.approx([-1.3 / 4, 1.3 / 4, -0.7 / 4, 0.7 / 4], rel=1e-6)
    assert m["loss"] == pytest.approx(-(1.3 - 1.3 + 0.7 - 0.7) / 4, abs=1e-7)


def test_decoupled_masks_every_token_whose_weight_exceeds_is_cap():
    # AReaL filters tokens with behav_imp_weight > behav_imp_weight_cap, stale or not: weight 3.0
    # against is_cap 2.0 gets no gradient; 1.5 gets -1.5 * A / 2
    for version in (0, 1):
        t, leaf = _trainer([-2.0 + math.log(3.0), -2.0 + math.log(1.5)], "decoupled")
        m = t.update(_batch([-2.0, -2.0]), [-1.0, -1.0], version)
        assert m["capped_tokens"] == 1
        assert leaf.grad.flatten().tolist() == pytest.approx([0.0, 1.5 / 2], rel=1e-6)


def test_objective_is_checked_before_the_model_loads():
    with pytest.raises(ValueError, match="objective 'tis': expected one of bypass, decoupled"):
        GRPOTrainer("/nonexistent", objective="tis")
