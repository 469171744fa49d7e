"""``calibrate --from-vllm-bench``: fit a profile's engine terms to ``vllm bench serve`` results.

The benchmark's closed loop is replayed on the cost model (:mod:`.replay`); with vLLM V1's
batching (``prefill_in_step``) and no roofline ``max`` (``a0 = c1 = 0``) a step costs

    t_fix + s1·B + a1·S + p1·(prompt tokens it prefills) + p0·(requests it admits)

which is linear in the five terms, so every measured time is the dot product of the terms with
features the replay sums over the steps it spans:
- every file's ``duration`` spans all steps (minus the engine's idle time);
- with ``--save-detailed`` lists, each request's time to first token (its admission step) and
  its end-to-end latency (``ttft + sum(itls)``: from its admission to its last step), and the
  sums of the first and of the last half of its gaps (the halves of the last requests of a
  closed loop see the batch shrink, which separates ``t_fix`` from ``s1`` at one level). Single
  inter-token gaps are not fitted: a busy API server streams tokens in bursts, so one gap is
  not one step, while a sum of many is nearly exact.
The terms solve a bounded linear least squares on relative errors. The replay's schedule does
not depend on the costs when every request is ready at once (``request_rate inf``); at a finite
rate it does, so fit and replay alternate until the terms settle.

A request also spends ``latency_s`` outside the engine between its send and its admission (the
HTTP hop, tokenisation, the queue to the engine process, the client's turn-around): time that
overlaps the other requests' decoding, so the engine runs one sequence short until the next
request arrives. With per-request latencies it is fitted too, as the value that leaves the
smallest residual (a one-dimensional search around the linear fit: the replay's schedule moves
with it). Without it, a closed loop at one concurrency charges that gap to ``p0`` (per admitted
request, engine time), which stretches every level's duration by the same count of requests and
so over-predicts higher levels.

Deliberate simplifications: the server's own CPU work per request (HTTP, tokenisation) is engine
time (``p0``), exact when server and engine share the CPU and an upper bound when they overlap;
``p2`` (attention pairs) and ``pn`` are 0, which holds for the short prompts of a benchmark.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sortedrl.calibration.bench_file import BenchRun
from sortedrl.calibration.replay import ENGINE_TERMS, Replay, replay
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.cost import CostModel

ITERATIONS = 20
UNCERTAIN = 0.1  # a term is uncertain when one standard error moves the mean step by 10%
TERM_UNITS = {"t_fix": "s/step", "s1": "s/sequence/step", "a1": "s/KV token/step",
              "p1": "s/prompt token", "p0": "s/request"}
COLUMNS = (*ENGINE_TERMS, "latency_s")  # the fitted columns: the engine terms and the request latency


def engine_costs(terms: dict[str, float], base: CostModel) -> CostModel:
    """The fitted engine terms, with ``base``'s (the preset's) trainer and sync terms; every
    other engine term is 0 (a preset's roofline terms would count the step twice)."""
    return CostModel(**{**terms, "a0": 0.0, "c1": 0.0, "p2": 0.0, "prefill_in_step": True},
                     **trainer_terms(base))


def trainer_terms(costs: CostModel) -> dict:
    """The terms of the update, the weight sync and the moves around them (``train_*``,
    ``sync*``, ``offload_s``, ``onload_s``): what a benchmark of the engine does not measure."""
    return {f.name: getattr(costs, f.name) for f in dataclasses.fields(costs)
            if f.name.startswith(("train_", "sync")) or f.name in ("offload_s", "onload_s")}


def check_enough(runs: list[BenchRun]) -> None:
    if any(r.detailed for r in runs) or len(runs) >= len(ENGINE_TERMS):
        return
    raise ConfigError(
        f"{', '.join(r.path for r in runs)}: {len(runs)} benchmark file(s) without per-request latencies "
        f"(ttfts, itls) cannot fit {len(ENGINE_TERMS)} terms ({', '.join(ENGINE_TERMS)}): give at least "
        f"{len(ENGINE_TERMS)} files (e.g. several --max-concurrency levels) or save with --save-detailed")


def fit_bench(runs: list[BenchRun], cluster: Cluster, latency_s: float | None = None) -> dict:
    """Fit the engine terms to ``runs``; returns the fitted terms and the error per file.
    ``latency_s`` is a request's latency outside the engine: fitted with the terms when None
    (and when any file has per-request latencies; 0 otherwise), else held at the value given."""
    check_enough(runs)
    base = cluster.cost()
    if latency_s is None:
        latency_s = _fit_latency(runs, cluster) if any(r.detailed for r in runs) else 0.0
    terms, reps, (X, y, w, x) = _fit_at(runs, cluster, latency_s)
    costs = engine_costs(terms, base)
    err = _stderr(X, y, w, x)  # the latency's from the system linearised at its value
    return {"terms": {k: {"value": v, "stderr": s, "unit": TERM_UNITS[k]}
                      for (k, v), s in zip(terms.items(), err[:len(terms)], strict=True)},
            "latency_s": latency_s,
            "latency_stderr_s": err[-1],
            "unidentified": _unidentified(X * w[:, None]),
            "uncertain": _uncertain(reps, x, err),
            "levels": sorted({r.concurrency for r in runs}),
            "files": [_file_report(r, costs, latency_s, cluster.max_num_seqs) for r in runs],
            "costs": costs}


def _fit_latency(runs: list[BenchRun], cluster: Cluster) -> float:
    """The latency whose fit leaves the smallest weighted residual, between 0 and the shortest
    time to first token (a request's latency is part of it). Not a column of the linear solve:
    the replay's schedule moves with it, and alternating fit and replay on it did not settle."""
    from scipy.optimize import minimize_scalar

    top = min(float(r.ttfts.min()) for r in runs if r.detailed)

    def residual(latency: float) -> float:
        _, _, (X, y, w, x) = _fit_at(runs, cluster, latency)
        r = (X @ x - y) * w
        return float(r @ r)

    res = minimize_scalar(residual, bounds=(0.0, top), method="bounded", options={"xatol": top * 1e-7})
    return float(res.x) if residual(float(res.x)) < residual(0.0) else 0.0


def _fit_at(runs: list[BenchRun], cluster: Cluster, latency_s: float):
    """Fit and replay alternately until the terms settle (at once when the schedule does not
    depend on them). The returned system has the latency's column and value for its error."""
    base = cluster.cost()
    terms = {"t_fix": base.t_fix or 1e-3, "s1": base.s1, "a1": base.a1, "p1": base.p1, "p0": base.p0}
    for _ in range(ITERATIONS):
        reps = [replay(r, engine_costs(terms, base), latency_s, cluster.max_num_seqs) for r in runs]
        X, y, w = _design(runs, reps, latency_s)
        x = _solve(X[:, :-1], y - X[:, -1] * latency_s, w)
        new = dict(zip(ENGINE_TERMS, (float(v) for v in x), strict=True))
        settled = all(math.isclose(new[k], terms[k], rel_tol=1e-9, abs_tol=1e-15) for k in terms)
        terms = new
        if settled:
            break
    return terms, reps, (X, y, w, np.append(x, latency_s))


# -- the linear system ----------------------------------------------------------------------------


def _design(runs: list[BenchRun], reps: list[Replay], latency_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows: each file's duration, and each detailed request's ttft and end-to-end latency;
    weights make each a relative error, and give a file's duration the weight of its requests.
    The last column is the request latency: once in each request's row, never in a duration
    (the replay's idle time and batches carry it there)."""
    X, y, w = [], [], []
    for run, rep in zip(runs, reps, strict=True):
        rows, targets, measured = _request_rows(run, rep, latency_s)
        X.append(np.append(rep.features, 0.0)[None, :])
        y.append([run.duration_s - rep.idle_s])
        w.append([math.sqrt(max(1, len(targets))) / run.duration_s])
        if len(targets):
            X.append(rows)
            y.append(targets)
            w.append(1.0 / np.maximum(measured, 1e-9))  # relative to what was measured, not to the engine's share
    return np.vstack(X), np.concatenate(y), np.concatenate(w)


def _request_rows(run: BenchRun, rep: Replay, latency_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A request's time to first token is its latency, its wait for the running step to end
    (from the replay) and its admission step; its end-to-end time adds the steps to its last.
    Each half of its later tokens (the sum of its first and of its last ``itls``) is also a row:
    in a closed loop the batch shrinks while the last requests drain, so the halves see different
    batches, which separates the per-step from the per-sequence cost at one level. The halves are
    sums of some twenty gaps, which the server's bursts barely move (single gaps they do)."""
    if not run.detailed:
        return np.zeros((0, len(COLUMNS))), np.zeros(0), np.zeros(0)
    prefix = np.vstack([np.zeros(len(ENGINE_TERMS)), np.cumsum(rep.step_features, axis=0)])
    ones = np.ones((len(rep.admit_step), 1))
    first = np.hstack([rep.step_features[rep.admit_step], ones])
    whole = np.hstack([prefix[rep.end_step + 1] - prefix[rep.admit_step], ones])
    wait = rep.step_start_s[rep.admit_step] - rep.sent_s - latency_s  # for the running step, s
    e2e = run.ttfts + np.array([g.sum() for g in run.itls])
    halves, sums = _half_rows(run, rep, prefix)
    measured = np.concatenate([run.ttfts, e2e, sums])
    targets = measured - np.concatenate([wait, wait, np.zeros(len(sums))])
    return np.vstack([first, whole, halves]), targets, measured


def _half_rows(run: BenchRun, rep: Replay, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the two halves of each request's inter-token gaps (gap j follows step admit + j + 1)."""
    rows, sums = [], []
    for i, gaps in enumerate(run.itls):
        n = len(gaps)
        if n < 2:
            continue
        for a, b in ((0, n // 2), (n // 2, n)):
            lo, hi = rep.admit_step[i] + a + 1, rep.admit_step[i] + b + 1
            rows.append(np.append(prefix[hi] - prefix[lo], 0.0))
            sums.append(float(gaps[a:b].sum()))
    return np.reshape(rows, (-1, len(COLUMNS))), np.asarray(sums)


def _solve(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    from scipy.optimize import lsq_linear

    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)  # columns span 1 to 1e5: normalise
    r = lsq_linear((X / scale) * w[:, None], y * w, bounds=(0.0, np.inf), method="bvls")
    return r.x / scale


def _stderr(X: np.ndarray, y: np.ndarray, w: np.ndarray, x: np.ndarray) -> list[float]:
    A = X * w[:, None]
    resid = A @ x - y * w
    dof = max(1, len(y) - len(x))
    cov = np.linalg.pinv(A.T @ A) * (resid @ resid) / dof
    return [float(v) for v in np.sqrt(np.clip(np.diag(cov), 0.0, None))]


def _unidentified(A: np.ndarray) -> list[str]:
    """Terms the data cannot tell apart (they share a direction the rows never constrain)."""
    names = COLUMNS if A[:, -1].any() else ENGINE_TERMS  # a held latency is not a column
    A = A[:, :len(names)]
    scale = np.maximum(np.abs(A).max(axis=0), 1e-300)
    _, sv, vt = np.linalg.svd(A / scale, full_matrices=True)
    tol = max(A.shape) * np.finfo(float).eps * (sv[0] if len(sv) else 0.0) * 1e6
    null = vt[np.count_nonzero(sv > tol):]
    hit = np.abs(null).max(axis=0) > 0.1 if len(null) else np.zeros(A.shape[1], dtype=bool)
    return [name for name, h in zip(names, hit, strict=True) if h]


def _uncertain(reps: list[Replay], x: np.ndarray, err: list[float]) -> list[str]:
    """Terms whose standard error moves the mean step time by more than ``UNCERTAIN`` (e.g. the
    per-step and per-sequence terms from a single concurrency level, where the batch hardly
    varies)."""
    feats = sum(r.features for r in reps)
    steps = max(1.0, feats[0])
    mean_step = float(feats @ x[:-1]) / steps
    terms_err = err[:len(ENGINE_TERMS)]  # the last is the latency's
    return [k for k, f, e in zip(ENGINE_TERMS, feats / steps, terms_err, strict=True)
            if e * f > UNCERTAIN * mean_step]


def _file_report(run: BenchRun, costs: CostModel, latency_s: float, max_num_seqs: int) -> dict:
    rep = replay(run, costs, latency_s, max_num_seqs)
    out = {"path": run.path, "engine_version": run.engine_version, "concurrency": run.concurrency,
           "requests": len(run.input_lens), "detailed": run.detailed,
           "lengths_from_totals": run.lengths_from_totals, "duration_s": run.duration_s,
           "predicted_s": rep.duration_s,
           "error_pct": 100.0 * (rep.duration_s - run.duration_s) / run.duration_s}
    if run.detailed:
        e2e = run.ttfts + np.array([g.sum() for g in run.itls])
        out["latency_mape_pct"] = float(100.0 * np.mean(np.abs(rep.end_s - rep.sent_s - e2e) / e2e))
    return out


def predict_duration(run: BenchRun, costs: CostModel, max_num_seqs: int, latency_s: float = 0.0) -> float:
    """The benchmark's duration replayed on ``costs`` (what the acceptance test compares)."""
    return replay(run, costs, latency_s, max_num_seqs).duration_s
