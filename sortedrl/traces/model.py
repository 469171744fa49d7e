"""A fitted length model: what a short trace says about a whole run, in a dozen numbers.

A user's own trace often covers one or a few steps; a single-step trace ends before any policy
reaches a steady state, so its drain dominates. ``trace fit`` (:mod:`sortedrl.traces.fit`)
estimates this model from such a trace, and :func:`generate` draws a run of any number of steps
with the same statistics. The model is the hierarchical one of :mod:`sortedrl.traces.synth`,
reduced to what a trace identifies, for prompt ``p``, sample ``k`` and step ``t``:

* prompt effect ``m_p = mu0 + drift * t + sigma_between * z_p``, ``z_p ~ N(0, 1)``;
* ``log l = m_p + sigma_within * e``, ``e ~ N(0, 1)``: responses to one prompt are alike;
* with probability ``runaway_share + runaway_drift * t`` a sample runs away to the cap;
* ``response_len = clip(round(l), 1, cap)``; ``truncated`` = at the cap (truncation at the cap);
* reward: each prompt has a pass rate ``q_p ~ Beta(pass_alpha, pass_beta)`` and each sample
  passes (reward 1) with probability ``q_p``, 0 otherwise (the parametrisation of per-prompt pass
  rates in GRPO: a group with ``q_p`` of 0 or 1 teaches nothing);
* ``prompt_len = clip(round(lognormal(log prompt_median, prompt_sigma)), prompt_min, prompt_max)``;
* turns, for a model fitted on a multi-turn (agentic) trace: tool calls per trajectory in
  proportion to its length, each call's seconds and tool-output tokens lognormal
  (:mod:`sortedrl.traces.model_turns`); drawn after everything above, so the lengths, prompt
  lengths and rewards are those of the same model without turns.

Stored as JSON with the key ``sortedrl_trace_model``; every field is checked on load. The turn
fields are all present or all absent (a model without turns is written as before them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sortedrl import file_kinds, jsonio
from sortedrl.errors import TraceError
from sortedrl.limits import INT32_MAX, check_seed
from sortedrl.traces import model_turns
from sortedrl.traces.model_turns import TURN_FIELDS
from sortedrl.traces.schema import Trace, TraceMeta, check_samples

VERSION = 1


@dataclass(frozen=True)
class TraceModel:
    """Parameters of the fitted length model (see the module docstring); lengths in tokens."""

    max_response_len: int
    group_size: int
    prompts_per_step: int
    mu0: float  # log-length mean of a prompt at step 0
    sigma_between: float  # std of the prompt effect (log units)
    sigma_within: float  # std of log length within a group
    drift: float  # log-length mean change per step
    runaway_share: float  # share of samples that run to the cap at step 0
    prompt_median: float
    prompt_sigma: float
    prompt_min: int
    prompt_max: int
    runaway_drift: float = 0.0  # change of runaway_share per step (trace fit --drift-from)
    max_drift: float = 0.0  # log change of the per-step max per step (W&B; reported only)
    pass_alpha: float | None = None  # Beta pass-rate prior; None: the trace had no reward
    pass_beta: float | None = None
    # turns (sortedrl.traces.model_turns): all None for a model of single-turn trajectories
    calls_per_token: float | None = None  # tool calls per generated token (Poisson rate)
    max_turns: int | None = None  # turns per trajectory, at most (calls: at most this - 1)
    tool_median_s: float | None = None  # s, median of a call's seconds (those above 0)
    tool_sigma: float | None = None  # std of log seconds of a call
    tool_max_s: float | None = None  # s, the longest call (a timeout): draws clipped to it
    tool_zero_share: float | None = None  # share of calls that take 0 s
    obs_median: float | None = None  # tokens, median tool output of a call (those above 0)
    obs_sigma: float | None = None  # std of log tool-output tokens of a call
    obs_max: int | None = None  # tokens, the largest tool output of a call: draws clipped to it
    obs_zero_share: float | None = None  # share of calls that output 0 tokens
    source: str = ""
    fit: dict = field(default_factory=dict, compare=False)  # goodness of fit, for the record

    def to_json(self, what: str = "the trace model") -> str:
        body = {"sortedrl_trace_model": VERSION, **dataclasses.asdict(self)}
        for name in TURN_FIELDS:  # a model without turns: the file it always was
            if body[name] is None:
                del body[name]
        return jsonio.dumps(body, what, indent=2) + "\n"


POSITIVE = ("max_response_len", "group_size", "prompts_per_step", "prompt_min", "prompt_max")
NONNEGATIVE = ("sigma_between", "sigma_within", "runaway_share", "prompt_sigma")
SPREADS = ("sigma_between", "sigma_within", "prompt_sigma")
# Largest spread (std of a log length): every length a trace holds (1 to 2**31, 21.5 log units)
# lies within half of it, and no fit comes near it. 1e308 overflowed the draws (NaN lengths).
MAX_SPREAD = 50.0
_MODEL_KEY = b'"sortedrl_trace_model"'
_MODEL_MAX = 1 << 20  # bytes: a model is a few hundred; a file over this is no model of ours


def is_trace_model(path: Path) -> bool:
    """Whether ``path`` holds a trace model: a JSON object with ``sortedrl_trace_model`` (first,
    as ``trace fit`` writes it, or anywhere in a file that is one JSON object, its keys sorted
    by ``jq -S``: :func:`sortedrl.file_kinds.json_document`). A pipe or FIFO is read whole here
    and kept for the reader that follows (:mod:`sortedrl.streams`)."""
    data = file_kinds.head(path, _MODEL_MAX + 1)
    if data is None or _MODEL_KEY not in data:  # (a trace: the key is in no line of it)
        return False
    if _MODEL_KEY in data[:200]:
        return True
    doc = file_kinds.json_document(data, _MODEL_MAX)
    return isinstance(doc, dict) and "sortedrl_trace_model" in doc


def load_model(path: str | Path) -> TraceModel:
    p = Path(path)
    body = jsonio.read(p, TraceError, bad="not a trace model (bad JSON: {e})")
    if not isinstance(body, dict) or body.get("sortedrl_trace_model") != VERSION:
        raise TraceError(f"{p}: not a trace model (no \"sortedrl_trace_model\": {VERSION})")
    names = {f.name for f in dataclasses.fields(TraceModel)}
    unknown = sorted(set(body) - names - {"sortedrl_trace_model"})
    if unknown:
        raise TraceError(f"{p}: unknown field(s) {', '.join(unknown)}")
    body.pop("sortedrl_trace_model")
    for f in dataclasses.fields(TraceModel):  # an integer where a float goes: as a float
        v = body.get(f.name)
        if f.type.startswith("float") and isinstance(v, int) and not isinstance(v, bool):
            try:
                body[f.name] = float(v)
            except OverflowError:  # numpy would overflow on it later (a C long)
                raise TraceError(f"{p}: field '{f.name}': {v} is not a finite number") from None
    for f in dataclasses.fields(TraceModel):  # named, not "__init__() missing 1 required ..."
        if (f.name not in body and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING):
            raise TraceError(f"{p}: field '{f.name}' is missing")
    model = TraceModel(**body)
    check_model(model, str(p))
    return model


def check_model(model: TraceModel, where: str) -> None:
    """Raise a one-line error for a field out of its range (a negative spread, say)."""
    for name in POSITIVE:
        v = getattr(model, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise TraceError(f"{where}: field '{name}': {v!r} must be a positive integer")
        if v > INT32_MAX:  # lengths, counts and sample ids are 32-bit downstream
            raise TraceError(f"{where}: field '{name}': {v:,} must be below 2**31")
    if not isinstance(model.source, str):
        raise TraceError(f"{where}: field 'source': {model.source!r} is not a string")
    if not isinstance(model.fit, dict):
        raise TraceError(f"{where}: field 'fit': {model.fit!r} is not an object")
    for f in dataclasses.fields(TraceModel):
        v = getattr(model, f.name)
        if f.name in ("source", "fit") or f.name in POSITIVE or f.name in TURN_FIELDS:
            continue
        if v is None and f.name in ("pass_alpha", "pass_beta"):  # no reward in the trace
            continue
        if not jsonio.finite(v):
            raise TraceError(f"{where}: field '{f.name}': {v!r} is not a finite number")
    for name in NONNEGATIVE:
        if getattr(model, name) < 0:
            what = "spread" if name.startswith("sigma") or name == "prompt_sigma" else "share"
            raise TraceError(f"{where}: field '{name}': {getattr(model, name)} is negative "
                             f"(a {what} must be >= 0)")
    for name in SPREADS:
        if getattr(model, name) > MAX_SPREAD:
            raise TraceError(f"{where}: field '{name}': {getattr(model, name):g} is above "
                             f"{MAX_SPREAD:g} (a spread of log lengths; e**{MAX_SPREAD:g} is "
                             f"{math.exp(MAX_SPREAD):.1e} times the median)")
    if model.runaway_share > 1:
        raise TraceError(f"{where}: field 'runaway_share': {model.runaway_share} is above 1")
    if model.prompt_median <= 0 or model.prompt_min > model.prompt_max:
        raise TraceError(f"{where}: prompt lengths: need prompt_median > 0 and "
                         f"prompt_min <= prompt_max")
    if model.prompt_median >= 2.0**31:  # a length, as prompt_max (1e308 overflowed the draw)
        raise TraceError(f"{where}: field 'prompt_median': {model.prompt_median:g} must be "
                         f"below 2**31")
    if (model.pass_alpha is None) != (model.pass_beta is None):
        raise TraceError(f"{where}: give both pass_alpha and pass_beta, or neither")
    for name in ("pass_alpha", "pass_beta"):
        v = getattr(model, name)
        if v is not None and v <= 0:
            raise TraceError(f"{where}: field '{name}': {v} must be > 0")
    model_turns.check_turns(model, where, MAX_SPREAD)


def generate(model: TraceModel, steps: int, seed: int = 0, prompts: int | None = None) -> Trace:
    """Draw a ``steps``-step trace from the model: fresh prompts every step."""
    if steps < 1:
        raise TraceError(f"--steps must be >= 1, got {steps}")
    if prompts is not None and prompts < 1:
        raise TraceError(f"--prompts must be >= 1, got {prompts}")
    check_seed(seed)  # (NumPy's generator refused a negative one with a traceback)
    n, per_step = model.group_size, model.prompts_per_step if prompts is None else prompts
    check_samples(per_step, n, steps)
    rng = np.random.default_rng(seed)
    groups = per_step * steps
    step, response = _draw_lengths(model, rng, steps, per_step)
    cap = model.max_response_len
    truncated = response == cap
    plen, reward = _draw_prompts_rewards(model, rng, groups)
    columns = {
        "prompt_id": np.repeat(np.array([f"m{g:07d}" for g in range(groups)]), n),
        "sample": np.tile(np.arange(n, dtype=np.int64), groups),
        "prompt_len": np.repeat(plen, n),
        "response_len": response,
        "truncated": truncated,
        "step": np.repeat(step, n),
        "finish_reason": np.where(truncated, "length", "stop"),
    }
    if reward is not None:
        columns["reward"] = reward
    if model_turns.has_turns(model):
        columns.update(model_turns.draw_turns(model, rng, response))
    name = f"model:{model.source or 'fit'} steps={steps} seed={seed}"
    meta = TraceMeta(max_response_len=cap, group_size=n, source=name)
    return Trace(meta=meta, name=Path(model.source or "model").stem or "model", **columns)


def draw_lengths(model: TraceModel, steps: int, seed: int = 0, prompts: int | None = None) -> np.ndarray:
    """The ``response_len`` column of :func:`generate` with the same arguments, value for value,
    and nothing else: ``trace fit``'s goodness of fit needs only the lengths, and the whole trace
    (prompt ids as strings, finish reasons) took about 150 bytes a sample, 20 draws a data
    sample (3 GiB a million; docs/traces.md)."""
    per_step = model.prompts_per_step if prompts is None else prompts
    check_samples(per_step, model.group_size, steps)
    return _draw_lengths(model, np.random.default_rng(seed), steps, per_step)[1]


def draw_tool_load(model: TraceModel, steps: int, seed: int = 0,
                   prompts: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's tool calls, and every call's seconds and tool-output tokens, of
    :func:`generate` with the same arguments, value for value (a model with turns): what the
    goodness of fit compares, without the prompt ids and turn splits of a whole trace."""
    per_step = model.prompts_per_step if prompts is None else prompts
    check_samples(per_step, model.group_size, steps)
    rng = np.random.default_rng(seed)
    response = _draw_lengths(model, rng, steps, per_step)[1]
    _draw_prompts_rewards(model, rng, per_step * steps)  # (drawn before the turns in generate)
    calls = model_turns.draw_calls(model, rng, response)
    return (calls, *model_turns.draw_tools(model, rng, int(calls.sum())))


