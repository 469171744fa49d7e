"""Calibrated profiles: cost-model terms fitted to measurements of a real engine and trainer.

``sortedrl calibrate`` measures decode steps over a grid of batch sizes and contexts, prefills,
updates and weight syncs (``realrun/calibrate.py``); this module fits the cost model to them with
``scipy.optimize.least_squares`` on relative errors, and reads and writes the profile JSON. A
profile records what it was measured on (device, model, engine and engine version, since
predictors drift as engines change: vidur #60, #72), every fitted term with its standard error,
and the fit's error per kind of measurement. ``--cluster PROFILE.json`` loads one wherever a
preset is accepted. A profile fitted from measurements taken elsewhere (``calibrate
--from-vllm-bench``, ``--from-metrics``, :mod:`sortedrl.calibration`) also records the preset
whose shape and settings it keeps (``cluster``: every field of the base cluster but its name
and costs, :data:`CLUSTER_FIELDS`) and which terms were measured (``measured_terms``). The
``costs`` object of a cluster file, a profile's or a user's, is checked here too (:func:`parse_costs`).
A profile written with the cost terms' old names (:data:`~sortedrl.sim.cost.LEGACY_NAMES`) is read
with the new ones (:func:`read_names`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from sortedrl.aside import aside
from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.sim.cluster import LEGACY_FIELDS, Cluster
from sortedrl.sim.cost import (
    LEGACY_STEP_FIT_NAMES,
    MIN_STEP_S,
    CostModel,
    as_written,
    old_name,
    renamed,
    renamed_list,
)

FORMAT = 1
TRAIN_TERMS = ("train_fix", "train_per_token")
# What a profile fitted on a base cluster (``calibrate --from-metrics/--from-vllm-bench
# --cluster BASE``) keeps of it in its ``cluster`` object: every field of the base but its name,
# its costs (the profile's own ``costs``) and max_num_seqs and kv_budget_tokens (``engine_config``).
# The shape first (all that profiles written before kept: the rest then fell back to the Cluster
# defaults, kv_watermark to 0, and a preset's chunked prefill went off: +0.61% rollout time on
# h100-llama3.1-8b-2gpu-disagg). The engine settings (chunked_prefill, prefix_caching,
# max_num_batched_tokens, kv_watermark, sleep, tool_pool, tool_holds_slot) drive the simulated
# engines; the trainer and link settings (train_fix, sync_fix, trainer_offload, host_gbs,
# gpus_per_node, net_gbps) scale the trainer and sync terms to a disaggregated split
# (cluster_split.split_costs); the rest (decode_model, mbu, mfu, step_fixed_s, ep, gpu_mem_util, ...) only
# derive a preset's costs, price nothing beside explicit ones, and are kept so the cluster reads
# back whole.
SHAPE = ("gpu", "model", "gpus", "tp", "placement", "train_gpus")
CLUSTER_FIELDS = SHAPE + tuple(f.name for f in dataclasses.fields(Cluster)
                               if f.name not in (*SHAPE, "name", "costs", "max_num_seqs", "kv_budget_tokens", "source"))


# -- fitting ---------------------------------------------------------------------------------------


def _fit(model, x0: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares on relative residuals; returns (params, standard errors, MAPE)."""
    from scipy.optimize import least_squares

    best = None
    for scale in (1.0, 0.1, 10.0):  # a few starts
        r = least_squares(lambda p: (model(p) - t) / t, x0 * scale, bounds=(0.0, np.inf))
        if best is None or r.cost < best.cost:
            best = r
    resid = best.fun
    dof = max(1, len(t) - len(x0))
    try:
        cov = np.linalg.pinv(best.jac.T @ best.jac) * (resid @ resid) / dof
        err = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        err = np.full(len(x0), np.nan)
    return best.x, err, float(np.mean(np.abs(resid)))


