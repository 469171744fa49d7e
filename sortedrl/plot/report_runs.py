"""``sortedrl report RUN1 RUN2 ...``: run directories side by side, real or simulated.

Why it exists: ``report DIR`` compares the runs that ``compare`` or ``tune`` laid out together,
on one trace and cluster. Real runs are made one at a time (``sortedrl run --policy sync --out
runs/sync``, then ``--policy sortedrl --out runs/sortedrl``), each in its own directory, and
nothing gathered them. This module reads any two or more run directories (``sortedrl run``'s,
``sortedrl simulate``'s, or a compare's ``DIR/LABEL``) and draws the page a compare directory
gets (:mod:`sortedrl.plot.report`: its bars and headline table), with what runs from anywhere
need besides:

- a label per run, its directory's name; names that clash get their parents' names in front,
  as many as it takes (``a/sync`` and ``b/sync`` for ``runs/a/sync`` and ``runs/b/sync``);
- whether each run is real (vLLM) or simulated, from its timeline's meta ``backend`` (a
  summary has none), and the policy and knobs it ran; a real run has no lower bound, so its
  efficiency is ``-`` (:func:`sortedrl.run_summary.has_no_bound`);
- a note naming what differs when the runs are on different traces or clusters, or mix real
  and simulated runs: their numbers are then not a like-for-like comparison. Traces are told
  apart by the fingerprint each run's meta records (``trace_digest``:
  :mod:`sortedrl.traces.digest`) when every run has one, else by name.

The length histogram is one figure with one outline per run, as the share of that run's
finished samples in each bin, not one histogram per trace: a real run's lengths are what its
model wrote, which differ between runs of one task (the policy changes what the model learns),
and a simulation may draw a regenerated sample's length afresh, so a trace name does not pin a
run's lengths. Shares rather than counts, so that runs of different sizes read on one axis.

Everything is checked before any figure is drawn, each problem one :class:`PlotError` naming
the directory: one given twice, one that does not exist, a compare or tune directory among
runs, a directory holding no run, a broken summary or timeline.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from sortedrl import jsonio
from sortedrl.plot.inputs import BAR_KEYS, PlotError, check_dir, load_run
from sortedrl.plot.page import figure_div, page
from sortedrl.plot.report import (
    HIST_BINS,
    PALETTE,
    bars_figure,
    headline_numbers,
    headline_table,
    response_lengths,
    timeline_cell,
)
from sortedrl.policies.auto import knob_text
from sortedrl.run_summary import is_finished, is_real_run
from sortedrl.timeline_file import NAMES

RUN_FILES = ("summary.json", *NAMES)
"""What makes a directory a run's: its summary and its timeline (either format)."""

REAL, SIMULATED = "real (vLLM)", "simulated"


@dataclass(frozen=True)
class Run:
    """One run directory as the page shows it."""

    path: Path
    label: str
    summary: dict
    kind: str  # REAL or SIMULATED, ", unfinished" added to a real run still going
    lengths: np.ndarray  # response lengths of its finished samples (tokens)
    group_size: int | None = None  # responses per prompt (the timeline's meta)
    digest: str | None = None  # the trace's fingerprint (the meta's trace_digest: traces/digest.py)

    @property
    def real(self) -> bool:
        return self.kind.startswith(REAL)


# -- checks, before anything is read ------------------------------------------------------------

def check_runs(dirs: list[Path]) -> None:
    """Each of ``dirs`` a distinct directory holding one run (not a compare or tune directory)."""
    seen: dict[Path, Path] = {}
    for d in dirs:
        check_dir(d, "a run directory")
        if not d.is_dir():
            raise PlotError(f"{d}: no such directory")
        if (same := seen.get(d.resolve())) is not None:
            twice = f"given twice ({same} and {d})" if str(same) != str(d) else "given twice"
            raise PlotError(f"{d}: {twice}; give each run once")
        seen[d.resolve()] = d
        for name, what in (("compare.json", "compare"), ("tune.json", "tune")):
            if (d / name).exists():
                runs = ", or give its runs' directories" if what == "compare" else ""  # (tune keeps none)
                raise PlotError(f"{d}: a {what} directory ({name}), not a run: report it alone "
                                f"(`sortedrl report {d}`){runs}")
        if not any((d / name).is_file() for name in RUN_FILES):
            raise PlotError(f"{d}: not a run directory (no {', '.join(RUN_FILES)}): give "
                            "directories written by `sortedrl run` or `sortedrl simulate`")


