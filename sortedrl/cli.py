"""The ``sortedrl`` command: simulate policies on traces, and manage traces.

Every command turns a :class:`~sortedrl.errors.SortedRLError` into one ``error: ...`` line on
stderr and exit code 2, with no traceback and no half-written output directory.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.policies.base import parse_params
from sortedrl.policies.registry import BUILTIN, make_policy, policy_class
from sortedrl.sim.cluster import load_cluster, preset_names
from sortedrl.sim.run import simulate as run_simulation
from sortedrl.traces.commands import app as trace_app
from sortedrl.traces.io import read_trace
from sortedrl.traces.schema import Trace
from sortedrl.traces.synth import synthesize

app = typer.Typer(name="sortedrl", no_args_is_help=True, add_completion=False,
                  help="Design, simulate and validate rollout-scheduling policies for GRPO.")
app.add_typer(trace_app, name="trace", help="Import, synthesise and inspect length traces.")
err = Console(stderr=True)

UNITS = {"makespan_s": "s", "lower_bound_s": "s", "rollout_s": "s", "train_s": "s", "sync_s": "s",
         "tokens_per_s": "tok/s", "generated_tokens": "tok", "useful_tokens": "tok",
         "wasted_tokens": "tok", "recomputed_tokens": "tok", "staleness_mean": "versions",
         "staleness_p95": "versions", "staleness_max": "versions"}


def main() -> None:
    app()


def user_errors(fn: Callable) -> Callable:
    """Report SortedRLError as one line and exit 2."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SortedRLError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
    return wrapper


# -- helpers shared by commands ---------------------------------------------------------------------


def load_input_trace(trace: Path | None, synthetic: str | None, prompts: int | None,
                     group_size: int | None, steps: int | None, seed: int) -> Trace:
    if (trace is None) == (synthetic is None):
        raise ConfigError("give exactly one of --trace FILE or --synthetic PRESET")
    if trace is not None:
        return read_trace(trace)
    return synthesize(synthetic, prompts=prompts, group_size=group_size, steps=steps, seed=seed)


def write_run_dir(out: Path, files: dict[str, Callable[[Path], None]]) -> None:
    """Write ``files`` (relative paths) into ``out`` all-or-nothing: build them in a temporary
    sibling first, then move them in; files of ``out`` not named here are left alone."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        for name, write in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            write(tmp / name)
        if not out.exists():
            os.rename(tmp, out)
            return
        for name in files:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / name, out / name)
        shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(obj: object) -> Callable[[Path], None]:
    return lambda p: p.write_text(json.dumps(obj, indent=2) + "\n")


class LazyProgress:
    """A rich progress bar on stderr that appears only once a run has lasted a second."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self.t0 = time.monotonic()
        self.bar: Progress | None = None
        self.task = None

    def __call__(self, advance: int, note: str = "") -> None:
        self.done += advance
        if note:
            self.label = note
        if self.bar is None:
            if time.monotonic() - self.t0 < 1.0:
                return
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total)
        self.bar.update(self.task, completed=self.done, description=self.label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title, show_header=True)
    table.add_column("metric", no_wrap=True, min_width=18)
    table.add_column("value", justify="right")
    table.add_column("unit")
    for key, value in summary.items():
        table.add_row(key, _cell(value), UNITS.get(key, ""))
    return table


# -- commands ---------------------------------------------------------------------------------------


