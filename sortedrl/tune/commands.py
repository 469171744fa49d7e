"""``sortedrl tune``: the command over :mod:`sortedrl.tune.search`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer

from sortedrl.cli_common import (
    CLUSTER,
    FORCE,
    GROUP_SIZE,
    PROMPTS,
    REGEN,
    SEED,
    STEPS,
    SYNTHETIC,
    TRACE,
    err,
    print_notes,
    slug,
    user_errors,
)
from sortedrl.cli_inputs import (
    check_input_trace,
    input_files,
    load_input_trace,
    run_identity,
    source_name,
    source_names,
)
from sortedrl.compare import (
    STALE_NOTE,
    cluster_for,
    fit_warnings,
    needs_split,
    placement_for,
    placement_note,
    trainer_split_note,
    used_clusters,
)
from sortedrl.errors import ConfigError
from sortedrl.limits import check_seed
from sortedrl.outputs import Outputs, write_json
from sortedrl.policies.auto import knob_text
from sortedrl.policies.registry import policy_class
from sortedrl.progress import Phases
from sortedrl.sim.attempts import check_regen
from sortedrl.sim.cluster import Cluster, load_cluster
from sortedrl.table_notes import trained_note, updates_note
from sortedrl.tables import Col, counted, fmt, render, terminal_width
from sortedrl.unmodelled import unmodelled_notes

MAX_BUDGET = 100_000  # trials of one tune: each is a whole simulation


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def tune(
        trace: Path = TRACE,
        synthetic: str = SYNTHETIC,
        policies: list[str] = typer.Option(..., "--policy", help="policy to tune (repeatable)"),
        params: list[str] = typer.Option([], "--param", help="NAME.key=lo:hi[:log] or NAME.key=v1,v2,..."),
        objective: str = typer.Option("learnable_tokens_per_s", "--objective",
                                      help="learnable_tokens_per_s, tokens_per_s, makespan_s or gpu_hours"),
        max_staleness: float = typer.Option(None, "--max-staleness", help="hard bound on staleness_max (versions behind)"),
        budget: int = typer.Option(64, "--budget", help="trials at most (a count)"),
        workers: int = typer.Option(1, "--workers", help="local worker processes"),
        ray: str = typer.Option(None, "--ray", help="run on Ray: auto, local or an address"),
        cluster: str = CLUSTER,
        seed: int = SEED,
        prompts: int = PROMPTS,
        group_size: int = GROUP_SIZE,
        steps: int = STEPS,
        regen: str = REGEN,
        out: Path = typer.Option(None, "--out", help="output directory (default runs/tune-TRACE-CLUSTER, and -seedN for --seed N)"),
        force: bool = FORCE,
        wide: bool = typer.Option(False, "--wide", help="every column, not fitted to the terminal"),
        as_json: bool = typer.Option(False, "--json", help="print only tune.json"),
    ) -> None:
        """Search policies' knobs for the fastest run within a staleness budget."""
        from sortedrl.tune.executors import check_spaces, make_executor
        from sortedrl.tune.search import OBJECTIVES, TuneConfig, Tuner, trial_counts
        from sortedrl.tune.space import parse_spaces

        check_regen(regen)
        check_seed(seed)
        if objective not in OBJECTIVES:
            raise ConfigError(f"--objective {objective}: expected one of {', '.join(OBJECTIVES)}")
        for option, value in (("--budget", budget), ("--workers", workers)):
            if value < 1:  # (the message named both options for one bad value)
                raise ConfigError(f"{option} {value}: must be >= 1")
        if ray and workers > 1:  # (the trials ran on Ray, --workers silently ignored)
            raise ConfigError(f"--workers {workers} and --ray {ray}: give one of them (--ray runs the "
                              "trials on a Ray cluster's workers, --workers in local processes)")
        if budget > MAX_BUDGET:
            raise ConfigError(f"--budget {budget:,}: at most {MAX_BUDGET:,} trials (each is a "
                              "whole simulation)")
        if max_staleness is not None and max_staleness < 0:
            raise ConfigError(f"--max-staleness {max_staleness}: must be >= 0")
        spaces = parse_spaces(policies, params)
        cl = load_cluster(cluster)
        check_input_trace(trace, synthetic, prompts, group_size, steps, seed)  # (before --out's run)
        outs = Outputs("tune", force, inputs=input_files(trace, cluster))
        run_dir = outs.run_dir(out, Path("runs") / slug(f"tune-{source_name(trace, synthetic)}-{cl.name}" + (f"-seed{seed}" if seed else "")),
                               identity=run_identity(trace, synthetic, cluster, seed=seed, prompts=prompts,
                                                     group_size=group_size, steps=steps, regen=regen,
                                                     policies=policies, params=params, objective=objective,
                                                     max_staleness=max_staleness, budget=budget),
                               names=source_names(trace, synthetic))
        with Phases(err) as progress:
            progress.phase(f"reading {trace or synthetic}")
            tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
            check_spaces(spaces, tr)  # a policy that refuses every --param combination
            cfg = TuneConfig(objective, max_staleness, budget, seed)
            progress.phase("starting workers")
            trials = int(min(budget, sum(trial_counts(spaces))))
            executor = make_executor(tr, cl, seed, min(workers, trials), ray, regen)
            progress.phase(f"tune: trials run (at most {trials})", total=trials)
            try:
                result = Tuner(spaces, cfg, executor, progress).run()
            finally:
                executor.close()
        result = {"trace": tr.name, "trace_shape": trace_shape(tr), "cluster": cl.name,
                  "cluster_fields": cl.fields(), "regen": regen, **result}
        if result["best"]["overall"] is None:
            raise ConfigError(infeasible_message(result))
        outs.write({run_dir: {"tune.json": write_json(result, run_dir / "tune.json")}})
        print_notes(outs)
        notes = fit_warnings(tr, cl, synthetic is not None, needs_split([s.policy for s in spaces], cl))
        notes += unmodelled_notes(*used_clusters([s.policy for s in spaces], cl))
        notes += [split_note(s.policy, result["trials"], cl) for s in spaces]
        notes.append(trainer_note(result, cl))
        if not params:  # (a search of one trial a policy, said nowhere)
            notes.append("note: no --param, so each policy ran once with its defaults; --param "
                         "NAME.key=lo:hi or NAME.key=v1,v2,... searches a knob")
        for note in filter(None, notes):
            typer.echo(note, err=True)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        typer.echo(tune_text(result, cl, None if wide else terminal_width()))
        typer.echo(f"wrote {run_dir}/tune.json ({counted(len(result['trials']), 'trial')}, {result['search']})")


