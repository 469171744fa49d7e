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
(:mod:`~sortedrl.calibration.trace_pairs`). Metric names map to roles through
:data:`ROLES`, the one table docs/calibration.md documents; a name may carry OpenRLHF's ``train/``
prefix (its W&B and TensorBoard loggers put it before every key). Accepted files:
- verl's file logger (``VERL_FILE_LOGGER_PATH``): JSON lines ``{"step": N, "data": {...}}``,
  or flat lines ``{"step": N, "metric": value, ...}``;
- a CSV with one column per metric (``step`` or ``Step`` plus metric names);
- a W&B "export CSV": columns ``Step`` (or ``train/global_step``, OpenRLHF's x-axis) and
  ``<run> - <metric>`` (split at the last `` - ``: a run name may hold one, a metric name never
  does); the ``__MIN``/``__MAX`` columns are the plot's downsampling buckets and are ignored.
  An export of several runs is read with ``--run`` naming one (:mod:`sortedrl.wandb_runs`).
A UTF-8 byte-order mark (Excel's, some exports') is skipped. In JSON lines, a metric of
:data:`ROLES` whose value is text, a bool or a container is an error; other keys' are ignored.
A step logged again with other values (a run resumed from an earlier checkpoint into the same
log logs the steps after it twice) is read from its last logging, and the fit notes it
(:func:`repeated_note`); logged again with the same values, it is read once.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from sortedrl import jsonio
from sortedrl.calibration.metrics_layouts import (
    GLOBAL_STEP,
    PREFIX,
    STEP_METRIC,
    named,
    row_updates,
    sync_column,
    updates_per_row,
)
from sortedrl.calibration.trace_pairs import TraceSteps
from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.wandb_runs import MAX_STEP, metric_of, only_run, present, step_number

# role -> metric names, verl first, then OpenRLHF (each also read with OpenRLHF's "train/" prefix).
# Update time is the sum of the roles marked "update" that are present; tokens come from total
# tokens, or from mean lengths x samples per update.
ROLES: dict[str, tuple[str, ...]] = {
    "update": ("timing_s/update_actor", "timing/ppo_train"),
    "old_log_prob": ("timing_s/old_log_prob",),
    "ref": ("timing_s/ref",),
    "experience": ("timing/make_experience",),  # OpenRLHF: the forward passes before training
    # verl's trainer from v0.7.1 (ray_trainer.py: colocated, with the rollout's wake-up), verl's
    # one-step-off trainer (one_step_off_policy/ray_trainer.py), OpenRLHF (ppo_trainer.py);
    # verl v0.7.0 and earlier log none (the sync is inside timing_s/gen)
    "sync": ("timing_s/update_weights", "timing_s/sync_rollout_weights", "timing/broadcast"),
    "tokens": ("perf/total_num_tokens",),
    "total_mean": ("total_length",),  # OpenRLHF: prompt + response, the mean of a trained sample
    "prompt_mean": ("prompt_length/mean",),
    "response_mean": ("response_length/mean",),
}
UPDATE_PARTS = ("update", "old_log_prob", "ref", "experience")
KNOWN = frozenset(p + name for names in ROLES.values() for name in names for p in ("", PREFIX)) | {GLOBAL_STEP}


class Metrics(dict):
    """Metric name -> {step: value}, with the notes on how the file was read (``notes``), which
    :func:`fit_metrics` records with its own (``fit.trainer.notes``)."""

    def __init__(self, *args, notes: list[str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.notes: list[str] = list(notes or [])


def repeated_note(where: str, steps: int) -> str:
    """The note for ``steps`` steps logged more than once with other values."""
    return (f"{where}: {steps} step(s) logged more than once with other values (a resumed run?): "
            "the last logging of each is used")


def read_metrics(path: str | Path, run: str | None = None) -> Metrics:
    """Metric name -> {step: value} from a JSONL or CSV metrics file; ``run``: the run to read
    of a W&B export (``--run``)."""
    where = str(path)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: metrics file not found") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start})") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark: the first header was '\ufeffStep'
    if p.suffix.lower() == ".csv":
        return _read_csv(text, where, run)
    if p.suffix.lower() in (".jsonl", ".json") and run is not None:
        raise ConfigError(f"--run {run}: {where} is JSON lines (verl / OpenRLHF): --run applies to "
                          "W&B export CSVs only")
    if p.suffix.lower() in (".jsonl", ".json"):
        return _read_jsonl(text, where)
    raise ConfigError(f"{where}: unknown metrics format {p.suffix!r} (known: .jsonl, .csv)")


def _read_jsonl(text: str, where: str) -> Metrics:
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()  # steps logged again with other values
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = jsonio.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or isinstance(rec["step"], bool):
            raise ConfigError(f"{where}: line {n}: expected an object with an integer 'step'")
        step = rec["step"]
        if not 0 <= step < MAX_STEP:
            raise ConfigError(f"{where}: line {n}: field 'step': {short_repr(step)} is not a step number "
                              "(a whole number from 0 to below 2**53)")
        data = rec.get("data", rec)
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: line {n}: field 'data': expected an object of metrics")
        for key, v in data.items():
            if finite(v):
                _store(out, key, step, float(v), f"{where}: line {n}: metric {key!r}", repeated)
            elif key in KNOWN and v is not None and (isinstance(v, bool)
                                                     or not isinstance(v, (int, float))):
                shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
                raise ConfigError(f"{where}: line {n}: metric {key!r}: expected a number, got "
                                  f"{shown}")  # (null, NaN and inf: not logged, as in a CSV)
    return _metrics(out, where, repeated)


def _read_csv(text: str, where: str, run: str | None) -> Metrics:
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ConfigError(f"{where}: empty CSV")
    header = only_run(rows[0], run, where, ConfigError)  # other runs' columns: blank
    step_cols, optional = _step_columns(header, where)
    names = _csv_names(header, step_cols, where)
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()  # steps logged again with other values
    for n, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):  # a row cut at a comma (or one with a comma too many)
            raise ConfigError(f"{where}: row {n}: {len(row)} cells, but the header has {len(header)} columns")
        step = _row_step(header, row, step_cols, optional, f"{where}: row {n}")
        if step is None:
            continue  # a W&B row that did not log train/global_step (its sample table, say)
        for col, name in names.items():
            cell = row[col].strip()
            if not cell:
                continue  # W&B leaves a cell empty where a metric was not logged
            try:
                value = float(cell)
            except ValueError:
                raise ConfigError(f"{where}: row {n}: column {header[col]!r}: expected a number, "
                                  f"got {cell!r}") from None
            if math.isfinite(value):  # NaN or inf: not logged, as the JSONL reader skips them
                _store(out, name, step, value, f"{where}: row {n}: column {header[col]!r}", repeated)
    return _metrics(out, where, repeated)


def _store(out: dict[str, dict[int, float]], name: str, step: int, value: float, at: str,
           repeated: set[int]) -> None:
    """``value`` of metric ``name`` at ``step`` (``at``: where it is). A step logged again (on a
    later line or row) with another value keeps the later one, the value of the run that went on
    after a resume from an earlier checkpoint, and joins ``repeated``."""
    if name == GLOBAL_STEP and step_number(value) is None:
        raise ConfigError(f"{at}: expected a whole number of updates, got {value:g}")
    column = out.setdefault(name, {})
    if column.get(step, value) != value:
        repeated.add(step)
    column[step] = value


def _metrics(out: dict[str, dict[int, float]], where: str, repeated: set[int]) -> Metrics:
    """The metrics read, with one note (for the file, not a step) when steps were logged again
    with other values."""
    return Metrics(out, notes=[repeated_note(where, len(repeated))] if repeated else [])


def _row_step(header: list[str], row: list[str], cols: list[int], optional: bool, at: str) -> int | None:
    """The row's step, the same in every step column; None for a row of an ``optional`` step
    column that did not log it."""
    steps = {}
    for col in cols:
        cell = row[col]
        if optional and not cell.strip():
            continue
        try:  # W&B may write 6.0; a whole number from 0 to below 2**53 (MAX_STEP)
            steps[col] = step_number(float(cell))
        except ValueError:
            steps[col] = None
        if steps[col] is None:
            raise ConfigError(f"{at}: column {header[col]!r}: expected a whole step number, got {cell!r}")
    if len(set(steps.values())) > 1:
        (a, x), *others = steps.items()
        b, y = next((c, s) for c, s in others if s != x)
        raise ConfigError(f"{at}: columns {header[a]!r} and {header[b]!r} give steps {x} and {y}: "
                          "which to read is unclear")
    return next(iter(steps.values()), None)


def _step_columns(header: list[str], where: str) -> tuple[list[int], bool]:
    """The step columns: ``step`` / ``Step``, else OpenRLHF's W&B x-axis ``train/global_step``
    (a metric column, empty in rows that did not log it: True); several (``Step`` and ``step``)
    must agree in every row."""
    cols = [i for i, h in enumerate(header) if h.strip().lower() == "step"]
    if cols:
        return cols, False
    cols = [i for i, h in enumerate(header) if h and metric_of(h) == STEP_METRIC]
    if cols:
        return cols, True
    raise ConfigError(f"{where}: no 'Step' (or '{STEP_METRIC}') column (columns found: {_listing(present(header))})")


def _csv_names(header: list[str], step_cols: list[int], where: str) -> dict[int, str]:
    """Column index -> metric name; W&B's ``<run> - <metric>`` loses its run prefix (the header
    holds one run's: :func:`~sortedrl.wandb_runs.only_run` blanked the others'). Two columns of
    one metric (two runs of one name, say) are an error: which one to fit is unclear."""
    names: dict[int, str] = {}
    for i, h in enumerate(header):
        if (i in step_cols or not h or h.endswith(("__MIN", "__MAX"))
                or h.strip().lower().startswith("_")):
            continue
        same = [j for j, name in names.items() if name == metric_of(h)]
        if same:
            raise ConfigError(f"{where}: columns {same[0] + 1} ({header[same[0]]!r}) and {i + 1} ({h!r}) both "
                              f"hold metric {metric_of(h)!r}: which to fit is unclear")
        names[i] = metric_of(h)
    return names


def _listing(items: list[str], most: int = 12) -> str:
    shown = ", ".join(items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "") if items else "none"


# -- the fit ----------------------------------------------------------------------------------------


def _column(metrics: dict, role: str) -> tuple[str, dict[int, float]] | None:
    for name in ROLES[role]:
        found = named(metrics, name)
        if found is not None:
            return found
    return None


def fit_metrics(metrics: dict[str, dict[int, float]], where: str, samples_per_step: int | None = None,
                updates: int | None = None, trace: TraceSteps | None = None) -> dict:
    """Fit ``train_fix``, ``train_per_token`` and ``sync_s``; says which columns it used.
    ``samples_per_step``: samples trained per update; ``updates``: ``--updates-per-row``;
    ``trace``: the run's length trace (``--trace``), which gives each row's tokens and attention
    pairs, so ``train_per_pair`` is fitted too (:mod:`~sortedrl.calibration.trace_pairs`). The
    notes of the reading (:attr:`Metrics.notes`) come first in the fit's."""
    parts = {r: c for r in UPDATE_PARTS if (c := _column(metrics, r))}
    if "update" not in parts:
        raise ConfigError(f"{where}: no update time: needs one of {', '.join(ROLES['update'])} "
                          f"(columns found: {_listing(sorted(metrics))})")
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
    return _read_notes(metrics, _with_sync(fit, sync, notes, upper, pairs_fitted=False))


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
    return _with_sync(fit, sync, [*notes, *trace_notes], upper, pairs_fitted=True)


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
    tokens[, pairs] a row), each row weighed by 1 / its time."""
    from scipy.optimize import lsq_linear

    w = 1.0 / np.maximum(t, 1e-12)
    scale = X.max(axis=0)
    x = lsq_linear((X / scale) * w[:, None], t * w, bounds=(0.0, np.inf)).x / scale
    pred = X @ x
    N, T = X[:, 0], X[:, 1]
    return {"source": "metrics", "file": where, "steps": len(steps), "updates_per_row": k,
            "updates": int(N.sum()),
            "columns": {"update": [c[0] for c in parts.values()], **columns},
            "terms": {name: {"value": float(v), "unit": unit} for (name, unit), v in zip(TERM_UNITS[:len(x)], x, strict=True)},
            "update_mape_pct": float(100.0 * np.mean(np.abs(pred - t) / t)),
            "update_s_mean": float((t / N).mean()), "tokens_mean": float((T / N).mean())}


def _with_sync(fit: dict, sync: tuple | None, notes: list[str], upper: bool, pairs_fitted: bool) -> dict:
    """``fit`` with the median sync (when a sync column was read) and the notes."""
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
    whole = _column(metrics, "total_mean")
    prompt, resp = _column(metrics, "prompt_mean"), _column(metrics, "response_mean")
    if samples_per_step is not None and whole is not None:
        return ({s: samples_per_step * v for s, v in whole[1].items()},
                f"{samples_per_step} x {whole[0]}", True)
    if samples_per_step is None or prompt is None or resp is None:
        raise ConfigError(
            f"{where}: no tokens per step: needs {ROLES['tokens'][0]}, or {ROLES['total_mean'][0]} "
            f"(OpenRLHF) or {ROLES['prompt_mean'][0]} and {ROLES['response_mean'][0]} with --samples-per-step "
            f"(columns found: {_listing(sorted(metrics))})")
    steps = set(prompt[1]) & set(resp[1])
    return ({s: samples_per_step * (prompt[1][s] + resp[1][s]) for s in steps},
            f"{samples_per_step} x ({prompt[0]} + {resp[0]})", True)
