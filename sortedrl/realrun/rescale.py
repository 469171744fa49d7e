"""``sortedrl calibrate --rescale PROFILE``: this host's speed now, against the profile's.

On a shared or cloud host the same work runs at a different speed from one hour to the next: on
our 2-core VM the calibration's own kind of run stepped its engine 3-20% slower than the table
fitted on it a quarter of an hour earlier, with no steal time (docs/calibration.md). A profile
fitted then predicts a run made now only as well as the host kept its speed. A full calibration
takes minutes; a rescale takes one short run a repeat (about 20 s): the calibration's own ``sync`` run
(same task, caps, engine size, warm-up and seed, read from the profile: the same work), timed
step by step and update by update. Each is compared with what the profile predicts for it, as a
ratio (the median over repeats), and divided by the same ratio of the calibration's own ``sync``
runs (``fit.runner.sync_ratios``), so the fit's own error on this run cancels and what is left is
the host's speed:
- the engine part of every step (the step table less the runner's host step, the per-token,
  prefill and per-request engine terms, a MoE expert read) times the **engine factor**;
- the update terms (and a colocated offload and onload) times the **update factor**;
- the weight sync times the **sync factor**: the median measured sync over the profile's
  ``sync_s`` (which is the median over every calibration run's syncs), divided likewise;
- the runner's Python work (host time per step, per admitted request, per policy event, a Ray
  driver's time per round) and every ratio (contention, Ray step factor) unchanged: Python work
  held within 0.5-1.5% where the engine's spread 37-60% (docs/calibration.md).
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.tables import counted

# Every CostModel field, by what scales it (tests check that none is left out).
ENGINE_COSTS = ("step_fixed_s", "weight_read_s", "kv_read_s_per_token", "compute_s_per_seq", "step_s_per_seq",
                "prefill_s_per_token", "prefill_s_per_pair", "admit_step_s", "expert_read")
TRAIN_COSTS = ("train_fix", "train_per_token", "train_per_pair", "offload_s", "onload_s")
SYNC_COSTS = ("sync_s",)
# their engine parts: fit.steps.table and fit.steps.admit_s_per_request
SPECIAL_COSTS = ("step_table", "admit_s_per_request")
UNSCALED_COSTS = ("policy_event_s", "step_overhead_s", "step_overhead_one_s",  # Python work
                  "prefill_in_step", "train_padded", "experts", "experts_per_token", "expert_shards",
                  "train_micro_pairs", "engine_contention", "train_contention", "engine_contention_one",
                  "train_contention_one", "peer_step_factor")  # flags, counts and ratios
STEP_FIT_TERMS = ("kv_read_s_per_token", "prefill_s_per_token", "prefill_s_per_pair", "admit_step_s",
                  "admit_s_per_request")  # fit.steps, beside its table
RUNNER_FIELDS = ("task", "max_tokens", "prompts", "group_size")


def run_config(profile: dict, model: str, where: str) -> dict:
    """The calibration's ``sync`` run as the profile recorded it; every field the rescale reads is
    checked here, before any run."""
    from sortedrl.sim.profile import profile_cluster

    profile_cluster(profile, where, "profile")  # format, costs, engine_config
    fit = profile.get("fit")
    runner = fit.get("runner") if isinstance(fit, dict) else None
    if not isinstance(runner, dict) or any(k not in runner for k in RUNNER_FIELDS):
        raise ConfigError(f"{where}: field 'fit.runner': missing or without {', '.join(RUNNER_FIELDS)} "
                          "(only a profile from `sortedrl calibrate --model` can be rescaled)")
    for k in ("max_tokens", "prompts", "group_size", "warm_tokens", "seed"):
        if k in runner and (type(runner[k]) is not int or runner[k] < (0 if k in ("warm_tokens", "seed") else 1)):
            raise ConfigError(f"{where}: field 'fit.runner.{k}': expected a whole number, got {runner[k]!r}")
    from sortedrl.realrun.task import get_task

    get_task(str(runner["task"]))
    base = runner.get("sync_ratios")
    if base is not None and (not isinstance(base, dict)
                             or not all(v is None or (_number(v) and v > 0) for v in base.values())):
        raise ConfigError(f"{where}: field 'fit.runner.sync_ratios': expected ratios > 0 (or null), got {base!r}")
    if "ray_sync_s" in runner and not _number(runner["ray_sync_s"]):
        raise ConfigError(f"{where}: field 'fit.runner.ray_sync_s': expected seconds >= 0, got {runner['ray_sync_s']!r}")
    steps = fit.get("steps")
    if (not isinstance(steps, dict) or not isinstance(steps.get("table"), list) or not steps["table"]
            or not all(_number(x) for x in steps["table"]) or not all(_number(steps.get(k)) for k in STEP_FIT_TERMS)):
        raise ConfigError(f"{where}: field 'fit.steps': expected the step fit's table and "
                          f"{', '.join(STEP_FIT_TERMS)} (a profile from `sortedrl calibrate --model`)")
    table = profile["costs"].get("step_table")
    if table and len(table) != len(steps["table"]):
        raise ConfigError(f"{where}: field 'costs.step_table': {len(table)} batch sizes, but 'fit.steps.table' "
                          f"has {len(steps['table'])}")
    return dict(model=model, steps=2, task=str(runner["task"]), max_tokens=runner["max_tokens"],
                prompts=runner["prompts"], group_size=runner["group_size"],
                max_num_seqs=int(profile["engine_config"]["max_num_seqs"]),
                warm_tokens=runner.get("warm_tokens", 0), seed=runner.get("seed", 0))


def _number(v: object) -> bool:
    return finite(v) and v >= 0


def speed_ratios(profile: dict, steps: list, updates: list, syncs: list[float] = ()) -> dict:
    """Measured over predicted for one run: its engine steps ``(batch, new, new tokens, new
    pairs, KV tokens, seconds)`` in total, the median over its updates ``(sequence lengths,
    seconds)``, and its median sync over ``sync_s``. The calibration records the median of these
    over its own ``sync`` runs; a rescale divides its own by them."""
    from sortedrl.realrun.calibrate import predict_steps
    from sortedrl.sim.profile import profile_cluster

    measured = float(sum(r[5] for r in steps))
    predicted = float(predict_steps(profile["fit"]["steps"], steps).sum()) if steps else 0.0
    costs = profile_cluster(profile, "profile", "profile").costs
    ratios = [t / p for t, p in ((t, costs.update(lens)) for lens, t in updates) if p > 0]
    return {"steps": measured / predicted if predicted > 0 else None,
            "updates": float(np.median(ratios)) if ratios else None,
            "syncs": float(np.median(syncs)) / costs.sync_s if len(syncs) and costs.sync_s > 0 else None,
            "step_count": len(steps), "update_count": len(ratios), "sync_count": len(syncs)}


def measure(profile: dict, run: dict, repeats: int, progress: Callable[[int, str], None] | None = None) -> dict:
    """Run the calibration's ``sync`` run (``run``, from :func:`run_config`) ``repeats`` times;
    the factors against the profile. ``progress(advance, note)``: 0 as a run starts, 1 as it ends
    (a bar's or :class:`~sortedrl.realrun.progress_lines.CountLines`' call)."""
    from sortedrl.realrun.calibrate import run_apart, sync_run_rows

    tick = progress or (lambda n, note="": None)
    each = []
    for k in range(repeats):
        tick(0, f"run {k + 1} of {repeats} starts: the profile's sync run, {run['steps']} steps of "
                f"{run['prompts']} prompts x {run['group_size']}")
        with tempfile.TemporaryDirectory() as tmp:
            st = run_apart(dict(policy="sync", sets=[], out=tmp + "/run", **run))
            updates, syncs = sync_run_rows(Path(tmp) / "run", run["group_size"])
            each.append(speed_ratios(profile, st["step_log"], updates, syncs))
        tick(1, f"run {k + 1}: {counted(len(st['step_log']), 'engine step')}, {counted(len(updates), 'update')}, "
                f"{counted(len(syncs), 'sync')}")
    return factors(profile, median_ratios(each), run, repeats)


def median_ratios(each: list[dict]) -> dict:
    """The median over runs of each ratio of :func:`speed_ratios` (None where no run had it),
    and the counts summed."""
    out = {}
    for k in ("steps", "updates", "syncs"):
        vals = [r[k] for r in each if r[k] is not None]
        out[k] = float(np.median(vals)) if vals else None
    for k in ("step_count", "update_count", "sync_count"):
        out[k] = sum(r[k] for r in each)
    return out


def factors(profile: dict, now: dict, run: dict, repeats: int) -> dict:
    """The rescale's factors: this run's ratios ``now`` (:func:`median_ratios`) divided by the
    calibration's (a ratio either lacks counts as 1: no factor)."""
    base = profile["fit"]["runner"].get("sync_ratios") or {}
    if now["steps"] is None:
        raise ConfigError("--rescale: the run made no engine step to compare")

    def factor(k: str) -> float:
        return now[k] / (base.get(k) or 1.0) if now[k] is not None else 1.0

    return {"engine_factor": factor("steps"), "update_factor": factor("updates"),
            "sync_factor": factor("syncs"), "ratios": now, "calibration_ratios": base or None,
            "steps": now["step_count"], "updates": now["update_count"], "syncs": now["sync_count"],
            "repeats": repeats, "seed": run["seed"], "warm_tokens": run["warm_tokens"]}