def _draw_prompts_rewards(model: TraceModel, rng: np.random.Generator,
                          groups: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Each group's prompt length, and every sample's reward (None without pass rates): the
    draws after the lengths."""
    plen = np.rint(np.exp(math.log(model.prompt_median)
                          + model.prompt_sigma * rng.standard_normal(groups)))
    plen = np.clip(plen, model.prompt_min, model.prompt_max).astype(np.int64)
    if model.pass_alpha is None:
        return plen, None
    n = model.group_size
    rate = np.repeat(rng.beta(model.pass_alpha, model.pass_beta, size=groups), n)
    return plen, (rng.random(groups * n) < rate).astype(np.float64)


def _draw_lengths(model: TraceModel, rng: np.random.Generator, steps: int,
                  per_step: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's step and every sample's length, the first draws from ``rng`` (the prompt
    effects, the noise within a group, the runaways): :func:`generate` draws the prompt lengths
    and rewards after them, so :func:`draw_lengths` alone gives the same lengths."""
    n, groups = model.group_size, per_step * steps
    step = np.repeat(np.arange(steps, dtype=np.int64), per_step)
    with np.errstate(over="ignore"):  # a drift past float range: +-inf, every sample at a bound
        trend = model.mu0 + model.drift * step
        runaway = model.runaway_share + model.runaway_drift * np.repeat(step, n)
    effect = trend + model.sigma_between * rng.standard_normal(groups)
    log_len = np.repeat(effect, n) + model.sigma_within * rng.standard_normal(groups * n)
    cap = model.max_response_len
    response = np.clip(np.rint(np.exp(np.minimum(log_len, math.log(cap) + 1.0))), 1, cap)
    runaway = np.clip(runaway, 0.0, 1.0)
    response = np.where(rng.random(groups * n) < runaway, cap, response).astype(np.int64)
    return step, response
