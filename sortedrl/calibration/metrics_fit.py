"""``calibrate --from-metrics``: fit the trainer and sync terms to an RL framework's step metrics.

A row of the file (one logged step) holds ``n`` updates: 1, or ``--updates-per-row`` (verl's
fully-async trainer logs one row per weight sync, each time the sum of the updates since the last:
:mod:`sortedrl.calibration.metrics_layouts`). The row's update time
``n·train_fix + train_per_token·tokens`` (the simulator's :meth:`CostModel.train` per update,
whose tokens are prompt + response of every trained sample and which includes the extra forward
passes for old and reference log-probs) is fitted by linear least squares over the rows;
``sync_s`` is the median weight sync, from a column that holds the sync alone
(:func:`~sortedrl.calibration.metrics_layouts.sync_column`). With the run's length trace
(``--trace``) each row's tokens and attention pairs come from its samples and
``n·train_fix + train_per_token·tokens + train_per_pair·pairs`` is fitted
(:mod:`~sortedrl.calibration.trace_pairs`). Each fitted update term keeps its standard error,
as the vllm-bench fit's (:func:`term_errors`), and a note names each term it leaves poorly
determined; the median sync has none (its spread is kept instead). Reading the file (which
files are accepted, the metric names of each role,
:data:`~sortedrl.calibration.metrics_names.ROLES`): :mod:`sortedrl.calibration.metrics_read`.
"""

from __future__ import annotations

import numpy as np

from sortedrl.calibration.metrics_layouts import (
    named,
    row_updates,
    sync_column,
    updates_per_row,
)
from sortedrl.calibration.metrics_names import INCLUDES, ROLES, TOKEN_RATE, UPDATE_PARTS, listing
from sortedrl.calibration.trace_pairs import TraceSteps
from sortedrl.calibration.vllm_bench import UNCERTAIN, fit_stderr
from sortedrl.errors import ConfigError


def _column(metrics: dict, role: str) -> tuple[str, dict[int, float]] | None:
    for name in ROLES[role]:
        found = named(metrics, name)
        if found is not None:
            return found
    return None


def update_parts(metrics: dict) -> dict[str, tuple[str, dict[int, float]]]:
    """Role -> (name, column) of each update part logged, less those the update column already
    holds (:data:`~sortedrl.calibration.metrics_names.INCLUDES`: slime's ``perf/train_time``)."""
    parts = {r: c for r in UPDATE_PARTS if (c := _column(metrics, r))}
    held = INCLUDES.get(parts["update"][0], ()) if "update" in parts else ()
    return {r: c for r, c in parts.items() if r == "update" or c[0] not in held}


