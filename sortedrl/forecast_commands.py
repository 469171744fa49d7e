"""The ``sortedrl forecast`` command: a whole run's wall-clock, GPU-hours, cost and step times
for one or more policies on one or more clusters, as a table, JSON or an HTML report.

Thin over :mod:`sortedrl.forecast`; the report is a self-contained plotly page like those of
``sortedrl/plot/`` (no network needed to open it), written atomically.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import typer

from sortedrl import jsonio
from sortedrl.cli_common import (
    FORCE,
    TRACE,
    WORKERS,
    LazyProgress,
    user_errors,
)
from sortedrl.cli_inputs import typed_option
from sortedrl.compare import fit_warnings, needs_split, offload_note, slots_warning, used_clusters
from sortedrl.errors import ConfigError
from sortedrl.limits import MAX_SEED, check_seed
from sortedrl.outputs import Outputs, write_text
from sortedrl.parallel import check_workers
from sortedrl.table_notes import count_text, trained_note, updates_note
from sortedrl.tables import FORMATS, Col, Note, fmt, render, terminal_width
from sortedrl.traces.model import generate
from sortedrl.unmodelled import unmodelled_notes

if TYPE_CHECKING:  # (imported where a forecast runs: numpy and the simulator load then)
    from sortedrl.forecast import RunSource

MAX_SEEDS = 1000  # draws of a whole run: each is a full simulation; the interval needs a few
MAX_GPU_HOUR_PRICE = 1e6  # $ per GPU-hour, far above any (1.7e308 made the cost infinite)
COLUMNS = (("policy", ""), ("cluster", ""), ("gpus", "GPUs"), ("wall_h", "h"), ("wall_s", "s"),
           ("wall_s_low", "s"), ("wall_s_high", "s"), ("gpu_hours", "GPU-h"), ("cost", "$"), ("updates", "count"),
           ("step_s_p50", "s"), ("step_s_p90", "s"), ("step_s_max", "s"), ("rollout_s", "s"),
           ("train_s", "s"), ("sync_s", "s"), ("offload_s", "s"), ("idle_s", "s"))


@user_errors
def forecast(
    trace: Path = TRACE,
    policies: list[str] = typer.Option(..., "--policy", help="[LABEL=]NAME, repeatable"),
    sets: list[str] = typer.Option([], "--set", help="LABEL.key=value (repeatable)"),
    clusters: list[str] = typer.Option(["h100-llama3.1-8b"], "--cluster",
                                       help="cluster preset or file, repeatable"),
    steps: int = typer.Option(None, "--steps", help="trace model: training steps of the run"),
    prompts: int = typer.Option(None, "--prompts", show_default=False,
                                help="trace model: prompts per step (default: the model's)"),
    seeds: int = typer.Option(3, "--seeds", help="trace model: draws (each simulated) for the interval"),
    seed: int = typer.Option(0, "--seed", help="trace model: the first draw's seed (draws use --seed to "
                             "--seed + seeds - 1); also seeds regenerated attempts' lengths"),
    gpu_hour_price: float = typer.Option(0.0, "--gpu-hour-price", help="price of one GPU-hour ($)"),
    report: Path = typer.Option(None, "--report", help="also write an HTML report (.html)"),
    force: bool = FORCE,
    workers: int = WORKERS,
    as_json: bool = typer.Option(False, "--json", help="print only the list of forecasts"),
    wide: bool = typer.Option(False, "--wide", help="print every column, however wide"),
) -> None:
    """Forecast a whole run: wall-clock, GPU-hours, cost, step times, where the time goes."""
    from sortedrl.compare import parse_specs
    from sortedrl.forecast import RunSource, run_forecast
    from sortedrl.sim.cluster import load_cluster
    from sortedrl.traces.io import read_trace
    from sortedrl.traces.model import is_trace_model, load_model

    if trace is None:
        raise ConfigError("give --trace FILE or --trace-model MODEL.json")
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be from 1 to {MAX_SEEDS:,}, got {seeds}")
    check_seed(seed)
    check_workers(workers)
    if not 0 <= gpu_hour_price <= MAX_GPU_HOUR_PRICE:  # (NaN fails it too)
        raise ConfigError(f"--gpu-hour-price must be from 0 to {MAX_GPU_HOUR_PRICE:,.0f} ($ per "
                          f"GPU-hour), got {gpu_hour_price:g}")
    if report is not None and report.suffix.lower() != ".html":
        raise ConfigError(f"--report {report}: must end in .html")
    outs = Outputs("forecast", force, inputs=[trace])
    outs.file(report, "--report")
    specs = parse_specs(policies, sets)
    for i, c in enumerate(clusters):
        if c in clusters[:i]:
            raise ConfigError(f"--cluster {c} is given twice")
    cls = [load_cluster(c) for c in clusters]
    _refuse_same_cluster(clusters, cls)
    if is_trace_model(trace):
        if steps is None or steps < 1:
            raise ConfigError("--trace-model needs --steps N >= 1: the length of the run to forecast")
        if prompts is not None and prompts < 1:
            raise ConfigError(f"--prompts must be >= 1, got {prompts}")
        check_seed(seed, most=MAX_SEED - (seeds - 1),  # (the draws' seeds: --seed to --seed + seeds - 1)
                   why=f" with --seeds {seeds} (the draws use --seed to --seed + {seeds - 1})")
        source = RunSource(model=load_model(trace), steps=steps, prompts=prompts)
    else:
        from sortedrl.traces.io import BUNDLED

        fixed_trace = read_trace(trace)  # (first: a file that is no trace, a tune.json, says what it is)
        shown = trace.name if trace.parent == BUNDLED else trace
        fixed = f"{shown} is a trace, not a trace model (`sortedrl trace fit` makes one of it)"
        if steps is not None:
            raise ConfigError(f"--steps needs a trace model: {fixed}; a trace has its own steps")
        if prompts is not None:
            raise ConfigError(f"--prompts needs a trace model: {fixed}; a trace has its own prompts per step")
        if typed_option("seeds", seeds) and seeds != 1:  # (one run of a trace: 1 is what it does)
            raise ConfigError(f"--seeds needs a trace model: {fixed}; a trace is simulated once, as it is")
        source = RunSource(trace=fixed_trace)
    skip, said = _same_runs(specs, cls)
    runs = len(source.seeds(seeds, seed)) * (len(specs) * len(cls) - len(skip))
    bar = LazyProgress(runs * source.samples_per_run(), f"forecast: {runs} simulated runs")
    try:
        results = run_forecast(source, specs, cls, seeds, seed, gpu_hour_price, progress=bar,
                               workers=workers, skip=skip)
    finally:
        bar.close()
    text = jsonio.dumps(results, "the forecast", indent=2)  # (an infinite cost: before any output)
    for note in _notes(source, trace.name, specs, cls, results, said):
        typer.echo(note, err=True)
    if report is not None:
        outs.write({report: write_text(report_html(results, trace.name))})
    if as_json:
        typer.echo(text)
        return
    typer.echo(forecast_text(results, f"forecast of {trace.name}",
                             None if wide else terminal_width(), priced=gpu_hour_price > 0))
    if report is not None:
        typer.echo(f"wrote {report}")


def _notes(source: RunSource, name: str, specs: list, clusters: list, results: list[dict],
           said: list[str]) -> list[str]:
    """The warnings and notes under a forecast, each once: the trace's fit to each cluster, the
    runs forecast once (``said``), and the trainer pools of the splits."""
    def split(cl) -> bool:  # (a policy runs on the cluster's split: a smaller cluster to try keeps one)
        return needs_split([spec.name for spec in specs], cl)

    used = [u for cl in clusters for u in used_clusters([spec.name for spec in specs], cl)]
    if source.trace is not None:  # (a trace model's draws: each its own trace)
        fits = [w for cl in clusters for w in fit_warnings(source.trace, cl, False, split(cl))]
    else:  # (its steps fill the slots alike in every draw: prompts a step x the group size)
        per_step, mean = source.samples_per_run() // source.steps, _mean_tokens(source)
        fits = [*(slots_warning(name, per_step, cl, "more --prompts", split(cl), mean) for cl in clusters),
                *map(offload_note, clusters), _drift_note(source, name)]
    fits += unmodelled_notes(*used)
    return list(filter(None, dict.fromkeys([*fits, *said, *(split_note(results, cl) for cl in clusters)])))


def _mean_tokens(source: RunSource) -> int:
    """A trace model's mean prompt + response in its first step (one step drawn again, cheap),
    for the KV cache's count of sequences in the mostly-idle warning, as a fixed trace's mean."""
    first = generate(source.model, 1, seed=0, prompts=source.prompts)
    return int(np.mean(first.prompt_len.astype(np.int64) + first.response_len))


def _drift_note(source: RunSource, name: str) -> str | None:
    """Said when the trace model's drift moves the lengths twofold or more over the forecast's
    steps: e^(drift x steps) multiplies them, and a drift fitted on a few steps may be their
    noise (a 4-step fit's -0.017 took a 300-step forecast's lengths to x0.0063)."""
    drift, steps = source.model.drift, source.steps
    grow = drift * (steps - 1)  # (the log of step `steps`' lengths against step 1's)
    if abs(grow) < math.log(2):
        return None
    factor = math.exp(max(-700.0, min(700.0, grow)))
    shown = f"x{factor:,.0f}" if 10 <= factor < 1e6 else f"x{factor:.2g}"
    return (f"note: {name}: the trace model's drift, {drift:.3g} log-tokens a step, makes the responses of "
            f"step {steps:,} {shown} those of step 1 before the cap clips them (each step moves a prompt's mean "
            "log-length by it): "
            "check it against your run's growth (trace fit --drift-from), or set drift to 0 in the model "
            "for lengths that do not grow")


def _unnamed(cluster):
    """The cluster without its name and source: equal for one cluster given under two names."""
    return dataclasses.replace(cluster, name="", source=None)


def _refuse_same_cluster(given: list[str], clusters: list) -> None:
    """Two --cluster names of one cluster (``h100-qwen3-8b`` and ``h100-qwen3-8b-8gpu``): one
    error, as a name given twice is (they would forecast the same runs twice)."""
    seen = {}
    for name, cl in zip(given, clusters, strict=True):
        key = _unnamed(cl)
        if key in seen:
            raise ConfigError(f"--cluster {name} is the cluster --cluster {seen[key]} gives ({cl.gpus} x {cl.gpu}, "
                              f"{cl.model}, tp {cl.tp}, {cl.placement}, max_num_seqs {cl.max_num_seqs}): give it once")
        seen[key] = name


def _same_runs(specs: list, clusters: list) -> tuple[set, list[str]]:
    """The runs (label, index of the cluster in ``clusters``) that would repeat another: a
    policy that runs on the disaggregated split of a colocated --cluster which another --cluster
    gives as it is (async on ``h100-qwen3-8b``, with ``h100-qwen3-8b-disagg`` given). Each is
    left out, with a note."""
    from sortedrl.compare import cluster_for
    from sortedrl.policies.registry import policy_class

    skip, said, ran = set(), [], {}
    for k, cl in enumerate(clusters):
        for spec in specs:
            on = cluster_for(policy_class(spec.name).placements, cl, spec.name)
            key = (spec.label, _unnamed(on))
            if key in ran:
                skip.add((spec.label, k))
                said.append(f"note: {spec.label} runs on one cluster, {on.name}, for --cluster "
                            f"{clusters[ran[key]].name} and --cluster {cl.name}: forecast once")
            else:
                ran[key] = k
    return skip, said


def split_note(results: list[dict], cluster) -> str | None:
    """:func:`~sortedrl.compare.trainer_split_note` for the forecasts that ran on ``cluster``'s
    disaggregated split, on their mean busy and wall seconds over the seeds."""
    from sortedrl.cluster_split import split_name
    from sortedrl.compare import trainer_split_note

    split = split_name(cluster)
    runs = [(r["policy"], {"train_s": r["train_s"], "rollout_s": r["rollout_s"],
                           "makespan_s": r["wall_s"]})
            for r in results if r["placement"] == "disaggregated" and r["cluster"] == split]
    return trainer_split_note(runs, cluster, named=True)


FORECAST_COLS = [Col("policy", left=True), Col("cluster", left=True, hide=1), Col("wall", "h"),
                 Col("low-high", "h", hide=3), Col("GPU-h"), Col("cost", "$", hide=4),
                 Col("updates", "count", hide=5), Col("step p50/p90/max", "s"),
                 Col("rollout/train/sync/offload/idle", "% of wall", hide=2)]


def forecast_text(results: list[dict], title: str, width: int | None, priced: bool = False) -> str:
    """The terminal view: wall-clock with its interval, GPU-hours, cost, step times and the
    shares of wall-clock per activity (all keys are in --json). ``priced`` (``--gpu-hour-price``
    given): the cost column is never hidden to fit, other columns go first; nor is the cluster
    column when the runs are on several clusters."""
    rows = []
    for r in results:
        shares = "/".join(f"{100 * r[k] / r['wall_s']:.0f}" if r["wall_s"] else "0"
                          for k in ("rollout_s", "train_s", "sync_s", "offload_s", "idle_s"))
        rows.append([r["policy"], r["cluster"], fmt("wall_h", r["wall_h"]),
                     f"{fmt('wall_h', r['wall_s_low'] / 3600)}-{fmt('wall_h', r['wall_s_high'] / 3600)}",
                     fmt("gpu_hours", r["gpu_hours"]), fmt("cost", r["cost"]) if priced else "-",
                     count_text(r["updates"]), "/".join(fmt(k, r[k]) for k in ("step_s_p50", "step_s_p90", "step_s_max")),
                     shares])
    seeds = results[0]["seeds"] if results else 0
    notes: list[str | Note] = [f"wall: mean of {seeds} simulated run(s) (docs/metrics.md, Forecast)",
                               Note("low-high: the range of their wall-clock", "low-high")]
    if not priced:  # (each note of a column goes when the column does: a narrow terminal)
        notes.append(Note("cost: give --gpu-hour-price ($ per GPU-hour)", "cost"))
    notes += filter(None, [updates_note([(f"{r['policy']} @ {r['cluster']}", r["updates"]) for r in results]),
                           trained_note([(f"{r['policy']} @ {r['cluster']}", r["samples_trained"], r["samples_total"])
                                         for r in results], "their learnable_tokens_per_s (--json)")])
    kept = {"cost"} if priced else set()
    if len({r["cluster"] for r in results}) > 1:  # (its rows would read alike without it)
        kept.add("cluster")
    cols = [dataclasses.replace(c, hide=0) if c.title in kept else c for c in FORECAST_COLS]
    return render(cols, rows, width, title, notes)


def report_html(results: list[dict], source: str) -> str:
    """One offline page: the wall-clock with its range, where the time goes, the table."""
    import plotly.graph_objects as go

    from sortedrl.plot.page import figure_div, page, table

    names = [f"{r['policy']} @ {r['cluster']}" for r in results]
    wall = go.Figure(go.Bar(
        x=names, y=[r["wall_s"] / 3600 for r in results],
        error_y={"type": "data", "symmetric": False,
                 "array": [(r["wall_s_high"] - r["wall_s"]) / 3600 for r in results],
                 "arrayminus": [(r["wall_s"] - r["wall_s_low"]) / 3600 for r in results]}))
    wall.update_layout(title="wall-clock of the whole run (h); bars: lowest to highest seed",
                       yaxis_title="hours")
    parts = go.Figure([go.Bar(name=key, x=names, y=[r[key] / 3600 for r in results])
                       for key in ("rollout_s", "train_s", "sync_s", "offload_s", "idle_s")])
    parts.update_layout(barmode="group", title="where the time goes (h; rollout and training "
                        "overlap on a disaggregated cluster)", yaxis_title="hours")
    rows = [["-" if r[k] is None else r[k] for k, _ in COLUMNS] for r in results]  # (cost: no price)
    whole = all(r["updates"] == int(r["updates"]) for r in results)  # as count_text prints them
    formats = [",.0f" if k == "updates" and whole else ",.2f" if k == "updates"
               else FORMATS.get(k, ",.1f" if u == "s" else None) for k, u in COLUMNS]
    return page(f"sortedrl forecast: {source}", [
        f"<h1>Forecast of {source}</h1>",
        '<p class="note">Definitions and units: docs/metrics.md ("Forecast").</p>',
        figure_div(wall, "forecast-wall"), figure_div(parts, "forecast-parts"),
        table([f"{k} ({u})" if u else k for k, u in COLUMNS], rows, "forecast-table", formats)])


def register(app: typer.Typer) -> None:
    app.command("forecast")(forecast)
