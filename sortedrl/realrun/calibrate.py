"""``sortedrl calibrate``: measure the real engine and trainer, fit the cost model, robustly.

Measurements, each repeated ``repeats`` times:
- decode steps: B requests of a fixed prompt length with ``ignore_eos``, so that every step after
  the first decodes exactly B sequences holding a known number of KV tokens (a grid of batch
  sizes x contexts);
- prefills: the first step of a batch of new requests (a grid of prompt lengths x counts);
- updates, weight syncs and the runner's own host overhead (per engine step, per admitted
  request, per policy event) from short ``sync`` and ``sortedrl`` runs of the real runner on the
  task to be run (``task``, ``max_tokens``, ``prompts``, ``group_size``), so the logs,
  checkpoints and bookkeeping it adds, and updates as long as the run's, are in the profile
  (with whichever form of the update cost, padded, per sequence or the trainer's micro-batches,
  fits them best);
- updates of chosen shapes on the trainer alone, which tell those forms apart
  (:mod:`sortedrl.realrun.update_shapes`);
- with ``ray_engines``, the Ray run's own overheads, and how much engine actors and the trainer
  actor slow each other on this host's cores (:mod:`sortedrl.realrun.contention`).
Decode and prefill terms are fitted together on every engine step measured, the grid's and the
runner's own (whose batches change shape every step, which costs vLLM more than a steady grid
batch: the simulator must predict those). The fit is in :mod:`sortedrl.sim.profile`.

A shared machine is noisy: other jobs steal the CPU for a while, and a calibration that takes
their slow steps at face value was off by up to 32%. So every statistic is robust: a grid point
is the median of its repeats; runner steps whose residual is far outside the fit's own spread
(``OUTLIER_MADS`` robust standard deviations) are dropped and the fit redone; host overheads are
medians over runs; updates are fitted with a soft-L1 loss. The profile's ``fit.noise`` reports
the noise seen (spread of repeated grid points, robust spread of the residuals, outliers
dropped) and ``fit.noise.repeat_spread``: the fit redone on each repeat alone, and how far apart
those fits predict the same steps. :func:`agreement` compares two profiles the same way.
"""

from __future__ import annotations

import json
import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sortedrl.realrun.contention import measure_contention
from sortedrl.realrun.model import check_model_dir
from sortedrl.realrun.update_shapes import measure_updates, update_shapes
from sortedrl.sim.profile import FORMAT, fit_step_table

BATCHES = (1, 2, 4, 8, 16, 32)
CONTEXTS = (16, 64, 160)
PREFILL_LENS = (8, 32, 96)
PREFILL_COUNTS = (1, 4, 16)
DECODE_STEPS = 12
OUTLIER_MADS = 4.0  # runner steps further than this many robust sds from the fit are dropped
MIN_REL_SCALE = 0.02  # ... but never closer than 4 x 2% (a quiet machine's MAD can be tiny)


