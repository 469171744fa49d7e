"""Plain-text tables that fit the terminal without cutting a value.

Why not rich's tables: when a rich table is wider than the terminal it shortens cells with an
ellipsis, and a cut cell can change the meaning (``h100-llama3.1-…`` hides the ``-disagg`` that
changed the result). Here a cell is never cut. A table that is too wide first loses whole
columns, least important first, and says which ones it hid and how to see them (``--wide``,
``--json``). A note that explains one column (a :class:`Note`: a legend, a ratio's terms) goes
with it: a reader who cannot see the column has no use for its legend. Every table ends with
one line that points at docs/metrics.md, where every column is defined with its unit.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

GAP = "  "
UNITS = {"makespan_s": "s", "lower_bound_s": "s", "rollout_s": "s", "train_s": "s", "sync_s": "s",
         "tokens_per_s": "tok/s", "generated_tokens": "tok", "useful_tokens": "tok",
         "wasted_tokens": "tok", "recomputed_tokens": "tok", "staleness_mean": "versions",
         "staleness_p95": "versions", "staleness_max": "versions", "learnable_tokens": "tok",
         "learnable_tokens_per_s": "tok/s", "filtered_tokens": "tok", "offload_s": "s", "tool_s": "s",
         "sandbox_wait_s": "s", "regen_sigma": "log-tokens",
         # ratios (0-1; the tables' % columns are 100x them)
         "efficiency": "ratio", "bubble_ratio": "ratio", "gpu_idle_ratio": "ratio",
         "bubble_tool_ratio": "ratio", "bubble_tail_ratio": "ratio",
         # counts
         "updates": "count", "samples_total": "count", "samples_trained": "count",
         "groups_trained_whole": "count", "samples_in_split_groups": "count",
         "filtered_groups": "count", "preemptions": "count", "tool_calls": "count"}
# printed without a unit, and documented so in docs/metrics.md: text, a bool, the seed (an id)
UNITLESS = ("policy", "params", "label", "trace", "cluster", "seed", "regen", "oracle", "auto_params")
# One precision per figure, whichever table prints it (simulate's summary, compare and its
# --wide, tune and its cluster plan, forecast, validate, the report), so that a figure printed in
# two tables reads the same in both (docs/metrics.md, "Printed precision"). Counts and tokens
# are whole numbers; a ``%`` column is 100 x a ratio, at PERCENT (0.1 of a point, the ratio's
# third decimal).
RATIO = ".3f"
PERCENT = ".1f"
AS_PERCENT = ".1%"  # a ratio formatted as a % with its sign, at PERCENT (0.684 -> 68.4%)
FORMATS = {**dict.fromkeys(("makespan_s", "lower_bound_s", "rollout_s", "train_s", "tool_s",
                            "sandbox_wait_s", "step_s_p50", "step_s_p90", "step_s_max"), ",.1f"),
           **dict.fromkeys(("sync_s", "offload_s"), ",.2f"),  # (often under a second)
           **dict.fromkeys(("tokens_per_s", "learnable_tokens_per_s"), ",.0f"),
           **dict.fromkeys(("efficiency", "bubble_ratio", "gpu_idle_ratio", "bubble_tool_ratio",
                            "bubble_tail_ratio", "bubble_ratio_abs_err"), RATIO),
           "staleness_mean": ".2f", "regen_sigma": ".4f",
           "gpu_hours": ",.3f", "wall_h": ",.2f", "cost": ",.2f",
           # the calibrated contention factors (x step time), as calibrate and profile show print them
           **dict.fromkeys(("engine_contention", "train_contention", "engine_contention_one",
                            "train_contention_one", "ray_step_factor"), ".3f"),
           # a trace's response lengths (trace stats, trace fit): quantiles whole, means to 0.1
           "response_len_quantile": ",.0f", "response_len_mean": ",.1f"}


def fmt(key: str, value: float) -> str:
    """``value`` of the figure ``key`` at its one precision (FORMATS)."""
    return format(value, FORMATS[key])


def percent(ratio: float) -> str:
    """A ratio as a ``%`` cell: 100 x it at PERCENT, without the sign (the unit row has it)."""
    return format(100 * ratio, PERCENT)


def counted(n: int, noun: str) -> str:
    """``n noun`` with the noun's plural unless ``n`` is 1 ("1 trial", "3 trials")."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


