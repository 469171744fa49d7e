"""``calibrate --from-metrics``: fit the trainer and sync terms to an RL framework's step metrics.

A step's update time ``train_fix + train_per_token · tokens`` (the simulator's
:meth:`CostModel.train`, whose tokens are prompt + response of every trained sample and which
includes the extra forward passes for old and reference log-probs) is fitted by linear least
squares over the logged steps; ``sync_s`` is the median weight sync. Metric names map to roles
through :data:`ROLES`, the one table docs/calibration.md documents. Accepted files:
- verl's file logger (``VERL_FILE_LOGGER_PATH``): JSON lines ``{"step": N, "data": {...}}``,
  or flat lines ``{"step": N, "metric": value, ...}``;
- a CSV with one column per metric (``step`` or ``Step`` plus metric names);
- a W&B "export CSV": columns ``Step`` and ``<run> - <metric>`` (split at the last `` - ``: a
  run name may hold one, a metric name never does); the ``__MIN``/``__MAX`` columns are the
  plot's downsampling buckets and are ignored.
A UTF-8 byte-order mark (Excel's, some exports') is skipped. In JSON lines, a metric of
:data:`ROLES` whose value is text, a bool or a container is an error; other keys' are ignored.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite

# role -> metric names, verl first, then OpenRLHF. Update time is the sum of the roles marked
# "update" that are present; tokens come from total tokens, or from mean lengths x samples/step.
ROLES: dict[str, tuple[str, ...]] = {
    "update": ("timing_s/update_actor", "timing/ppo_train"),
    "old_log_prob": ("timing_s/old_log_prob",),
    "ref": ("timing_s/ref",),
    "experience": ("timing/make_experience",),  # OpenRLHF: the forward passes before training
    "sync": ("timing_s/update_weights", "timing_s/sync_weights", "timing/broadcast"),
    "tokens": ("perf/total_num_tokens",),
    "prompt_mean": ("prompt_length/mean",),
    "response_mean": ("response_length/mean",),
}
UPDATE_PARTS = ("update", "old_log_prob", "ref", "experience")
KNOWN = frozenset(name for names in ROLES.values() for name in names)


def read_metrics(path: str | Path) -> dict[str, dict[int, float]]:
    """Metric name -> {step: value} from a JSONL or CSV metrics file."""
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
        return _read_csv(text, where)
    if p.suffix.lower() in (".jsonl", ".json"):
        return _read_jsonl(text, where)
    raise ConfigError(f"{where}: unknown metrics format {p.suffix!r} (known: .jsonl, .csv)")


def _read_jsonl(text: str, where: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = jsonio.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or isinstance(rec["step"], bool):
            raise ConfigError(f"{where}: line {n}: expected an object with an integer 'step'")
        data = rec.get("data", rec)
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: line {n}: field 'data': expected an object of metrics")
        for key, v in data.items():
            if finite(v):
                out.setdefault(key, {})[rec["step"]] = float(v)
            elif key in KNOWN and v is not None and (isinstance(v, bool)
                                                     or not isinstance(v, (int, float))):
                shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
                raise ConfigError(f"{where}: line {n}: metric {key!r}: expected a number, got "
                                  f"{shown}")  # (null, NaN and inf: not logged, as in a CSV)
    return out


def _read_csv(text: str, where: str) -> dict[str, dict[int, float]]:
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ConfigError(f"{where}: empty CSV")
    header = rows[0]
    lower = [h.strip().lower() for h in header]
    if "step" not in lower:
        raise ConfigError(f"{where}: no 'Step' column (columns found: {_listing(header)})")
    step_col = lower.index("step")
    names = _csv_names(header, step_col, where)
    out: dict[str, dict[int, float]] = {}
    for n, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        cell = row[step_col] if step_col < len(row) else ""
        step = _step(cell)
        if step is None:
            raise ConfigError(f"{where}: row {n}: column {header[step_col]!r}: expected a whole "
                              f"step number, got {cell!r}")
        for col, name in names.items():
            cell = row[col].strip() if col < len(row) else ""
            if not cell:
                continue  # W&B leaves a cell empty where a metric was not logged
            try:
                value = float(cell)
            except ValueError:
                raise ConfigError(f"{where}: row {n}: column {header[col]!r}: expected a number, "
                                  f"got {cell!r}") from None
            if math.isfinite(value):  # NaN or inf: not logged, as the JSONL reader skips them
                out.setdefault(name, {})[step] = value
    return out


def _csv_names(header: list[str], step_col: int, where: str) -> dict[int, str]:
    """Column index -> metric name; W&B's ``<run> - <metric>`` loses its run prefix."""
    names, runs = {}, set()
    for i, h in enumerate(header):
        if i == step_col or h.endswith(("__MIN", "__MAX")) or h.strip().lower().startswith("_"):
            continue
        run, sep, metric = h.rpartition(" - ")  # a run name may hold " - "; a metric never
        if sep:
            runs.add(run)
            names[i] = metric.strip()
        else:
            names[i] = h.strip()
    if len(runs) > 1:
        raise ConfigError(f"{where}: columns of {len(runs)} runs ({_listing(sorted(runs))}): export one run")
    return names


