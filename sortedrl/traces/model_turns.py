"""Turns of the fitted length model: what a multi-turn (agentic) trace says about tool calls.

A trace with turns (:mod:`sortedrl.traces.turns`) spends much of its wall time in tool calls;
a length model that keeps only ``response_len`` draws single-turn runs with no tool time (a
fitted ``agentic-retool`` forecast 0.15 h against the trace's own 0.69 h). This module holds
the turn part of :class:`sortedrl.traces.model.TraceModel`: its fields, their checks, their
estimation by ``trace fit`` and the draws of :func:`sortedrl.traces.model.generate`. The length
model itself is unchanged, and a model without turns has none of these fields. For a trajectory
of ``L`` generated tokens:

* tool calls ``C = min(Poisson(calls_per_token * L), max_turns - 1, L - 1)``: calls scale with
  the length (in the three agentic presets the mean calls of a length decile grow in proportion
  to it, from 0.1 at 115 tokens to 9 at 7,400 in ``agentic-retool``), so a long trajectory
  carries its tool time;
* ``C + 1`` turns of at least one token each: ``L - C - 1`` tokens shared out by uniform
  spacings (each turn's share an exponential draw over their sum, floored at cumulative cuts);
* each call takes 0 s with probability ``tool_zero_share``, else ``lognormal(log tool_median_s,
  tool_sigma)`` seconds clipped to ``tool_max_s`` (the longest call of the trace, a timeout);
* each call appends 0 tokens with probability ``obs_zero_share``, else ``lognormal(log
  obs_median, obs_sigma)`` tokens rounded and clipped to ``[1, obs_max]``.

The fit sets ``calls_per_token`` so that the model's own length draw (that of the goodness of
fit) gets the trace's mean calls per trajectory after the clip, and fits each lognormal on the
calls (the non-last turns) by the median and interquartile range of the logs, which a timeout's
mass at the maximum does not reach while under a quarter of the calls sit there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.limits import INT32_MAX
from sortedrl.traces.turns import MAX_TOOL_S

# the turn fields of TraceModel, in order: all present (a model with turns) or all None
TURN_FIELDS = ("calls_per_token", "max_turns", "tool_median_s", "tool_sigma", "tool_max_s",
               "tool_zero_share", "obs_median", "obs_sigma", "obs_max", "obs_zero_share")
SHARES = ("tool_zero_share", "obs_zero_share")
SIGMAS = ("tool_sigma", "obs_sigma")
IQR = 1.3489795  # interquartile range of a standard normal
P10 = 1.2815516  # its 50th minus 10th percentile


def has_turns(model: Any) -> bool:
    return model.calls_per_token is not None


def check_turns(model: Any, where: str, max_spread: float) -> None:
    """One-line errors for the turn fields: all or none, each of its kind and in range."""
    present = [name for name in TURN_FIELDS if getattr(model, name) is not None]
    if not present:
        return
    missing = [name for name in TURN_FIELDS if getattr(model, name) is None]
    if missing:
        raise TraceError(f"{where}: field '{missing[0]}' is missing (a model with turns needs "
                         f"all of {', '.join(TURN_FIELDS)})")
    for name in ("max_turns", "obs_max"):
        v, low = getattr(model, name), 1 if name == "max_turns" else 0
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            kind = "a positive" if low else "a non-negative"
            raise TraceError(f"{where}: field '{name}': {v!r} must be {kind} integer")
        if v > INT32_MAX:
            raise TraceError(f"{where}: field '{name}': {v:,} must be below 2**31")
    for name in TURN_FIELDS:
        v = getattr(model, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TraceError(f"{where}: field '{name}': {v!r} is not a finite number")
    for name in SHARES:
        v = getattr(model, name)
        if not 0 <= v <= 1:
            raise TraceError(f"{where}: field '{name}': {v} is outside 0 to 1 (a share)")
    for name in SIGMAS:
        v = getattr(model, name)
        if not 0 <= v <= max_spread:
            raise TraceError(f"{where}: field '{name}': {v:g} is outside 0 to {max_spread:g} "
                             "(a spread of logs)")
    if not 0 <= model.calls_per_token <= 1:
        raise TraceError(f"{where}: field 'calls_per_token': {model.calls_per_token:g} is outside "
                         "0 to 1 (tool calls per generated token; a turn has a token or more)")
    for name, top, unit in (("tool_median_s", MAX_TOOL_S, " s"), ("obs_median", INT32_MAX, "")):
        v = getattr(model, name)
        if not 0 < v <= top:
            raise TraceError(f"{where}: field '{name}': {v:g} must be above 0 and at most "
                             f"{top:g}{unit}")
    if not 0 <= model.tool_max_s <= MAX_TOOL_S:
        raise TraceError(f"{where}: field 'tool_max_s': {model.tool_max_s:g} is outside 0 to "
                         f"{MAX_TOOL_S:g} s")


# -- drawing -------------------------------------------------------------------------------


def draw_calls(model: Any, rng: np.random.Generator, response: np.ndarray) -> np.ndarray:
    """Tool calls of each trajectory (int64), given its generated tokens."""
    calls = rng.poisson(model.calls_per_token * response.astype(np.float64))
    return np.minimum(calls, np.minimum(model.max_turns - 1, response - 1)).astype(np.int64)


def draw_tools(model: Any, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Seconds (float64) and tool-output tokens (int64) of ``count`` calls."""
    seconds = _lognormal_draw(rng, count, model.tool_zero_share, model.tool_median_s,
                              model.tool_sigma, 0.0, model.tool_max_s)
    tokens = _lognormal_draw(rng, count, model.obs_zero_share, model.obs_median, model.obs_sigma,
                             min(1, model.obs_max), model.obs_max)
    return seconds, np.rint(tokens).astype(np.int64)