def fit_metrics(metrics: dict[str, dict[int, float]], where: str, samples_per_step: int | None = None,
                updates: int | None = None, trace: TraceSteps | None = None) -> dict:
    """Fit ``train_fix``, ``train_per_token`` and ``sync_s``; says which columns it used.
    ``samples_per_step``: samples trained per update; ``updates``: ``--updates-per-row``;
    ``trace``: the run's length trace (``--trace``), which gives each row's tokens and attention
    pairs, so ``train_per_pair`` is fitted too (:mod:`~sortedrl.calibration.trace_pairs`). The
    notes of the reading (:attr:`Metrics.notes`) come first in the fit's."""
    parts = update_parts(metrics)
    if not metrics:  # (not "columns found: none" for a file whose header names them)
        raise ConfigError(f"{where}: no metric values: no row holds a number in a metric column "
                          "(W&B's __MIN and __MAX columns are not read)")
    if "update" not in parts:
        raise ConfigError(f"{where}: no update time: needs one of {', '.join(ROLES['update'])} "
                          f"(columns found: {listing(sorted(metrics))})")
    k = updates_per_row(metrics, where, updates)
    if trace is not None:
        return _read_notes(metrics, _fit_with_trace(metrics, where, samples_per_step, k, parts, trace))
    tokens, token_source, per_update = _tokens(metrics, where, samples_per_step)
    sync, notes, upper = sync_column(metrics, _column(metrics, "sync"))
    for name, column in [*parts.values(), (token_source, tokens), *([sync] if sync else [])]:
        _check_range(where, name, column)
    n = row_updates(metrics, where, sorted(set(tokens).intersection(*(set(c[1]) for c in parts.values()))), k)
    steps = sorted(n)
    if len(steps) < 2:
        raise ConfigError(f"{where}: {len(steps)} step(s) log both the update time and the tokens: "
                          "the fit needs at least 2")
    N = np.array([float(n[s]) for s in steps])
    T = np.array([tokens[s] for s in steps]) * (N if per_update else 1.0)
    t = _update_times(where, parts, steps)
    if np.ptp(T / N) <= 0:
        raise ConfigError(f"{where}: every update trained {T[0] / N[0]:g} tokens: the per-token and fixed "
                          "update times cannot be told apart")
    X = np.column_stack([N, T])  # a row of n updates: n fixed times, and the tokens of all n
    fit = _fit_record(where, k, steps, X, t, parts, {"tokens": token_source})
    notes = [*sparse_notes([*parts.values(), (token_source, tokens)]), *notes]
    if samples_per_step is not None and not per_update:  # (given, and the file logs the tokens)
        notes.append(f"--samples-per-step {samples_per_step}: not used: the tokens a step trained are logged "
                     f"({token_source})")
    return _read_notes(metrics, _with_sync(fit, sync, notes, upper, pairs_fitted=False))


def sparse_notes(columns: list[tuple[str, dict[int, float]]]) -> list[str]:
    """A note for each column of the fit (the update parts, whose sum is the update time, and the
    tokens) missing on steps that log all the others: the fit uses only the steps that log every
    one, so such a column (verl's ``timing_s/ref`` logged on 3 of 100 steps) silently cut the
    fit to its steps. Leaving the column out instead would fit an update time without its share."""
    notes = []
    for i, (name, column) in enumerate(columns):
        others = [c for j, c in enumerate(columns) if j != i]
        if not others:
            continue
        both = set.intersection(*(set(c[1]) for c in others))
        missing = both - set(column)
        if missing:
            notes.append(f"{name} is logged on {len(both) - len(missing)} of the {len(both)} steps that log "
                         f"{_names([c[0] for c in others])}: the fit uses only the steps that log all of them, "
                         f"so it left out {len(missing)} (steps "
                         f"{_steps(sorted(missing))}); log {name} on every step to fit them all")
    return notes


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _steps(steps: list[int]) -> str:
    """Steps as runs, the first few: 4-100, or 2, 4, 6 ... (50 steps)."""
    runs, start = [], steps[0]
    for a, b in zip(steps, [*steps[1:], None], strict=True):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs) if len(runs) <= 4 else f"{', '.join(runs[:3])} ... {runs[-1]}"


def _read_notes(metrics: dict, fit: dict) -> dict:
    """``fit`` with the notes of reading ``metrics`` (a step logged again: :func:`read_metrics`)."""
    read = getattr(metrics, "notes", [])
    if read:
        fit["notes"] = [*read, *fit.get("notes", [])]
    return fit


