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
from sortedrl.sim.run import run_context
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
    """Write ``files`` into ``out`` all-or-nothing: build them in a temporary sibling first."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        for name, write in files.items():
            write(tmp / name)
        if not out.exists():
            os.rename(tmp, out)
            return
        if not out.is_dir():
            raise ConfigError(f"--out {out}: exists and is not a directory")
        for name in files:
            os.replace(tmp / name, out / name)
        tmp.rmdir()
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

    def __call__(self, advance: int) -> None:
        self.done += advance
        if self.bar is None:
            if time.monotonic() - self.t0 < 1.0:
                return
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=err, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total)
        self.bar.update(self.task, completed=self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, float):
            value = f"{value:,.4f}" if abs(value) < 10 else f"{value:,.1f}"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        table.add_row(key, str(value), UNITS.get(key, ""))
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
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON"),
) -> None:
    """Replay a length trace through a simulated cluster under one policy."""
    cl = load_cluster(cluster)
    cls = policy_class(policy)
    parse_params(cls.Params, sets, policy)  # bad knobs fail before any work
    tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
    pol = make_policy(policy, sets, run_context(tr))
    bar = LazyProgress(len(tr), f"simulate {pol.name}")
    try:
        result = run_simulation(tr, pol, cl, seed=seed, progress=bar)
    finally:
        bar.close()
    out = out or Path("runs") / f"{Path(tr.name).stem}-{pol.name}"
    write_run_dir(out, {"summary.json": write_json(result.summary),
                        "timeline.jsonl": result.timeline.write_jsonl})
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    console = Console()
    console.print(summary_table(result.summary, f"{pol.name} on {tr.name} ({cl.name})"))
    console.print(f"wrote {out}/summary.json and {out}/timeline.jsonl")


@app.command("policies")
def list_policies() -> None:
    """List the built-in policies and their knobs."""
    import dataclasses
    console = Console()
    for name, cls in BUILTIN.items():
        console.print(f"[bold]{name}[/bold]: {(cls.__doc__ or '').strip().splitlines()[0]}")
        for f in dataclasses.fields(cls.Params):
            console.print(f"  {f.name} = {f.default!r}  {f.metadata.get('help', '')}")


@app.command("clusters")
def list_clusters() -> None:
    """List the cluster presets (suffixes -tpN and -Ngpu change the shape)."""
    for name in preset_names():
        c = load_cluster(name)
        typer.echo(f"{name}: {c.gpus} GPUs, tp={c.tp}, {c.engines} engines x {c.max_num_seqs} seqs, "
                   f"KV {c.kv_budget:,} tokens/engine, {c.placement}")

