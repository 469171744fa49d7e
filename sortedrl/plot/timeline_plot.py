"""``sortedrl plot``: one run's timeline as a self-contained interactive HTML page.

The page answers "where did the time go?" for one policy on one trace and cluster. Three panels
share the time axis (seconds since the start of the run):

1. *Lanes*: one per engine (rollout, prefill stalls, idle) and one for the trainer (train, sync,
   idle); idle time is shaded grey as bubble.
2. *Running batch size*: samples in the running batch, in total and per engine, against the
   ``engines x max_num_seqs`` slots; the grey gap between them is empty slots.
3. *Samples*: for a run with at most :data:`~sortedrl.plot.lanes.DETAIL_LIMIT` spans, one bar
   per span (row = sample id) coloured by the policy version that generated it; above that, the
   running batch split by version as stacked occupancy curves over
   :data:`~sortedrl.plot.lanes.BINS` time bins, and lanes rasterised to the same bins, so that a
   million-sample page stays a few MB (plotly.js itself is 4.7 MB of it).

Below the figure, a table with one row per update (``train`` record).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from sortedrl.metrics import summarize
from sortedrl.plot import lanes as L
from sortedrl.plot.page import atomic_write, figure_div, page, table
from sortedrl.timeline import Timeline

COLORS = {"rollout": "#4c78a8", "prefill": "#f58518", "idle": "#d0d0d0", "train": "#54a24b",
          "sync": "#b279a2", "capacity": "#222222", "total": "#222222", "offload": "#e45756",
          "onload": "#72b7b2", "tool": "#9d755d", "sandbox_full": "#d62728"}
VERSION_SCALE = "Viridis"
MAX_VERSION_GROUPS = 12  # stacked occupancy curves of a large run: at most this many version groups
STEP_COLUMNS = ("update", "version", "start (s)", "end (s)", "duration (s)", "samples",
                "prompt+response tokens")
"""The steps table's headers: its tokens are the ``train`` record's, prompt + response, where
``metrics.jsonl``'s ``tokens`` of the same update are the response tokens in the loss (a header
``tokens`` read as the same figure)."""
STEP_FORMATS = (",d", ",d", ",.3f", ",.3f", ",.3f", ",d", ",d")
"""One precision down each column of the steps table (the default by size switched from 931.479
to 1,010.0 within the start column)."""
STEP_ROWS_SHOWN = 5000
LEGEND_PX = 20


def title_of(tl: Timeline, summary: dict) -> str:
    """What ran, then the headline numbers, on two lines: on one line the title ran past the
    right edge of an 800 px window and was clipped mid-number."""
    m = tl.meta
    oracle = " [ORACLE: reads true lengths]" if m.get("oracle") else ""
    return (f"{m['policy']} on {m['trace']} ({m['cluster']}){oracle}<br>"
            f"makespan {summary['makespan_s']:,.1f} s | bubble {summary['bubble_ratio']:.1%} | "
            f"{summary['tokens_per_s']:,.0f} useful tokens/s")


def int_dtick(span: float, ticks: int = 10) -> int:
    """A tick step of 1, 2, 5, 10, 20, 50, ... giving at most ``ticks`` ticks over ``span``: the
    axes of integers (sample ids, policy versions) would otherwise get ticks at 0.5 or -0.4."""
    scale = 1
    while True:
        for m in (1, 2, 5):
            if span / (m * scale) <= ticks:
                return m * scale
        scale *= 10


def step_rows(tl: Timeline) -> list[tuple]:
    """One row per update: index, version, start, end, duration (s), samples, prompt + response
    tokens (the ``train`` record's)."""
    tr = tl.columns("train")
    return [(u, v, t0, t1, t1 - t0, n, k) for u, (t0, t1, v, n, k) in enumerate(zip(
        tr["t"].tolist(), tr["t_end"].tolist(), tr["version"].tolist(),
        tr["samples"].lengths().tolist(), tr["tokens"].tolist(), strict=True))]


def timeline_figure(tl: Timeline, summary: dict | None = None,
                    ln: L.Lanes | None = None) -> go.Figure:
    """The three-panel timeline figure of ``tl`` (see the module docstring); ``ln``: its lanes
    if the caller has them (``plot --perfetto`` draws both from one span table)."""
    summary = summary if summary is not None else summarize(tl)
    ln = ln if ln is not None else L.lanes(tl)
    E = ln.engines
    # each panel tall enough for its lanes and for its legend (about 20 px an entry)
    heights = [max(34 * (E + 1) + 40, LEGEND_PX * (2 * E + 3) + 40),
               max(260, LEGEND_PX * (E + 2) + 40), max(380, LEGEND_PX * MAX_VERSION_GROUPS + 60)]
    third = ("Samples, coloured by the policy version that generated them" if ln.detailed else
             f"Running samples by policy version (mean over {L.BINS} time bins; the run is too "
             "large for one bar per sample)")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=70 / sum(heights),
                        row_heights=[h / sum(heights) for h in heights],
                        subplot_titles=("Lanes: what each engine and the trainer is doing",
                                        "Running batch size", third))
    _lanes(fig, ln)
    _batch(fig, ln)
    if ln.detailed:
        _sample_bars(fig, ln)
    else:
        _version_curves(fig, ln)
    top = 105  # the title is two lines
    side = {"x": 1.01, "xanchor": "left", "yanchor": "top", "traceorder": "normal"}
    fig.update_layout(
        title={"text": title_of(tl, summary), "x": 0.01, "xanchor": "left", "font": {"size": 15}},
        height=sum(heights) + top + 60, margin={"t": top, "r": 40, "l": 90, "b": 60},
        barmode="overlay", bargap=0.0, plot_bgcolor="white", hovermode="closest",
        legend={**side, "title": {"text": "lanes"}, "y": fig.layout.yaxis.domain[1],
                "tracegroupgap": 2},
        legend2={**side, "title": {"text": "batch size"}, "y": fig.layout.yaxis2.domain[1]},
        legend3={**side, "title": {"text": "policy version"}, "y": fig.layout.yaxis3.domain[1]},
    )
    for row in (1, 2, 3):
        fig.update_xaxes(title_text="time (s)", showticklabels=True, range=[0, ln.makespan or 1],
                         showgrid=True, gridcolor="#eeeeee", zeroline=False, row=row, col=1)
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee", zeroline=False)
    moves = ["offload/onload"] if ln.offload is not None else []
    moves += ["tool calls"] if ln.tool is not None else []
    fig.update_yaxes(title_text="lane", tickvals=list(range(E + 1 + len(moves))),
                     ticktext=[f"engine {e}" for e in range(E)] + ["trainer"] + moves,
                     autorange="reversed", showgrid=False, row=1, col=1)
    fig.update_yaxes(title_text="running samples", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="sample (id)" if ln.detailed else "running samples",
                     rangemode="tozero", row=3, col=1)
    if ln.detailed:
        ids = int(ln.spans["sample"].max()) + 1 if ln.spans.size else 1
        fig.update_yaxes(autorange="reversed", tick0=0, dtick=int_dtick(ids), row=3, col=1)
    return fig