def _fit_with_trace(metrics: dict, where: str, samples_per_step: int | None, k: int, parts: dict,
                    trace: TraceSteps) -> dict:
    """The fit of [updates, tokens, pairs] a row, the tokens and pairs from the trace; the
    metrics' own tokens (when logged) only checked against the trace's."""
    logged = _logged_tokens(metrics, where, samples_per_step)
    sync, notes, upper = sync_column(metrics, _column(metrics, "sync"))
    for name, column in [*parts.values(), *([logged[:2]] if logged else []), *([sync] if sync else [])]:
        _check_range(where, name, column)
    n = row_updates(metrics, where, sorted(set.intersection(*(set(c[1]) for c in parts.values()))), k)
    row_tokens = None if logged is None else (logged[0], {s: v * (n[s] if logged[2] else 1)
                                                          for s, v in logged[1].items() if s in n})
    steps, X, trace_notes = trace.design(metrics, where, n, k, row_tokens)
    t = _update_times(where, parts, steps)
    if np.linalg.matrix_rank(X / X.max(axis=0)) < X.shape[1]:
        raise ConfigError(f"--trace {trace.where}: the matched steps' updates, tokens and attention pairs are "
                          "proportional: the fixed, per-token and per-pair times cannot be told apart")
    columns = {"tokens": f"trace {trace.where} (prompt + response of each step's samples)",
               "pairs": f"trace {trace.where} (sum of L(L+1)/2 over each step's samples)"}
    if logged is not None:
        columns["tokens_checked"] = logged[0]
    fit = _fit_record(where, k, steps, X, t, parts, columns)
    fit["trace"] = trace.where
    return _with_sync(fit, sync, [*sparse_notes(list(parts.values())), *notes, *trace_notes], upper,
                      pairs_fitted=True)


def _logged_tokens(metrics: dict, where: str, samples_per_step: int | None
                   ) -> tuple[str, dict[int, float], bool] | None:
    """The metrics' tokens (name, step -> tokens, per update?) as :func:`_tokens` reads them;
    None when the file has none (with ``--trace`` they are not needed)."""
    try:
        tokens, source, per_update = _tokens(metrics, where, samples_per_step)
    except ConfigError:
        return None
    return source, tokens, per_update


def _update_times(where: str, parts: dict, steps: list[int]) -> np.ndarray:
    t = np.array([sum(c[1][s] for c in parts.values()) for s in steps])
    if not t.all():  # the fit weighs each step by 1 / its time
        step = steps[int(np.flatnonzero(t == 0)[0])]
        raise ConfigError(f"{where}: the update at step {step} took 0 s: a step that logs an "
                          "update time must have trained")
    return t


TERM_UNITS = (("train_fix", "s/update"), ("train_per_token", "s/token"), ("train_per_pair", "s/pair"))


def _fit_record(where: str, k: int, steps: list[int], X: np.ndarray, t: np.ndarray, parts: dict,
                columns: dict) -> dict:
    """Non-negative least squares of the update times ``t`` on the columns of ``X`` (updates,
    tokens[, pairs] a row), each row weighed by 1 / its time; each term with its standard error
    (:func:`term_errors`), and a note for each it leaves poorly determined."""
    from scipy.optimize import lsq_linear

    w = 1.0 / np.maximum(t, 1e-12)
    scale = X.max(axis=0)
    x = lsq_linear((X / scale) * w[:, None], t * w, bounds=(0.0, np.inf)).x / scale
    pred = X @ x
    N, T = X[:, 0], X[:, 1]
    exact = len(t) <= len(x)  # as many steps as terms: the fit passes through each, no error left
    err = [None] * len(x) if exact else term_errors(X, t, w, x)
    units = TERM_UNITS[:len(x)]
    fit = {"source": "metrics", "file": where, "steps": len(steps), "updates_per_row": k,
           "updates": int(N.sum()),
           "columns": {"update": [c[0] for c in parts.values()], **columns},
           "terms": {name: {"value": float(v), "stderr": e, "unit": unit}
                     for (name, unit), v, e in zip(units, x, err, strict=True)},
           "update_mape_pct": float(100.0 * np.mean(np.abs(pred - t) / t)),
           "update_s_mean": float((t / N).mean()), "tokens_mean": float((T / N).mean())}
    notes = [exact_note(len(t), len(x))] if exact else \
        _poorly_determined(fit["terms"], (X / N[:, None]).mean(axis=0), fit["update_s_mean"], pairs_fitted=len(x) == 3)
    if notes:
        fit["notes"] = notes
    return fit


