"""``sortedrl tune``: the command over :mod:`sortedrl.tune.search`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from sortedrl.cli_common import (
    CLUSTER,
    FORCE,
    GROUP_SIZE,
    PROMPTS,
    SEED,
    STEPS,
    SYNTHETIC,
    TRACE,
    LazyProgress,
    _cell,
    input_files,
    load_input_trace,
    print_notes,
    slug,
    source_name,
    user_errors,
)
from sortedrl.errors import ConfigError
from sortedrl.outputs import Outputs, write_json
from sortedrl.sim.cluster import load_cluster


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    def tune(
        trace: Path = TRACE,
        synthetic: str = SYNTHETIC,
        policies: list[str] = typer.Option(..., "--policy", help="policy to tune (repeatable)"),
        params: list[str] = typer.Option([], "--param", help="NAME.key=lo:hi[:log] or NAME.key=v1,v2,..."),
        objective: str = typer.Option("learnable_tokens_per_s", "--objective",
                                      help="learnable_tokens_per_s, tokens_per_s or makespan_s"),
        max_staleness: float = typer.Option(None, "--max-staleness", help="hard bound on staleness_max"),
        budget: int = typer.Option(64, "--budget", help="trials at most"),
        workers: int = typer.Option(1, "--workers", help="local worker processes"),
        ray: str = typer.Option(None, "--ray", help="run on Ray: auto, local or an address"),
        cluster: str = CLUSTER,
        seed: int = SEED,
        prompts: int = PROMPTS,
        group_size: int = GROUP_SIZE,
        steps: int = STEPS,
        out: Path = typer.Option(None, "--out", help="output directory (default runs/tune-TRACE-CLUSTER)"),
        force: bool = FORCE,
        as_json: bool = typer.Option(False, "--json", help="print only tune.json"),
    ) -> None:
        """Search policies' knobs for the fastest run within a staleness budget."""
        from sortedrl.tune.executors import make_executor
        from sortedrl.tune.search import OBJECTIVES, TuneConfig, Tuner
        from sortedrl.tune.space import parse_spaces

        if objective not in OBJECTIVES:
            raise ConfigError(f"--objective {objective}: expected one of {', '.join(OBJECTIVES)}")
        if budget < 1 or workers < 1:
            raise ConfigError("--budget and --workers must be >= 1")
        if max_staleness is not None and max_staleness < 0:
            raise ConfigError(f"--max-staleness {max_staleness}: must be >= 0")
        spaces = parse_spaces(policies, params)
        cl = load_cluster(cluster)
        outs = Outputs("tune", force, inputs=input_files(trace, cluster))
        run_dir = outs.run_dir(out, Path("runs") / slug(f"tune-{source_name(trace, synthetic)}-{cl.name}"),
                               identity=dict(source=str(trace or synthetic), policies=policies, params=params,
                                             objective=objective, max_staleness=max_staleness, budget=budget,
                                             cluster=cluster, seed=seed, prompts=prompts,
                                             group_size=group_size, steps=steps))
        tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
        cfg = TuneConfig(objective, max_staleness, budget, seed)
        executor = make_executor(tr, cl, seed, workers, ray)
        bar = LazyProgress(budget, "tune trials")
        try:
            result = Tuner(spaces, cfg, executor, bar).run()
        finally:
            bar.close()
            executor.close()
        result = {"trace": tr.name, "cluster": cl.name, **result}
        if result["best"]["overall"] is None:
            raise ConfigError(infeasible_message(result))
        outs.write({run_dir: {"tune.json": write_json(result)}})
        print_notes(outs)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        console = Console(width=120)
        console.print(tune_table(result))
        console.print(f"wrote {run_dir}/tune.json ({len(result['trials'])} trials, {result['search']})")


def infeasible_message(result: dict) -> str:
    """No trial met --max-staleness: name the one that came closest."""
    trials = result["trials"]
    closest = min(trials, key=lambda t: (t["summary"]["staleness_max"], -t["summary"]["tokens_per_s"], t["id"]))
    s = closest["summary"]
    params = ", ".join(f"{k}={v}" for k, v in closest["params"].items()) or "defaults"
    return (f"no trial of {len(trials)} meets --max-staleness {result['max_staleness']}; the closest is "
            f"trial {closest['id']}: {closest['policy']} ({params}) with staleness_max "
            f"{s['staleness_max']} at {s['tokens_per_s']:,.0f} tok/s; raise the bound or add a policy "
            "that bounds staleness (sync, sortedrl)")


def tune_table(result: dict) -> Table:
    trials = result["trials"]
    table = Table(title=f"tune: best per policy ({result['objective']}"
                        + (f", staleness_max <= {result['max_staleness']}" if result["max_staleness"] is not None else "")
                        + ")")
    for col in ("", "policy", "params", "tokens_per_s", "makespan_s", "staleness_mean", "staleness_max"):
        table.add_column(col)
    rows = [("best", result["best"]["overall"])]
    rows += [("", i) for i in result["best"]["per_policy"].values()]
    rows += [("pareto", i) for i in result["pareto"]]
    for tag, i in rows:
        if i is None:
            continue
        t = trials[i]
        s = t["summary"]
        table.add_row(tag, t["policy"], _cell(t["params"]), _cell(s["tokens_per_s"]), _cell(s["makespan_s"]),
                      _cell(s["staleness_mean"]), str(s["staleness_max"]))
    missing = [p for p, i in result["best"]["per_policy"].items() if i is None]
    if missing:
        table.caption = "no feasible trial for: " + ", ".join(missing)
    return table