def trace_shape(trace) -> dict:
    """What tune.json records of the trace's shape, which ``export`` writes as the run's batch
    (``--group-size`` and ``--prompts`` default to it): responses per prompt, prompts a step,
    steps, the response cap."""
    return {"group_size": trace.meta.group_size, "prompts_per_step": trace.prompts_per_step,
            "steps": trace.num_steps,
            "max_response_len": trace.meta.max_response_len}


def split_note(policy: str, trials: list[dict], cluster: Cluster) -> str | None:
    """:func:`~sortedrl.compare.placement_note`, said of the clusters ``policy``'s trials ran on:
    with ``--param cluster.*`` each trial's shape has its own split (not the given cluster's)."""
    from sortedrl.tune.space import as_sets, split_cluster

    placements = policy_class(policy).placements
    shapes = [split_cluster(as_sets(t["params"]))[0] for t in trials if t["policy"] == policy]
    if not any(shapes):
        return placement_note(policy, placements, cluster)
    moved = {}
    for shape in shapes:
        shaped = dataclasses.replace(cluster, **shape)
        used = cluster_for(placements, shaped)
        if used is not shaped:
            moved[(used.gpus, used.rollout_gpus)] = f"{used.rollout_gpus}+{used.trainer_gpus} of {used.gpus}"
    if not moved:
        return None
    return (f"note: {policy} needs separate rollout and training GPUs, so each of its trials on a "
            "colocated shape runs on the disaggregated split of that trial's GPUs (roll out + train): "
            + ", ".join(moved[k] for k in sorted(moved))
            + ("; the given trainer and sync terms are scaled to the split as the preset's are"
               if cluster.costs is not None else ""))


