"""Synthetic length traces whose statistics match published RL-rollout numbers.

Real per-sample length traces of GRPO runs are rarely published, but a few summary statistics
are (``docs/traces.md`` and the reference digest, section 5, list them). This module draws traces
from a small hierarchical model whose parameters are fitted to those statistics, so that the
simulator can be run on realistic length distributions without a GPU.

The model, for prompt ``p``, sample ``k`` and training step ``t``:

* difficulty ``d_p = z_p + hard_shift * h_p`` with ``z_p ~ N(0, 1)`` and ``h_p ~ Bernoulli(hard_share)``:
  a two-component mixture, because one lognormal cannot give both P75/P50 ≈ 1.5 and
  P99/P50 ≈ 10;
* log-length mean ``m_pt = mu0 + sigma_between * d_p + drift * t``;
* ``log l = m_pt + sigma_within * e`` with ``e ~ N(0, 1)``, ``sigma_within < sigma_between``
  (responses to one prompt have similar lengths);
* with probability ``sigmoid(runaway_logit + runaway_slope * (m_pt - mu0) / sigma_between)`` the
  sample runs away to the cap (hard prompts run away more often);
* ``response_len = clip(round(l), 1, cap)``, ``truncated = response_len == cap``;
* per prompt, a pass rate ``q_p ~ Beta(pass_alpha, pass_beta)`` (U-shaped for the presets: many
  prompts are almost always or almost never solved, so many GRPO groups have all-equal rewards,
  which is what dynamic sampling filters);
* ``reward = 1`` with probability ``sigmoid(logit(q_p) + reward_slope * (log l - mu0))``, and 0
  for truncated samples: longer answers are more often wrong (``q_p`` is the prompt's pass rate
  at the length ``exp(mu0)``). With ``pass_alpha = 0`` every prompt has ``logit(q_p) =
  reward_logit``;
* ``prompt_len ~ round(lognormal(log prompt_median, prompt_sigma))`` clipped, fixed per prompt.

Everything is vectorized; one million samples take a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.limits import INT32_MAX, check_seed
from sortedrl.traces.schema import Trace, TraceMeta, check_samples
from sortedrl.traces.synth_agentic import (
    AGENTIC_PRESETS,
    AgenticParams,
    generate_agentic,
    synthetic_trace,
)


@dataclass(frozen=True)
class SynthParams:
    """Parameters of the hierarchical length model (see the module docstring)."""

    max_response_len: int  # the generation cap (tokens)
    mu0: float  # log-length centre of an easy prompt at step 0
    sigma_between: float  # std of the prompt log-length mean, per unit of difficulty
    sigma_within: float  # std of log-length between samples of one prompt
    hard_share: float  # share of "hard" prompts (second mixture component)
    hard_shift: float  # difficulty offset of hard prompts (in units of sigma_between)
    runaway_logit: float  # logit of the run-to-the-cap probability at difficulty 0
    runaway_slope: float  # its increase per unit of difficulty
    drift: float  # log-length increase per training step
    reward_logit: float  # logit of P(correct) for a response of length exp(mu0)
    reward_slope: float  # change of that logit per unit of log-length (negative)
    prompt_median: float  # median prompt length (tokens)
    prompt_sigma: float  # std of log prompt length
    prompt_min: int  # prompt lengths are clipped to [prompt_min, prompt_max]
    prompt_max: int
    prompts: int = 128  # default prompts per step
    group_size: int = 8  # default GRPO group size n
    steps: int = 1  # default number of steps
    pass_alpha: float = 0.0  # per-prompt pass rate ~ Beta(pass_alpha, pass_beta); 0: reward_logit
    pass_beta: float = 0.0


# Fitted with a Nelder-Mead search on 400k samples (seed 0), minimising the squared log-errors
# of the targets below; the measured values are in docs/traces.md and tested in
# tests/test_traces_synth.py.
PRESETS: dict[str, SynthParams] = {
    # LogicRL (Knights and Knaves), LLaMA-3.1-8B-Instruct, 8k cap; SortedRL throughput setting.
    "logic-8k": SynthParams(
        max_response_len=8192,  # SortedRL: "max generation length 8k, batch 512"
        # fitted: SortedRL's 74% slot bubble (definition A) as the simulator times it, the mean `sync`
        # bubble of seeds 0-5 on h100-llama3.1-8b-64seq; mean/cap 0.23 (1 - mean/cap overstates the
        # bubble: steps speed up as the batch drains)
        mu0=7.34,
        sigma_between=0.45,  # not published; assumed (lighter tail than math)
        sigma_within=0.30,  # not published; assumed < sigma_between (Seer's premise)
        hard_share=0.0,  # not needed: no tail target for this task
        hard_shift=0.0,
        runaway_logit=-4.465,  # fitted: ~2% truncated, so a 512-sample step reaches the cap
        runaway_slope=1.0,  # assumed: hard prompts run away more often
        drift=0.003,  # assumed: Logic-RL style length growth (no published rate)
        reward_logit=-0.5,  # assumed: ~35% accuracy early in training
        reward_slope=-1.0,  # assumed: longer answers are more often wrong
        prompt_median=300.0,  # assumed: a 3-7 character K&K puzzle plus template
        prompt_sigma=0.25,
        prompt_min=64,
        prompt_max=1024,
        prompts=128,  # SortedRL logic baseline: 128 prompts x 8 responses
        group_size=8,
        steps=1,
        pass_alpha=0.6,  # assumed: mean pass rate 0.375 = sigmoid(reward_logit), U-shaped
        pass_beta=1.0,
    ),
    # DAPO-Math-17k style math RL, 16k cap.
    "math-16k": SynthParams(
        max_response_len=16384,  # RollPacker / AsyncFlow: max response 16k
        mu0=6.37,  # fitted: median 600-800, P75 755-1.1k (RollPacker), mean ~1k (AsyncFlow)
        sigma_between=0.435,  # fitted: P75/P50 (RollPacker) together with the tail below
        sigma_within=0.22,  # fitted ratio: P99/P50 ~ 10 over non-truncated samples (Laminar)
        hard_share=0.096,  # fitted: P99/P50 ~ 10 (Laminar)
        hard_shift=4.08,
        runaway_logit=-4.37,  # fitted: 2-5% truncated at 16k (verl: ~3% much longer than median)
        runaway_slope=0.49,  # fitted with the above
        drift=0.002,  # assumed: DAPO-style length growth (no published rate)
        reward_logit=0.4,  # assumed: ~60% accuracy at the median length
        reward_slope=-1.0,  # assumed: longer answers are more often wrong
        prompt_median=150.0,  # assumed: a DAPO-Math problem plus template
        prompt_sigma=0.4,
        prompt_min=16,
        prompt_max=2048,
        prompts=128,  # RollPacker: batch 128 x 8
        group_size=8,
        steps=1,
        pass_alpha=0.9,  # assumed: mean pass rate 0.6 = sigmoid(reward_logit), U-shaped
        pass_beta=0.6,
    ),
}


def synthesize(
    preset: str,
    prompts: int | None = None,
    group_size: int | None = None,
    steps: int | None = None,
    seed: int = 0,
    dataset_size: int | None = None,
    max_response_len: int | None = None,
) -> Trace:
    """Draw a trace from a preset; ``None`` arguments take the preset's defaults.

    ``prompts`` is prompts per step, ``dataset_size`` the number of distinct prompts (default
    ``prompts * steps``: no repeats). A smaller dataset is cycled epoch by epoch in a fresh
    shuffled order (like a shuffling dataloader with ``drop_last``); a prompt keeps its
    difficulty and prompt length across epochs, so its ``prompt_id`` recurs.
    ``max_response_len`` replaces the preset's generation cap (of a trajectory, all turns
    together, for an agentic preset): the same length model, cut at another cap, so its runaways
    run to that cap (RL runs of reasoning models use 16k to 64k).
    """
    params, P, n, S = check_synthesis(preset, prompts, group_size, steps, seed, dataset_size, max_response_len)
    if isinstance(params, SynthParams):
        trace = generate(params, P, n, S, seed=seed, dataset_size=dataset_size)
    else:
        trace = generate_agentic(params, P, n, S, int(seed), _dataset_size(dataset_size, P, S), "synth")
    D = P * S if dataset_size is None else dataset_size
    source = f"synth:{preset} seed={seed} prompts={P} group_size={n} steps={S} dataset_size={D}" + (
        f" max_response_len={max_response_len}" if max_response_len is not None else "")
    meta = TraceMeta(trace.meta.max_response_len, trace.meta.group_size, source)
    return dataclasses.replace(trace, meta=meta, name=preset)


def check_synthesis(preset: str, prompts: int | None = None, group_size: int | None = None,
                    steps: int | None = None, seed: int = 0, dataset_size: int | None = None,
                    max_response_len: int | None = None) -> tuple[SynthParams | AgenticParams, int, int, int]:
    """Check :func:`synthesize`'s arguments without drawing anything; return the preset's
    parameters and the prompts per step, group size and steps it will draw. Cheap, so that a
    command checks them before its outputs: an unknown preset is what is wrong, not the run
    directory of other options it would replace."""
    if preset not in PRESETS and preset not in AGENTIC_PRESETS:
        known = ", ".join(preset_names())
        raise ConfigError(f"unknown preset {preset!r}; known presets: {known}")
    params = PRESETS.get(preset) or AGENTIC_PRESETS[preset]
    if max_response_len is not None:  # (a 32-bit length, as a trace's)
        cap = _check_int("max_response_len", max_response_len, 1, INT32_MAX)
        params = dataclasses.replace(params, max_response_len=cap)
    P, n, S, _, _ = _shape(params.prompts if prompts is None else prompts,
                           params.group_size if group_size is None else group_size,
                           params.steps if steps is None else steps, seed, dataset_size)
    return params, P, n, S


def _shape(prompts: object, group_size: object, steps: object, seed: object,
           dataset_size: int | None) -> tuple[int, int, int, int, int]:
    """A draw's prompts per step, group size, steps, seed and dataset size, checked in that
    order (one message a refused value: :func:`check_synthesis` and :func:`generate` alike)."""
    P, n, S, seed = (_check_int(k, v, m) for k, v, m in
                     (("prompts", prompts, 1), ("group_size", group_size, 1), ("steps", steps, 1),
                      ("seed", seed, 0)))
    seed = check_seed(seed, "seed")
    check_samples(P, n, S)
    D = _dataset_size(dataset_size, P, S)
    if D < P:
        raise ConfigError(f"dataset_size ({D}) must be >= prompts per step ({P})")
    return P, n, S, seed, D


def preset_names() -> list[str]:
    """Every synthetic preset: the single-turn length presets, then the agentic (multi-turn) ones."""
    return sorted(PRESETS) + sorted(AGENTIC_PRESETS)


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum:,}, got {value:,}")
    return int(value)


MAX_DATASET = 2**24  # distinct prompts a synthetic dataset may have beyond those a run uses: each
# has its own drawn effect (an array entry); real RL datasets hold 10^4 to 10^6 prompts


def _dataset_size(dataset_size: int | None, P: int, S: int) -> int:
    if dataset_size is None:
        return P * S
    return _check_int("dataset_size", dataset_size, 1, max(P * S, MAX_DATASET))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def generate(
    params: SynthParams,
    prompts: int,
    group_size: int,
    steps: int,
    seed: int = 0,
    dataset_size: int | None = None,
    source: str = "synth",
) -> Trace:
    """Draw a trace from explicit parameters (``synthesize`` with a preset is the usual entry)."""
    P, n, S, seed, D = _shape(prompts, group_size, steps, seed, dataset_size)
    rng = np.random.default_rng(seed)
    cap = params.max_response_len

    # per prompt of the dataset: difficulty and prompt length
    hard = rng.random(D) < params.hard_share
    difficulty = rng.standard_normal(D) + params.hard_shift * hard
    plen = np.exp(math.log(params.prompt_median) + params.prompt_sigma * rng.standard_normal(D))
    plen = np.clip(np.rint(plen), params.prompt_min, params.prompt_max).astype(np.int64)

    # which prompt each (step, slot) gets: shuffled epochs, drop_last
    per_epoch = D // P
    epochs = -(-S // per_epoch)
    order = np.argsort(rng.random((epochs, D)), axis=1)[:, : per_epoch * P]
    draw = order.reshape(-1)[: S * P]
    draw_step = np.repeat(np.arange(S, dtype=np.int64), P)

    # per sample
    idx = np.repeat(draw, n)
    step = np.repeat(draw_step, n)
    mean = params.mu0 + params.sigma_between * difficulty[idx] + params.drift * step
    log_len = mean + params.sigma_within * rng.standard_normal(idx.size)
    z = (mean - params.mu0) / params.sigma_between
    runaway = rng.random(idx.size) < _sigmoid(params.runaway_logit + params.runaway_slope * z)
    length = np.rint(np.exp(np.minimum(log_len, math.log(cap) + 1.0)))
    response_len = np.clip(length, 1, cap).astype(np.int64)
    response_len[runaway] = cap
    truncated = response_len == cap
    draw_reward = rng.random(idx.size)
    logit_pass = np.full(D, params.reward_logit)
    if params.pass_alpha > 0:  # drawn last, so the lengths do not depend on it
        q = np.clip(rng.beta(params.pass_alpha, params.pass_beta, D), 1e-6, 1 - 1e-6)
        logit_pass = np.log(q) - np.log1p(-q)
    p_correct = _sigmoid(logit_pass[idx] + params.reward_slope * (np.log(response_len) - params.mu0))
    reward = ((draw_reward < p_correct) & ~truncated).astype(np.float64)

    return synthetic_trace(cap, n, source, D, idx, plen, response_len, truncated, step, reward)
