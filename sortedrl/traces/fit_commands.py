"""``sortedrl trace fit``: fit the length model to a trace, print how well it fits, save it.

Thin over :mod:`sortedrl.traces.fit` and :mod:`sortedrl.traces.wandb_drift` (``--drift-from``,
whose notes go to stderr); registered on the ``trace`` command group. The model file
is written atomically and never over an input.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sortedrl.cli_common import user_errors
from sortedrl.errors import ConfigError
from sortedrl.tables import fmt
from sortedrl.traces.io import bundled_names, resolve_bundled
from sortedrl.traces.model_turns import TURN_FIELDS

DEFAULT_METRIC = "response_length/mean"  # verl's mean response length, as W&B exports it


def fit_cmd(
    trace: Annotated[Path, typer.Argument(
        callback=resolve_bundled,
        help="Trace file (.jsonl, .csv or .parquet), or a bundled trace by its name: "
             f"{', '.join(bundled_names())}.")],
    out: Annotated[Path, typer.Option(help="Output model (.json).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --out file.")] = False,
    drift_from: Annotated[Path | None, typer.Option(
        help="W&B export CSV of a longer run: fit the per-step drift of the length and of the "
             "runaway share from it.")] = None,
    metric: Annotated[str, typer.Option(
        help="The mean length metric in --drift-from (verl's response_length/mean, TRL's "
             "train/completions/mean_length, slime's rollout/response_len/mean); its max and "
             "clip-ratio siblings are read too.")] = DEFAULT_METRIC,
    step_column: Annotated[str | None, typer.Option(
        help="The training step's column in --drift-from (default: train/global_step, "
             "rollout/step or Step, the first present).")] = None,
    wandb_run: Annotated[str | None, typer.Option(
        "--run", help="Which W&B run of a multi-run --drift-from export to read.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the model as JSON.")] = False,
) -> None:
    """Fit the hierarchical length model to a trace; report quantiles and the KS statistic."""
    from sortedrl.outputs import Outputs, write_text
    from sortedrl.traces.fit import fit_trace, goodness
    from sortedrl.traces.io import read_trace
    from sortedrl.traces.wandb_drift import read_wandb_drift

    if out.suffix.lower() != ".json":
        raise ConfigError(f"--out {out}: a trace model is a .json file")
    if wandb_run is not None and drift_from is None:
        raise ConfigError("--run: only with --drift-from (the run of a W&B export to read)")
    if drift_from is None and (metric != DEFAULT_METRIC or step_column is not None):  # (ignored)
        which = "--metric" if metric != DEFAULT_METRIC else "--step-column"
        raise ConfigError(f"{which}: only with --drift-from (a column of the W&B export to read)")
    outs = Outputs("trace fit", force, inputs=[trace, drift_from])
    outs.file(out, "--out")
    data = read_trace(trace)
    notes = [note for note in [_unfinished_note(data)] if note]
    model = fit_trace(data, source=trace.name, where=str(trace))
    notes += _size_notes(data, str(trace), model.sigma_between)
    if drift_from is not None:
        drift = read_wandb_drift(drift_from, model, metric, step_column, wandb_run)
        model = dataclasses.replace(model, **drift.fields)
        # the fit printed and saved is the written model's (it was the trace's drift's)
        model = dataclasses.replace(model, fit=goodness(data, model))
        notes += drift.notes
    else:
        notes += _drift_note(data, model.drift, str(trace))
    body = model.to_json(str(out))
    outs.write({out: write_text(body)})
    for note in notes:
        typer.echo(note, err=True)
    if as_json:
        typer.echo(body, nl=False)
        return
    console = Console()
    console.print(_params_table(model))
    console.print(_fit_table(model.fit))
    typer.echo(f"wrote {out}")  # (plain: a path is not rich markup, nor wrapped)


def _unfinished_note(trace) -> str:
    """A note when a real run's trace holds rows that never finished (``abort``): the fit takes
    their length, the cap, as a response censored at the cap (docs/traces.md)."""
    if trace.finish_reason is None:
        return ""
    n = int((trace.finish_reason == "abort").sum())
    if not n:
        return ""
    return (f"note: {n} of {len(trace)} rows never finished (finish_reason abort): their lengths "
            "were never observed and are written as the cap, so the fit counts them as reaching "
            "it (the runaway share and the tail come out high); fit a run whose responses all "
            "finished for the length distribution itself")


FEW_STEPS = 5  # steps below which a fitted drift is mostly the steps' noise


def _drift_note(trace, drift: float, where: str) -> list[str]:
    """A note when the drift comes from few steps: a forecast of many steps multiplies lengths by
    e^(drift x steps) (2 steps of a preset without drift fitted 0.099 a step: x343 by step 60)."""
    steps = len(np.unique(trace.step)) if trace.step is not None else 1  # (as the fit counts them)
    log_60 = drift * 59  # (the log of the length at step 60 against step 1's)
    if not 2 <= steps < FEW_STEPS or abs(log_60) < math.log(2):  # (a drift that matters over a forecast)
        return []
    if abs(log_60) > math.log(1e6):  # (e^x of a wild drift overflowed a float)
        factor = "over x1,000,000" if log_60 > 0 else "under x0.000001"
    else:
        by_60 = math.exp(log_60)
        factor = f"x{by_60:,.0f}" if by_60 >= 10 else f"x{by_60:.2g}"
    return [f"note: {where}: the drift, {drift:.3g} log-tokens a step, rests on {steps} steps, so it may "
            f"be mostly their noise, and a forecast of many steps multiplies lengths by e^(drift x steps) "
            f"({factor} by step 60): fit {FEW_STEPS} or more steps, or give the run's length growth "
            "with --drift-from"]


def _size_notes(trace, where: str, sigma_between: float = 1.0) -> list[str]:
    """Notes for a trace that identifies less than the model asks: one sample per prompt (the
    within-group spread cannot be told from the prompt effect's), or few prompts."""
    from sortedrl.traces.fit import SMALL_GROUPS

    notes = []
    if trace.meta.group_size == 1:
        notes.append(f"note: {where}: one sample per prompt (group_size 1): the spread within a "
                     "group cannot be told from the prompt effect's; sigma_within is set to 0, "
                     "not measured, and sigma_between holds the whole spread")
    if trace.num_groups < SMALL_GROUPS:
        error = (f" (sigma_between's standard error is at least {1 / (2 * trace.num_groups) ** 0.5:.0%} of it)"
                 if sigma_between else "")  # (a fitted 0 has no share to give)
        notes.append(f"note: {where}: only {trace.num_groups} prompts (groups): the spreads and "
                     f"the drift rest on few of them{error}; {SMALL_GROUPS} or more give a steadier model")
    return notes


# the unit of each model parameter, as trace fit prints it (docs/metrics.md, "Trace fit"):
# tokens written tok, and log-tokens (natural log of a length in tokens) as simulate's regen_sigma
UNITS = {
    "max_response_len": "tok", "group_size": "samples per prompt",
    "prompts_per_step": "prompts", "mu0": "log-tokens", "sigma_between": "log-tokens",
    "sigma_within": "log-tokens", "drift": "log-tokens per step", "runaway_share": "share",
    "prompt_median": "tok", "prompt_sigma": "log-tokens", "prompt_min": "tok",
    "prompt_max": "tok", "runaway_drift": "share per step",
    "max_drift": "log-tokens per step", "pass_alpha": "Beta shape", "pass_beta": "Beta shape",
    "calls_per_token": "calls per token", "max_turns": "turns", "tool_median_s": "s",
    "tool_sigma": "log s", "tool_max_s": "s", "tool_zero_share": "share of calls",
    "obs_median": "tok", "obs_sigma": "log-tokens", "obs_max": "tok",
    "obs_zero_share": "share of calls",
}


def _shown(v: object, unit: str) -> str:
    """A parameter as printed (docs/metrics.md, "Trace fit"): counts and tokens with thousands
    separators (a float in tokens to 1 decimal), other floats to 4 significant digits."""
    if isinstance(v, float):
        return f"{v:,.1f}" if unit == "tok" else f"{v:.4g}"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def _params_table(model) -> Table:
    table = Table(title=f"length model of {escape(model.source)}")  # (a file name: not markup)
    table.add_column("parameter")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for f in dataclasses.fields(model):
        v = getattr(model, f.name)
        if f.name in ("fit", "source") or (v is None and f.name in TURN_FIELDS):
            continue  # (a model without turns has none of their fields)
        shown = "-" if v is None else _shown(v, UNITS[f.name])
        table.add_row(f.name, shown, UNITS[f.name])
    return table


def _fit_table(fit: dict) -> Table:
    table = Table(title=f"goodness of fit: KS statistic {fit['ks']:.4f} "
                        f"({fit['samples']:,} samples vs {fit['model_samples']:,} drawn)")
    table.add_column("response_len")
    table.add_column("data", justify="right")
    table.add_column("model", justify="right")
    table.add_column("unit")
    for row in fit["quantiles"]:
        table.add_row(f"p{round(row['q'] * 100)}",
                      *(fmt("response_len_quantile", row[k]) for k in ("data", "model")), "tok")
    table.add_row("mean", *(fmt("response_len_mean", fit[k]) for k in ("mean_data", "mean_model")), "tok")
    table.add_row("truncated share", f"{fit['truncated_data']:.4f}", f"{fit['truncated_model']:.4f}",
                  "share of samples")
    if "calls_data" in fit:  # a model with turns: its tool load per trajectory (means)
        table.add_section()
        for label, key, unit, digits in (("tool calls", "calls", "calls per trajectory", 3),
                                         ("tool time", "tool_s", "s per trajectory", 3),
                                         ("tool output", "tool_tokens", "tok per trajectory", 1)):
            table.add_row(label, f"{fit[key + '_data']:,.{digits}f}",
                          f"{fit[key + '_model']:,.{digits}f}", unit)
    return table


def register(app: typer.Typer) -> None:
    app.command("fit")(user_errors(fit_cmd))  # (one error line, Ctrl-C included)


__all__ = ["fit_cmd", "register"]
