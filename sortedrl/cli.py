"""The ``sortedrl`` command: simulate, compare, tune, run for real, calibrate, validate, plot.

This module holds the simulation commands and wires in the others (``traces.commands``,
``tune.commands``, ``realrun.commands``, ``plot.commands``); ``cli_common`` has what they share.
Every command turns a :class:`~sortedrl.errors.SortedRLError` into one ``error: ...`` line on
stderr and exit code 2, with no traceback and no half-written output directory.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from sortedrl import __version__, timeline_file
from sortedrl.broken_pipe import rich_raises_broken_pipes
from sortedrl.calibration.commands import profile_app
from sortedrl.cli_common import (
    CLUSTER,
    FORCE,
    GROUP_SIZE,
    PROMPTS,
    REGEN,
    SEED,
    STEPS,
    SYNTHETIC,
    TIMELINE,
    TRACE,
    WORKERS,
    OneLineUsageErrors,
    Terminated,
    end_cleanly_on_termination,
    err,
    perfetto_writer,
    pin_malloc_threshold,
    print_notes,
    slug,
    summary_text,
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
from sortedrl.compare import gpu_split
from sortedrl.export_commands import register as register_export
from sortedrl.forecast_commands import register as register_forecast
from sortedrl.interrupts import ignore_once_done
from sortedrl.limits import check_seed
from sortedrl.outputs import Outputs, write_json
from sortedrl.parallel import check_workers
from sortedrl.policies.base import parse_params
from sortedrl.policies.registry import BUILTIN, make_policy, policy_class, summary_of
from sortedrl.progress import Phases
from sortedrl.realrun.commands import register as register_real
from sortedrl.realrun.engine import quiet_torch
from sortedrl.sim.attempts import check_regen
from sortedrl.sim.cluster import load_cluster, preset_names
from sortedrl.sim.hardware import GPUS, MODELS
from sortedrl.sim.run import simulate as run_simulation
from sortedrl.tables import counted, terminal_width
from sortedrl.traces.commands import app as trace_app
from sortedrl.tune.commands import register as register_tune

app = typer.Typer(name="sortedrl", no_args_is_help=True, add_completion=False,
                  cls=OneLineUsageErrors,
                  help="Design, simulate and validate rollout-scheduling policies for GRPO.")
app.add_typer(trace_app, name="trace", help="Import, synthesise and inspect length traces.")
app.add_typer(profile_app, name="profile", help="Inspect calibrated profiles (profile show).")


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"sortedrl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _top(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                      help="print the version and exit")) -> None:
    """Design, simulate and validate rollout-scheduling policies for GRPO."""


# commands that run torch or vLLM in this process: their allocators rely on glibc's usual reuse
# of freed blocks, so the malloc setting is left as it is (a real run is timed against profiles)
REAL_RUNNER_COMMANDS = ("run", "calibrate", "model")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in REAL_RUNNER_COMMANDS:
        pin_malloc_threshold()
    else:  # before torch loads, which reads its C++ log level once
        quiet_torch()
    end_cleanly_on_termination()
    rich_raises_broken_pipes()  # (`| head`: a quiet exit 141, as every command's, not rich's 1)
    try:
        app()
    except SystemExit:  # (typer ends every command so, its exit code given)
        _ending()
        raise
    except Terminated as e:  # outside a command's own reporting (user_errors)
        typer.echo(f"error: {e}", err=True)
        _ending()
        sys.exit(e.exit_code)


def _ending() -> None:
    """The command is over: a signal in the teardown keeps its exit code (a second one ends it
    at once), but where Ray shuts down at exit (a real run, a tune that joined a cluster), which
    stays interruptible as before."""
    ray = sys.modules.get("ray")
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in REAL_RUNNER_COMMANDS and not (ray is not None and getattr(ray, "is_initialized", bool)()):
        ignore_once_done()


# -- commands ---------------------------------------------------------------------------------------


@app.command()
@user_errors
def simulate(
    trace: Path = TRACE,
    synthetic: str = SYNTHETIC,
    policy: str = typer.Option(..., "--policy", help="policy name or module:Class"),
    sets: list[str] = typer.Option([], "--set", help="policy knob key=value, or POLICY.key=value as compare and tune print it (repeatable)"),
    cluster: str = CLUSTER,
    seed: int = SEED,
    prompts: int = PROMPTS,
    group_size: int = GROUP_SIZE,
    steps: int = STEPS,
    regen: str = REGEN,
    out: Path = typer.Option(None, "--out", help="run directory (default runs/TRACE-POLICY-CLUSTER, and -seedN for --seed N)"),
    perfetto: Path = typer.Option(None, "--perfetto", help="also export the timeline as Chrome trace-event JSON"),
    timeline: str = TIMELINE,
    force: bool = FORCE,
    as_json: bool = typer.Option(False, "--json", help="print only the summary JSON"),
) -> None:
    """Replay a length trace through a simulated cluster under one policy."""
    from sortedrl.compare import (
        cluster_for,
        fit_warnings,
        never_synced,
        placement_note,
        trainer_split_note,
    )
    from sortedrl.unmodelled import unmodelled_notes

    check_regen(regen)
    check_seed(seed)
    tl_name = timeline_file.file_name(timeline)
    cl = load_cluster(cluster)
    cls = policy_class(policy)
    parse_params(cls.Params, sets, policy)  # bad knobs fail before any work
    sets = [knob.removeprefix(f"{policy}.").removeprefix(f"{policy.rpartition(':')[2]}.") for knob in sets]  # (POLICY.key)
    check_input_trace(trace, synthetic, prompts, group_size, steps, seed)  # (before --out's run)
    outs = Outputs("simulate", force, inputs=input_files(trace, cluster))
    source = source_name(trace, synthetic)
    run_dir = outs.run_dir(out, Path("runs") / slug(f"{source}-{policy}-{cl.name}" + (f"-seed{seed}" if seed else "")),
                           identity=run_identity(trace, synthetic, cluster, seed=seed, prompts=prompts, group_size=group_size,
                                                 steps=steps, regen=regen, policy=policy, sets=sets),
                           names=source_names(trace, synthetic))
    perfetto = outs.file(perfetto, "--perfetto")
    with Phases(err) as progress:
        progress.phase(f"reading {trace or synthetic}")
        tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
        pol = make_policy(policy, sets, tr)
        progress.phase(f"simulating {pol.name}", total=len(tr))
        ran_on = cluster_for(pol.placements, cl, pol.name)
        with outs.scratch(run_dir) as spill:  # a long run's timeline waits there, not in memory
            result = run_simulation(tr, pol, ran_on, seed=seed,
                                    progress=progress, regen=regen, spill_dir=spill)
            summary = write_json(result.summary, run_dir / "summary.json")  # (checked now)
            files: dict = {run_dir: {"summary.json": summary,
                                     tl_name: timeline_file.writer(result.timeline, timeline)}}
            if perfetto is not None:
                files[perfetto] = perfetto_writer(result.timeline)
            outs.write(files, progress.file)
    print_notes(outs)
    split = ran_on.placement == "disaggregated"
    notes = [*fit_warnings(tr, ran_on, synthetic is not None), *unmodelled_notes(ran_on),
             placement_note(pol.name, pol.placements, cl),
             trainer_split_note([(pol.name, result.summary)] if split else [], cl),
             never_synced(f"policy {pol.name}", result.timeline)]
    for note in filter(None, notes):
        typer.echo(note, err=True)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
        return
    oracle = " [ORACLE: reads true lengths, an upper reference]" if pol.oracle else ""
    typer.echo(summary_text(result.summary, f"{pol.name} on {tr.name} ({result.summary['cluster']}, "
                            f"GPUs {gpu_split(result.timeline.meta)}){oracle}"))
    typer.echo(f"wrote {run_dir}/summary.json and {run_dir}/{tl_name}"
               + (f", and {perfetto}" if perfetto else ""))


@app.command()
@user_errors
def compare(
    trace: Path = TRACE,
    synthetic: str = SYNTHETIC,
    policies: list[str] = typer.Option(..., "--policy", help="[LABEL=]NAME, NAME a built-in policy or module:Class; repeatable"),
    sets: list[str] = typer.Option([], "--set", help="LABEL.key=value (repeatable)"),
    cluster: str = CLUSTER,
    seed: int = SEED,
    prompts: int = PROMPTS,
    group_size: int = GROUP_SIZE,
    steps: int = STEPS,
    regen: str = REGEN,
    out: Path = typer.Option(None, "--out", help="output directory (default runs/compare-TRACE-CLUSTER, and -seedN for --seed N)"),
    timeline: str = TIMELINE,
    force: bool = FORCE,
    workers: int = WORKERS,
    wide: bool = typer.Option(False, "--wide", help="print every field, a metric per row (not fitted)"),
    as_json: bool = typer.Option(False, "--json", help="print only the list of summaries"),
) -> None:
    """Run several policies on the same trace and cluster; print them side by side."""
    from sortedrl.compare import (
        cluster_for,
        compare_text,
        fit_warnings,
        gpu_split,
        never_synced,
        offload_note,
        parse_specs,
        run_compare,
        trainer_split_note,
        used_clusters,
        wide_text,
    )
    from sortedrl.table_notes import draws_lengths
    from sortedrl.unmodelled import unmodelled_notes

    check_regen(regen)
    check_seed(seed)
    check_workers(workers)
    tl_name = timeline_file.file_name(timeline)
    specs = parse_specs(policies, sets)
    cl = load_cluster(cluster)
    check_input_trace(trace, synthetic, prompts, group_size, steps, seed)  # (before --out's run)
    outs = Outputs("compare", force, inputs=input_files(trace, cluster))
    source = source_name(trace, synthetic)
    run_dir = outs.run_dir(out, Path("runs") / slug(f"compare-{source}-{cl.name}" + (f"-seed{seed}" if seed else "")),
                           identity=run_identity(trace, synthetic, cluster, seed=seed, prompts=prompts, group_size=group_size,
                                                 steps=steps, regen=regen, policies=policies, sets=sets),
                           names=source_names(trace, synthetic))
    with Phases(err) as progress:
        progress.phase(f"reading {trace or synthetic}")
        tr = load_input_trace(trace, synthetic, prompts, group_size, steps, seed)
        with outs.scratch(run_dir) as spill:  # long runs' timelines wait there, not in memory
            results = run_compare(tr, specs, cl, seed=seed, progress=progress, regen=regen,
                                  workers=workers, spill_dir=spill)
            summaries = [{"label": spec.label, **r.summary} for spec, r in results]
            drawn = [spec.label for spec, r in results if draws_lengths(r.summary, r.timeline)]  # (spilled: read now)
            files: dict[str, Callable[[Path], None]] = {
                "compare.json": write_json(summaries, run_dir / "compare.json")}
            for spec, r in results:
                name = f"{spec.label}/summary.json"
                files[name] = write_json(r.summary, run_dir / name)
                files[f"{spec.label}/{tl_name}"] = timeline_file.writer(r.timeline, timeline)
            outs.write({run_dir: files}, progress.file)
    print_notes(outs)
    moved = [(spec.label, r.summary) for spec, r in results
             if r.timeline.meta["placement"] == "disaggregated"]
    split = offload_note(cluster_for(("disaggregated",), cl)) if moved else None  # (their trainer's)
    for note in filter(None, dict.fromkeys([*fit_warnings(tr, cl, synthetic is not None, bool(moved)),
                                            *unmodelled_notes(*used_clusters([s.name for s in specs], cl)),
                                            trainer_split_note(moved, cl),
                                            split, *(never_synced(spec.label, r.timeline) for spec, r in results)])):
        typer.echo(note, err=True)
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
        return
    title = (f"{len(specs)} polic{'y' if len(specs) == 1 else 'ies'} on {tr.name} ({counted(len(tr), 'sample')}), "
             f"cluster {cl.name}")
    splits = [gpu_split(r.timeline.meta) for _, r in results]
    typer.echo(wide_text(summaries, title, terminal_width()) if wide
               else compare_text(summaries, splits, cl, title, terminal_width(), drawn))
    typer.echo(f"wrote {run_dir}/compare.json and one directory per policy")


def _register_plots() -> None:
    from sortedrl.plot.commands import register

    register(app)


@app.command("policies")
@user_errors
def list_policies(
    names: list[str] = typer.Argument(None, show_default=False, help=(
        "policies to show: built-in names or your module:Class (default: every built-in)")),
) -> None:
    """List the built-in policies (or the ones named, a user's module:Class too) and their knobs."""
    import dataclasses
    import textwrap

    classes = {name: policy_class(name, "policies") for name in names} if names else BUILTIN
    width = terminal_width()
    for name, cls in classes.items():
        shown = name if name == cls.name else f"{name} ({cls.name})"
        typer.echo(textwrap.fill(f"{shown}: {summary_of(cls)}", width, subsequent_indent="    "))
        for f in dataclasses.fields(cls.Params):
            given = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            default = (default_text(f.default) if f.default is not dataclasses.MISSING else "(a default factory)"
                       ) if given else "(no default: give it with --set)"
            line = f"{f.name} = {default}  {f.metadata.get('help', '')}".rstrip()
            typer.echo(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="      "))