@app.command()
@user_errors
def simulate(
    trace: Path = typer.Option(None, "--trace", help="length trace (.jsonl, .csv, .parquet)"),
    synthetic: str = typer.Option(None, "--synthetic", help="synthetic preset (logic-8k, math-16k)"),
    policy: str = typer.Option(..., "--policy", help="policy name or module:Class"),
    sets: list[str] = typer.Option([], "--set", help="policy knob key=value (repeatable)"),
    cluster: str = typer.Option("h100-llama3.1-8b", "--cluster", help="cluster preset or JSON file"),
    seed: int = typer.Option(0, "--seed", help="seed (synthetic traces)"),
    prompts: int = typer.Option(None, "--prompts", help="synthetic: prompts per step"),
    group_size: int = typer.Option(None, "--group-size", help="synthetic: responses per prompt"),
    steps: int = typer.Option(None, "--steps", help="synthetic: steps"),
    out: Path = typer.Option(None, "--out", help="run directory (default runs/TRACE-POLICY)"),
    perfetto: Path = typer.Option(None, "--perfetto", help="also export the timeline as Chrome trace-event JSON"),
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON"),
) -> None:
    """Replay a length trace through a simulated cluster under one policy."""
    cl = load_cluster(cluster)
    cls = policy_class(policy)
    parse_params(cls.Params, sets, policy)  # bad knobs fail before any work
    tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
    pol = make_policy(policy, sets, tr)
    bar = LazyProgress(len(tr), f"simulate {pol.name}")
    try:
        result = run_simulation(tr, pol, cl, seed=seed, progress=bar)
    finally:
        bar.close()
    out = out or Path("runs") / f"{Path(tr.name).stem}-{pol.name}"
    write_run_dir(out, {"summary.json": write_json(result.summary),
                        "timeline.jsonl": result.timeline.write_jsonl})
    if perfetto is not None:
        from sortedrl.plot.perfetto import write_perfetto

        write_perfetto(result.timeline, perfetto)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    console = Console()
    oracle = " [ORACLE: reads true lengths, an upper reference]" if pol.oracle else ""
    console.print(summary_table(result.summary, f"{pol.name} on {tr.name} ({cl.name}){oracle}"))
    console.print(f"wrote {out}/summary.json and {out}/timeline.jsonl")


@app.command()
@user_errors
def compare(
    trace: Path = typer.Option(None, "--trace", help="length trace (.jsonl, .csv, .parquet)"),
    synthetic: str = typer.Option(None, "--synthetic", help="synthetic preset (logic-8k, math-16k)"),
    policies: list[str] = typer.Option(..., "--policy", help="[LABEL=]NAME, repeatable"),
    sets: list[str] = typer.Option([], "--set", help="LABEL.key=value (repeatable)"),
    cluster: str = typer.Option("h100-llama3.1-8b", "--cluster", help="cluster preset or JSON file"),
    seed: int = typer.Option(0, "--seed", help="seed (synthetic traces)"),
    prompts: int = typer.Option(None, "--prompts", help="synthetic: prompts per step"),
    group_size: int = typer.Option(None, "--group-size", help="synthetic: responses per prompt"),
    steps: int = typer.Option(None, "--steps", help="synthetic: steps"),
    out: Path = typer.Option(None, "--out", help="output directory (default runs/compare-TRACE)"),
    as_json: bool = typer.Option(False, "--json", help="print only the list of summaries"),
) -> None:
    """Run several policies on the same trace and cluster; print them side by side."""
    from sortedrl.compare import parse_specs, run_compare

    specs = parse_specs(policies, sets)
    cl = load_cluster(cluster)
    tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
    bar = LazyProgress(len(tr) * len(specs), f"compare {len(specs)} policies")
    try:
        results = run_compare(tr, specs, cl, seed=seed, progress=bar)
    finally:
        bar.close()
    summaries = [{"label": spec.label, **r.summary} for spec, r in results]
    out = out or Path("runs") / f"compare-{Path(tr.name).stem}"
    files: dict[str, Callable[[Path], None]] = {"compare.json": write_json(summaries)}
    for spec, r in results:
        files[f"{spec.label}/summary.json"] = write_json(r.summary)
        files[f"{spec.label}/timeline.jsonl"] = r.timeline.write_jsonl
    write_run_dir(out, files)
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
        return
    console = Console(width=max(100, 34 + 18 * len(summaries)))
    console.print(compare_table(summaries, f"{tr.name} on {cl.name}"))
    if any(s["oracle"] for s in summaries):
        console.print("oracle = an upper reference that reads true lengths; not a deployable policy")
    console.print(f"wrote {out}/compare.json and one directory per policy")