def trainer_note(result: dict, cluster: Cluster) -> str | None:
    """:func:`~sortedrl.compare.trainer_split_note` of the best trials that ran on the given
    cluster's default split (a search of ``cluster.*`` shapes says nothing: its trials ran on
    several splits, and ``cluster.train_gpus`` is the knob to add to it)."""
    from sortedrl.tune.space import as_sets, split_cluster

    trials = result["trials"]
    if any(split_cluster(as_sets(t["params"]))[0] for t in trials):
        return None
    runs = [(f"trial {i} {trials[i]['policy']}", trials[i]["summary"])
            for i in result["best"]["per_policy"].values()
            if i is not None and placement_for(policy_class(trials[i]["policy"]).placements,
                                               cluster.placement) == "disaggregated"]
    return trainer_split_note(runs, cluster)


def infeasible_message(result: dict) -> str:
    """No trial met --max-staleness: name the one that came closest (or, when every trial was
    skipped, the first one's reason)."""
    trials = result["trials"]
    if not trials:
        skipped = result.get("skipped", [])
        return f"no trial could run ({len(skipped)} skipped); the first: {skipped[0]['reason']}"
    closest = min(trials, key=lambda t: (t["summary"]["staleness_max"], -t["summary"]["tokens_per_s"], t["id"]))
    s = closest["summary"]
    params = ", ".join(f"{k}={v}" for k, v in closest["params"].items()) or "defaults"
    return (f"no trial of {len(trials)} meets --max-staleness {result['max_staleness']}; the closest is "
            f"trial {closest['id']}: {closest['policy']} ({params}) with staleness_max "
            f"{s['staleness_max']} at {fmt('tokens_per_s', s['tokens_per_s'])} tok/s; raise the bound or add a policy "
            "that bounds staleness (sync, sortedrl)")


# GPU-h: --objective gpu_hours only; its title is its unit, as in the plan's and forecast's tables
# (it had the unit h, under a figure in GPU-hours)
TUNE_COLS = [Col("policy", left=True), Col("trial"), Col("useful", "tok/s"), Col("learnable", "tok/s", hide=3),
             Col("vs", "best"), Col("makespan", "s", hide=2), Col("stale", "versions"), Col("updates", "count", hide=4),
             Col("GPUs", "r+t", hide=1), Col("GPU-h")]


def _trial_row(t: dict, rate: str, top: float, splits: dict) -> list[str]:
    s = t["summary"]
    return [t["policy"], str(t["id"]), fmt("tokens_per_s", s["tokens_per_s"]),
            fmt("learnable_tokens_per_s", s.get("learnable_tokens_per_s", 0)),
            f"{s[rate] / top:.2f}x" if top > 0 else "-",
            fmt("makespan_s", s["makespan_s"]), f"{fmt('staleness_mean', s['staleness_mean'])}/{s['staleness_max']}",
            f"{s['updates']:,}", splits.get(t["id"], splits[t["policy"]]), fmt("gpu_hours", s.get("gpu_hours", 0))]


def _seed_said(result: dict) -> list[str]:
    """Under a seed other than 0, how to rerun a trial: its knobs and that seed (without it, a
    run whose regenerated lengths or synthetic trace the seed drew is another run)."""
    seed = result.get("seed")
    if not seed:
        return []
    return [f"seed: every trial ran with --seed {seed}; rerun one with its knobs and --seed {seed}"]


