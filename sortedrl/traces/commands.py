"""The ``sortedrl trace`` command group: import, synthesize and summarise length traces.

These are thin wrappers over :mod:`sortedrl.traces`; they exist so that traces can be made and
inspected from the shell. Every user error is a :class:`~sortedrl.errors.SortedRLError`, printed
as one ``error: ...`` line on stderr with exit code 2; outputs are written atomically, so a
failed command never leaves a half-written ``--out`` file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from sortedrl import jsonio
from sortedrl.cli_common import err, user_errors
from sortedrl.cli_inputs import synthesized
from sortedrl.errors import ConfigError, TraceError
from sortedrl.limits import check_seed
from sortedrl.outputs import Outputs
from sortedrl.progress import Phases
from sortedrl.tables import METRICS_LINE, counted
from sortedrl.traces.fit_commands import register as _register_fit
from sortedrl.traces.importer import import_table_with_report
from sortedrl.traces.importer_groups import table_notes
from sortedrl.traces.importers import check_framework
from sortedrl.traces.io import FORMATS, bundled_names, read_trace, resolve_bundled, write_trace
from sortedrl.traces.stats import print_stats, trace_stats
from sortedrl.traces.synth import preset_names

app = typer.Typer(
    name="trace",
    no_args_is_help=True,
    help="Import, synthesize and summarise response-length traces.",
)


def _output(out: Path, force: bool, inputs: list[Path], scanned: list[Path] = ()) -> Outputs:
    """Check ``--out`` before any work: a known trace format, writable, not an input, not inside
    a dump directory (``scanned``)."""
    if out.is_dir():
        raise ConfigError(f"--out {out}: is a directory; give a trace file's name ({', '.join(FORMATS)})")
    if out.suffix.lower() not in FORMATS:
        raise TraceError(f"{out}: unknown trace format {out.suffix!r}; use one of {', '.join(FORMATS)}")
    outs = Outputs("trace", force, inputs=inputs, scanned=scanned)
    outs.file(out, "--out")
    return outs


# the options only some sources read, and why: given to another, each is an error, not ignored
ONLY_FOR = {
    "--decode-tps": (("areal",), "it stands in for the token counts AReaL does not log"),
    "--prompt-len": (("areal",), "it stands in for the token counts AReaL does not log"),
    "--tokenizer": (("verl", "trl"), "their dumps hold text; the others hold token counts"),
    "--reward-columns": (("trl",), "it names the reward-function columns of TRL's completions "
                                   "table"),
    "--group-size": ((None,), "a framework's dump gives its own groups"),
    "--prompt-len-col": ((None,), "a framework's dump is read in its own layout"),
    "--response-len-col": ((None,), "a framework's dump is read in its own layout"),
    "--step-col": ((None,), "a framework's dump is read in its own layout"),
    "--prompt-id-col": ((None,), "a framework's dump is read in its own layout"),
    "--reward-col": ((None,), "a framework's dump is read in its own layout"),
}

FORCE = typer.Option("--force", help="Overwrite an existing --out file (written atomically).")


@app.command("import")
@user_errors
def import_cmd(
    file: Annotated[Path, typer.Argument(help="Per-request table (CSV, JSONL or Parquet), or "
                                              "with --from a framework's dump file or directory.")],
    out: Annotated[Path, typer.Option(help="Output trace (.jsonl, .csv or .parquet).")],
    prompt_len_col: Annotated[
        str | None, typer.Option(help="Column holding the prompt length (tables).")] = None,
    response_len_col: Annotated[
        str | None, typer.Option(help="Column holding the response length (tables).")] = None,
    step_col: Annotated[str | None, typer.Option(
        help="Column holding each row's training step (tables): a step's rows are grouped apart.")] = None,
    prompt_id_col: Annotated[str | None, typer.Option(
        help="Column holding each row's prompt id (tables): a prompt's rows (in one step) form a "
             "group wherever they lie.")] = None,
    reward_col: Annotated[str | None, typer.Option(
        help="Column holding each row's reward (tables), for filter_groups.")] = None,
    group_size: Annotated[int | None, typer.Option(
        help="Rows per prompt (GRPO n; tables): consecutive rows, or a prompt id's. Default 1.",
        show_default=False)] = None,
    max_response_len: Annotated[
        int | None, typer.Option(help="Generation cap in tokens; a table's longer rows are clipped to it, a --from dump's "
                            "are refused (the framework generated them: the cap is not the run's). Default: the "
                            "longest row's length (its rows then count as truncated).")
    ] = None,
    source: Annotated[str | None, typer.Option(help="Source label. Default: file name.")] = None,
    framework: Annotated[str | None, typer.Option(
        "--from", help="Read a framework's own dump: verl, slime, nemo-rl, trl, areal (session "
                       "tracer) or nemo-gym (per-turn metrics).")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="--from verl/trl: local tokenizer directory (its tokenizer.json) for token counts."
    )] = None,
    decode_tps: Annotated[float | None, typer.Option(
        "--decode-tps", help="--from areal without per-turn token counts: one sequence's decode "
                             "rate, tokens/s; a turn's tokens are its generate seconds times it "
                             "(an estimate, printed as a note).")] = None,
    prompt_len: Annotated[int | None, typer.Option(
        help="--from areal without prompt_tokens: every sample's prompt tokens (default 1, "
             "printed as a note).")] = None,
    reward_columns: Annotated[str | None, typer.Option(
        "--reward-columns", help="--from trl: the reward-function columns and their "
                                 "reward_weights, NAME=WEIGHT,... (a name alone weighs 1); the "
                                 "reward is their weighted sum, as TRL's.")] = None,
    force: Annotated[bool, FORCE] = False,
) -> None:
    """Turn a public per-request table, or an RL framework's rollout dump, into a length trace."""
    if framework is not None:
        check_framework(framework)
    given = {"--decode-tps": decode_tps, "--prompt-len": prompt_len, "--tokenizer": tokenizer,
             "--reward-columns": reward_columns, "--group-size": group_size,
             "--prompt-len-col": prompt_len_col, "--response-len-col": response_len_col,
             "--step-col": step_col, "--prompt-id-col": prompt_id_col, "--reward-col": reward_col}
    for flag, (frameworks, why) in ONLY_FOR.items():  # an option that would be ignored
        if given[flag] is not None and framework not in frameworks:
            which = ("a table import, without --from" if frameworks == (None,)
                     else "--from " + " or ".join(frameworks))
            raise ConfigError(f"{flag}: only for {which} ({why}); remove it")
    for flag, value in (("--group-size", group_size), ("--max-response-len", max_response_len)):
        if value is not None and value < 1:  # (named as typed; the library call names its argument)
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    # a dump directory is read as a whole: an --out inside it would be read by the next import
    outs = _output(out, force, [file] if file.is_file() else [p for p in file.rglob("*") if p.is_file()],
                   [] if file.is_file() else [file])
    if framework is not None:
        _import_framework(framework, file, out, outs, dict(
            tokenizer=tokenizer, max_response_len=max_response_len, source=source,
            decode_tps=decode_tps, prompt_len=prompt_len, reward_columns=reward_columns))
        return
    if prompt_len_col is None or response_len_col is None:
        raise ConfigError("give --prompt-len-col and --response-len-col for a table, "
                          "or --from FRAMEWORK for a framework's dump")
    group_size = 1 if group_size is None else group_size
    with Phases(err) as progress:
        progress.phase(f"reading {file}")
        trace, report = import_table_with_report(
            file, prompt_len_col, response_len_col, group_size, max_response_len, source,
            step_col=step_col, prompt_id_col=prompt_id_col, reward_col=reward_col)
        outs.write({out: lambda p: write_trace(trace, p)}, progress.file)
    for note in table_notes(report, group_size, trace.meta.max_response_len, prompt_id_col is not None,
                            step_col is not None):
        typer.echo(note, err=True)
    if max_response_len is None and (said := _cap_note(trace)):
        typer.echo(said, err=True)
    steps = f" over {report.steps:,} step(s)" if report.steps else ""
    typer.echo(
        f"wrote {out}: {counted(report.rows, 'row')} read, {counted(report.prompts, 'prompt')} x {group_size:,}{steps}, "
        f"{counted(report.dropped_rows, 'row')} dropped, {report.clipped_rows:,} clipped"
    )