def compare_table(summaries: list[dict], title: str) -> Table:
    table = Table(title=title)
    table.add_column("metric", no_wrap=True, min_width=18)
    for s in summaries:
        table.add_column(s["label"] + (" (oracle)" if s["oracle"] else ""), justify="right")
    table.add_column("unit")
    for key in summaries[0]:
        if key == "label":
            continue
        cells = [_cell(s[key]) for s in summaries]
        table.add_row(key, *cells, UNITS.get(key, ""))
    return table


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in value.items()) or "defaults"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@app.command()
@user_errors
def tune(
    trace: Path = typer.Option(None, "--trace", help="length trace (.jsonl, .csv, .parquet)"),
    synthetic: str = typer.Option(None, "--synthetic", help="synthetic preset (logic-8k, math-16k)"),
    policies: list[str] = typer.Option(..., "--policy", help="policy to tune (repeatable)"),
    params: list[str] = typer.Option([], "--param", help="NAME.key=lo:hi[:log] or NAME.key=v1,v2,..."),
    objective: str = typer.Option("tokens_per_s", "--objective", help="tokens_per_s or makespan_s"),
    max_staleness: float = typer.Option(None, "--max-staleness", help="hard bound on staleness_max"),
    budget: int = typer.Option(64, "--budget", help="trials at most"),
    workers: int = typer.Option(1, "--workers", help="local worker processes"),
    ray: str = typer.Option(None, "--ray", help="run on Ray: auto, local or an address"),
    cluster: str = typer.Option("h100-llama3.1-8b", "--cluster", help="cluster preset or JSON file"),
    seed: int = typer.Option(0, "--seed", help="seed of the search and of synthetic traces"),
    prompts: int = typer.Option(None, "--prompts", help="synthetic: prompts per step"),
    group_size: int = typer.Option(None, "--group-size", help="synthetic: responses per prompt"),
    steps: int = typer.Option(None, "--steps", help="synthetic: steps"),
    out: Path = typer.Option(None, "--out", help="output directory (default runs/tune-TRACE)"),
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
    out = out or Path("runs") / f"tune-{Path(tr.name).stem}"
    write_run_dir(out, {"tune.json": write_json(result)})
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = Console(width=120)
    console.print(tune_table(result))
    console.print(f"wrote {out}/tune.json ({len(result['trials'])} trials, {result['search']})")


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


def _register_plots() -> None:
    from sortedrl.plot.commands import register

    register(app, user_errors)


model_app = typer.Typer(no_args_is_help=True, help="Build the tiny local model for real runs.")
app.add_typer(model_app, name="model")


@model_app.command("init")
@user_errors
def model_init(
    out: Path = typer.Option(..., "--out", help="directory to create (HF format)"),
    task: str = typer.Option("sort", "--task", help="toy task whose text trains the tokenizer"),
    hidden: int = typer.Option(64, "--hidden", help="hidden size (multiple of 32)"),
    layers: int = typer.Option(2, "--layers", help="transformer layers"),
    warmup_steps: int = typer.Option(300, "--warmup-steps", help="supervised warm-start steps (0: random weights)"),
    seed: int = typer.Option(0, "--seed", help="seed"),
) -> None:
    """A tiny Qwen2 model with random weights and a locally trained tokenizer; no downloads."""
    from sortedrl.realrun.model import init_model

    path = init_model(out, task=task, hidden=hidden, layers=layers, warmup_steps=warmup_steps, seed=seed)
    typer.echo(f"wrote {path}")


@app.command()
@user_errors
def run(
    model: Path = typer.Option(..., "--model", help="model directory from `sortedrl model init`"),
    policy: str = typer.Option(..., "--policy", help="policy name or module:Class"),
    steps: int = typer.Option(..., "--steps", help="steps of prompts to train on"),
    out: Path = typer.Option(..., "--out", help="run directory"),
    sets: list[str] = typer.Option([], "--set", help="policy knob key=value (repeatable)"),
    task: str = typer.Option("sort", "--task", help="toy task"),
    prompts: int = typer.Option(8, "--prompts", help="prompts per step"),
    group_size: int = typer.Option(4, "--group-size", help="responses per prompt (GRPO n)"),
    max_tokens: int = typer.Option(64, "--max-tokens", help="response cap"),
    lr: float = typer.Option(1e-3, "--lr", help="learning rate"),
    kl_coef: float = typer.Option(0.0, "--kl", help="KL coefficient to the initial weights"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="vLLM max_num_seqs"),
    seed: int = typer.Option(0, "--seed", help="seed"),
    resume: bool = typer.Option(False, "--resume", help="continue RUNDIR from its last checkpoint"),
    perfetto: Path = typer.Option(None, "--perfetto", help="also export the timeline as Chrome trace-event JSON"),
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON"),
) -> None:
    """Run GRPO for real (vLLM + torch) with the same controller and policy as the simulator."""
    from sortedrl.realrun.run import RunConfig, run_real

    cfg = RunConfig(model=str(model), policy=policy, out=str(out), steps=steps, sets=list(sets),
                    task=task, prompts=prompts, group_size=group_size, max_tokens=max_tokens, lr=lr,
                    kl_coef=kl_coef, max_num_seqs=max_num_seqs, seed=seed)
    bar = LazyProgress(steps * prompts * group_size, f"run {policy}")
    try:
        summary = run_real(cfg, resume=resume, progress=bar)
    finally:
        bar.close()
    if perfetto is not None:
        from sortedrl.plot.perfetto import write_perfetto
        from sortedrl.timeline import Timeline

        write_perfetto(Timeline.read_jsonl(out / "timeline.jsonl"), perfetto)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    Console().print(summary_table(summary, f"{policy} for real on {model}"))
    typer.echo(f"wrote {out}/summary.json, timeline.jsonl, trace.jsonl, metrics.jsonl")


@app.command()
@user_errors
def calibrate(
    model: Path = typer.Option(..., "--model", help="model directory from `sortedrl model init`"),
    out: Path = typer.Option(..., "--out", help="profile to write (PROFILE.json)"),
    engine: str = typer.Option("vllm", "--engine", help="engine to measure (vllm)"),
    max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="vLLM max_num_seqs"),
    repeats: int = typer.Option(3, "--repeats", help="repetitions of the measurement grid"),
    seed: int = typer.Option(0, "--seed", help="seed"),
) -> None:
    """Measure decode, prefill, update and sync times on the real engine; fit the cost model."""
    from sortedrl.realrun.calibrate import (
        BATCHES,
        CONTEXTS,
        PREFILL_COUNTS,
        PREFILL_LENS,
        calibrate,
    )
    from sortedrl.sim.profile import write_profile

    if engine != "vllm":
        raise ConfigError(f"--engine {engine}: unknown engine (known: vllm)")
    if repeats < 1 or max_num_seqs < 1:
        raise ConfigError("--repeats and --max-num-seqs must be >= 1")
    per = (len([b for b in BATCHES if b <= max_num_seqs]) * len(CONTEXTS)
           + len([c for c in PREFILL_COUNTS if c <= max_num_seqs]) * len(PREFILL_LENS))
    bar = LazyProgress(repeats * (per + 4) + per, "calibrate")
    try:
        profile = calibrate(str(model), max_num_seqs=max_num_seqs, repeats=repeats, seed=seed,
                            progress=bar)
    finally:
        bar.close()
    write_profile(out, profile)
    fit = profile["fit"]
    typer.echo(f"wrote {out}: engine steps MAPE {100 * fit['steps']['mape']:.1f}% (total "
               f"{100 * fit['steps']['total_error']:+.1f}%) over "
               f"{fit['steps']['measurements']} steps (decode-only {100 * fit['steps']['mape_decode_only']:.1f}%, "
               f"with prefill {100 * fit['steps']['mape_with_prefill']:.1f}%), "
               f"update {100 * fit['train']['mape']:.1f}%, sync {1000 * fit['sync']['median']:.1f} ms")