def calibrate(model_dir: str, max_num_seqs: int = 32, repeats: int = 3, seed: int = 0,
              progress: Callable[[int, str], None] | None = None, task: str = "sort",
              max_tokens: int = 64, prompts: int = 8, group_size: int = 4, ray_engines: int = 0,
              warm_tokens: int = 0) -> dict:
    import torch
    import vllm

    model = check_model_dir(model_dir)
    tick = progress or (lambda n, note="": None)
    contexts = grid_contexts(max_tokens)
    tick(0, "starting the vLLM engine for the step grid")
    grid, kv_tokens = _measure_grid(str(model), max_num_seqs, repeats, seed, contexts, tick, warm_tokens)
    run = dict(model=str(model), steps=2, prompts=prompts, group_size=group_size, max_tokens=max_tokens,
               task=task, max_num_seqs=max_num_seqs, seed=seed, warm_tokens=warm_tokens)
    runner = _measure_runner(run, repeats, tick)
    bare = apart(measure_updates, str(model), update_shapes(prompts * group_size, max_tokens), repeats, seed)
    tick(1, "updates of chosen shapes")
    on_ray = _measure_ray(run, ray_engines) if ray_engines else {}
    shared = _measure_shared_host(str(model), ray_engines, run, runner, repeats) if ray_engines else {}
    tick(1, "engines beside the trainer" if ray_engines else "engines beside the trainer: skipped, no --ray-engines")
    grid_rows = [(*key[:5], float(np.median(ts))) for key, ts in grid.items()]
    d, kept, dropped = robust_step_fit(grid_rows, runner["steps"], max_num_seqs)
    tr = fit_train(runner["train"], bare)
    host = {k: float(np.median(v)) if v else 0.0 for k, v in runner["host"].items()}
    sync_s = float(np.median(runner["sync"])) if runner["sync"] else 0.0
    costs = {"step_fixed_s": 0.0, "step_s_per_seq": 0.0, "weight_read_s": 0.0, "compute_s_per_seq": 0.0,
             **{k: d[k] for k in ("kv_read_s_per_token", "prefill_s_per_token", "prefill_s_per_pair",
                                  "admit_step_s")},
             **{k: v["value"] for k, v in tr["terms"].items()},
             "sync_s": sync_s, "prefill_in_step": True,
             "admit_s_per_request": host["admit"] + d["admit_s_per_request"],  # the runner's + the engine's
             "policy_event_s": host["event"], **tr["costs"],
             "step_table": [x + host["step"] for x in d["table"]],  # the runner's work per step
             **{k: shared[k] for k in ("engine_contention", "train_contention", "engine_contention_one",
                                       "train_contention_one") if k in shared}}
    noise = {"grid_rel_mad": _median_rel_mad(grid.values()), "step_rel_scale": d["rel_scale"],
             "runner_steps_dropped": dropped, "runner_steps_kept": kept,
             "train_rel_scale": tr["rel_scale"],
             "repeat_spread": repeat_spread(grid, runner["steps"], max_num_seqs, repeats)}
    profile = {
        "sortedrl_profile": FORMAT,
        "device": f"{platform.machine()} {platform.processor() or 'cpu'} ({torch.get_num_threads()} torch threads)",
        "model": str(model),
        "engine": "vllm-cpu" if not torch.cuda.is_available() else "vllm",
        "engine_version": vllm.__version__,
        "torch_version": torch.__version__,
        "engine_config": {"max_num_seqs": max_num_seqs, "kv_budget_tokens": kv_tokens or 10**7},
        "costs": costs,
        "fit": {"steps": d, "train": {**tr, "updates": [{"lengths": lens, "seconds": t}
                                                       for lens, t in runner["train"]],
                                      "bare": [{"lengths": lens, "seconds": t} for lens, t in bare]},
                "noise": noise, "shared_host": shared,
                "sync": {"median": sync_s, "samples": len(runner["sync"]),
                         "spread": float(np.ptp(runner["sync"])) if runner["sync"] else 0.0},
                "runner": {"host_s_per_step": host["step"], "admit_s_per_request": host["admit"],
                           "event_s_per_event": host["event"], "runs": len(runner["host"]["step"]),
                           "task": task, "max_tokens": max_tokens, "prompts": prompts,
                           "group_size": group_size, "warm_tokens": warm_tokens, "seed": seed, **on_ray}},
        "grid": {"batches": list(BATCHES), "contexts": list(contexts), "decode_steps": DECODE_STEPS,
                 "prefill_lens": list(PREFILL_LENS), "prefill_counts": list(PREFILL_COUNTS),
                 "repeats": repeats},
    }
    profile["fit"]["runner"]["sync_ratios"] = sync_ratios(profile, runner["sync_runs"])
    return profile


def sync_ratios(profile: dict, runs: list) -> dict:
    """Measured over predicted for the calibration's ``sync`` runs (the median over repeats):
    what ``calibrate --rescale`` divides its own run's ratios by, so that only the host's
    change of speed is left (:mod:`sortedrl.realrun.rescale`)."""
    from sortedrl.realrun.rescale import median_ratios, speed_ratios

    med = median_ratios([speed_ratios(profile, *run) for run in runs])
    return {k: med[k] for k in ("steps", "updates", "syncs")}


def grid_contexts(max_tokens: int) -> tuple[int, ...]:
    """Contexts of the decode grid: short ones, and one near a long response's, so the KV term is
    measured where long-tailed runs spend their time."""
    return tuple(sorted({*CONTEXTS, min(640, max(CONTEXTS[-1], max_tokens))}))


# -- measuring -------------------------------------------------------------------------------------