def _import_framework(framework: str, path: Path, out: Path, outs: Outputs, options: dict) -> None:
    from sortedrl.traces.importers import import_framework

    with Phases(err) as progress:
        progress.phase(f"reading {path}")
        trace, report = import_framework(framework, path, **options)
        outs.write({out: lambda p: write_trace(trace, p)}, progress.file)
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)
    if options["max_response_len"] is None and (said := _cap_note(trace)):
        typer.echo(said, err=True)
    if report.dropped_groups:
        typer.echo(f"note: dropped {counted(report.dropped_groups, 'group')} ({counted(report.dropped_rows, 'sample')}) "
                   f"whose size is not a multiple of the group size "
                   f"{report.group_size:,} (a filtered or aborted sample)", err=True)
    written = counted(len(trace), "sample")  # (a dropped group's samples were read, not written)
    if report.dropped_rows:
        written += (f" of {report.rows:,} read ({report.dropped_rows:,} dropped in groups whose size is "
                    f"not a multiple of {report.group_size:,})")
    typer.echo(f"wrote {out}: {written} from {report.files:,} {framework} file(s), "
               f"{counted(report.groups, 'group')} x {report.group_size:,} over {report.steps:,} step(s), "
               f"cap {trace.meta.max_response_len:,} tokens")