@app.command()
@user_errors
def validate(
    rundir: Path = typer.Argument(..., help="run directory written by `sortedrl run`"),
    profile: Path = typer.Option(None, "--profile", help="calibrated profile (default RUNDIR/profile.json)"),
    plot: Path = typer.Option(None, "--plot", help="also write an HTML overlay of real and simulated"),
    as_json: bool = typer.Option(False, "--json", help="print only validate.json"),
) -> None:
    """Replay a real run in the simulator and report the error per step."""
    from sortedrl.validate import overlay_html, write_validate
    from sortedrl.validate import validate as run_validation

    profile = profile or rundir / "profile.json"
    if not profile.exists():
        raise ConfigError(f"--profile {profile}: not found (make one with `sortedrl calibrate`)")
    result = run_validation(rundir, profile)
    write_validate(result, rundir / "validate.json")
    if plot is not None:
        overlay_html(result, plot)
    if as_json:
        typer.echo((rundir / "validate.json").read_text(), nl=False)
        return
    table = Table(title=f"validate {result['policy']} ({rundir}) against {profile}")
    for col in ("step", "real step s", "sim step s", "err %", "real rollout s", "sim rollout s",
                "real train s", "sim train s", "real bubble", "sim bubble"):
        table.add_column(col, justify="right")
    for s in result["steps"]:
        table.add_row(str(s["step"]), f"{s['real_step_s']:.3f}", f"{s['sim_step_s']:.3f}",
                      f"{s['step_err_pct']:.1f}", f"{s['real_rollout_s']:.3f}", f"{s['sim_rollout_s']:.3f}",
                      f"{s['real_train_s']:.3f}", f"{s['sim_train_s']:.3f}",
                      f"{s['real_bubble_ratio']:.3f}", f"{s['sim_bubble_ratio']:.3f}")
    console = Console(width=140)
    console.print(table)
    console.print(f"step_time_mape {result['step_time_mape']:.2f}%  rollout_time_mape "
                  f"{result['rollout_time_mape']:.2f}%  bubble_ratio_abs_err "
                  f"{100 * result['bubble_ratio_abs_err']:.2f} points  makespan error "
                  f"{result['makespan_err_pct']:.2f}%")
    console.print(f"wrote {rundir}/validate.json" + (f" and {plot}" if plot else ""))


@app.command("policies")
def list_policies() -> None:
    """List the built-in policies and their knobs."""
    import dataclasses
    console = Console()
    for name, cls in BUILTIN.items():
        doc = (cls.__doc__ or "").strip().splitlines() or [""]
        console.print(f"[bold]{name}[/bold]: {doc[0]}", highlight=False)
        for f in dataclasses.fields(cls.Params):
            console.print(f"  {f.name} = {f.default!r}  {f.metadata.get('help', '')}",
                          highlight=False, markup=False)


@app.command("clusters")
def list_clusters() -> None:
    """List the cluster presets (suffixes -tpN and -Ngpu change the shape)."""
    for name in preset_names():
        c = load_cluster(name)
        typer.echo(f"{name}: {c.gpus} GPUs, tp={c.tp}, {c.engines} engines x {c.max_num_seqs} seqs, "
                   f"KV {c.kv_budget:,} tokens/engine, {c.placement}"
                   + (f" (+{c.trainer_gpus} trainer GPUs)" if c.placement == "disaggregated" else ""))

_register_plots()

if __name__ == "__main__":
    main()