METRICS_LINE = "columns are defined in docs/metrics.md; --json prints every field"


@dataclass(frozen=True)
class Col:
    title: str
    unit: str = ""
    hide: int = 0  # 0: always shown; when too wide, the column with the largest ``hide`` goes first
    left: bool = False


@dataclass(frozen=True)
class Note:
    """A note under a table that explains one column, printed only while that column is shown."""

    text: str
    column: str  # the ``Col.title`` it explains


def terminal_width(default: int = 100) -> int:
    """The width to fit: ``COLUMNS`` when set (even when not a terminal), else the terminal's."""
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def render(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None, title: str = "",
           notes: Sequence[str | Note] = (), footer: str = METRICS_LINE,
           text_width: int | None = None) -> str:
    """The table as text, at most ``width`` characters a line where its shown columns allow
    (``None``: no limit). ``notes`` are printed under the table, wrapped, before the footer (a
    :class:`Note` only when its column is shown); the title, notes and footer wrap at
    ``text_width`` when given, else at ``width``."""
    wrap_at = width if text_width is None else text_width
    widths = [max([len(c.title), len(c.unit)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    hidden: list[str] = []
    while width is not None and _total(widths, shown) > width:
        droppable = [i for i in shown if cols[i].hide > 0]
        if not droppable:
            break
        gone = max(droppable, key=lambda i: (cols[i].hide, i))
        shown.remove(gone)
        hidden.insert(0, cols[gone].title + (f" {cols[gone].unit}" if cols[gone].unit else ""))
    lines = _wrap(title, wrap_at)
    lines.append(_line([cols[i].title for i in shown], cols, widths, shown))
    if any(cols[i].unit for i in shown):
        lines.append(_line([cols[i].unit for i in shown], cols, widths, shown))
    lines.append("-" * _total(widths, shown))
    lines += [_line([r[i] for i in shown], cols, widths, shown) for r in rows]
    titles = {cols[i].title for i in shown}
    for note in notes:
        if isinstance(note, Note):
            if note.column not in titles:
                continue
            note = note.text
        lines += _wrap(note, wrap_at, indent="  ")
    if hidden:
        lines += _wrap(f"hidden to fit {width} columns: {', '.join(hidden)} (--wide shows them)", width)
    lines += _wrap(footer, wrap_at)
    return "\n".join(lines)


def key_value_table(rows: Sequence[tuple[str, Sequence[str], str]], heads: Sequence[str], title: str,
                    notes: Sequence[str] = (), width: int | None = None) -> str:
    """A metric-per-row table (``--wide``): every field, each policy a column, never cut (and
    never narrowed: its lines are as long as its columns need). ``notes`` (text too long for a
    column) follow it, wrapped at ``width``."""
    cols = [Col("metric", left=True), *(Col(h) for h in heads), Col("unit", left=True)]
    return render(cols, [[k, *vals, unit] for k, vals, unit in rows], None, title, notes,
                  text_width=width)


def cell(value: object, key: str = "") -> str:
    """A summary value as a table prints it: a figure at its precision in FORMATS, else by type."""
    if key in FORMATS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt(key, value)
    if isinstance(value, dict):
        return "\n".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in value.items()) or "defaults"
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if key in UNITLESS else f"{value:,}"  # (a seed is an id: no separators)
    return str(value)


def _total(widths: Sequence[int], shown: Sequence[int]) -> int:
    return sum(widths[i] for i in shown) + len(GAP) * max(0, len(shown) - 1)


def _line(cells: Sequence[str], cols: Sequence[Col], widths: Sequence[int], shown: Sequence[int]) -> str:
    parts = [cell.ljust(widths[i]) if cols[i].left else cell.rjust(widths[i]) for cell, i in zip(cells, shown, strict=True)]
    return GAP.join(parts).rstrip()


def _wrap(text: str, width: int | None, indent: str = "") -> list[str]:
    """Wrap at spaces only; a word longer than the line stays whole (it is never cut)."""
    if not text:
        return []
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [text]
