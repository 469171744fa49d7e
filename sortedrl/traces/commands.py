"""The ``sortedrl trace`` command group: import, synthesize and summarise length traces.

These are thin wrappers over :mod:`sortedrl.traces`; they exist so that traces can be made and
inspected from the shell. Every user error is a :class:`~sortedrl.errors.SortedRLError`, printed
as one ``error: ...`` line on stderr with exit code 2; outputs are written atomically, so a
failed command never leaves a half-written ``--out`` file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.traces.importer import import_table_with_report
from sortedrl.traces.io import read_trace, write_trace
from sortedrl.traces.stats import format_stats, trace_stats
from sortedrl.traces.synth import PRESETS, synthesize

app = typer.Typer(
    name="trace",
    no_args_is_help=True,
    help="Import, synthesize and summarise response-length traces.",
)


def _fail(e: SortedRLError) -> typer.Exit:
    typer.echo(f"error: {e}", err=True)
    return typer.Exit(e.exit_code)


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="Per-request table (CSV/JSONL), or with --from a "
                                              "framework's dump file or directory.")],
    out: Annotated[Path, typer.Option(help="Output trace (.jsonl, .csv or .parquet).")],
    prompt_len_col: Annotated[
        str | None, typer.Option(help="Column holding the prompt length (tables).")] = None,
    response_len_col: Annotated[
        str | None, typer.Option(help="Column holding the response length (tables).")] = None,
    group_size: Annotated[int, typer.Option(help="Consecutive rows per prompt (GRPO n).")] = 1,
    max_response_len: Annotated[
        int | None, typer.Option(help="Generation cap; longer rows are clipped. Default: max.")
    ] = None,
    source: Annotated[str | None, typer.Option(help="Source label. Default: file name.")] = None,
    framework: Annotated[str | None, typer.Option(
        "--from", help="Read a framework's own dump: verl, slime, nemo-rl or trl.")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="--from verl/trl: local tokenizer directory (its tokenizer.json) for token counts."
    )] = None,
) -> None:
    """Turn a public per-request table, or an RL framework's rollout dump, into a length trace."""
    if framework is not None:
        _import_framework(framework, file, out, tokenizer, max_response_len, source)
        return
    try:
        if prompt_len_col is None or response_len_col is None:
            raise ConfigError("give --prompt-len-col and --response-len-col for a table, "
                              "or --from FRAMEWORK for a framework's dump")
        trace, report = import_table_with_report(
            file, prompt_len_col, response_len_col, group_size, max_response_len, source
        )
        write_trace(trace, out)
    except SortedRLError as e:
        raise _fail(e) from None
    if report.dropped_rows:
        typer.echo(
            f"note: dropped {report.dropped_rows} trailing rows that do not fill a group of "
            f"{group_size}",
            err=True,
        )
    if report.clipped_rows:
        typer.echo(
            f"note: clipped {report.clipped_rows} responses to max_response_len "
            f"{trace.meta.max_response_len}",
            err=True,
        )
    typer.echo(
        f"wrote {out}: {report.rows} rows read, {report.prompts} prompts x {group_size}, "
        f"{report.dropped_rows} rows dropped, {report.clipped_rows} clipped"
    )


def _import_framework(framework: str, path: Path, out: Path, tokenizer: Path | None,
                      max_response_len: int | None, source: str | None) -> None:
    from sortedrl.traces.importers import import_framework

    try:
        trace, report = import_framework(framework, path, tokenizer, max_response_len, source)
        write_trace(trace, out)
    except SortedRLError as e:
        raise _fail(e) from None
    if report.dropped_groups:
        typer.echo(f"note: dropped {report.dropped_groups} groups ({report.dropped_rows} "
                   f"samples) with fewer than {report.group_size} samples", err=True)
    typer.echo(f"wrote {out}: {report.rows} samples from {report.files} {framework} file(s), "
               f"{report.groups} groups x {report.group_size} over {report.steps} step(s), "
               f"cap {trace.meta.max_response_len}")


@app.command("synth")
def synth_cmd(
    preset: Annotated[str, typer.Argument(help=f"One of: {', '.join(sorted(PRESETS))}.")],
    out: Annotated[Path, typer.Option(help="Output trace (.jsonl, .csv or .parquet).")],
    prompts: Annotated[int | None, typer.Option(help="Prompts per step.")] = None,
    group_size: Annotated[int | None, typer.Option(help="Samples per prompt (GRPO n).")] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    dataset_size: Annotated[
        int | None, typer.Option(help="Distinct prompts (default prompts x steps).")
    ] = None,
) -> None:
    """Draw a synthetic trace from a preset fitted to published length statistics."""
    try:
        trace = synthesize(preset, prompts, group_size, steps, seed, dataset_size)
        write_trace(trace, out)
    except SortedRLError as e:
        raise _fail(e) from None
    typer.echo(
        f"wrote {out}: {len(trace)} samples, {trace.prompts_per_step} prompts x "
        f"{trace.meta.group_size} per step, {trace.num_groups // trace.prompts_per_step} steps"
    )


@app.command("stats")
def stats_cmd(
    file: Annotated[Path, typer.Argument(help="Trace file (.jsonl, .csv or .parquet).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print only the stats as JSON.")] = False,
) -> None:
    """Print response-length statistics of a trace."""
    try:
        stats = trace_stats(read_trace(file))
    except SortedRLError as e:
        raise _fail(e) from None
    if as_json:
        typer.echo(json.dumps(stats, indent=2))
    else:
        Console().print(format_stats(stats))
