"""``calibrate --from-vllm-bench``: fit a profile's engine terms to ``vllm bench serve`` results.

The benchmark's closed loop is replayed on the cost model (:mod:`.replay`); with vLLM V1's
batching (``prefill_in_step``) and no roofline ``max`` (``weight_read_s = compute_s_per_seq =
0``) a step costs

    step_fixed_s + step_s_per_seq·B + kv_read_s_per_token·S
    + prefill_s_per_token·(prompt tokens it prefills) + admit_s_per_request·(requests it admits)

of engine time, and each request costs ``host_s`` of host work that runs ahead of the engine
(the client, the API server and the hand-over to the engine, sharing its CPU: see
:mod:`.replay`). The model is linear in the five terms and ``host_s``, so every measured time is
the dot product of them with features the replay sums over the step spans it covers, plus the
idle time in them:
- every file's ``duration`` spans all steps;
- with ``--save-detailed`` lists, each request's time to first token (from its send to its
  admission step) and its end-to-end latency (``ttft + sum(itls)``: to its last step), and the
  sums of the first and of the last half of its gaps (the halves of the last requests of a
  closed loop see the batch shrink, which separates ``step_fixed_s`` from ``step_s_per_seq`` at
  one level; the gaps of every request also hold the other requests' host work, which stretches
  the steps it runs in). Single inter-token gaps are not fitted: a busy API server streams tokens in bursts,
  so one gap is not one step, while a sum of many is nearly exact.
A request whose tokens came in merged chunks (fewer ``itls`` than ``output_lens - 1``: vLLM
coalesces the outputs its API server has not taken yet) gives only its end-to-end row: its last
chunk still ends with its last step, but neither its first chunk (which may hold the tokens of
several steps) nor its gaps say which steps they end with.
The six solve a bounded linear least squares on relative errors. The replay's schedule does
not depend on the costs when every request is ready at once (``request_rate inf``), ``host_s``
> 0 and the schedule is serial; otherwise fit and replay alternate until they settle (or, when
they cycle, the round with the smallest residual is kept: :func:`_fit_at`).

Files without per-request latencies hold ``host_s`` at 0: a closed loop at one concurrency then
charges the host work to ``admit_s_per_request`` (engine time per admitted request, the same
total).

Deliberate simplifications: ``prefill_s_per_pair`` (attention pairs) and ``admit_step_s`` are 0,
which holds for the short prompts of a benchmark; the host work is the same for every request
(its dependence on the prompt's length is within the noise of the recorded files).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sortedrl.calibration.bench_concurrency import engine_steps, most_running
from sortedrl.calibration.bench_file import BenchRun
from sortedrl.calibration.replay import COLUMNS, ENGINE_TERMS, Replay, replay
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.cost import CostModel

ITERATIONS = 100  # a finite rate or the overlapped schedule: fit and replay alternate (a serial closed loop settles at once)
UNCERTAIN = 0.1  # a term is uncertain when one standard error moves the mean step by 10%
TERM_UNITS = {"step_fixed_s": "s/step", "step_s_per_seq": "s/sequence/step", "kv_read_s_per_token": "s/KV token/step",
              "prefill_s_per_token": "s/prompt token", "admit_s_per_request": "s/request"}


def engine_costs(terms: dict[str, float], base: CostModel) -> CostModel:
    """The fitted engine terms, with ``base``'s (the preset's) trainer and sync terms; every
    other engine term is 0 (a preset's roofline terms would count the step twice)."""
    return CostModel(**{**terms, "weight_read_s": 0.0, "compute_s_per_seq": 0.0, "prefill_s_per_pair": 0.0,
                        "prefill_in_step": True},
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


def fit_bench(runs: list[BenchRun], cluster: Cluster, host_s: float | None = None,
              schedule: str = "serial") -> dict:
    """Fit the engine terms to ``runs``; returns the fitted terms and the error per file.
    ``host_s`` is a request's host work (see :mod:`.replay`): fitted with the terms when None
    and any file has per-request latencies (0 when none has), else held at the value given.
    ``schedule``: the replay's host schedule, ``serial`` or ``overlapped`` (:mod:`.replay`; in the
    overlapped one ``host_s`` is searched, :mod:`.host_schedule`)."""
    check_enough(runs)
    if host_s is None and not any(r.detailed for r in runs):
        host_s = 0.0
    if host_s is None and schedule == "overlapped":  # host_s is not a column: a 1-D search
        from sortedrl.calibration.host_schedule import overlapped_host

        fit = fit_bench(runs, cluster, overlapped_host(runs, cluster), schedule)
        return {**fit, "host_stderr_s": None, "host_searched": True}
    terms, host, reps, (X, y, w, x) = _fit_at(runs, cluster, host_s, schedule)
    costs = engine_costs(terms, cluster.cost())
    exact = len(y) <= X.shape[1] - (host_s is not None)  # no row to spare: a residual of 0, no error
    if exact:
        err = [0.0] * X.shape[1]  # (nothing flagged from it; the profile writes null)
    elif host_s is None:
        err = fit_stderr(X, y, w, x)
    else:
        err = [*fit_stderr(X[:, :-1], y - X[:, -1] * host_s, w, x[:-1]), 0.0]
    unidentified = _unidentified(X * w[:, None], held=host_s is not None)
    # a term not separable from others has no standard error of its own: the pseudo-inverse
    # drops the direction the rows leave free, which gave 2e-12 (and 0) for such terms
    err = [0.0 if name in unidentified else e for name, e in zip(COLUMNS, err, strict=True)]
    return {"terms": {k: {"value": v, "stderr": None if exact or k in unidentified else s, "unit": TERM_UNITS[k]}
                      for (k, v), s in zip(terms.items(), err[:len(terms)], strict=True)},
            "host_s": host,
            "host_stderr_s": None if exact or host_s is not None or "host_s" in unidentified else err[-1],
            **({"exact": True} if exact else {}),
            "unidentified": unidentified,
            "uncertain": _uncertain(reps, x, err),
            "full_batch": _full_batch(reps, x, err, cluster.max_num_seqs),
            "levels": sorted({r.concurrency for r in runs}),
            "schedule": schedule,
            "files": [_file_report(r, costs, host, cluster.max_num_seqs, schedule) for r in runs],
            "costs": costs}


def residual(X: np.ndarray, y: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """The fit's weighted root-mean-square relative error over its rows (what it minimises)."""
    return float(np.sqrt(np.mean(((X @ x - y) * w) ** 2)))


def _fit_at(runs: list[BenchRun], cluster: Cluster, held: float | None, schedule: str = "serial"):
    """Fit and replay alternately until the terms settle (at once when the schedule does not
    depend on them). ``held``: the host work per request when not fitted. Returns the terms,
    the host work, the replays and the system with its solution: the last round's when they
    settle, else (``ITERATIONS`` rounds, e.g. the overlapped schedule cycling between a few
    schedules) the round whose solution left the smallest residual."""
    base = cluster.cost()
    terms = {"step_fixed_s": base.step_fixed_s or 1e-3, "step_s_per_seq": base.step_s_per_seq,
             "kv_read_s_per_token": base.kv_read_s_per_token, "prefill_s_per_token": base.prefill_s_per_token,
             "admit_s_per_request": base.admit_s_per_request}
    host = 0.0 if held is None else held
    best = None
    for _ in range(ITERATIONS):
        reps = [replay(r, engine_costs(terms, base), host, cluster.max_num_seqs, schedule) for r in runs]
        X, y, w = _design(runs, reps)
        if held is None:
            x = _solve(X, y, w)
        else:
            x = np.append(_solve(X[:, :-1], y - X[:, -1] * held, w), held)
        new = dict(zip(ENGINE_TERMS, (float(v) for v in x), strict=False))
        settled = all(math.isclose(new[k], terms[k], rel_tol=1e-9, abs_tol=1e-15) for k in terms) \
            and math.isclose(float(x[-1]), host, rel_tol=1e-9, abs_tol=1e-15)
        terms, host = new, float(x[-1])
        if settled:
            return terms, host, reps, (X, y, w, x)
        score = residual(X, y, w, x)
        if best is None or score < best[0]:
            best = (score, terms, host, reps, (X, y, w, x))
    return best[1:]


# -- the linear system ----------------------------------------------------------------------------


def _design(runs: list[BenchRun], reps: list[Replay]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows: each file's duration, and each detailed request's ttft, end-to-end latency and
    halves of its gaps; the columns are the engine terms' features and the host work (in
    requests' worth) of the spans a row covers, its target the measured time less the idle
    time in them. Weights make each a relative error, and give a file's duration the weight
    of its requests."""
    X, y, w = [], [], []
    for run, rep in zip(runs, reps, strict=True):
        rows, targets, measured = _request_rows(run, rep)
        X.append(rep.features[None, :])
        y.append([run.duration_s - rep.idle_s])
        w.append([math.sqrt(max(1, len(targets))) / run.duration_s])
        if len(targets):
            X.append(rows)
            y.append(targets)
            w.append(1.0 / np.maximum(measured, 1e-9))  # relative to what was measured
    return np.vstack(X), np.concatenate(y), np.concatenate(w)


def _request_rows(run: BenchRun, rep: Replay) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A request's time to first token covers the spans from its send to its admission step
    (the part of the span it was sent in, ``lead_s``, is taken from the replay); its end-to-end
    time the spans to its last step. Each half of its later tokens (the sum of its first and of
    its last ``itls``) is also a row: in a closed loop the batch shrinks while the last requests
    drain, so the halves see different batches, which separates the per-step from the
    per-sequence cost at one level. The halves are sums of some twenty gaps, which the server's
    bursts barely move (single gaps they do)."""
    if not run.detailed:
        return np.zeros((0, len(COLUMNS))), np.zeros(0), np.zeros(0)
    prefix = np.vstack([np.zeros(len(COLUMNS)), np.cumsum(rep.step_features, axis=0)])
    idle = np.concatenate([[0.0], np.cumsum(rep.step_idle_s)])
    k0 = rep.first_span
    e2e = run.ttfts + np.array([g.sum() for g in run.itls])
    whole = run.merged_tokens == 0  # the others' first chunk and gaps do not say their steps
    rows = [(prefix[rep.admit_step + 1] - prefix[k0])[whole], prefix[rep.end_step + 1] - prefix[k0]]
    targets = [(run.ttfts - rep.lead_s - (idle[rep.admit_step + 1] - idle[k0]))[whole],
               e2e - rep.lead_s - (idle[rep.end_step + 1] - idle[k0])]
    halves, sums, lo, hi = _half_rows(run, rep, prefix, whole)
    return (np.vstack([*rows, halves]), np.concatenate([*targets, sums - (idle[hi] - idle[lo])]),
            np.concatenate([run.ttfts[whole], e2e, sums]))


def _half_rows(run: BenchRun, rep: Replay, prefix: np.ndarray, whole: np.ndarray):
    """Rows of the two halves of the inter-token gaps of each request that streamed one token
    a chunk (``whole``; gap j ends with step admit + j + 1), their measured sums, and the spans
    [lo, hi) each covers."""
    rows, sums, los, his = [], [], [], []
    for i, gaps in enumerate(run.itls):
        n = len(gaps)
        if n < 2 or not whole[i]:
            continue
        for a, b in ((0, n // 2), (n // 2, n)):
            lo, hi = rep.admit_step[i] + a + 1, rep.admit_step[i] + b + 1
            rows.append(prefix[hi] - prefix[lo])
            sums.append(float(gaps[a:b].sum()))
            los.append(lo)
            his.append(hi)
    return (np.reshape(rows, (-1, len(COLUMNS))), np.asarray(sums),
            np.asarray(los, dtype=np.int64), np.asarray(his, dtype=np.int64))


def _solve(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    from scipy.optimize import lsq_linear

    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)  # columns span 1 to 1e5: normalise
    r = lsq_linear((X / scale) * w[:, None], y * w, bounds=(0.0, np.inf), method="bvls")
    return r.x / scale


def fit_stderr(X: np.ndarray, y: np.ndarray, w: np.ndarray, x: np.ndarray) -> list[float]:
    """The standard error of each fitted term ``x`` of the weighted least squares of ``y`` on
    ``X`` (rows weighed by ``w``): the square root of the diagonal of the weighted residual
    variance (dof = rows - terms, at least 1) times the pseudo-inverse of the weighted normal
    matrix. The bounds are not in it: a term at its bound 0 gets the error of the unbounded fit.
    The metrics fit uses it too (:func:`~sortedrl.calibration.metrics_fit.term_errors`)."""
    A = X * w[:, None]
    resid = A @ x - y * w
    dof = max(1, len(y) - len(x))
    cov = np.linalg.pinv(A.T @ A) * (resid @ resid) / dof
    return [float(v) for v in np.sqrt(np.clip(np.diag(cov), 0.0, None))]


def _unidentified(A: np.ndarray, held: bool) -> list[str]:
    """Terms the data cannot tell apart (they share a direction the rows never constrain)."""
    names = ENGINE_TERMS if held else COLUMNS  # a held host work is not a column
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
    feats = sum(r.features for r in reps)[:len(ENGINE_TERMS)]
    steps = max(1.0, feats[0])
    mean_step = float(feats @ x[:len(ENGINE_TERMS)]) / steps
    terms_err = err[:len(ENGINE_TERMS)]  # the last is the host work's
    return [k for k, f, e in zip(ENGINE_TERMS, feats / steps, terms_err, strict=True)
            if e * f > UNCERTAIN * mean_step]


def _full_batch(reps: list[Replay], x: np.ndarray, err: list[float], batch: int) -> dict:
    """How well the fit pins a decode step at the engine's full batch (``batch`` sequences, each
    holding the fitted steps' mean KV tokens): files from low concurrency levels hardly vary the
    batch, so a per-sequence term they leave loose is harmless where they were measured and large
    there (on the recorded files, c2 alone: ``step_s_per_seq`` 0.119 +- 0.082 ms, and it
    over-predicted c16 by 19%). ``uncertain``: each term whose standard error moves that step by
    over ``UNCERTAIN``, with by how much (%)."""
    feats = sum(r.features for r in reps)[:len(ENGINE_TERMS)]
    kv_per_seq = float(feats[2] / feats[1]) if feats[1] > 0 else 0.0
    full = np.zeros(len(ENGINE_TERMS))
    full[:3] = (1.0, batch, batch * kv_per_seq)  # a decode step: no prefill, no admission
    step = float(full @ x[:len(ENGINE_TERMS)])
    moved = {k: float(100.0 * e * f / step) for k, f, e in zip(ENGINE_TERMS, full, err[:len(ENGINE_TERMS)], strict=True)
             if step > 0 and e * f > UNCERTAIN * step}
    return {"batch": batch, "kv_tokens_per_sequence": kv_per_seq, "step_s": step, "uncertain": moved}


def _file_report(run: BenchRun, costs: CostModel, host_s: float, max_num_seqs: int, schedule: str) -> dict:
    rep = replay(run, costs, host_s, max_num_seqs, schedule)
    out = {"path": run.path, "engine": run.engine, "engine_version": run.engine_version,
           **({"model_id": run.model} if run.model is not None else {}), "concurrency": run.concurrency,
           "requests": len(run.input_lens), "detailed": run.detailed,
           "lengths_from_totals": run.lengths_from_totals, "duration_s": run.duration_s,
           "predicted_s": rep.duration_s,
           "error_pct": 100.0 * (rep.duration_s - run.duration_s) / run.duration_s}
    if run.concurrency_from_sends:  # (max_concurrency null, but the sends kept fewer in flight)
        out["concurrency_from_sends"] = True
    if run.detailed:
        e2e = run.ttfts + np.array([g.sum() for g in run.itls])
        out["latency_mape_pct"] = float(100.0 * np.mean(np.abs(rep.end_s - rep.sent_s - e2e) / e2e))
        merged = run.merged_tokens
        # requests with tokens in merged chunks: only their end-to-end time is fitted
        out["merged_requests"], out["merged_tokens"] = int((merged > 0).sum()), int(merged.sum())
        # the schedule check: the replay's step count against the one read off the tokens
        out["steps_replayed"], out["steps_measured"] = rep.steps, engine_steps(run)
        # the server's batch, read off the tokens: below the concurrency, its max_num_seqs was
        out["running_most"] = most_running(run.sends, run.ttfts, run.itls)
    return out


def predict_duration(run: BenchRun, costs: CostModel, max_num_seqs: int, host_s: float = 0.0,
                     schedule: str = "serial") -> float:
    """The benchmark's duration replayed on ``costs`` (what the acceptance test compares)."""
    return replay(run, costs, host_s, max_num_seqs, schedule).duration_s