def _measure_grid(model: str, max_num_seqs: int, repeats: int, seed: int, contexts, tick,
                  warm_tokens: int = 0):
    """Engine steps of the grid: key (batch, new, new tokens, new pairs, kv, which) -> seconds of
    each repeat. Pass 0 warms up: the CPU kernels are built the first time a shape is seen, which
    a run pays once per shape; it is not measured."""
    from sortedrl.realrun.engine import VllmEngine

    rng = random.Random(seed)
    eng = VllmEngine(model, max_num_seqs=max_num_seqs, max_model_len=max(max(contexts) + DECODE_STEPS + 8, 128),
                     seed=seed, warm_tokens=warm_tokens)
    vocab = eng.engine.model_config.get_vocab_size()
    clock = time.perf_counter
    grid: dict[tuple, list[float]] = {}

    def batch_run(count: int, length: int, steps: int) -> list[float]:
        for k in range(count):
            prompt = [rng.randrange(4, vocab) for _ in range(length)]
            eng.add(k, f"c{clock()}-{k}", prompt, 0, steps, 1.0, rng.randrange(2**31), ignore_eos=True)
        times = []
        while eng.has_unfinished():
            t0 = clock()
            eng.step(clock)
            times.append(clock() - t0)
        return times

    def keep(key: tuple, t: float, rep: int) -> None:
        if rep > 0:
            grid.setdefault(key, []).append(t)

    for rep in range(repeats + 1):
        for b in (x for x in BATCHES if x <= max_num_seqs):
            for ctx in contexts:
                times = batch_run(b, ctx, DECODE_STEPS)
                # step 0 prefills (and samples token 1); step j decodes prompt + j tokens each
                keep((b, b, b * ctx, b * ctx * (ctx + 1) // 2, b * ctx, 0), times[0], rep)
                for j, t in enumerate(times[1:DECODE_STEPS], start=1):
                    keep((b, 0, 0, 0, b * (ctx + j), j), t, rep)
                if rep:
                    tick(1, f"decode B={b} ctx={ctx}")
        for n in (x for x in PREFILL_COUNTS if x <= max_num_seqs):
            for length in PREFILL_LENS:
                keep((n, n, n * length, n * length * (length + 1) // 2, n * length, 0),
                     batch_run(n, length, 1)[0], rep)
                if rep:
                    tick(1, f"prefill {n} x {length}")
    kv = int(eng.engine.vllm_config.cache_config.num_gpu_blocks or 0) * int(
        eng.engine.vllm_config.cache_config.block_size)
    eng.close()
    return grid, kv


def runner_runs(prompts: int, group_size: int) -> list[tuple[str, list[str]]]:
    """The runner's runs: sync, and sortedrl in both modes harvesting half a step at a time."""
    half = [f"update_batch={max(1, prompts * group_size // 2)}"]
    return [("sync", []), ("sortedrl", half), ("sortedrl", [*half, "mode=partial"])]


def _measure_runner(run: dict, repeats: int, tick) -> dict:
    """Short real runs, the same ones each repeat (same seed: the same work): their engine steps
    with their shapes, their updates on padded tokens, their syncs, and host overheads per run."""
    out = {"steps": [], "train": [], "sync": [], "host": {"step": [], "admit": [], "event": []},
           "sync_runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for k, (policy, sets) in enumerate(runner_runs(run["prompts"], run["group_size"])):
                run_dir = Path(tmp) / f"run-{rep}-{k}"
                st = run_apart(dict(policy=policy, sets=sets, out=str(run_dir), **run))
                updates, syncs = sync_run_rows(run_dir, run["group_size"])
                out["train"] += updates
                out["sync"] += syncs
                if policy == "sync":  # what `calibrate --rescale` repeats later
                    out["sync_runs"].append((st["step_log"], updates, syncs))
                out["host"]["step"].append(st["host_s"] / max(1, st["steps"]))
                out["host"]["admit"].append(st["admit_s"] / max(1, st["admitted"]))
                out["host"]["event"].append(st["event_s"] / max(1, st["events"]))
                out["steps"] += [(*row, rep) for row in st["step_log"]]
                tick(1, f"runner: {' '.join([policy, *sets])}")
    return out


def sync_run_rows(run_dir: Path, group_size: int) -> tuple[list, list[float]]:
    """A runner run's updates ``(sequence lengths, seconds)`` and weight syncs (seconds)."""
    from sortedrl.timeline import Timeline

    tl = Timeline.read_jsonl(run_dir / "timeline.jsonl")
    seq = _sequence_lengths(run_dir / "trace.partial.jsonl", group_size)
    updates = [([seq[i] for i in samples], t1 - t0) for t0, t1, _v, samples, _ in tl.rows("train")]
    return updates, [t1 - t0 for t0, t1, _v in tl.rows("sync")]


def _measure_ray(run: dict, engines: int) -> dict:
    """What a run on Ray adds (:mod:`sortedrl.realrun.ray_backend`): per round, the driver's wall
    time beyond the slowest engine's own step (calls, results over Ray), and the weight push
    through the object store. From one disaggregated ``async`` run; ``validate`` adds them to
    the simulation of a run that was on Ray."""
    from sortedrl.timeline import Timeline

    with tempfile.TemporaryDirectory() as tmp:
        st = run_apart(dict(policy="async", sets=["eta=1"], out=tmp + "/run", engines=engines,
                            placement="disaggregated", **run))
        syncs = [t1 - t0 for t0, t1, _v in Timeline.read_jsonl(Path(tmp) / "run/timeline.jsonl").rows("sync")]
    rounds = max(1, st["steps"])
    return {"ray_round_s": max(0.0, (st["round_s"] - st["engine_s"]) / rounds), "ray_rounds": rounds,
            "ray_sync_s": float(np.median(syncs)) if syncs else 0.0, "ray_engines": engines}


def _measure_shared_host(model: str, engines: int, run: dict, runner: dict, repeats: int) -> dict:
    """The contention factors (:mod:`sortedrl.realrun.contention`), with updates of the runner's
    median update's lengths."""
    median = sorted(runner["train"], key=lambda u: u[1])[len(runner["train"]) // 2][0]
    return apart(measure_contention, model, engines, run["max_num_seqs"], median, repeats,
                 seed=run["seed"], warm_tokens=run["warm_tokens"])


def run_apart(config: dict) -> dict:
    """One real run in a process of its own; returns its calibration statistics."""
    return apart(_run_for_stats, config)


def apart(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a process of its own. A process that ran several real runs grew
    by about 1 GB per run (vLLM and torch keep what they freed), past 10 GB."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _run_for_stats(config: dict) -> dict:
    from sortedrl.realrun.run import RunConfig, run_real

    stats: dict = {}
    run_real(RunConfig(**config), stats=stats)
    return stats


def _sequence_lengths(rows_path: Path, n: int) -> dict[int, int]:
    """Prompt + response length of every trained sample of a run, by sample index."""
    out = {}
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out[int(r["prompt_id"][1:]) * n + int(r["sample"])] = r["prompt_len"] + r["response_len"]
    return out


# -- robust fitting --------------------------------------------------------------------------------


def predict_steps(d: dict, rows) -> np.ndarray:
    """Seconds the fitted step model gives each (batch, new, new tokens, new pairs, kv) row."""
    b, n, T, P, S = (np.asarray([r[k] for r in rows], dtype=float) for k in range(5))
    table = np.asarray(d["table"])
    idx = np.clip(b.astype(int), 1, len(table)) - 1
    return (table[idx] + d["kv_read_s_per_token"] * S + d["prefill_s_per_token"] * T
            + d["prefill_s_per_pair"] * P + d["admit_step_s"] * (n > 0) + d["admit_s_per_request"] * n)


def robust_step_fit(grid_rows: list, runner_rows: list, max_batch: int) -> tuple[dict, int, int]:
    """Fit grid medians and runner steps; drop runner steps far outside the fit's robust spread
    (a step another job slowed down) and fit again. Returns (fit, steps kept, steps dropped)."""
    rows = [r[:6] for r in grid_rows] + [r[:6] for r in runner_rows]
    d = fit_step_table(*zip(*rows, strict=True), max_batch=max_batch)
    t = np.asarray([r[5] for r in rows])
    rel = (predict_steps(d, rows) - t) / t
    scale = max(1.4826 * float(np.median(np.abs(rel - np.median(rel)))), MIN_REL_SCALE)
    runner = np.arange(len(rows)) >= len(grid_rows)
    keep = ~runner | (np.abs(rel) <= OUTLIER_MADS * scale)
    if not keep.all():
        rows = [r for r, k in zip(rows, keep, strict=True) if k]
        d = fit_step_table(*zip(*rows, strict=True), max_batch=max_batch)
        t = np.asarray([r[5] for r in rows])
        rel = (predict_steps(d, rows) - t) / t
    d["rel_scale"] = 1.4826 * float(np.median(np.abs(rel - np.median(rel))))
    return d, int(keep[runner].sum()), int((~keep[runner]).sum())


def fit_train(updates: list[tuple[list[int], float]], bare: list[tuple[list[int], float]] = ()) -> dict:
    """The update cost from ``(sequence lengths, seconds)`` of each runner update and of each
    ``bare`` update (:mod:`sortedrl.realrun.update_shapes`: shapes chosen to tell the forms
    apart, timed on the trainer alone, without the runner's log and checkpoint), in three forms
    of the simulator: tokens and attention pairs of the batch padded to its longest sequence
    (``train_padded``), of each sequence alone, or of the trainer's micro-batches
    (``train_micro_pairs``); the profile keeps the one whose residuals spread least. With bare
    updates a fourth term, ``runner_update_s``, is what a runner update adds to a bare one; the
    profile's ``train_fix`` includes it (the simulator predicts runner updates)."""
    from sortedrl.realrun.trainer import MAX_PAIRS
    from sortedrl.sim.cost import CostModel

    forms = {"padded": {"train_padded": True}, "per_sequence": {"train_padded": False},
             "micro_batches": {"train_padded": True, "train_micro_pairs": float(MAX_PAIRS)}}
    fits = {}
    for name, knobs in forms.items():
        cm = CostModel(0, 0, 0, 0, 0, 0, 0, 0, 0, **knobs)
        rows = [(cm.train_tokens(lens), cm.train_pairs(lens), t, runner)
                for runner, group in ((1, updates), (0, bare)) for lens, t in group]
        fits[name] = fit_train_pairs(rows, runner_term=bool(bare))
    best = min(fits, key=lambda k: fits[k]["rel_scale"])
    return {**fits[best], "form": best, "costs": forms[best], "bare_updates": len(bare),
            "rel_scale_by_form": {k: f["rel_scale"] for k, f in fits.items()}}


def fit_train_pairs(rows: list[tuple], runner_term: bool = False) -> dict:
    """t = train_fix + train_per_token · tokens + train_per_pair · attention pairs (+
    runner_update_s for a runner's update: rows ``(tokens, pairs, seconds, runner)``), with a
    soft-L1 loss on relative residuals (an update slowed by another job weighs little)."""
    from scipy.optimize import least_squares

    X = np.asarray([(1.0, r[0], r[1], *((r[3],) if runner_term else ())) for r in rows], dtype=float)
    t = np.asarray([r[2] for r in rows], dtype=float)
    scale = np.maximum(X.max(axis=0), 1.0)
    fit = least_squares(lambda p: (X @ (p / scale) - t) / t, np.full(X.shape[1], t.min() / 3),
                        bounds=(0.0, np.inf), loss="soft_l1", f_scale=0.05)
    x = fit.x / scale
    rel = (X @ x - t) / t
    terms = {"train_fix": x[0] + (x[3] if runner_term else 0.0), "train_per_token": x[1],
             "train_per_pair": x[2]}
    return {"terms": {k: {"value": float(v)} for k, v in terms.items()},
            "runner_update_s": float(x[3]) if runner_term else None,
            "mape": float(np.mean(np.abs(rel))), "measurements": len(t),
            "rel_scale": 1.4826 * float(np.median(np.abs(rel - np.median(rel))))}


def _median_rel_mad(groups) -> float:
    """Median over repeated measurements of their relative median absolute deviation."""
    out = [float(np.median(np.abs(np.asarray(v) - np.median(v))) / np.median(v)) for v in groups if len(v) > 1]
    return float(np.median(out)) if out else 0.0


def repeat_spread(grid: dict, runner_rows: list, max_batch: int, repeats: int) -> float:
    """The fit redone on each repeat's measurements alone: the largest relative difference
    between two of them in the total time they predict for every step measured. How far two
    calibrations of one repeat each would disagree; a calibration of ``repeats`` repeats, whose
    statistics are medians, disagrees less."""
    if repeats < 2:
        return 0.0
    everything = [(*key[:5], float(np.median(ts))) for key, ts in grid.items()] + [r[:6] for r in runner_rows]
    totals = []
    for rep in range(repeats):
        rows = [(*key[:5], ts[rep]) for key, ts in grid.items() if len(ts) > rep]
        rows += [r[:6] for r in runner_rows if r[6] == rep]
        d = fit_step_table(*zip(*rows, strict=True), max_batch=max_batch)
        totals.append(float(predict_steps(d, everything).sum()))
    return float((max(totals) - min(totals)) / np.median(totals))


def agreement(a: dict, b: dict, rows: list) -> float:
    """Relative difference of the total step time two profiles' fits predict for ``rows``."""
    ta, tb = (float(predict_steps(p["fit"]["steps"], rows).sum()) for p in (a, b))
    return abs(ta - tb) / ta