def default_text(value: object) -> str:
    """A knob's default as ``--set`` takes it (and the tables print it): ``true``, ``none``,
    ``groups``, not Python's ``True``, ``None``, ``'groups'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


@app.command("clusters")
@user_errors
def list_clusters(
    wide: bool = typer.Option(False, "--wide", help="every column, not fitted to the terminal"),
    as_json: bool = typer.Option(False, "--json", help="print the presets' shapes as JSON"),
) -> None:
    """List the cluster presets: {gpu}-{model}[-tpN][-Ngpu][-Nseq][-disagg]."""
    from sortedrl.tables import Col, render

    clusters = [load_cluster(name) for name in preset_names()]
    if as_json:
        typer.echo(json.dumps([{"name": c.name, "gpus": c.gpus, "tp": c.tp, "engines": c.engines,
                                "max_num_seqs": c.max_num_seqs, "kv_budget": c.kv_budget,
                                "placement": c.placement, "rollout_gpus": c.rollout_gpus,
                                "trainer_gpus": c.trainer_gpus} for c in clusters], indent=2))
        return
    cols = [Col("preset", left=True), Col("GPUs", "roll+train"), Col("tp", "GPUs/engine"), Col("engines", "x seqs"),
            Col("KV", "tok/engine", hide=1)]
    rows = [[c.name, f"{c.rollout_gpus}+{c.trainer_gpus}" if c.placement == "disaggregated" else f"{c.gpus} shared",
             str(c.tp), f"{c.engines} x {c.max_num_seqs}", f"{c.kv_budget:,}"] for c in clusters]
    typer.echo(render(cols, rows, None if wide else terminal_width(), "cluster presets", [
        "grammar: {gpu}-{model}[-tpN][-Ngpu][-Nseq][-disagg], e.g. h100-llama3.1-8b-tp2-4gpu-64seq: "
        "-tpN tensor-parallel degree (default: the fewest GPUs holding the weights twice over), -Ngpu "
        "GPUs in all (default 8, or more until the trainer holds its Adam state), -Nseq "
        "max_num_seqs per engine (default 256), -disagg separate rollout and trainer GPUs "
        "(train_gpus of them train, default a quarter; the rest roll out). 'shared': every GPU rolls out "
        "and trains in turn.",
        "a JSON file {\"preset\": NAME, field: value} overrides any field (docs/calibration.md)",
        *(f"source of {key}: {spec.source}" for key, spec in {**GPUS, **MODELS}.items())]))


def one_line_summaries(group: typer.Typer) -> None:
    """Give each command's line in its group's list (``sortedrl --help``) its docstring's first
    paragraph as one line: typer's rich help keeps a docstring's line breaks there, so a
    summary wrapped in the source broke mid-sentence in the list."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    for sub in group.registered_groups:
        one_line_summaries(sub.typer_instance)


_register_plots()
register_tune(app)
register_forecast(app)
register_export(app)
register_real(app)
one_line_summaries(app)

if __name__ == "__main__":
    main()