def rescaled(profile: dict, factors: dict, source: str) -> dict:
    """``profile`` with its time terms scaled by ``factors`` (module docstring). ``costs`` holds
    what the simulator uses; ``fit.steps`` and a Ray run's weight push in ``fit.runner`` are
    scaled too (``validate`` and profile comparisons read them); the other ``fit`` records stay
    the calibration's."""
    out = copy.deepcopy(profile)
    ef, uf, sf = factors["engine_factor"], factors["update_factor"], factors["sync_factor"]
    costs, steps = out["costs"], out["fit"]["steps"]
    for names, f in ((ENGINE_COSTS, ef), (TRAIN_COSTS, uf), (SYNC_COSTS, sf)):
        for k in names:
            if k in costs:
                costs[k] *= f
    if costs.get("step_table"):  # the engine part of each batch size's step; the host step stays
        costs["step_table"] = [x + (ef - 1) * e for x, e in zip(costs["step_table"], steps["table"], strict=True)]
    if "admit_s_per_request" in costs:  # the engine's per-request part; the runner's admission stays
        costs["admit_s_per_request"] += (ef - 1) * steps["admit_s_per_request"]
    steps["table"] = [x * ef for x in steps["table"]]
    for k in STEP_FIT_TERMS:
        steps[k] *= ef
    if "ray_sync_s" in out["fit"]["runner"]:
        out["fit"]["runner"]["ray_sync_s"] *= sf
    out["rescaled"] = {"from": source, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       **factors, "earlier": profile.get("rescaled")}
    return out


