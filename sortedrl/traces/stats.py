"""Summary statistics of a length trace, for ``sortedrl trace stats`` and for checking presets.

The statistics are the ones that published RL-rollout numbers are quoted in (median, P75, P99/P50,
truncated share, mean/cap; see ``docs/traces.md``), so a trace can be compared with the sources
directly. ``p99_p50_not_truncated`` is taken over the samples that ended on their own, because
with a few percent of samples at the cap the overall P99 is the cap itself.

A real run's trace may hold rows whose response never finished (``finish_reason`` ``abort``:
their length was never observed and is written as the cap, see docs/traces.md). The length
statistics leave them out and ``unfinished`` counts them; ``count`` and the group counts keep
every row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from sortedrl.errors import TraceError
from sortedrl.tables import fmt, percent
from sortedrl.traces.schema import Trace

PERCENTILES = (50, 75, 90, 95, 99)
MAX_STEP_ROWS = 20  # format_stats shows the first and last steps beyond this many


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Return a JSON-serialisable dict of the trace's length statistics."""
    observed = observed_rows(trace)
    r = trace.response_len[observed]
    truncated = trace.truncated[observed]
    cap = trace.meta.max_response_len
    finished = r[~truncated]
    pct = np.percentile(r, PERCENTILES)
    out: dict[str, Any] = {
        "source": trace.meta.source,
        "count": len(trace),
        "prompts": int(np.unique(trace.prompt_id).size),
        "groups": trace.num_groups,
        "steps": int(np.unique(trace.step).size) if trace.step is not None else None,
        "group_size": trace.meta.group_size,
        "max_response_len": cap,
        "response_len_mean": float(r.mean()),
        "response_len_min": int(r.min()),
        "response_len_max": int(r.max()),
    }
    if not observed.all():
        out["unfinished"] = int((~observed).sum())
    for q, v in zip(PERCENTILES, pct, strict=True):
        out[f"response_len_p{q}"] = float(v)
    if finished.size:
        out["p99_p50_not_truncated"] = float(np.percentile(finished, 99) / np.median(finished))
    else:
        out["p99_p50_not_truncated"] = None
    out["truncated_share"] = float(truncated.mean())
    out["mean_over_cap"] = float(r.mean() / cap)
    out["prompt_len_mean"] = float(trace.prompt_len.mean())
    if trace.reward is not None:
        out["reward_mean"] = float(trace.reward.mean())
    if trace.turn_offsets is not None:
        out.update(turn_stats(trace, observed))
    if trace.step is not None:
        steps, inverse, counts = np.unique(trace.step, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        seen = np.bincount(inverse, weights=observed, minlength=steps.size)
        sums = np.bincount(inverse, weights=np.where(observed, trace.response_len, 0).astype(np.float64),
                           minlength=steps.size)
        out["per_step"] = [
            {"step": int(s), "samples": int(c), "mean_response_len": float(t / k) if k else None}
            for s, c, t, k in zip(steps, counts, sums, seen, strict=True)
        ]
    return out


def observed_rows(trace: Trace) -> np.ndarray:
    """Whether each row's response length was observed: every row but the ``abort`` ones of a
    real run's trace. Refuses a trace with no observed row."""
    if trace.finish_reason is None:
        return np.ones(len(trace), dtype=bool)
    observed = trace.finish_reason != "abort"
    if not observed.any():
        raise TraceError(f"{trace.meta.source or 'the trace'}: every row is unfinished "
                         "(finish_reason abort): no response length was observed")
    return observed


def turn_stats(trace: Trace, rows: np.ndarray | None = None) -> dict[str, Any]:
    """Turns per trajectory and tool time, for a trace with turns (units in docs/traces.md),
    over the rows ``rows`` selects (all by default)."""
    all_turns = np.diff(trace.turn_offsets)
    rows = np.ones(all_turns.size, dtype=bool) if rows is None else rows
    turns = all_turns[rows]
    mine = np.repeat(rows, all_turns)  # per turn: its row is selected
    called = np.ones(trace.turn_gen.size, dtype=bool)
    called[trace.turn_offsets[1:] - 1] = False  # no tool call after a trajectory's last turn
    tool_s = trace.turn_tool_s[called & mine]
    per_row_tool_s = np.add.reduceat(trace.turn_tool_s, trace.turn_offsets[:-1])[rows]
    out: dict[str, Any] = {
        "turns_mean": float(turns.mean()),
        "turns_p50": float(np.percentile(turns, 50)),
        "turns_p99": float(np.percentile(turns, 99)),
        "turns_max": int(turns.max()),
        "gen_tokens_per_turn_mean": float(trace.turn_gen[mine].mean()),
        "tool_calls": int(tool_s.size),
        "tool_s_per_trajectory_mean": float(per_row_tool_s.mean()),
    }
    if tool_s.size:
        p50, p99 = np.percentile(tool_s, [50, 99])
        out.update(tool_s_mean=float(tool_s.mean()), tool_s_p50=float(p50),
                   tool_s_p99=float(p99), tool_s_max=float(tool_s.max()),
                   tool_tokens_per_call_mean=float(trace.turn_tool_tokens[called & mine].mean()))
    return out


_LABELS = {
    "source": "source",
    "count": "samples",
    "prompts": "distinct prompts",
    "groups": "groups (prompt x step)",
    "steps": "steps",
    "group_size": "group size n",
    "max_response_len": "max response len (cap)",
    "response_len_mean": "response len mean",
    "response_len_min": "response len min",
    "response_len_max": "response len max",
    "unfinished": "unfinished (abort, left out)",
    **{f"response_len_p{q}": f"response len p{q}" for q in PERCENTILES},
    "p99_p50_not_truncated": "p99/p50 (not truncated)",
    "truncated_share": "truncated share",
    "mean_over_cap": "mean / cap",
    "prompt_len_mean": "prompt len mean",
    "reward_mean": "reward mean",
    "turns_mean": "turns per trajectory mean",
    "turns_p50": "turns per trajectory p50",
    "turns_p99": "turns per trajectory p99",
    "turns_max": "turns per trajectory max",
    "gen_tokens_per_turn_mean": "generated tokens per turn mean",
    "tool_calls": "tool calls",
    "tool_s_mean": "tool time per call mean",
    "tool_s_p50": "tool time per call p50",
    "tool_s_p99": "tool time per call p99",
    "tool_s_max": "tool time per call max",
    "tool_s_per_trajectory_mean": "tool time per trajectory mean",
    "tool_tokens_per_call_mean": "tool-output tokens per call mean",
}


# The unit of each statistic as the table prints it (docs/metrics.md defines each, with the
# table's label of each key): tok (tokens), s, count, turns, ratio (a share, 0-1), x (a
# multiple: p99/p50), % (truncated_share: a 0-1 share in the JSON, printed x100 to 1 decimal),
# reward (the task's own scale); the source is text.
UNITS = {"source": "", "count": "count", "prompts": "count", "groups": "count", "steps": "count",
         "group_size": "count", "max_response_len": "tok", "response_len_mean": "tok",
         "response_len_min": "tok", "response_len_max": "tok", "unfinished": "count",
         **{f"response_len_p{q}": "tok" for q in PERCENTILES},
         "p99_p50_not_truncated": "x", "truncated_share": "%", "mean_over_cap": "ratio",
         "prompt_len_mean": "tok", "reward_mean": "reward", "turns_mean": "turns",
         "turns_p50": "turns", "turns_p99": "turns", "turns_max": "turns",
         "gen_tokens_per_turn_mean": "tok", "tool_calls": "count", "tool_s_mean": "s",
         "tool_s_p50": "s", "tool_s_p99": "s", "tool_s_max": "s", "tool_s_per_trajectory_mean": "s",
         "tool_tokens_per_call_mean": "tok"}
STEP_UNITS = {"step": "", "samples": "count", "mean_response_len": "tok"}  # per_step's keys
# Printed whole, as the response lengths' quantiles: the percentiles of turns (NumPy's linear
# interpolation can fall between two counts; turns_max is an int), beside their mean to 0.1
WHOLE = ("turns_p50", "turns_p99")


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if key == "truncated_share":  # (a % figure: 100 x the share, 1 decimal, the unit cell says %)
            return percent(v)
        if key in ("mean_over_cap", "reward_mean", "p99_p50_not_truncated") or "tool_s" in key:
            return f"{v:.3f}"
        if key.startswith("response_len_p") or key in WHOLE:  # (quantiles: whole, as trace fit prints them)
            return fmt("response_len_quantile", v)
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def format_stats(stats: dict[str, Any]) -> Group:
    """A rich renderable: a statistics table, plus a per-step table when the trace has steps.
    Text from the trace (its source) is shown as it is, never read as rich markup; only the
    value column may narrow, and a value too long for it folds onto the next line, never cut
    (:func:`print_stats` keeps the console wide enough for every cell but the source)."""
    table = Table(title="trace statistics", show_header=True, header_style="bold")
    table.add_column("statistic", no_wrap=True)
    table.add_column("value", justify="right", overflow="fold")
    table.add_column("unit", no_wrap=True)
    for key, label in _LABELS.items():
        if key in stats:
            table.add_row(label, escape(_fmt(key, stats[key])), UNITS[key])
    parts: list[Table] = [table]
    per_step = stats.get("per_step")
    if per_step:
        steps = Table(title="per step", show_header=True, header_style="bold")
        for col in ("step", "samples (count)", "mean response len (tok)"):
            steps.add_column(col, justify="right", no_wrap=True)
        rows = per_step
        if len(rows) > MAX_STEP_ROWS:
            half = MAX_STEP_ROWS // 2
            rows = rows[:half] + [None] + rows[-half:]
        for row in rows:
            if row is None:
                steps.add_row("...", "...", "...")
            else:
                steps.add_row(
                    str(row["step"]), f"{row['samples']:,}",
                    _fmt("mean_response_len", row["mean_response_len"])
                )
        parts.append(steps)
    return Group(*parts)


def print_stats(stats: dict[str, Any], console: Console | None = None) -> None:
    """Print :func:`format_stats`'s tables on a console at least as wide as their every cell but
    the source (which folds): a number or label is never cut or split, and a terminal narrower
    than that wraps the lines instead, as :mod:`sortedrl.tables` keeps a cell whole."""
    console = console or Console()
    bare = format_stats({k: v for k, v in stats.items() if k != "source"})
    need = Measurement.get(console, console.options.update(max_width=10_000), bare).maximum
    if console.width < need:
        console.width = need
    console.print(format_stats(stats))
