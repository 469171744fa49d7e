"""``trace fit``: estimate the length model of :mod:`sortedrl.traces.model` from a trace.

The estimators are moments, chosen because they are closed-form and exact enough at the sample
sizes of one RL step (thousands of responses):

* drift of the mean: the slope of the group medians of log length against the step (a sample
  at the cap counts as above the others, so a median is exact while under half its group is
  capped; with one step there is no drift);
* centre and total spread: quantiles of the residual log lengths (median and interquartile
  range), which the cap does not reach while under a quarter of the samples are at it (up to
  half: the median and 10th percentile);
* truncation at the cap: the share at the cap beyond what the fitted lognormal puts above it is
  the runaway share; it shifts the quantile levels, so the three are solved together;
* within-group spread: the pooled within-group variance of log length over groups with no
  sample at the cap whose median is far below it; the prompt effect's spread is what remains of
  the total (``sigma_between**2 = total**2 - sigma_within**2``);
* pass rates: a beta-binomial method of moments on the per-group pass counts (reward > 0);
* drift from a W&B export (``--drift-from``, :mod:`sortedrl.traces.wandb_drift`): per step, the
  log-mean and the runaway share that give the logged mean and share at the cap under this
  model's cap and spread, and their slopes per step.

Goodness of fit compares the data's response lengths with a large draw from the model over the
same steps: quantiles side by side and the two-sample Kolmogorov-Smirnov statistic.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.traces.model import TraceModel, check_model, generate
from sortedrl.traces.schema import Trace
from sortedrl.traces.wandb_drift import SIBLINGS, drift_from_wandb  # noqa: F401  (re-exported)

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
REPLICAS = 20  # model draws per data sample in the goodness-of-fit comparison


def fit_trace(trace: Trace, source: str = "") -> TraceModel:
    """Fit the length model to ``trace`` and attach its goodness of fit."""
    n = trace.meta.group_size
    cap = trace.meta.max_response_len
    groups = trace.num_groups
    step = (trace.step if trace.step is not None else np.zeros(len(trace), dtype=np.int64))
    group_step = (step[::n] - step.min()).astype(np.float64)
    capped = (trace.response_len >= cap).reshape(groups, n)
    log_len = np.where(capped, np.inf, np.log(trace.response_len.astype(np.float64)).reshape(groups, n))
    intercept, drift = _median_line(log_len, group_step)
    resid = log_len - (intercept + drift * group_step)[:, None]
    mu0, total_sd, runaway = _centre_spread_runaway(resid, intercept, drift, group_step, cap,
                                                    float(capped.mean()))
    sigma_within = _within(log_len, capped, math.log(cap) - 3 * total_sd)
    sigma_between = math.sqrt(max(0.0, total_sd**2 - sigma_within**2))
    plen = np.log(trace.prompt_len[::n].astype(np.float64))
    alpha, beta = _pass_rates(trace.reward, n) if trace.reward is not None else (None, None)
    steps = len(np.unique(group_step))
    model = TraceModel(
        max_response_len=cap, group_size=n, prompts_per_step=max(1, round(groups / steps)),
        mu0=mu0, sigma_between=sigma_between, sigma_within=sigma_within, drift=drift,
        runaway_share=runaway, prompt_median=float(np.exp(plen.mean())),
        prompt_sigma=float(plen.std()), prompt_min=int(trace.prompt_len.min()),
        prompt_max=int(trace.prompt_len.max()), pass_alpha=alpha, pass_beta=beta,
        source=source or trace.meta.source or trace.name)
    check_model(model, "fitted model")
    return dataclasses.replace(model, fit=goodness(trace, model))


def _median_line(log_len: np.ndarray, group_step: np.ndarray) -> tuple[float, float]:
    """Intercept and slope per step of the group medians of log length (capped samples count as
    above every other, so a median is exact while under half of its group is capped)."""
    median = np.median(log_len, axis=1)
    used = np.isfinite(median)
    if not used.any():
        raise TraceError("trace fit: most samples are at the cap; the lengths say too little")
    if np.unique(group_step[used]).size > 1:
        slope, intercept = np.polyfit(group_step[used], median[used], 1)
        return float(intercept), float(slope)
    return float(median[used].mean()), 0.0


def _centre_spread_runaway(resid: np.ndarray, intercept: float, drift: float,
                           group_step: np.ndarray, cap: int,
                           capped_share: float) -> tuple[float, float, float]:
    """mu0, the total std of log length, and the runaway share, from residual quantiles.

    A runaway share ``r`` puts mass at the cap, so the natural distribution's quantile ``q`` is
    the observed quantile ``q * (1 - r)``; natural censoring at the cap only hides the top, so
    quantiles up to 0.75 are exact while under a quarter is capped. Three fixed-point rounds."""
    flat = resid.reshape(-1)
    runaway, mu0, total_sd = 0.0, intercept, 0.0
    for _ in range(3):
        keep = 1.0 - runaway
        tail, low, mid, high = np.quantile(flat, [0.1 * keep, 0.25 * keep, 0.5 * keep,
                                                  0.75 * keep])
        if not np.isfinite(mid):
            raise TraceError("trace fit: half the samples or more are at the cap; the length "
                             "distribution cannot be told from the cap")
        if np.isfinite(high):
            total_sd = float(high - low) / 1.3489795  # the interquartile range of a normal
        else:  # over a quarter at the cap: the lower half only
            total_sd = float(mid - tail) / 1.2815516
        mu0 = intercept + float(mid)
        natural = _natural_share(mu0 + drift * group_step, total_sd, cap)
        runaway = max(0.0, (capped_share - natural) / (1.0 - natural)) if natural < 1 else 0.0
    return mu0, total_sd, runaway


def _within(log_len: np.ndarray, capped: np.ndarray, far_below: float) -> float:
    """Pooled within-group std of log length over groups with no sample at the cap, taking
    those whose median is far below it (3 total std) when there are enough of them, so that
    censoring does not thin the spread."""
    clean = ~capped.any(axis=1)
    far = clean & (np.median(np.where(capped, 0.0, log_len), axis=1) < far_below)
    rows = log_len[far if far.sum() >= 10 else clean]
    if rows.shape[0] == 0 or rows.shape[1] < 2:
        return 0.0
    return float(math.sqrt(np.var(rows, axis=1, ddof=1).mean()))


def _natural_share(means: np.ndarray, sd: float, cap: int) -> float:
    """Share of lognormal draws that round to the cap or above."""
    if sd == 0:
        return float(np.mean(np.exp(means) >= cap - 0.5))
    z = (math.log(cap - 0.5) - means) / (sd * math.sqrt(2.0))
    return float(np.mean([0.5 * math.erfc(v) for v in z]))


def _pass_rates(reward: np.ndarray, n: int) -> tuple[float, float]:
    """Beta(alpha, beta) of per-prompt pass rates by the beta-binomial method of moments."""
    passes = (reward > 0).reshape(-1, n).sum(axis=1).astype(np.float64)
    p = float(np.clip(passes.sum() / passes.size / n, 1e-3, 1 - 1e-3))
    if n == 1 or passes.size < 2:
        rho = 1.0 / 3.0  # not identified from one sample per prompt: Beta(2p, 2(1-p))... scale 2
    else:
        var = float(np.var(passes / n, ddof=1))
        rho = (var * n / (p * (1 - p)) - 1) / (n - 1)
    rho = float(np.clip(rho, 1e-3, 0.999))
    scale = 1.0 / rho - 1.0
    return p * scale, (1 - p) * scale


def goodness(trace: Trace, model: TraceModel) -> dict:
    """Quantiles of the data against a draw from the model, and the KS statistic."""
    steps = 1 if trace.step is None else int(trace.step.max() - trace.step.min() + 1)
    per_step = max(1, trace.num_groups // steps)
    draw = generate(model, steps, seed=0, prompts=per_step * REPLICAS)
    data, sim = np.sort(trace.response_len), np.sort(draw.response_len)
    return {
        "quantiles": [{"q": q, "data": float(np.quantile(data, q)),
                       "model": float(np.quantile(sim, q))} for q in QUANTILES],
        "mean_data": float(data.mean()), "mean_model": float(sim.mean()),
        "truncated_data": float(np.mean(trace.truncated)),
        "truncated_model": float(np.mean(draw.truncated)),
        "ks": ks_statistic(data, sim), "samples": int(data.size), "model_samples": int(sim.size),
    }


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    gap = np.searchsorted(a, points, side="right") / a.size \
        - np.searchsorted(b, points, side="right") / b.size
    return float(np.abs(gap).max())