def _lognormal_draw(rng: np.random.Generator, count: int, zero_share: float, median: float,
                    sigma: float, low: float, high: float) -> np.ndarray:
    """0 with probability ``zero_share``, else ``lognormal(log median, sigma)`` clipped to
    ``[low, high]``; in place (a fit's goodness draws tens of millions of calls)."""
    zero = rng.random(count) < zero_share
    values = rng.standard_normal(count)
    values *= sigma
    values += math.log(median)
    with np.errstate(over="ignore"):  # past float range: inf, then the clip
        np.exp(values, out=values)
    np.clip(values, low, high, out=values)
    values[zero] = 0.0
    return values


def draw_turns(model: Any, rng: np.random.Generator,
               response: np.ndarray) -> dict[str, np.ndarray]:
    """The four turn columns of a trace (see :mod:`sortedrl.traces.turns`) for the generated
    tokens ``response``: calls, then the calls' seconds and tokens, then the split into turns
    (the goodness of fit draws the first three alone, with the same values)."""
    calls = draw_calls(model, rng, response)
    seconds, tokens = draw_tools(model, rng, int(calls.sum()))
    turns = calls + 1
    offsets = np.zeros(response.size + 1, dtype=np.int64)
    np.cumsum(turns, out=offsets[1:])
    row = np.repeat(np.arange(response.size), turns)
    last = offsets[1:] - 1
    # each turn one token, the other L - C - 1 by uniform spacings: cumulative shares of
    # exponential draws, cut by floor; the last share of a row is exactly 1, so rows sum to L
    weight = np.cumsum(rng.standard_exponential(int(offsets[-1])))
    base = np.concatenate([[0.0], weight[last[:-1]]])  # the sum before each row
    share = (weight - base[row]) / (weight[last] - base)[row]
    spare = (response - turns)[row]
    cut = np.floor(spare * share).astype(np.int64)  # a row's last share is 1.0: its cut, L - C - 1
    gen = np.diff(np.concatenate([[0], cut])) + 1
    gen[offsets[:-1]] = cut[offsets[:-1]] + 1  # a row's first turn: from 0, not the row before
    call = np.ones(gen.size, dtype=bool)
    call[last] = False
    tool_s = np.zeros(gen.size)
    tool_s[call] = seconds
    tool_tokens = np.zeros(gen.size, dtype=np.int64)
    tool_tokens[call] = tokens
    return {"turn_offsets": offsets, "turn_gen": gen, "turn_tool_s": tool_s,
            "turn_tool_tokens": tool_tokens}