def fit_step_table(batch, new, new_tokens, new_pairs, kv, seconds, max_batch: int) -> dict:
    """A lookup-table fit: a step costs ``T[B] + kv_read_s_per_token·S + [new > 0]·admit_step_s
    + admit_s_per_request·new + prefill_s_per_token·T_new + prefill_s_per_pair·pairs``, linear in
    every unknown, solved by bounded linear least squares weighted by each step's duration (its
    admit_s_per_request is the engine's part; the profile's adds the runner's). T[B] for batch
    sizes never measured is interpolated; the table is made non-decreasing."""
    from scipy.optimize import lsq_linear

    b = np.minimum(np.asarray(batch, dtype=int), max_batch)
    n, T, P, s, t = (np.asarray(v, dtype=float) for v in (new, new_tokens, new_pairs, kv, seconds))
    X = np.zeros((len(t), max_batch + 5))
    X[np.arange(len(t)), b - 1] = 1.0
    X[:, max_batch], X[:, max_batch + 1], X[:, max_batch + 2] = s, T, P
    X[:, max_batch + 3], X[:, max_batch + 4] = (n > 0), n
    w = 1.0 / np.sqrt(t * t.mean())
    x = lsq_linear(X * w[:, None], t * w, bounds=(0.0, np.inf)).x
    counts = np.bincount(b - 1, minlength=max_batch)
    seen = np.flatnonzero(counts >= 3)
    table = np.interp(np.arange(max_batch), seen, x[seen]) if seen.size else np.full(max_batch, t.mean())
    table = np.maximum.accumulate(table)
    pred = X[:, :max_batch] @ table + X[:, max_batch:] @ x[max_batch:]
    rel = np.abs(pred - t) / t
    return {"table": [float(v) for v in table], "kv_read_s_per_token": float(x[max_batch]),
            "prefill_s_per_token": float(x[max_batch + 1]), "prefill_s_per_pair": float(x[max_batch + 2]),
            "admit_step_s": float(x[max_batch + 3]), "admit_s_per_request": float(x[max_batch + 4]),
            "mape": float(rel.mean()),
            "mape_decode_only": float(rel[n == 0].mean()) if (n == 0).any() else 0.0,
            "mape_with_prefill": float(rel[n > 0].mean()) if (n > 0).any() else 0.0,
            "total_error": float((pred.sum() - t.sum()) / t.sum()), "measurements": int(len(t)),
            "batch_counts": [int(c) for c in counts]}


def fit_train(tokens, seconds) -> dict:
    """t = train_fix + train_per_token · tokens."""
    T, t = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
    x, err, mape = _fit(lambda p: p[0] + p[1] * T, np.array([t.min(), 1e-6]), t)
    return _report(TRAIN_TERMS, x, err, mape, len(t))


def _report(names, x, err, mape, n) -> dict:
    return {"terms": {k: {"value": float(v), "stderr": float(e)} for k, v, e in zip(names, x, err, strict=True)},
            "mape": mape, "measurements": n}


# -- profile files -------------------------------------------------------------------------------