def runs_inputs(dirs: list[Path]) -> list[Path]:
    """Every file the report of ``dirs`` reads or links (a run's ``timeline.html``): its
    ``--out`` may never replace one."""
    return [d / name for d in dirs for name in (*RUN_FILES, "timeline.html")]


def run_labels(dirs: list[Path]) -> list[str]:
    """Each directory's name as given (a symbolic link's own name, not its target's); where
    names clash, as many parent names in front as make them differ (the paths are distinct once
    resolved, so their absolute forms are, and the whole path always differs)."""
    paths = [Path(os.path.abspath(d)) for d in dirs]
    parts = [p.parts for p in paths]
    depth = [1] * len(dirs)

    def label(i: int) -> str:
        return str(paths[i]) if depth[i] >= len(parts[i]) else "/".join(parts[i][-depth[i]:])

    while True:
        labels = [label(i) for i in range(len(dirs))]
        clash = [i for i, x in enumerate(labels) if labels.count(x) > 1 and depth[i] < len(parts[i])]
        if not clash:
            return labels
        for i in clash:
            depth[i] += 1


# -- reading -------------------------------------------------------------------------------------

def load_runs(dirs: list[Path]) -> list[Run]:
    """The runs in ``dirs``, checked, labelled and summarised (:func:`load_run` for each)."""
    check_runs(dirs)
    runs = []
    for d, label in zip(dirs, run_labels(dirs), strict=True):
        tl, summary = load_run(d)
        for key in BAR_KEYS:  # (read_summary checks the others; staleness_mean is drawn too)
            if not jsonio.finite(summary.get(key)):
                raise PlotError(f"{d / 'summary.json'}: field {key!r}: expected a finite number "
                                "(delete the file to recompute the summary from the timeline)")
        kind = SIMULATED
        if is_real_run(tl.meta):
            kind = REAL if is_finished(d, tl.meta) else f"{REAL}, unfinished"
        digest = tl.meta.get("trace_digest")
        runs.append(Run(d, label, summary, kind, response_lengths(tl), tl.meta.get("group_size"),
                        digest if isinstance(digest, str) and digest else None))
    return runs


def unlike_note(runs: list[Run]) -> str | None:
    """Why the runs' numbers are not like-for-like (traces, their sizes and group sizes,
    clusters, real beside simulated), naming the runs of each value; None when they agree. (A
    trace's name alone does not say its size: a synthetic one is named by its preset, a real
    run's by its task; traces are compared by contents when every run has a fingerprint.)"""
    differ = []
    for key, name in (("trace", "trace"), ("samples_total", "samples"), ("group_size", "group size"),
                      ("cluster", "cluster")):
        groups: dict[str, list[str]] = {}
        for run in runs:
            value = run.group_size if key == "group_size" else run.summary.get(key)
            value = f"{value:,}" if isinstance(value, int) else str(value if value is not None else "?")
            groups.setdefault(value, []).append(run.label)
        if key == "trace" and all(run.digest for run in runs):
            groups = trace_groups(runs)
        if len(groups) > 1:
            each = "; ".join(f"{value}: {', '.join(labels)}" for value, labels in groups.items())
            differ.append(f"{name} ({each})")
    if len({run.real for run in runs}) > 1:  # (measured beside costed by a model)
        each = [", ".join(r.label for r in runs if r.real is real) for real in (True, False)]
        differ.append(f"backend (vLLM: {each[0]}; simulated: {each[1]})")
    if not differ:
        return None
    listed = " and ".join([", ".join(differ[:-1]), differ[-1]] if len(differ) > 1 else differ)
    return f"the runs differ in {listed}: not a like-for-like comparison"