def check_rescale_options(ctx, measured: bool) -> None:
    """``--rescale`` repeats the profile's own run: the options that would choose another run, or
    fit measurements taken elsewhere, are an error rather than silently ignored."""
    if measured:
        raise ConfigError("--rescale: not with --from-vllm-bench / --from-metrics (it measures this host)")
    from sortedrl.cli_common import given_options

    given = given_options(ctx, ("task", "max_tokens", "prompts", "group_size", "seed", "ray_engines",
                                "max_num_seqs", "engine", "cluster", "samples_per_step"))
    if given:
        raise ConfigError(f"--rescale: {', '.join(given)} not allowed (the rescale repeats the run the "
                          "profile records; only --model, --out, --repeats, --warm-tokens and --force apply)")


def rescale_command(source: Path, model: Path, out: Path, repeats: int, warm_tokens: int,
                    force: bool) -> None:
    """``calibrate --rescale``: check everything, measure, write the rescaled profile whole."""
    import typer

    from sortedrl.calibration.show import load_profile
    from sortedrl.outputs import Outputs
    from sortedrl.realrun.model import check_model_dir
    from sortedrl.sim.profile import write_profile

    if repeats < 1 or warm_tokens < 0:
        raise ConfigError("--repeats must be >= 1 and --warm-tokens >= 0")
    outs = Outputs("calibrate", force, inputs=[model, source])
    outs.file(out, "--out")
    profile = load_profile(source)
    check_model_dir(str(model))
    run = run_config(profile, str(model), str(source))  # a profile that cannot be rescaled fails before any run
    if warm_tokens:
        run["warm_tokens"] = warm_tokens
    from sortedrl.cli_common import LazyProgress, err
    from sortedrl.realrun.progress_lines import CountLines

    bar = (LazyProgress(repeats, "calibrate --rescale") if err.is_terminal  # (as calibrate --model)
           else CountLines("calibrate --rescale", repeats, "runs"))
    try:
        f = measure(profile, run, repeats, bar)
    finally:
        bar.close()
    new = rescaled(profile, f, str(source))
    outs.write({out: lambda p: write_profile(p, new)})
    typer.echo(f"wrote {out}: {source} rescaled to this host now: engine x{f['engine_factor']:.3f} "
               f"({f['steps']} steps), updates x{f['update_factor']:.3f} (median of {f['updates']}), "
               f"sync x{f['sync_factor']:.3f} (median of {f['syncs']})")