def tune_text(result: dict, cluster: Cluster, width: int | None) -> str:
    """Two tables: the best feasible trial per policy (best first), then the Pareto front of
    feasible trials; each trial's knobs under them."""
    from sortedrl.tune.search import OBJECTIVES

    trials = result["trials"]
    learnable = all("learnable_tokens_per_s" in t["summary"] for t in trials)
    rate = "learnable_tokens_per_s" if learnable else "tokens_per_s"
    cols = [c for c in TUNE_COLS if (learnable or c.title != "learnable")  # the ranking's own column
            and (c.title != "GPU-h" or result["objective"] == "gpu_hours")]
    keep = [i for i, c in enumerate(TUNE_COLS) if c in cols]

    def rows(ts: list[dict]) -> list[list[str]]:
        return [[r[i] for i in keep] for r in (_trial_row(t, rate, top, splits) for t in ts)]

    splits: dict = {p: _split(p, cluster) for p in result["best"]["per_policy"]}
    splits.update(_shaped_splits(trials, cluster))  # tune --param cluster.*: per trial
    best = [trials[i] for i in result["best"]["per_policy"].values() if i is not None]
    sign = OBJECTIVES[result["objective"]]
    best.sort(key=lambda t: (-sign * t["summary"][result["objective"]], t["id"]))
    top = trials[result["best"]["overall"]]["summary"][rate]
    bound = (f", staleness_max <= {result['max_staleness']:g}" if result["max_staleness"] is not None else "")
    missing = [p for p, i in result["best"]["per_policy"].items() if i is None]
    notes = [f"no feasible trial for: {', '.join(missing)}"] if missing else []
    if result.get("skipped") and not result.get("cluster_pareto"):  # (the plan counts them)
        n = len(result["skipped"])
        notes.append(f"{n} trial{'s' * (n != 1)} skipped (cannot run: see tune.json 'skipped')")
    notes += filter(None, [updates_note([(f"trial {t['id']}", t["summary"]["updates"]) for t in best]),
                           trained_note([(f"trial {t['id']}", t["summary"]["samples_trained"],
                                          t["summary"]["samples_total"]) for t in best
                                         if "samples_trained" in t["summary"]])])
    first = render(cols, rows(best), width, f"tune: best trial per policy by {result['objective']}{bound} "
                   f"({counted(len(trials), 'trial')}, {result['search']})", notes, footer="")
    front = [trials[i] for i in result["pareto"]]  # (feasible trials only)
    shown = {t["id"]: t for t in best + front}
    knobs = [f"trial {i} {t['policy']}: " + knob_text(t["summary"]["params"], t["summary"].get("auto_params", {}))
             for i, t in sorted(shown.items())]
    what = "learnable" if learnable else "useful"
    second = render(cols, rows(front), width,
                    f"Pareto front: feasible trials no other beats on both {what} tok/s and staleness mean",
                    ["knobs: " + "; ".join(knobs), *_seed_said(result),
                     f"vs best: {what} tok/s over the best trial's", STALE_NOTE])
    if result.get("cluster_pareto"):  # tune --param cluster.*
        from sortedrl.tune.plan import plan_text

        second += "\n\n" + plan_text(result, width)
    return first + "\n\n" + second


def _shaped_splits(trials: list[dict], cluster: Cluster) -> dict[int, str]:
    from sortedrl.tune.space import as_sets, split_cluster

    out = {}
    for t in trials:
        shape, _ = split_cluster(as_sets(t["params"]))
        if shape:
            out[t["id"]] = _split(t["policy"], dataclasses.replace(cluster, **shape))
    return out


def _split(policy: str, cluster: Cluster) -> str:
    used = cluster_for(policy_class(policy).placements, cluster)
    return f"{used.rollout_gpus}+{used.trainer_gpus}" if used.placement == "disaggregated" else f"{used.gpus} shared"