def _hbar(fig: go.Figure, bars: L.Bars, name: str, color: str, group: str) -> None:
    exact = bool(np.all(bars.thickness == L.BAND))
    share = "" if exact else "<br>%{customdata:.1%} of each bin"
    fig.add_trace(go.Bar(
        base=np.round(bars.base, 6), x=np.round(bars.length, 6), y=np.round(bars.y, 6),
        width=L.BAND if exact else np.round(bars.thickness, 6), orientation="h", name=name,
        legendgroup=group, marker={"color": color, "line": {"width": 0}},
        customdata=None if exact else np.round(bars.thickness / L.BAND, 4),
        hovertemplate=f"{name}<br>from %{{base:.3f}} s for %{{x:.3f}} s{share}<extra></extra>"),
        row=1, col=1)


def _lanes(fig: go.Figure, ln: L.Lanes) -> None:
    """Exact bars for a small run; a large run's lanes binned (thickness = share of the bin)."""
    E = ln.engines
    lanes = [[ln.rollout[e], ln.prefill[e], ln.idle[e]] for e in range(E)]
    lanes.append([ln.train, ln.sync, ln.trainer_idle])
    if ln.offload is not None:  # colocated engines stepping aside for updates: their own lane
        moved = L.union(np.concatenate([ln.offload[0], ln.onload[0]]),
                        np.concatenate([ln.offload[1], ln.onload[1]]))
        lanes.append([ln.offload, ln.onload, L.complement(moved, 0.0, ln.makespan)])
    if ln.tool is not None:  # multi-turn: sandboxes running tool calls, and a full pool
        lanes.append([ln.tool, ln.sandbox_full, (np.zeros(0), np.zeros(0))])
    if ln.detailed:
        bars = [[L.Bars.exact(iv, lane) for iv in states] for lane, states in enumerate(lanes)]
    else:
        edges = ln.edges()
        bars = [L.binned_bars(states, edges, lane) for lane, states in enumerate(lanes)]
    for e in range(E):
        _hbar(fig, bars[e][0], f"engine {e}: rollout", COLORS["rollout"], f"engine {e}")
        _hbar(fig, bars[e][1], f"engine {e}: prefill", COLORS["prefill"], f"engine {e}")
    _hbar(fig, bars[E][0], "trainer: train", COLORS["train"], "trainer")
    _hbar(fig, bars[E][1], "trainer: sync", COLORS["sync"], "trainer")
    if ln.offload is not None:
        _hbar(fig, bars[E + 1][0], "engines: offload", COLORS["offload"], "offload")
        _hbar(fig, bars[E + 1][1], "engines: onload", COLORS["onload"], "offload")
    if ln.tool is not None:
        lane = E + 1 + int(ln.offload is not None)
        _hbar(fig, bars[lane][0], "tools: calls running", COLORS["tool"], "tools")
        _hbar(fig, bars[lane][1], "tools: pool full, calls queue", COLORS["sandbox_full"], "tools")
    _hbar(fig, L.Bars.concat([b[2] for b in bars[:E + 1]]), "idle", COLORS["idle"], "idle")