def _cap_note(trace) -> str | None:
    """Without --max-response-len the longest response is taken as the run's cap, so the
    responses of that length are marked truncated (``trace fit`` counts them as runaways): said,
    with how many, when several are (a pile-up at the longest length, which a real cap makes;
    one longest response alone is not said)."""
    cap, at_cap = trace.meta.max_response_len, int(np.count_nonzero(trace.truncated))
    if at_cap < 2:
        return None
    return (f"note: no --max-response-len: the longest response, {cap:,} tokens, is taken as the run's cap, so "
            f"the {at_cap:,} responses of that length ({100 * at_cap / len(trace):.1f}% of {len(trace):,}) are "
            "marked truncated (finish reason length); give the run's cap if it was larger")


@app.command("synth")
@user_errors
def synth_cmd(
    preset: Annotated[str, typer.Argument(help=f"One of: {', '.join(preset_names())}.")],
    out: Annotated[Path, typer.Option(help="Output trace (.jsonl, .csv or .parquet).")],
    prompts: Annotated[int | None, typer.Option(
        help="Prompts per step (default: the preset's, 128; agentic-retool 64, agentic-swe 32).", show_default=False)] = None,
    group_size: Annotated[int | None, typer.Option(
        help="Samples per prompt, GRPO n (default: the preset's, 8; agentic-retool 16).", show_default=False)] = None,
    steps: Annotated[int, typer.Option(help="Training steps (the first is every policy's warm-up).")] = 4,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    dataset_size: Annotated[
        int | None, typer.Option(help="Distinct prompts (default prompts x steps).")
    ] = None,
    max_response_len: Annotated[int | None, typer.Option(
        help="Generation cap in tokens (default: the preset's, 8,192 for logic-8k, 16,384 for math-16k): "
             "the same length model cut at another cap, e.g. 32768", show_default=False)] = None,
    force: Annotated[bool, FORCE] = False,
) -> None:
    """Draw a synthetic trace from a preset fitted to published length statistics."""
    check_seed(seed)
    outs = _output(out, force, [])
    with Phases(err) as progress:
        progress.phase(f"drawing {preset}")
        trace = synthesized(preset, prompts, group_size, steps, seed, dataset_size, max_response_len)
        outs.write({out: lambda p: write_trace(trace, p)}, progress.file)
    typer.echo(
        f"wrote {out}: {counted(len(trace), 'sample')}, {counted(trace.prompts_per_step, 'prompt')} x "
        f"{trace.meta.group_size} per step, {counted(trace.num_steps, 'step')}"
    )


_register_fit(app)


@app.command("stats")
@user_errors
def stats_cmd(
    file: Annotated[Path, typer.Argument(
        callback=resolve_bundled,
        help="Trace file (.jsonl, .csv or .parquet), or a bundled trace by its name: "
             f"{', '.join(bundled_names())}.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print only the stats as JSON.")] = False,
) -> None:
    """Print response-length statistics of a trace."""
    with Phases(err) as progress:
        progress.phase(f"reading {file}")
        trace = read_trace(file)
        progress.phase("computing statistics")
        stats = trace_stats(trace)
    if as_json:
        typer.echo(jsonio.dumps(stats, f"{file}: the statistics", indent=2))
    else:
        print_stats(stats)
        typer.echo(METRICS_LINE)
