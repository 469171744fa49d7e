"""``sortedrl calibrate --rescale PROFILE``: this host's speed now, against the profile's.

On a shared or cloud host the same work runs at a different speed from one quarter of an hour to
the next: on our 2-core VM the calibration's own kind of run stepped its engine 3-20% slower than
the table fitted on it minutes earlier, with no steal time (docs/calibration.md). A profile
fitted then predicts a run made now only as well as the host kept its speed. A full calibration
takes minutes; a rescale takes one short runner run (about 20 s): the calibration's ``sync`` run
(same task, caps, engine size and warm-up, read from the profile), timed step by step and update
by update, against what the profile predicts for the same shapes. It writes the profile with:
- every engine-side term (the step table and the per-token, per-prefill, per-request and
  per-event terms, and a Ray run's driver time per round) times the **engine factor**: the run's
  total measured step time over the total the profile predicts for its steps;
- the update terms times the **update factor**: the median over its updates of measured over
  predicted;
- the weight sync times the **sync factor**: the median measured sync over the profile's;
- the shared-host factors unchanged (they are ratios of two timings made together).
The run uses a seed of its own (``RESCALE_SEED``), so its work is none of the runs it is used to
predict. The new profile records the factors and what they were measured on (``rescaled``).
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError

ENGINE_COSTS = ("t_fix", "s1", "a0", "c1", "a1", "p1", "p2", "pn", "p0", "f0")
TRAIN_COSTS = ("train_fix", "train_per_token", "train_per_pair")
STEP_FIT_TERMS = ("a1", "p1", "p2", "pn", "pr")  # fit.steps, beside its table
DRIVER_TERMS = ("step_overhead_s", "step_overhead_one_s")  # fit.shared_host: Python work per round
RESCALE_SEED = 10_000  # far from the seeds of the runs a rescaled profile predicts


def run_config(profile: dict, model: str, where: str) -> dict:
    """The calibration's runner run, as the profile recorded it."""
    runner = (profile.get("fit") or {}).get("runner")
    needed = ("task", "max_tokens", "prompts", "group_size")
    if not isinstance(runner, dict) or any(k not in runner for k in needed):
        raise ConfigError(f"{where}: field 'fit.runner': missing or without {', '.join(needed)} "
                          "(only a profile from `sortedrl calibrate --model` can be rescaled)")
    return dict(model=model, steps=2, task=runner["task"], max_tokens=int(runner["max_tokens"]),
                prompts=int(runner["prompts"]), group_size=int(runner["group_size"]),
                max_num_seqs=int(profile["engine_config"]["max_num_seqs"]),
                warm_tokens=int(runner.get("warm_tokens", 0)), seed=RESCALE_SEED)


def measure(profile: dict, model: str, repeats: int, where: str) -> dict:
    """Run the calibration's ``sync`` run ``repeats`` times and compare it with the profile."""
    from sortedrl.realrun.calibrate import _sequence_lengths, predict_steps, run_apart
    from sortedrl.timeline import Timeline

    run = run_config(profile, model, where)
    steps, updates, syncs = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            st = run_apart(dict(policy="sync", sets=[], out=tmp + "/run", **run))
            tl = Timeline.read_jsonl(Path(tmp) / "run/timeline.jsonl")
            seq = _sequence_lengths(Path(tmp) / "run/trace.partial.jsonl", run["group_size"])
            updates += [([seq[i] for i in samples], t1 - t0) for t0, t1, _v, samples, _ in tl.rows("train")]
            syncs += [t1 - t0 for t0, t1, _v in tl.rows("sync")]
            steps += st["step_log"]
    measured = float(sum(r[5] for r in steps))
    predicted = float(predict_steps(profile["fit"]["steps"], steps).sum())
    model_costs = _cost_model(profile)
    ratios = [t / model_costs.update(lens) for lens, t in updates if model_costs.update(lens) > 0]
    sync_s = float(profile["costs"].get("sync_s") or 0.0)
    return {"engine_factor": measured / predicted, "update_factor": float(np.median(ratios)) if ratios else 1.0,
            "sync_factor": float(np.median(syncs)) / sync_s if syncs and sync_s > 0 else 1.0,
            "steps": len(steps), "measured_step_s": measured, "predicted_step_s": predicted,
            "updates": len(ratios), "syncs": len(syncs), "repeats": repeats, "seed": run["seed"]}


def _cost_model(profile: dict):
    from sortedrl.sim.cost import CostModel

    keep = {k: v for k, v in profile["costs"].items() if k in CostModel.__dataclass_fields__}
    return CostModel(**{**keep, "step_table": None})


def rescaled(profile: dict, factors: dict, source: str) -> dict:
    """``profile`` with its time terms scaled by ``factors`` (:func:`measure`)."""
    out = copy.deepcopy(profile)
    ef, uf, sf = factors["engine_factor"], factors["update_factor"], factors["sync_factor"]
    costs = out["costs"]
    for k in ENGINE_COSTS:
        if k in costs:
            costs[k] *= ef
    for k in TRAIN_COSTS:
        if k in costs:
            costs[k] *= uf
    if costs.get("step_table"):
        costs["step_table"] = [x * ef for x in costs["step_table"]]
    costs["sync_s"] = costs.get("sync_s", 0.0) * sf
    fit = out["fit"]
    fit["steps"]["table"] = [x * ef for x in fit["steps"]["table"]]
    for k in STEP_FIT_TERMS:
        fit["steps"][k] *= ef
    runner = fit["runner"]
    for k, f in (("ray_round_s", ef), ("ray_sync_s", sf)):
        if k in runner:
            runner[k] *= f
    for k in DRIVER_TERMS:
        if k in (fit.get("shared_host") or {}):
            fit["shared_host"][k] *= ef
    out["rescaled"] = {"from": source, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       **factors, "earlier": profile.get("rescaled")}
    return out


def rescale_command(source: Path, model: Path | None, out: Path, repeats: int, warm_tokens: int,
                    force: bool) -> None:
    """``calibrate --rescale``: check everything, measure, write the rescaled profile whole."""
    import typer

    from sortedrl.calibration.show import load_profile
    from sortedrl.outputs import Outputs
    from sortedrl.realrun.model import check_model_dir
    from sortedrl.sim.profile import write_profile

    if model is None:
        raise ConfigError("--rescale: give --model DIR, the model the profile was calibrated on")
    if repeats < 1 or warm_tokens < 0:
        raise ConfigError("--repeats must be >= 1 and --warm-tokens >= 0")
    outs = Outputs("calibrate", force, inputs=[model, source])
    outs.file(out, "--out")
    profile = load_profile(source)
    check_model_dir(str(model))
    where = str(source)
    run_config(profile, str(model), where)  # a profile that cannot be rescaled fails before any run
    if warm_tokens:
        profile["fit"]["runner"]["warm_tokens"] = warm_tokens
    factors = measure(profile, str(model), repeats, where)
    new = rescaled(profile, factors, where)
    outs.write({out: lambda p: write_profile(p, new)})
    typer.echo(f"wrote {out}: {source} rescaled to this host now: engine x{factors['engine_factor']:.3f} "
               f"({factors['steps']} steps, {factors['measured_step_s']:.2f} s measured, "
               f"{factors['predicted_step_s']:.2f} s predicted), updates x{factors['update_factor']:.3f} "
               f"(median of {factors['updates']}), sync x{factors['sync_factor']:.3f} (median of {factors['syncs']})")