# -- fitting -------------------------------------------------------------------------------


def fit_turns(trace: Any, model_lengths: np.ndarray) -> dict[str, Any]:
    """The turn fields fitted to ``trace`` (``{}`` without turns, or with no tool call in it);
    ``model_lengths``: the length model's own draw, on which ``calls_per_token`` is solved."""
    if trace.turn_offsets is None:
        return {}
    turns = np.diff(trace.turn_offsets)
    if int(turns.max()) == 1:
        return {}  # no call: the model draws single-turn runs, as a model without turns
    call = np.ones(trace.turn_gen.size, dtype=bool)
    call[trace.turn_offsets[1:] - 1] = False
    seconds, tokens = trace.turn_tool_s[call], trace.turn_tool_tokens[call]
    max_turns = int(turns.max())
    tool_median, tool_sigma = _lognormal(seconds)
    obs_median, obs_sigma = _lognormal(tokens.astype(np.float64))
    return {
        "calls_per_token": _calls_per_token(float(turns.mean() - 1), model_lengths, max_turns),
        "max_turns": max_turns,
        "tool_median_s": tool_median, "tool_sigma": tool_sigma,
        "tool_max_s": float(seconds.max()), "tool_zero_share": float(np.mean(seconds == 0)),
        "obs_median": obs_median, "obs_sigma": obs_sigma,
        "obs_max": int(tokens.max()), "obs_zero_share": float(np.mean(tokens == 0)),
    }


def _lognormal(values: np.ndarray) -> tuple[float, float]:
    """Median and log spread of the positive ``values`` from the quartiles of their logs (the
    median and 10th percentile when over a quarter sit at the maximum, a timeout or cap); 1 and
    0 when none is positive (every value is then drawn as 0: the zero share is 1)."""
    positive = values[values > 0]
    if not positive.size:
        return 1.0, 0.0
    logs = np.log(positive)
    p10, q1, mid, q3 = np.quantile(logs, [0.1, 0.25, 0.5, 0.75])
    if q3 < logs.max():
        sigma = (q3 - q1) / IQR
    else:
        sigma = (mid - p10) / P10
    return float(math.exp(mid)), float(sigma)


def expected_calls(rate: float, lengths: np.ndarray, counts: np.ndarray, max_turns: int) -> float:
    """Mean of ``min(Poisson(rate * L), min(max_turns - 1, L - 1))`` over lengths ``L`` given
    as distinct values with their counts: ``E min(X, k) = lam P(X <= k-1) + k P(X > k)``."""
    from scipy.special import pdtr, pdtrc

    k = np.minimum(max_turns - 1, lengths - 1).astype(np.float64)
    lam = rate * lengths
    with np.errstate(invalid="ignore"):
        each = np.where(k > 0, lam * pdtr(k - 1, lam) + k * pdtrc(k, lam), 0.0)
    return float((each * counts).sum() / counts.sum())


def _calls_per_token(target: float, model_lengths: np.ndarray, max_turns: int) -> float:
    """The rate whose clipped Poisson draw over ``model_lengths`` has mean ``target`` calls;
    1 (a call per token) when even that falls short."""
    from scipy.optimize import brentq

    lengths, counts = np.unique(model_lengths, return_counts=True)
    if expected_calls(1.0, lengths, counts, max_turns) <= target:
        return 1.0
    return float(brentq(lambda r: expected_calls(r, lengths, counts, max_turns) - target,
                        0.0, 1.0, xtol=1e-15, rtol=1e-12))