def _step(cell: str) -> int | None:
    """A CSV step cell as an int (W&B may write ``6.0``); None unless a finite whole number."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


def _listing(items: list[str], most: int = 12) -> str:
    shown = ", ".join(items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "") if items else "none"


# -- the fit ----------------------------------------------------------------------------------------


def _column(metrics: dict, role: str) -> tuple[str, dict[int, float]] | None:
    for name in ROLES[role]:
        if name in metrics:
            return name, metrics[name]
    return None


def fit_metrics(metrics: dict[str, dict[int, float]], where: str,
                samples_per_step: int | None = None) -> dict:
    """Fit ``train_fix``, ``train_per_token`` and ``sync_s``; says which columns it used."""
    parts = {r: c for r in UPDATE_PARTS if (c := _column(metrics, r))}
    if "update" not in parts:
        raise ConfigError(f"{where}: no update time: needs one of {', '.join(ROLES['update'])} "
                          f"(columns found: {_listing(sorted(metrics))})")
    tokens, token_source = _tokens(metrics, where, samples_per_step)
    sync = _column(metrics, "sync")
    for name, column in [*parts.values(), (token_source, tokens), *([sync] if sync else [])]:
        _check_range(where, name, column)
    steps = sorted(set(tokens).intersection(*(set(c[1]) for c in parts.values())))
    if len(steps) < 2:
        raise ConfigError(f"{where}: {len(steps)} step(s) log both the update time and the tokens: "
                          "the fit needs at least 2")
    T = np.array([tokens[s] for s in steps])
    t = np.array([sum(c[1][s] for c in parts.values()) for s in steps])
    if not t.all():  # the fit weighs each step by 1 / its time
        step = steps[int(np.flatnonzero(t == 0)[0])]
        raise ConfigError(f"{where}: the update at step {step} took 0 s: a step that logs an "
                          "update time must have trained")
    if np.ptp(T) <= 0:
        raise ConfigError(f"{where}: every step trained {T[0]:g} tokens: the per-token and fixed update "
                          "times cannot be told apart")
    from scipy.optimize import lsq_linear

    X = np.column_stack([np.ones_like(T), T])
    w = 1.0 / np.maximum(t, 1e-12)
    scale = np.array([1.0, T.max()])
    x = lsq_linear((X / scale) * w[:, None], t * w, bounds=(0.0, np.inf)).x / scale
    pred = X @ x
    fit = {"source": "metrics", "file": where, "steps": len(steps),
           "columns": {"update": [c[0] for c in parts.values()], "tokens": token_source},
           "terms": {"train_fix": {"value": float(x[0]), "unit": "s/update"},
                     "train_per_token": {"value": float(x[1]), "unit": "s/token"}},
           "update_mape_pct": float(100.0 * np.mean(np.abs(pred - t) / t)),
           "update_s_mean": float(t.mean()), "tokens_mean": float(T.mean())}
    if sync is not None and sync[1]:
        vals = np.array(sorted(sync[1].values()))
        fit["terms"]["sync_s"] = {"value": float(np.median(vals)), "unit": "s/sync"}
        fit["columns"]["sync"] = sync[0]
        fit["sync_spread_s"] = float(vals[-1] - vals[0])
    return fit


MAX_METRIC = 1e15  # seconds or tokens of one step: far past any run


def _check_range(where: str, name: str, column: dict[int, float]) -> None:
    """A time or a token count of a step: from 0 to :data:`MAX_METRIC` (a negative time made a
    negative error; 1e308 an infinite spread)."""
    for step, v in column.items():
        if not 0 <= v <= MAX_METRIC:
            raise ConfigError(f"{where}: {name} at step {step}: {v:g} is not from 0 to "
                              f"{MAX_METRIC:g}")


def _tokens(metrics: dict, where: str, samples_per_step: int | None) -> tuple[dict[int, float], str]:
    total = _column(metrics, "tokens")
    if total is not None:
        return total[1], total[0]
    prompt, resp = _column(metrics, "prompt_mean"), _column(metrics, "response_mean")
    if prompt is None or resp is None or samples_per_step is None:
        raise ConfigError(
            f"{where}: no tokens per step: needs {ROLES['tokens'][0]}, or {ROLES['prompt_mean'][0]} and "
            f"{ROLES['response_mean'][0]} with --samples-per-step (columns found: {_listing(sorted(metrics))})")
    steps = set(prompt[1]) & set(resp[1])
    return ({s: samples_per_step * (prompt[1][s] + resp[1][s]) for s in steps},
            f"{samples_per_step} x ({prompt[0]} + {resp[0]})")