def exact_note(rows: int, terms: int) -> str:
    """The note for a fit with no step to spare: it passes through every step, so its residual
    says nothing of the noise and no standard error is given (``stderr`` null), rather than the
    0 that a residual of 0 makes (2 steps of +2% and -1% noise gave train_fix +27%, "stderr 0")."""
    return (f"{rows} step(s) for {terms} terms: no step to spare, so the fit has no standard "
            "error and cannot say how well the terms are determined; record more steps")


def term_errors(X: np.ndarray, t: np.ndarray, w: np.ndarray, x: np.ndarray) -> list[float]:
    """The standard error of each fitted term, as the vllm-bench fit's
    (:func:`~sortedrl.calibration.vllm_bench.fit_stderr`: weighted residual variance, dof = rows -
    terms and at least 1, times the pseudo-inverse of the weighted normal matrix), taken on the
    columns scaled to a largest value of 1 and scaled back: the same figures, but the
    pseudo-inverse no longer drops the updates column as noise beside the pairs' (1 against
    ~1e9 a row, ~1e18 in the normal matrix, past its cut-off of ~1e-15 of the largest)."""
    scale = X.max(axis=0)
    return [float(e) for e in np.asarray(fit_stderr(X / scale, t, w, x * scale)) / scale]


def _poorly_determined(terms: dict, feature_mean: np.ndarray, update_s_mean: float,
                      pairs_fitted: bool) -> list[str]:
    """A note for each term whose standard error moves the mean update time by more than
    :data:`~sortedrl.calibration.vllm_bench.UNCERTAIN` (stderr x the term's mean feature per
    update: 1, the tokens, the pairs), the vllm-bench fit's rule. 15 steps of 100k-200k tokens at
    5% noise gave train_fix 2.64 +- 1.05 s for a true 2.0, 12% of the 8.95 s mean update: flagged;
    over 150k-300k tokens, 2.63 +- 1.04 s is 8.6% of a 12.1 s update: not flagged. The two terms'
    errors are anti-correlated (-0.98 in the first case, where an update of the mean tokens is
    known to 0.19 s): the rule says how far off an update far from the logged lengths may be."""
    vary = "tokens and lengths" if pairs_fitted else "tokens"
    notes = []
    for (name, term), f in zip(terms.items(), feature_mean, strict=True):
        moved = term["stderr"] * f / update_s_mean
        if moved > UNCERTAIN:
            notes.append(f"{name} {term['value']:.3g} +- {term['stderr']:.3g} {term['unit']} is poorly "
                         f"determined: one standard error moves the mean update ({update_s_mean:.3g} s) by "
                         f"{100 * moved:.0f}%; record more steps, or steps whose {vary} vary more")
    return notes


def _with_sync(fit: dict, sync: tuple | None, notes: list[str], upper: bool, pairs_fitted: bool) -> dict:
    """``fit`` with the median sync (when a sync column was read) and the notes. The median
    gets no standard error: a median's depends on the shape of the syncs' spread, which a run's
    few syncs do not pin; ``sync_spread_s`` (max - min) is kept, and printed, instead."""
    if sync is not None and sync[1]:
        vals = np.array(sorted(sync[1].values()))
        fit["terms"]["sync_s"] = {"value": float(np.median(vals)), "unit": "s/sync"}
        fit["columns"]["sync"] = sync[0]
        fit["sync_spread_s"] = float(vals[-1] - vals[0])
        if upper:
            fit["sync_upper_bound"] = True
    fix = fit["terms"]["train_fix"]["value"]
    if fix <= AT_BOUND * fit["update_s_mean"]:
        notes = [*notes, fix_at_bound_note(fix, pairs_fitted)]
    notes = [*notes, *fit.pop("notes", [])]  # the terms poorly determined (_fit_record)
    if notes:
        fit["notes"] = notes
    return fit


