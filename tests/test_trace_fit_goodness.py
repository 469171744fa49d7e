"""`trace fit`'s goodness of fit without a 20-fold trace in memory: the lengths-only draw, the
KS statistic from counts and the cap on model draws. Before, goodness drew a whole trace of 20
times the data's prompts (3 GiB a million samples; an 8M-sample trace did not fit in 24 GiB).
Up to 200,000 data samples the figures are those of that whole draw, to the bit."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from sortedrl.traces.fit import (
    MAX_MODEL_SAMPLES,
    QUANTILES,
    REPLICAS,
    goodness,
    ks_from_counts,
    ks_statistic,
    model_prompts,
)
from sortedrl.traces.model import TraceModel, draw_lengths, generate

MODEL = TraceModel(max_response_len=4096, group_size=8, prompts_per_step=64, mu0=6.5,
                   sigma_between=0.6, sigma_within=0.4, drift=0.05, runaway_share=0.03,
                   prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=2048,
                   runaway_drift=0.002, pass_alpha=0.8, pass_beta=1.2, source="known")


def _old_goodness(trace, model) -> dict:
    """goodness as it was: a whole generated trace of REPLICAS times the prompts, sorted."""
    steps = 1 if trace.step is None else int(trace.step.max() - trace.step.min() + 1)
    draw = generate(model, steps, seed=0, prompts=max(1, trace.num_groups // steps) * REPLICAS)
    data, sim = np.sort(trace.response_len), np.sort(draw.response_len)
    return {
        "quantiles": [{"q": q, "data": float(np.quantile(data, q)),
                       "model": float(np.quantile(sim, q))} for q in QUANTILES],
        "mean_data": float(data.mean()), "mean_model": float(sim.mean()),
        "truncated_data": float(np.mean(trace.truncated)),
        "truncated_model": float(np.mean(draw.truncated)),
        "ks": ks_statistic(data, sim), "samples": int(data.size), "model_samples": int(sim.size),
    }


@pytest.mark.parametrize("group_size", [1, 8])
@pytest.mark.parametrize("reward", [True, False])
def test_draw_lengths_is_generates_length_column(group_size, reward) -> None:
    model = dataclasses.replace(MODEL, group_size=group_size,
                                **({} if reward else {"pass_alpha": None, "pass_beta": None}))
    for seed in (0, 7):
        assert np.array_equal(draw_lengths(model, 5, seed=seed, prompts=33),
                              generate(model, 5, seed=seed, prompts=33).response_len)


def test_ks_from_counts_is_ks_statistic_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = rng.integers(1, rng.integers(2, 60), size=rng.integers(1, 300))
        b = rng.integers(rng.integers(1, 20), 80, size=rng.integers(1, 300))
        top = max(a.max(), b.max()) + 1
        assert ks_from_counts(np.bincount(a, minlength=top),
                              np.bincount(b, minlength=top)) == ks_statistic(a, b)


@pytest.mark.parametrize("steps,prompts", [(1, 40), (6, 64), (3, 500)])
def test_goodness_of_a_small_trace_is_the_whole_draws(steps, prompts) -> None:
    """Every value equal (==, not close) to the old whole-trace computation."""
    trace = generate(dataclasses.replace(MODEL, mu0=6.3), steps, seed=5, prompts=prompts)
    assert goodness(trace, MODEL) == _old_goodness(trace, MODEL)


def test_model_draws_are_capped_for_a_big_trace() -> None:
    """A 256,000-sample trace: 20 times would be 5.12M draws; the draw holds MAX_MODEL_SAMPLES
    (4M) at most. Up to 200,000 samples the draw is the full 20 times."""
    big = generate(MODEL, 10, seed=1, prompts=3200)  # 10 steps x 3200 prompts x 8 = 256,000
    fit = goodness(big, MODEL)
    assert fit["samples"] == 256_000
    assert fit["model_samples"] == 10 * 8 * (MAX_MODEL_SAMPLES // 80) == 4_000_000
    assert model_prompts(big) == (10, 50_000)
    below = SimpleNamespace(step=np.array([0, 9]), num_groups=25_000,
                            meta=SimpleNamespace(group_size=8))  # 200,000 samples
    assert model_prompts(below) == (10, 2_500 * REPLICAS)
    # more steps x group size than the cap: one prompt a step, still no more than the data
    many = SimpleNamespace(step=np.array([0, 599_999]), num_groups=600_000,
                           meta=SimpleNamespace(group_size=8))
    assert model_prompts(many) == (600_000, 1)


def test_a_cap_far_above_the_lengths_takes_ks_from_the_draws() -> None:
    """Runaway responses at a cap of 1e9 tokens: counts per length would be 8 GB; the KS
    statistic then comes from the sorted draws, equal to the whole-trace computation still."""
    model = dataclasses.replace(MODEL, max_response_len=10**9)
    trace = generate(model, 2, seed=5, prompts=40)
    assert int(trace.response_len.max()) == 10**9
    assert goodness(trace, model) == _old_goodness(trace, model)
