"""``trace fit``: estimate the length model of :mod:`sortedrl.traces.model` from a trace.

The estimators are moments, chosen because they are closed-form and exact enough at the sample
sizes of one RL step (thousands of responses):

* drift of the mean: the slope of the group medians of log length against the step (a sample
  at the cap counts as above the others, so a median is exact while under half its group is
  capped; with one step there is no drift). A group with half its samples or more at the cap
  has a median known only to lie above a floor (the median with the capped samples put at the
  cap); those groups are the long ones of the long steps, so dropping them pulled the drift
  toward 0 (a true 0.1 read as 0.093). They enter a censored (Tobit) normal regression of the
  medians instead, which is ordinary least squares when no median is censored;
* centre and total spread: quantiles of the residual log lengths (median and interquartile
  range), which the cap does not reach while under a quarter of the samples are at it (up to
  half: the median and 10th percentile);
* truncation at the cap: the share at the cap beyond what the fitted lognormal puts above it is
  the runaway share; it shifts the quantile levels, so the three are solved together, by fixed
  point iteration to convergence (three fixed rounds stopped short when many samples sit at the
  cap: a runaway share of 0.02 read as 0.236 with a centre 3% below the cap);
* within-group spread: the pooled within-group variance of log length over groups whose median
  lies at least 4 within-group spreads below the cap (iterated from the total spread, which
  bounds it from above), their capped samples left out: so far below the cap a capped sample is
  a runaway, which is independent of the spread, and the cap cuts under 0.01% of a group's own
  distribution. Taking groups with no capped sample instead kept those near the cap whose spread
  happened to be small. With fewer than 10 such groups the 10 lowest are used, and the cap may
  thin their spread (docs/traces.md). The prompt effect's spread is what remains of the total
  (``sigma_between**2 = total**2 - sigma_within**2``); with one sample per prompt the two cannot
  be told apart, ``sigma_within`` is 0 and ``trace fit`` says so;
* pass rates: a beta-binomial method of moments on the per-group pass counts (reward > 0);
* drift from a W&B export (``--drift-from``, :mod:`sortedrl.traces.wandb_drift`): per step, the
  log-mean and the runaway share that give the logged mean and share at the cap under this
  model's cap and spread, and their slopes per step.

Turns (a multi-turn trace): :func:`sortedrl.traces.model_turns.fit_turns`, after the lengths.

Goodness of fit compares the data's response lengths with a large draw from the model over the
same steps (20 times the data, at most 4M samples): quantiles side by side and the two-sample
Kolmogorov-Smirnov statistic; with turns, also the mean tool calls, tool seconds and tool-output
tokens per trajectory.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.traces.model import TraceModel, check_model, draw_lengths, draw_tool_load
from sortedrl.traces.model_turns import fit_turns, has_turns
from sortedrl.traces.schema import Trace
from sortedrl.traces.wandb_drift import SIBLINGS, drift_from_wandb  # noqa: F401  (re-exported)

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
REPLICAS = 20  # model draws per data sample in the goodness-of-fit comparison
MAX_MODEL_SAMPLES = 4_000_000  # at most, in that draw (model_prompts; 32 MB of lengths)
# Fewer prompts than this and the prompt effect cannot be told from the spread within a group
# (one row gave every spread 0; two rows on two steps a drift of 0.41): refused. At 8 each
# quartile of the prompt effects rests on 2 prompts and sigma_between's standard error is at
# least a quarter of it (slime's 8-prompt fixture dump still fits).
MIN_GROUPS = 8
SMALL_GROUPS = 100  # below it trace fit prints a note (sigma_between's error is then >= 7%)
ROUNDS = 200  # at most, for the fixed points (each converges in under 30 on the audit's cases)
TOL = 1e-10
FAR = 4.0  # within-group spreads between a group's median and the cap for it to count as uncut
MIN_FAR = 10  # groups


def fit_trace(trace: Trace, source: str = "", where: str = "") -> TraceModel:
    """Fit the length model to ``trace`` and attach its goodness of fit. ``where`` (the file,
    by default ``source`` or the trace's name) opens every error."""
    where = where or source or trace.name
    n = trace.meta.group_size
    cap = trace.meta.max_response_len
    groups = trace.num_groups
    if groups < MIN_GROUPS:
        raise TraceError(f"{where}: field 'prompt_id': {groups} prompt(s) (groups of "
                         f"{n}); a trace fit needs at least {MIN_GROUPS} to tell the prompt "
                         "effect from the spread within a group")
    step = (trace.step if trace.step is not None else np.zeros(len(trace), dtype=np.int64))
    group_step = (step[::n] - step.min()).astype(np.float64)
    capped = (trace.response_len >= cap).reshape(groups, n)
    log_len = np.where(capped, np.inf, np.log(trace.response_len.astype(np.float64)).reshape(groups, n))
    intercept, drift = _median_line(log_len, group_step, cap, where)
    resid = log_len - (intercept + drift * group_step)[:, None]
    mu0, total_sd, runaway = _centre_spread_runaway(resid, intercept, drift, group_step, cap,
                                                    float(capped.mean()), where)
    sigma_within = _within(log_len, cap, total_sd)
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
    if trace.turn_offsets is not None:  # calls per token: solved on the model's own lengths
        steps, prompts = model_prompts(trace)
        model = dataclasses.replace(model, **fit_turns(trace, draw_lengths(model, steps, 0, prompts)))
    check_model(model, "fitted model")
    return dataclasses.replace(model, fit=goodness(trace, model))


def _median_line(log_len: np.ndarray, group_step: np.ndarray, cap: int,
                 where: str) -> tuple[float, float]:
    """Intercept and slope per step of the group medians of log length (capped samples count as
    above every other, so a median is exact while under half of its group is capped; a group
    with more capped has a censored median, see :func:`_tobit_line`). The slope is fitted only
    when the exact medians span two steps or more: with them all on one step, censored medians
    elsewhere only say "longer", which any steeper line satisfies (a likelihood with no
    maximum: a drift of 4.4 a step came out), so the line stays flat, as with one step."""
    median = np.median(log_len, axis=1)
    used = np.isfinite(median)
    if not used.any():
        raise TraceError(f"{where}: field 'response_len': every prompt has half its samples or "
                         f"more at the cap ({cap:,}); the lengths say too little to fit")
    sloped = np.unique(group_step[used]).size > 1
    if sloped:
        slope, intercept = np.polyfit(group_step[used], median[used], 1)
    else:
        slope, intercept = 0.0, median[used].mean()
    if used.all():
        return float(intercept), float(slope)
    floor = np.median(np.where(used[:, None] | np.isfinite(log_len), log_len,
                               math.log(cap - 0.5)), axis=1)
    y = np.where(used, median, floor)
    return _tobit_line(y, ~used, group_step, float(intercept), float(slope), sloped)


def _tobit_line(y: np.ndarray, censored: np.ndarray, x: np.ndarray, intercept: float,
                slope: float, sloped: bool) -> tuple[float, float]:
    """Maximum likelihood line ``y = a + b x + s e`` (``e`` normal) where ``y`` is only known to
    be at least its value in the ``censored`` rows (the Tobit model), started from the least
    squares line of the others. A group's median is normal to good approximation (the prompt
    effect plus the median of its samples' noise); without ``sloped`` the slope stays 0."""
    from scipy.optimize import minimize
    from scipy.special import log_ndtr

    def nll(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b, log_s = theta[0], (theta[1] if sloped else 0.0), theta[-1]
        s = math.exp(log_s)
        z = (y - a - b * x) / s
        zc, zu = z[censored], z[~censored]
        tail = log_ndtr(-zc)  # log P(latent >= floor)
        hazard = np.exp(-0.5 * zc**2 - 0.5 * math.log(2 * math.pi) - tail)
        dmu = np.zeros_like(y)
        dmu[~censored] = -zu / s
        dmu[censored] = -hazard / s
        value = float(zu.size * log_s + 0.5 * (zu**2).sum() - tail.sum())
        grad = [dmu.sum(), (dmu * x).sum()] if sloped else [dmu.sum()]
        grad.append(float(zu.size - (zu**2).sum() - (hazard * zc).sum()))
        return value, np.array(grad, dtype=np.float64)

    free = ~censored
    rest = y[free] - intercept - slope * x[free]
    s0 = max(float(np.sqrt(np.mean(rest**2))) if rest.size > 1 else 0.0, 1e-3)
    start = [intercept, slope, math.log(s0)] if sloped else [intercept, math.log(s0)]
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        found = minimize(nll, np.array(start), jac=True, method="L-BFGS-B",
                         bounds=[(None, None)] * (len(start) - 1) + [(math.log(1e-4), 5.0)],
                         options={"maxiter": 500, "ftol": 1e-14, "gtol": 1e-10})
    if not np.all(np.isfinite(found.x)):
        return intercept, slope
    return float(found.x[0]), float(found.x[1]) if sloped else 0.0


def _centre_spread_runaway(resid: np.ndarray, intercept: float, drift: float,
                           group_step: np.ndarray, cap: int, capped_share: float,
                           where: str) -> tuple[float, float, float]:
    """mu0, the total std of log length, and the runaway share, from residual quantiles.

    A runaway share ``r`` puts mass at the cap, so the natural distribution's quantile ``q`` is
    the observed quantile ``q * (1 - r)``; natural censoring at the cap only hides the top, so
    quantiles up to 0.75 are exact while under a quarter is capped. Iterated until no value
    moves by ``TOL`` (at most ``ROUNDS``): near the cap each round moves the runaway share a
    little, and three rounds left it 10 times too high."""
    flat = resid.reshape(-1)
    runaway, mu0, total_sd = 0.0, intercept, 0.0
    for _ in range(ROUNDS):
        keep = 1.0 - runaway
        with np.errstate(invalid="ignore"):  # quantiles between two capped (infinite) residuals
            tail, low, mid, high = np.quantile(flat, [0.1 * keep, 0.25 * keep, 0.5 * keep,
                                                      0.75 * keep])
        if not np.isfinite(mid):
            raise TraceError(f"{where}: field 'response_len': half the samples or more are at "
                             f"the cap ({cap:,}); the length distribution cannot be told from "
                             "the cap")
        if np.isfinite(high):
            sd = float(high - low) / 1.3489795  # the interquartile range of a normal
        else:  # over a quarter at the cap: the lower half only
            sd = float(mid - tail) / 1.2815516
        centre = intercept + float(mid)
        natural = _natural_share(centre + drift * group_step, sd, cap)
        share = max(0.0, (capped_share - natural) / (1.0 - natural)) if natural < 1 else 0.0
        moved = max(abs(centre - mu0), abs(sd - total_sd), abs(share - runaway))
        mu0, total_sd, runaway = centre, sd, share
        if moved < TOL:
            break
    return mu0, total_sd, runaway


def _within(log_len: np.ndarray, cap: int, total_sd: float) -> float:
    """Pooled within-group std of log length over the groups whose median is ``FAR``
    within-group spreads below the cap, their capped samples (runaways) left out; the spread in
    that rule starts at the total, an upper bound, and follows the estimate to a fixed point.
    With fewer than ``MIN_FAR`` such groups, the ``MIN_FAR`` lowest (the cap may thin them)."""
    if log_len.shape[1] < 2:
        return 0.0  # one sample per prompt: not identified (trace fit prints a note)
    top = math.log(cap - 0.5)
    median = np.median(log_len, axis=1)
    finite = np.isfinite(log_len)
    lowest = np.argsort(median, kind="stable")[:MIN_FAR]
    sigma = total_sd
    for _ in range(ROUNDS):
        far = median < top - FAR * sigma
        rows = far if far.sum() >= MIN_FAR else lowest
        values, kept = log_len[rows], finite[rows]
        count = kept.sum(axis=1)
        mean = np.where(kept, values, 0.0).sum(axis=1) / np.maximum(count, 1)
        squares = np.where(kept, (np.where(kept, values, 0.0) - mean[:, None]) ** 2, 0.0)
        dof = np.maximum(count - 1, 0).sum()
        new = float(math.sqrt(squares.sum() / dof)) if dof else 0.0
        if abs(new - sigma) < TOL:
            return new
        sigma = new
    return sigma


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


def model_prompts(trace: Trace) -> tuple[int, int]:
    """Steps and prompts per step of the model draw that goodness of fit compares with
    ``trace``: ``REPLICAS`` times the data's prompts over the same steps, cut so the draw holds
    at most ``MAX_MODEL_SAMPLES`` (never under one prompt a step). The cut reaches only traces
    over ``MAX_MODEL_SAMPLES / REPLICAS`` (200,000) samples, whose own size already bounds the
    KS statistic's precision; uncut, the draw grew 20 times the trace (an 8M-sample trace needed
    160M draws, over 24 GiB)."""
    steps = 1 if trace.step is None else int(trace.step.max() - trace.step.min() + 1)
    per_step = max(1, trace.num_groups // steps)
    room = MAX_MODEL_SAMPLES // (steps * trace.meta.group_size)
    return steps, max(1, min(per_step * REPLICAS, room))


def goodness(trace: Trace, model: TraceModel) -> dict:
    """Quantiles of the data against a draw from the model, and the KS statistic. The draw is
    of lengths alone (:func:`draw_lengths`) and the KS statistic comes from counts per length
    (lengths are whole numbers from 1 to the cap; from the sorted draws when the cap is far above
    their number): the figures are those of the whole generated
    trace and of :func:`ks_statistic`, to the bit, without a 20-fold trace in memory."""
    steps, prompts = model_prompts(trace)
    sim = np.sort(draw_lengths(model, steps, seed=0, prompts=prompts))
    data = np.sort(trace.response_len)
    top = int(max(data[-1], sim[-1])) + 1
    if top <= 4 * (data.size + sim.size):  # counts per length: no larger than the draws
        ks = ks_from_counts(np.bincount(data, minlength=top), np.bincount(sim, minlength=top))
    else:  # a cap far above the lengths (1e9 tokens): counts would not fit, the draws do
        ks = ks_statistic(data, sim)
    fit = {
        "quantiles": [{"q": q, "data": float(np.quantile(data, q)),
                       "model": float(np.quantile(sim, q))} for q in QUANTILES],
        "mean_data": float(data.mean()), "mean_model": float(sim.mean()),
        "truncated_data": float(np.mean(trace.truncated)),
        "truncated_model": float(np.mean(sim == model.max_response_len)),
        "ks": ks,
        "samples": int(data.size), "model_samples": int(sim.size),
    }
    if has_turns(model):  # per trajectory, means: those of the whole generated trace
        rows = len(trace)
        data_calls = 0 if trace.turn_offsets is None else (trace.turn_offsets[-1] - rows) / rows
        # at most MAX_MODEL_SAMPLES calls (about): 4M trajectories of agentic-swe held 33M calls
        room = MAX_MODEL_SAMPLES / (steps * trace.meta.group_size * max(1.0, data_calls))
        calls, seconds, tokens = draw_tool_load(model, steps, seed=0,
                                                prompts=max(1, min(prompts, int(room))))
        fit.update({
            "calls_data": float(data_calls), "calls_model": float(calls.mean()),
            "tool_s_data": _per_row(trace.turn_tool_s, rows),
            "tool_s_model": float(seconds.sum() / calls.size),
            "tool_tokens_data": _per_row(trace.turn_tool_tokens, rows),
            "tool_tokens_model": float(tokens.sum() / calls.size),
            "tool_model_samples": int(calls.size),
        })
    return fit


def _per_row(values: np.ndarray | None, rows: int) -> float:
    return 0.0 if values is None else float(values.sum() / rows)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    gap = np.searchsorted(a, points, side="right") / a.size \
        - np.searchsorted(b, points, side="right") / b.size
    return float(np.abs(gap).max())


def ks_from_counts(a: np.ndarray, b: np.ndarray) -> float:
    """:func:`ks_statistic` of two samples of whole numbers given as counts per value (index =
    value, both the same length): the CDFs at every whole number, the same divisions as there,
    and between sample values the CDFs repeat a value already taken, so the maximum is equal."""
    ca, cb = np.cumsum(a), np.cumsum(b)
    return float(np.abs(ca / ca[-1] - cb / cb[-1]).max())