def write_profile(path: str | Path, profile: dict) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=aside(path.name, ""), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(profile, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def is_profile(raw: object) -> bool:
    return isinstance(raw, dict) and "sortedrl_profile" in raw


def read_names(raw: dict, where: str) -> dict:
    """A profile with the cost terms' old names (:data:`~sortedrl.sim.cost.LEGACY_NAMES`) read as
    the new ones wherever a profile holds them: ``costs``, ``cluster`` (t_fix), ``measured_terms``,
    ``fit.from_preset``, ``fit.steps`` (also its "pr"), and the terms, lists and objects of term
    names of ``fit.engine`` and ``fit.trainer``. A copy of what changed; what is not as calibrate
    writes it is left for its reader to refuse. An object with both names of a term is an error."""
    out = dict(raw)
    if isinstance(out.get("costs"), dict):
        out["costs"] = renamed(out["costs"], where, "costs")
    if isinstance(out.get("cluster"), dict):
        out["cluster"] = renamed(out["cluster"], where, "cluster", LEGACY_FIELDS)
    if "measured_terms" in out:
        out["measured_terms"] = renamed_list(out["measured_terms"])
    fit = out.get("fit")
    if not isinstance(fit, dict):
        return out
    fit = out["fit"] = dict(fit)
    if "from_preset" in fit:
        fit["from_preset"] = renamed_list(fit["from_preset"])
    if isinstance(fit.get("steps"), dict):
        fit["steps"] = renamed(fit["steps"], where, "fit.steps", LEGACY_STEP_FIT_NAMES)
    for part in ("engine", "trainer"):
        if not isinstance(fit.get(part), dict):
            continue
        sec = fit[part] = dict(fit[part])
        if isinstance(sec.get("terms"), dict):
            sec["terms"] = renamed(sec["terms"], where, f"fit.{part}.terms")
        for key in ("fixed_by_model", "uncertain", "unidentified"):
            if key in sec:
                sec[key] = renamed_list(sec[key])
        full = sec.get("full_batch")
        if isinstance(full, dict) and isinstance(full.get("uncertain"), dict):
            sec["full_batch"] = {**full, "uncertain": renamed(full["uncertain"], where,
                                                              f"fit.{part}.full_batch.uncertain")}
    return out


def profile_cluster(raw: dict, where: str, name: str) -> Cluster:
    """The one-engine, colocated cluster a profile describes, with its fitted costs (old names
    read as the new ones: :func:`read_names`; an error names a term as the file spells it)."""
    given = raw
    raw = read_names(raw, where)
    for key in ("device", "model", "engine", "engine_version", "costs", "engine_config"):
        if key not in raw:
            raise ConfigError(f"{where}: field {key!r}: missing (not a profile from sortedrl calibrate?)")
    check_format(raw, where)
    costs = raw["costs"]
    if not isinstance(costs, dict):
        raise ConfigError(f"{where}: field 'costs': expected an object of fitted terms")
    vals = {}
    for f in dataclasses.fields(CostModel):
        if f.name not in costs:
            if f.default is not dataclasses.MISSING:
                continue
            raise ConfigError(f"{where}: field 'costs.{f.name}': missing")
        vals[f.name] = _term(f.name, costs[f.name], where, given["costs"])
    for term in ("engine_contention", "train_contention", "peer_step_factor",  # a shared host slows,
                 "engine_contention_one", "train_contention_one"):  # never speeds up (0: not measured)
        if vals.get(term, 1.0) < 1.0 and not (term.endswith("_one") and vals[term] == 0.0):
            what = "a factor >= 1 (or 0: not measured)" if term.endswith("_one") else "a factor >= 1"
            raise ConfigError(f"{where}: field 'costs.{term}': expected {what}, got {vals[term]!r}")
    extra = set(costs) - set(vals)
    if extra:
        raise ConfigError(f"{where}: field 'costs': unknown {', '.join(sorted(extra))}")
    _check_step_time(vals, where, given["costs"])
    ec = raw["engine_config"]
    if not isinstance(ec, dict) or not {"max_num_seqs", "kv_budget_tokens"} <= set(ec):
        raise ConfigError(f"{where}: field 'engine_config': needs integer max_num_seqs and kv_budget_tokens")
    for key in ("max_num_seqs", "kv_budget_tokens"):  # (true read as 1, 2.9 as 2 and "256" as 256)
        if type(ec[key]) is not int:
            raise ConfigError(f"{where}: field 'engine_config.{key}': expected int, got {short_repr(ec[key])}")
    seqs, kv = ec["max_num_seqs"], ec["kv_budget_tokens"]
    settings = {"kv_watermark": 0.0, **_shape(raw, where, given.get("cluster"))}  # (0 where not said)
    # each field of its cluster object named as the file spells it: 'cluster.step_fixed_s', or
    # 'cluster.t_fix' (now step_fixed_s) (a new-name one was named 'step_fixed_s', as if at the top)
    labels = {key: as_written(key, given.get("cluster"), "cluster.", LEGACY_FIELDS)
              for key in raw.get("cluster") or {}}
    return Cluster(name=name, max_num_seqs=seqs, kv_budget_tokens=kv,
                   costs=CostModel(**vals), **settings).validate(where, labels)


def cluster_record(cluster: Cluster) -> dict:
    """A profile's ``cluster`` object: the base cluster it was fitted on, by name (``preset``),
    and each of its :data:`CLUSTER_FIELDS`, from which :func:`profile_cluster` rebuilds it."""
    return {"preset": cluster.name, **{k: getattr(cluster, k) for k in CLUSTER_FIELDS}}


def _shape(raw: dict, where: str, given: object) -> dict:
    """The cluster's shape and settings: the base's a profile was fitted on (``cluster``), else
    one engine on one device (a profile measured by ``calibrate --model``: its KV budget is the
    measured engine's own, num_gpu_blocks x block_size, read with no watermark). A field the
    profile does not hold (one written before it kept the base's settings) is the Cluster
    default, but kv_watermark 0: such a profile reads as it always did. ``given``: the
    ``cluster`` object as the file spells it (t_fix), for the errors."""
    shape = raw.get("cluster")
    if shape is None:
        return {"gpus": 1, "tp": 1, "placement": "colocated"}
    if not isinstance(shape, dict):
        raise ConfigError(f"{where}: field 'cluster': expected an object (gpu, model, gpus, tp, placement, ...)")
    extra = sorted(set(shape) - {"preset", *CLUSTER_FIELDS})
    if extra:  # (a typo such as gpu_mem_utl left the default in place)
        raise ConfigError(f"{where}: field 'cluster': unknown {', '.join(extra)}")
    out = {}
    for key in CLUSTER_FIELDS:
        if key not in shape:
            continue
        v, kind = shape[key], type(getattr(Cluster, key))  # (the field's default)
        if kind is float and type(v) is int:
            v = float(v)
        if type(v) is not kind:
            raise ConfigError(f"{where}: field {as_written(key, given, 'cluster.', LEGACY_FIELDS)}: "
                              f"expected {kind.__name__}, got {short_repr(v)}")
        out[key] = v
    return out


def _table(v: object, where: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    if (not isinstance(v, list) or not v
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                       for x in v)):
        raise ConfigError(f"{where}: field 'costs.step_table': expected a list of seconds >= 0 per batch size")
    return tuple(float(x) for x in v)


_INT_COSTS = ("experts", "experts_per_token", "expert_shards")


def _term(name: str, v: object, where: str, given: object) -> object:
    """One term of a ``costs`` object, checked (a profile's and a cluster file's alike, so one
    bad value gets one message). ``given``: the costs as the file spells them (t_fix, a0)."""
    if name == "step_table":
        return _table(v, where)
    if name in ("prefill_in_step", "train_padded"):
        if not isinstance(v, bool):
            raise ConfigError(f"{where}: field 'costs.{name}': expected true or false, got {v!r}")
        return v
    if not finite(v) or v < 0:
        raise ConfigError(f"{where}: field {as_written(name, given, 'costs.')}: expected a finite number "
                          f">= 0, got {short_repr(v)}")
    return _count(name, v, where) if name in _INT_COSTS else float(v)


def _count(name: str, v: int | float, where: str) -> int:
    """A count of ``costs`` (a number >= 0 already): whole (2.5 experts was read as 2)."""
    if v != int(v):
        raise ConfigError(f"{where}: field 'costs.{name}': expected a whole number, got {v!r}")
    return int(v)


def check_format(raw: dict, where: str) -> None:
    """A profile of the one format this version reads (``--cluster`` and ``profile show``)."""
    if raw.get("sortedrl_profile") != FORMAT or isinstance(raw.get("sortedrl_profile"), bool):
        raise ConfigError(f"{where}: field 'sortedrl_profile': format {short_repr(raw.get('sortedrl_profile'))} "
                          f"is not {FORMAT}")


def _check_step_time(vals: dict, where: str, given: object) -> None:
    """A decode step takes time: step_fixed_s + weight_read_s (or each step_table entry) of at
    least MIN_STEP_S (a step_fixed_s of 1e-320 s passed '> 0', and a run of such steps took no
    time: its tokens/s was infinite). ``given``: the costs as the file spells them (t_fix, a0)."""
    table, step = vals.get("step_table"), vals["step_fixed_s"] + vals["weight_read_s"]
    if step < MIN_STEP_S and not (table and min(table) >= MIN_STEP_S):
        terms = " + ".join(k if old_name(k, given) is None else f"{old_name(k, given)} (now {k})"
                           for k in ("step_fixed_s", "weight_read_s"))
        raise ConfigError(f"{where}: field 'costs': {terms} must be at least {MIN_STEP_S:g} s "
                          f"(a decode step takes time), got {step:g}")


def parse_costs(raw: object, where: str) -> CostModel:
    """The ``costs`` object of a cluster file: every field checked, one error naming it (an old
    name of a term is read as its new one: :data:`~sortedrl.sim.cost.LEGACY_NAMES`)."""
    names = [f.name for f in dataclasses.fields(CostModel)]
    required = [f.name for f in dataclasses.fields(CostModel) if f.default is dataclasses.MISSING]
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: field 'costs': expected an object with {', '.join(names)}")
    given, raw = raw, renamed(raw, where, "costs")  # (an error names a term as given: a0)
    missing = [n for n in required if n not in raw]
    if missing:
        raise ConfigError(f"{where}: field 'costs': missing {', '.join(missing)}")
    extra = [k for k in raw if k not in names]
    if extra:
        raise ConfigError(f"{where}: field 'costs': unknown {', '.join(extra)}")
    vals = {}
    for n in (n for n in names if n in raw):
        vals[n] = _term(n, raw[n], where, given)
    _check_step_time(vals, where, given)
    return CostModel(**vals)
