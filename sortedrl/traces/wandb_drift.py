"""``trace fit --drift-from``: the length model's drifts from a W&B "export CSV" of a longer run.

The frameworks log, per step, the mean response length over every response (those cut at the
cap included), the largest, and the share of responses at the cap (verl's
``response_length/clip_ratio``, TRL's ``completions/clipped_ratio``, slime's
``rollout/truncated_ratio``). In the model of :mod:`sortedrl.traces.model` a step's responses
are ``clip(round(L), 1, cap)`` with ``log L ~ N(mu_t, s**2)``, ``s**2 = sigma_between**2 +
sigma_within**2`` (the prompt effect and the sample, pooled over a step's prompts), except a
runaway share ``r_t`` that runs to the cap. With ``b = cap - 0.5`` (a draw rounds to the cap
from there) and ``z = (ln b - mu_t) / s``:

* share at the cap ``c_t = r_t + (1 - r_t) * (1 - Phi(z))``;
* mean of the responses below the cap ``E[L | L < b] = exp(mu_t + s**2/2) * Phi(z - s) / Phi(z)``,
  which the logged mean and share give as ``(mean_t - c_t * cap) / (1 - c_t)``;
* mean ``mean_t = r_t * cap + (1 - r_t) * (exp(mu_t + s**2/2) * Phi(z - s) + cap * (1 - Phi(z)))``

(rounding to whole tokens is left out: it moves a mean by well under a token). Per step,
``mu_t`` is solved from the mean below the cap (a monotone function of ``mu_t``) and ``r_t``
from the share; ``drift`` and ``runaway_drift`` are their least-squares slopes per step. Without
a share column ``mu_t`` is solved from the mean alone with ``r_t`` held at the trace's
``runaway_share`` and ``runaway_drift`` is left as the trace gave it. ``max_drift`` is the slope
of log(max length) per step, recorded, not drawn from. The slope of log(mean) and of the share
themselves, used before, count truncation twice: the lognormal's own share at the cap grows
with the drift, and the cap holds the mean back.

The step column is ``Step`` (W&B's ``_step``: the training step for verl, which logs with
``step=``), ``train/global_step`` (HF transformers' WandbCallback, so TRL) or ``rollout/step``
(slime): TRL and slime log without ``step=``, so their ``_step`` counts log calls. An export of
several runs is read with ``--run`` naming one (:mod:`sortedrl.wandb_runs`).
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from sortedrl import jsonio, streams
from sortedrl.errors import TraceError, not_found
from sortedrl.tables import counted
from sortedrl.wandb_runs import only_run, present, repeated_note, step_number

SIBLINGS = {  # mean metric -> (max metric, clip-ratio metric), as the frameworks name them
    "response_length/mean": ("response_length/max", "response_length/clip_ratio"),  # verl
    "completions/mean_length": ("completions/max_length", "completions/clipped_ratio"),  # TRL
    "rollout/response_len/mean": ("rollout/response_len/max", "rollout/truncated_ratio"),  # slime
}
# HF transformers' WandbCallback logs TRL's keys as train/<key> (rewrite_logs)
PREFIXES = ("", "train/")
STEP_COLUMNS = ("train/global_step", "rollout/step", "Step")  # in order of preference
LOG_CALL_STEP = "_step"
MIN_SPREAD = 1e-6  # a trace of one length per step: a spread this small stands for zero


@dataclass(frozen=True)
class WandbDrift:
    """What ``--drift-from`` sets on the model, and the notes to print about it."""

    fields: dict[str, float]
    notes: list[str] = field(default_factory=list)
    step_column: str = "Step"


def drift_from_wandb(path: str | Path, model, metric: str = "response_length/mean",
                     step_column: str | None = None, run: str | None = None) -> dict[str, float]:
    """The fields (``drift`` and, when their columns are present, ``runaway_drift`` and
    ``max_drift``) that ``path`` sets on ``model``, a fitted :class:`TraceModel`."""
    return read_wandb_drift(path, model, metric, step_column, run).fields


def read_wandb_drift(path: str | Path, model, metric: str = "response_length/mean",
                     step_column: str | None = None, run: str | None = None) -> WandbDrift:
    """Read the export, solve each step for ``mu_t`` and ``r_t``, and fit their slopes.
    ``run``: the run to read of an export of several (``--run``)."""
    p = Path(path)
    rows = _rows(p)
    header = only_run([h.strip() for h in rows[0]], run, str(p), TraceError)  # others': blank
    step_col, step_name = _step_column(p, header, step_column)
    mean_col = _column(header, metric, p)
    if mean_col is None:
        raise TraceError(f"{p}: no length column '<run> - {metric}'; found: {', '.join(present(header))}"
                         + _hint(header, metric))
    family = _family(metric)
    notes: list[str] = []
    if family is not None and step_name == "Step" and family[1] != "response_length/mean":
        notes.append(f"note: {p}: steps read from 'Step', W&B's _step; TRL and slime log without "
                     "step=, so there it counts log calls, not training steps: export against "
                     "train/global_step (TRL) or rollout/step (slime)")
    max_name, clip_name = (None, None) if family is None else (
        family[0] + SIBLINGS[family[1]][0], family[0] + SIBLINGS[family[1]][1])
    max_col = _column(header, max_name, p) if max_name else None
    clip_col = _column(header, clip_name, p) if clip_name else None
    share = f"{model.runaway_share:.4g}"
    if family is None:
        notes.append(f"note: {p}: '{metric}' is no metric of verl, TRL or slime, so its max and "
                     f"clip-ratio columns are unknown: drift solved from the mean alone with the "
                     f"runaway share held at the trace's {share}; runaway_drift and max_drift "
                     "not set")
    else:
        if clip_col is None:
            notes.append(f"note: {p}: no column '<run> - {clip_name}': drift solved from the mean "
                         f"alone with the runaway share held at the trace's {share}; "
                         "runaway_drift not set")
        if max_col is None:
            notes.append(f"note: {p}: no column '<run> - {max_name}': max_drift not set")
    cols = [mean_col] if clip_col is None else [mean_col, clip_col]
    repeated: set[int] = set()  # steps logged again with other values, in any column read
    series = _series(p, rows, header, step_col, step_name, cols, repeated)
    cap = model.max_response_len
    s = max(MIN_SPREAD, math.hypot(model.sigma_between, model.sigma_within))
    mus, runaways, kept, full = [], [], [], 0
    for lineno, step, row in series:
        mean = _length(p, lineno, header[mean_col], row[0], cap)
        if clip_col is None:
            mus.append(_mu_from_mean(p, lineno, header[mean_col], mean, model.runaway_share, cap, s))
        else:
            clip = row[1]
            if not 0.0 <= clip <= 1.0:
                raise TraceError(f"{p}: line {lineno}: column '{header[clip_col]}': {clip:g} is "
                                 "not a share from 0 to 1")
            if clip == 1.0:  # every response at the cap: nothing on the length below it
                full += 1
                continue
            mu = _mu_from_below(p, lineno, mean, clip, cap, s, header[mean_col], header[clip_col])
            natural = float(ndtr((mu - math.log(cap - 0.5)) / s))
            mus.append(mu)
            runaways.append((clip - natural) / (1.0 - natural))
        kept.append(step)
    if full:
        notes.append(f"note: {p}: {full} step(s) with every response at the cap (clip ratio 1) "
                     "say nothing of the length below it: left out")
    out = {"drift": _slope(p, kept, mus, header[mean_col])}
    if clip_col is not None:
        out["runaway_drift"] = _slope(p, kept, runaways, header[clip_col])
    if max_col is not None:
        maxima = _series(p, rows, header, step_col, step_name, [max_col], repeated)
        out["max_drift"] = _slope(
            p, [step for _, step, _ in maxima],
            [math.log(_length(p, lineno, header[max_col], v, cap)) for lineno, _, (v,) in maxima],
            header[max_col])
    if repeated:
        notes.append(f"note: {repeated_note(str(p), len(repeated))}")
    return WandbDrift(out, notes, step_name)


def _rows(p: Path) -> list[list[str]]:
    try:  # (a pipe or FIFO read once, whole, its bytes kept for any other option naming it)
        data = streams.take(p)
        if data is not None:
            rows = list(csv.reader(io.StringIO(jsonio.text(data), newline="")))
        else:
            with open(p, encoding="utf-8-sig", newline="") as f:
                rows = list(csv.reader(f))
    except FileNotFoundError:
        raise TraceError(not_found(p)) from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise TraceError(f"{p}: not a CSV export: {e}") from None
    except OSError as e:  # a directory, a file we may not read
        raise TraceError(f"{p}: cannot read it ({e.strerror or e})") from None
    if not rows:
        raise TraceError(f"{p}: empty file")
    if rows[0] and rows[0][0].lstrip().startswith(("{", "[")):  # (its "columns" were JSON pieces)
        raise TraceError(f"{p}: JSON, not a CSV: --drift-from reads a W&B \"Export CSV\" of the "
                         "response length (a metrics JSONL goes to `calibrate --from-metrics`)")
    return rows


def _named(header: list[str], name: str, p: Path) -> int | None:
    """The column ``name`` (an x-axis, as W&B heads it) or ``<run> - name`` (a plotted series)."""
    return _one(p, [i for i, h in enumerate(header) if h == name or h.endswith(f" - {name}")], header)


def _one(p: Path, matches: list[int], header: list[str]) -> int | None:
    """The one column of ``matches``; two (two runs of one name, say) are an error: which one
    to read is unclear."""
    if len(matches) > 1:
        a, b = matches[:2]
        raise TraceError(f"{p}: columns {a + 1} ('{header[a]}') and {b + 1} ('{header[b]}') hold one "
                         "metric: which to read is unclear")
    return matches[0] if matches else None


def _step_column(p: Path, header: list[str], wanted: str | None) -> tuple[int, str]:
    why = ("W&B's _step counts wandb.log calls, not training steps (TRL and slime log without "
           "step=)")
    if wanted is not None:
        if wanted.strip() == LOG_CALL_STEP:
            raise TraceError(f"{p}: --step-column _step: {why}; name the training step's column")
        col = _named(header, wanted.strip(), p)
        if col is None:
            raise TraceError(f"{p}: no step column '{wanted}'; found: {', '.join(present(header))}")
        return col, wanted.strip()
    for name in STEP_COLUMNS:
        col = _named(header, name, p)
        if col is not None:
            return col, name
    if _named(header, LOG_CALL_STEP, p) is not None:
        raise TraceError(f"{p}: the only step column is '_step', and {why}: export against "
                         "train/global_step (TRL) or rollout/step (slime), or name the column "
                         "with --step-column")
    raise TraceError(f"{p}: no step column ({', '.join(STEP_COLUMNS)}, or one named with "
                     f"--step-column); found: {', '.join(present(header))}")


def _column(header: list[str], metric: str, p: Path | None = None) -> int | None:
    """``<run> - metric``; its ``__MIN``/``__MAX`` (a grouped export's group min and max) are
    other columns and stay unread. With ``p``, two such columns are an error (:func:`_one`)."""
    matches = [i for i, h in enumerate(header) if h.endswith(f" - {metric}")]
    return _one(p, matches, header) if p is not None else (matches[0] if matches else None)


def _family(metric: str) -> tuple[str, str] | None:
    """(prefix, mean metric of SIBLINGS) for a known metric, ``train/`` prefix or none."""
    for prefix in PREFIXES:
        if metric.startswith(prefix) and metric[len(prefix):] in SIBLINGS:
            return prefix, metric[len(prefix):]
    return None


def _hint(header: list[str], metric: str) -> str:
    found = [prefix + name for name in SIBLINGS for prefix in PREFIXES
             if prefix + name != metric and _column(header, prefix + name) is not None]
    return f" (pass --metric {found[0]} for its column)" if found else ""


def _number(p: Path, lineno: int, column: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise TraceError(f"{p}: line {lineno}: column '{column}': {text!r} is not a number") from None


def _series(p: Path, rows: list[list[str]], header: list[str], step_col: int, step_name: str,
            cols: list[int], repeated: set[int]) -> list[tuple[int, int, tuple[float, ...]]]:
    """(line, step, values) of the rows where every column in ``cols`` holds a finite number
    (an empty, NaN or inf cell: not logged at that step, as calibrate reads it). A row of
    another length than the header (cut at a comma) is an error. A step logged again with other
    values (a W&B run resumed from an earlier checkpoint logs the steps after it twice) is read
    from its last row, the run that went on, and joins ``repeated``; the same values again are
    read once."""
    series: dict[int, tuple[int, int, tuple[float, ...]]] = {}
    for lineno, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise TraceError(f"{p}: line {lineno}: {counted(len(row), 'cell')}, but the header has {len(header)} columns")
        if any(not row[c].strip() for c in cols):
            continue
        vals = tuple(_number(p, lineno, header[c], row[c]) for c in cols)
        value = _number(p, lineno, step_name, row[step_col])
        if not math.isfinite(value):
            raise TraceError(f"{p}: line {lineno}: column '{step_name}': {row[step_col]!r} is not "
                             "a finite number")
        step = step_number(value)
        if step is None:
            raise TraceError(f"{p}: line {lineno}: column '{step_name}': {row[step_col]!r} is not a "
                             "step number (a whole number from 0 to below 2**53)")
        if not all(math.isfinite(v) for v in vals):
            continue
        if step in series:
            if series[step][2] == vals:
                continue  # the same values again: read once, from the first row
            repeated.add(step)
        series[step] = (lineno, step, vals)
    return list(series.values())


def _length(p: Path, lineno: int, column: str, value: float, cap: int) -> float:
    if value <= 0:
        raise TraceError(f"{p}: line {lineno}: column '{column}': {value:g} is not a positive "
                         "length")
    if value > cap:
        raise TraceError(f"{p}: line {lineno}: column '{column}': {value:g} is above the trace's "
                         f"cap of {cap} (the W&B run and the trace must share max_response_len)")
    return value


def _solve(log_fn, log_target: float, what: str) -> float:
    """The ``mu`` at which the increasing ``log_fn`` reaches ``log_target``."""
    lo = hi = log_target
    step = 1.0
    for _ in range(200):
        if log_fn(lo) <= log_target <= log_fn(hi):
            return float(brentq(lambda m: log_fn(m) - log_target, lo, hi, xtol=1e-12, rtol=1e-14))
        lo, hi, step = lo - step, hi + step, step * 2
    raise TraceError(f"{what}: no log-mean length gives it under the trace's spread")


def _mu_from_below(p: Path, lineno: int, mean: float, clip: float, cap: int, s: float,
                   mean_name: str, clip_name: str) -> float:
    """mu_t whose lognormal, cut below ``cap - 0.5``, has the mean of the responses below it."""
    below = (mean - clip * cap) / (1.0 - clip)
    b = cap - 0.5
    if not 0.0 < below < b:
        raise TraceError(f"{p}: line {lineno}: columns '{mean_name}' and '{clip_name}': a mean of "
                         f"{mean:g} with a share {clip:g} at the cap of {cap} leaves "
                         f"{below:g} for the responses below it, not a length under the cap")

    def log_mean_below(mu: float) -> float:
        z = (math.log(b) - mu) / s
        return mu + s * s / 2 + float(log_ndtr(z - s)) - float(log_ndtr(z))

    return _solve(log_mean_below, math.log(below), f"{p}: line {lineno}: column '{mean_name}'")


def _mu_from_mean(p: Path, lineno: int, column: str, mean: float, runaway: float, cap: int,
                  s: float) -> float:
    """mu_t whose capped lognormal, with ``runaway`` of the mass moved to the cap, has ``mean``."""
    natural = (mean - runaway * cap) / (1.0 - runaway) if runaway < 1 else -1.0
    b = cap - 0.5
    if not 0.0 < natural < cap:
        raise TraceError(f"{p}: line {lineno}: column '{column}': a mean of {mean:g} is below "
                         f"what the trace's runaway share {runaway:.4g} alone puts at the cap of "
                         f"{cap} (the trace and the W&B run disagree)")

    def log_mean(mu: float) -> float:
        z = (math.log(b) - mu) / s
        return float(np.logaddexp(mu + s * s / 2 + log_ndtr(z - s), math.log(cap) + log_ndtr(-z)))

    return _solve(log_mean, math.log(natural), f"{p}: line {lineno}: column '{column}'")


def _slope(p: Path, t: list[float], y: list[float], column: str) -> float:
    if len(set(t)) < 2:
        raise TraceError(f"{p}: column '{column}' has values at fewer than two steps")
    x = np.array(t, dtype=float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (centred steps keep it conditioned; no warning reaches stderr)
        slope = float(np.polyfit(x - x.mean(), np.array(y), 1)[0])
    if not math.isfinite(slope):
        raise TraceError(f"{p}: column '{column}': no finite slope per step (steps "
                         f"{min(t):g} to {max(t):g})")
    return slope