AT_BOUND = 1e-6  # a fitted train_fix under this share of the mean update time: at its bound 0


def fix_at_bound_note(value: float, pairs_fitted: bool = False) -> str:
    """The note for a ``train_fix`` fitted at (or within :data:`AT_BOUND` of) its bound 0: the
    per-token term took the fixed time. In the audit's colocated h100-llama3.1-8b-2gpu run
    (train_fix 1 s, attention pairs priced) the fit gave 1.8e-9 s and a per-token term 10% high,
    at a 1.3% update MAPE. With ``--trace`` (``pairs_fitted``) the pairs have their own term."""
    if pairs_fitted:
        return (f"train_fix {value:.3g} s is at its bound 0: the fixed time per update is not separable "
                "from these steps; a constant share of the per-token or per-pair time took it")
    return (f"train_fix {value:.3g} s is at its bound 0: the fixed time per update is not separable "
            "from these metrics; the attention pairs (not in the metrics, so fitted into "
            "train_per_token) or a constant share of the per-token time took it, and train_per_token "
            "holds it (high by that share)")


MAX_METRIC = 1e15  # seconds or tokens of one step: far past any run


def _check_range(where: str, name: str, column: dict[int, float]) -> None:
    """A time or a token count of a step: from 0 to :data:`MAX_METRIC` (a negative time made a
    negative error; 1e308 an infinite spread)."""
    for step, v in column.items():
        if not 0 <= v <= MAX_METRIC:
            raise ConfigError(f"{where}: {name} at step {step}: {v:g} is not from 0 to "
                              f"{MAX_METRIC:g}")


def _tokens(metrics: dict, where: str, samples_per_step: int | None) -> tuple[dict[int, float], str, bool]:
    """Tokens a row trained (False), or an update trained (True: mean lengths x samples)."""
    total = _column(metrics, "tokens")
    if total is not None:
        return total[1], total[0], False
    rate, time = (named(metrics, name) for name in TOKEN_RATE)
    if rate is not None and time is not None:  # slime: training throughput x training time
        steps = set(rate[1]) & set(time[1])
        return {s: rate[1][s] * time[1][s] for s in steps}, f"{rate[0]} x {time[0]}", False
    whole = _column(metrics, "total_mean")
    prompt, resp = _column(metrics, "prompt_mean"), _column(metrics, "response_mean")
    for mean in (whole, prompt, resp):  # (a negative prompt length passed inside a positive sum)
        if mean is not None:
            _check_range(where, mean[0], mean[1])
    if samples_per_step is not None and whole is not None:
        return ({s: samples_per_step * v for s, v in whole[1].items()},
                f"{samples_per_step} x {whole[0]}", True)
    logged = [m[0] for m in ((whole,) if whole is not None else (prompt, resp)) if m is not None]
    if samples_per_step is None and (whole is not None or (prompt is not None and resp is not None)):
        raise ConfigError(f"{where}: no tokens per step: needs {' or '.join(ROLES['tokens'])}, or --samples-per-step N (the "
                          f"samples trained in one update) with the mean lengths this file logs "
                          f"({' + '.join(logged)}): only --samples-per-step is missing")
    if prompt is None or resp is None:
        raise ConfigError(
            f"{where}: no tokens per step: needs {' or '.join(ROLES['tokens'])}, or {' and '.join(TOKEN_RATE)} (slime), "
            f"or {ROLES['total_mean'][0]} "
            f"(OpenRLHF) or {ROLES['prompt_mean'][0]} and {ROLES['response_mean'][0]} with --samples-per-step, "
            f"or give --trace with the run's length trace, which holds each step's tokens "
            f"(columns found: {listing(sorted(metrics))})")
    steps = set(prompt[1]) & set(resp[1])
    return ({s: samples_per_step * (prompt[1][s] + resp[1][s]) for s in steps},
            f"{samples_per_step} x ({prompt[0]} + {resp[0]})", True)