def _steps_xy(t: np.ndarray, n: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    return np.r_[t, end], np.r_[n, n[-1]]


def _batch(fig: go.Figure, ln: L.Lanes) -> None:
    sp, E, end = ln.spans, ln.engines, ln.makespan
    if ln.detailed:
        def curve(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return _steps_xy(*L.running_steps(sp["t0"][mask], sp["t1"][mask]), end)
    else:
        edges = ln.edges()

        def curve(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            occ = L.occupancy(sp["t0"][mask], sp["t1"][mask], edges)
            return edges, np.r_[occ, occ[-1]]
    x, y = curve(np.ones(sp.size, dtype=bool))
    fig.add_trace(go.Scatter(x=np.round(x, 6), y=np.round(y, 3), name="running samples (total)",
                             line={"color": COLORS["total"], "width": 2, "shape": "hv"},
                             legend="legend2", mode="lines",
                             hovertemplate="t %{x:.3f} s<br>%{y} running<extra>total</extra>"),
                  row=2, col=1)
    cap = E * ln.capacity
    fig.add_trace(go.Scatter(x=[0, end], y=[cap, cap], name=f"slots ({E} x {ln.capacity})",
                             fill="tonexty", fillcolor="rgba(160,160,160,0.25)",
                             line={"color": COLORS["capacity"], "dash": "dash", "width": 1},
                             legend="legend2", mode="lines",
                             hovertemplate=f"{cap} slots<extra></extra>"), row=2, col=1)
    if ln.away is not None:  # multi-turn: trajectories holding no slot while their tool runs
        x, y = _steps_xy(*ln.away, end)
        fig.add_trace(go.Scatter(x=np.round(x, 6), y=np.round(y, 3), name="away on tool calls",
                                 line={"color": COLORS["tool"], "width": 2, "shape": "hv"},
                                 legend="legend2", mode="lines",
                                 hovertemplate="t %{x:.3f} s<br>%{y} away<extra>tools</extra>"),
                      row=2, col=1)
    if E > 1:
        palette = sample_colorscale("Blues", [0.45 + 0.5 * e / max(E - 1, 1) for e in range(E)])
        for e in range(E):
            x, y = curve(sp["engine"] == e)
            fig.add_trace(go.Scatter(x=np.round(x, 6), y=np.round(y, 3), mode="lines",
                                     name=f"engine {e} running", legend="legend2",
                                     visible=True if E <= 4 else "legendonly",
                                     line={"color": palette[e], "width": 1, "shape": "hv"}),
                          row=2, col=1)


def version_colors(versions: np.ndarray, vmax: int) -> list[str]:
    """Each version's colour on :data:`VERSION_SCALE` (0 to ``max(vmax, 1)``), as a string."""
    palette = sample_colorscale(VERSION_SCALE, [v / max(vmax, 1) for v in range(vmax + 1)])
    return [palette[v] for v in versions.tolist()]


def _sample_bars(fig: go.Figure, ln: L.Lanes) -> None:
    """One bar per span, coloured by version. The bars get colour strings: given the versions
    as numbers on a colour scale, plotly.js (3.x) drew them right but logged "Invalid color
    specifier" once per bar in the browser's console, so the colour bar comes from an empty
    scatter trace on the same scale instead. How a span ended is hover text only (drawn on a
    wide bar it read as a label)."""
    sp = ln.spans
    vmax = int(sp["version"].max()) if sp.size else 0
    custom = np.stack([sp["t1"], sp["attempt"], sp["version"], sp["tokens"]], axis=1) if sp.size \
        else np.zeros((0, 4))
    dom = fig.layout.yaxis3.domain
    fig.add_trace(go.Bar(
        base=np.round(sp["t0"], 6), x=np.round(sp["t1"] - sp["t0"], 6), y=sp["sample"],
        orientation="h", name="sample spans", legend="legend3", width=0.9,
        marker={"color": version_colors(sp["version"], vmax), "line": {"width": 0}},
        customdata=custom, text=sp["end"], textposition="none",
        hovertemplate="sample %{y}<br>%{base:.3f} to %{customdata[0]:.3f} s<br>attempt "
                      "%{customdata[1]}, version %{customdata[2]}<br>%{customdata[3]} tokens, "
                      "ended by %{text}<extra></extra>", showlegend=False), row=3, col=1)
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="markers", name="policy version", showlegend=False,
        hoverinfo="skip",
        marker={"color": [0], "colorscale": VERSION_SCALE, "cmin": 0, "cmax": max(vmax, 1),
                "showscale": True,
                "colorbar": {"title": {"text": "policy version"}, "x": 1.01, "xanchor": "left",
                             "y": dom[1], "yanchor": "top", "len": (dom[1] - dom[0]) * 0.8,
                             "thickness": 14, "tick0": 0, "dtick": int_dtick(vmax)}}),
        row=3, col=1)


def _version_curves(fig: go.Figure, ln: L.Lanes) -> None:
    sp = ln.spans
    edges = ln.edges()
    vmax = int(sp["version"].max())
    width = -(-(vmax + 1) // MAX_VERSION_GROUPS)  # versions per group
    groups = range(0, vmax + 1, width)
    colors = sample_colorscale(VERSION_SCALE, [g / max(vmax, 1) for g in groups])
    for g, color in zip(groups, colors, strict=True):
        mask = (sp["version"] >= g) & (sp["version"] < g + width)
        if not mask.any():
            continue
        occ = L.occupancy(sp["t0"][mask], sp["t1"][mask], edges)
        name = f"version {g}" if width == 1 else f"versions {g}-{min(g + width, vmax + 1) - 1}"
        fig.add_trace(go.Scatter(x=np.round(edges, 6), y=np.round(np.r_[occ, occ[-1]], 3),
                                 name=name, stackgroup="versions", legend="legend3",
                                 mode="lines", line={"shape": "hv", "width": 0, "color": color},
                                 fillcolor=color,
                                 hovertemplate=f"{name}<br>t %{{x:.1f}} s<br>%{{y:.1f}} running"
                                               "<extra></extra>"), row=3, col=1)


def timeline_page(tl: Timeline, summary: dict | None = None, ln: L.Lanes | None = None) -> str:
    """The complete HTML page: figure and step table, plotly.js inlined (``ln``: as for
    :func:`timeline_figure`)."""
    summary = summary if summary is not None else summarize(tl)
    fig = timeline_figure(tl, summary, ln)
    rows = step_rows(tl)
    # each duration from the start and end as shown, so that start + duration = end on the page
    shown = [(*r[:4], round(r[3], 3) - round(r[2], 3), *r[5:]) for r in rows[:STEP_ROWS_SHOWN]]
    note = (f'<p class="note">First {len(shown):,} of {len(rows):,} updates.</p>'
            if len(shown) < len(rows) else "")
    m = tl.meta
    facts = (f"{m['samples_total']:,} samples, {m['engines']} engine(s) x {m['max_num_seqs']} "
             f"slots, {m.get('gpus', '?')} GPUs, {m.get('placement', '?')} placement; "
             f"{tl.count('span'):,} spans, {len(rows):,} updates.")
    parts = [f'<p class="note">{html.escape(facts)}</p>',
             figure_div(fig, "timeline"),
             "<h2>Steps: one row per update (version v to v+1)</h2>", note,
             table(STEP_COLUMNS, shown, "steps", STEP_FORMATS)]
    return page(f"timeline: {m['policy']} on {m['trace']}", parts)


def write_timeline_html(tl: Timeline, path: str | Path, summary: dict | None = None) -> Path:
    """Write the timeline page to ``path`` atomically; returns the path."""
    path = Path(path)
    atomic_write({path: timeline_page(tl, summary)})
    return path