def trace_groups(runs: list[Run]) -> dict[str, list[str]]:
    """The runs' labels by the contents of their traces (every run has a fingerprint), each group
    shown by its traces' names and the fingerprint's first 8 digits: ``trace.jsonl #1a2b3c4d``.
    A real run's trace and a simulation of it are one group; two files named alike, or a preset
    under two seeds, are two."""
    labels: dict[str, list[str]] = {}
    names: dict[str, list[str]] = {}
    for run in runs:
        labels.setdefault(run.digest, []).append(run.label)
        name = str(run.summary.get("trace", "?"))
        if name not in names.setdefault(run.digest, []):
            names[run.digest].append(name)
    return {f"{'/'.join(names[d])} #{d[:8]}": labels[d] for d in labels}


# -- the page ------------------------------------------------------------------------------------

def lengths_figure(runs: list[Run]) -> go.Figure:
    """One outline per run: the share of its finished samples in each response-length bin,
    the bins common to all runs."""
    top = max((int(r.lengths.max()) for r in runs if r.lengths.size), default=1)
    edges = np.histogram_bin_edges([], bins=HIST_BINS, range=(0, max(top, 1)))
    fig = go.Figure()
    for i, run in enumerate(runs):
        if not run.lengths.size:
            continue
        counts, _ = np.histogram(run.lengths, bins=edges)
        share = 100 * counts / run.lengths.size
        fig.add_trace(go.Scatter(
            x=edges, y=np.append(share, share[-1]), mode="lines", line={"shape": "hv", "width": 2,
                                                                        "color": PALETTE[i % len(PALETTE)]},
            name=f"{run.label} ({run.lengths.size:,} samples, mean {run.lengths.mean():,.0f} tokens)",
            customdata=np.stack([edges, np.append(edges[1:], edges[-1]), np.append(counts, counts[-1])], axis=1),
            hovertemplate=f"{html.escape(run.label)}<br>%{{customdata[0]:.0f}} to %{{customdata[1]:.0f}} "
                          "tokens<br>%{customdata[2]} samples (%{y:.1f}%)<extra></extra>"))
    fig.update_layout(title={"text": "Response lengths of each run's finished samples", "x": 0.01,
                             "font": {"size": 13}},
                      height=420, plot_bgcolor="white", xaxis_title="response length (tokens)",
                      yaxis_title="samples (% of the run's)", legend={"title": {"text": "run"}})
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee", rangemode="tozero")
    return fig


def knobs(summary: dict) -> str:
    """The knobs a run's policy ran with, as ``simulate`` and ``run`` print them."""
    params, auto = summary.get("params"), summary.get("auto_params")
    return knob_text(params if isinstance(params, dict) else {}, auto if isinstance(auto, dict) else {})


def runs_page(runs: list[Run], out: Path) -> str:
    """The report page of ``runs``, to be written at ``out`` (its links are relative to it)."""
    entries = [{**r.summary, "label": r.label} for r in runs]
    where = "; ".join(f"{r.label}: {r.path} ({r.kind})" for r in runs)
    parts = [f"<h1>Report: {len(runs)} runs</h1>",
             f'<p class="note">Bars from each run\'s summary: {html.escape(where)}.</p>']
    if note := unlike_note(runs):
        parts.append(f'<p class="note"><strong>Note: {html.escape(note)}.</strong></p>')
    if any(s.get("oracle") for s in entries):
        parts.append('<p class="note">Hatched bars are oracle runs: upper references that read '
                     "true lengths, not deployable policies.</p>")
    parts.append(figure_div(bars_figure(entries, "Runs", "run"), "bars"))
    if any(r.lengths.size for r in runs):
        parts.append(figure_div(lengths_figure(runs), "lengths"))
    empty = [r.label for r in runs if not r.lengths.size]
    if empty:
        parts.append(f'<p class="note">No finished samples, no lengths: {html.escape(", ".join(empty))}.</p>')
    rows = [(r.label + (" (oracle)" if r.summary.get("oracle") else ""), r.kind,
             str(r.summary.get("policy", "?")), knobs(r.summary), str(r.summary.get("trace", "?")),
             str(r.summary.get("cluster", "?")), *headline_numbers(r.summary),
             timeline_cell(r.path / "timeline.html", out.parent)) for r in runs]
    parts += ["<h2>Headline numbers</h2>",
              headline_table(("run", "backend", "policy", "knobs", "trace", "cluster"), rows)]
    return page(f"report: {', '.join(r.label for r in runs)}", parts)
