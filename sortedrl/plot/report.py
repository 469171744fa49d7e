"""``sortedrl report``: one self-contained HTML page comparing policies on one trace and cluster.

It reads a ``compare`` output directory (``compare.json`` plus one run directory per label) or a
``tune`` output directory (``tune.json``), and shows:

- bars of makespan (s), bubble ratio, useful tokens/s and mean staleness (versions) per policy,
  oracle runs hatched and labelled ``(oracle)``; for a tune directory without ``compare.json``,
  each policy's best trial as tune recorded it (``best.per_policy``: by its ``--objective``,
  among the trials that meet ``--max-staleness``; a policy with none has no bar);
- the response-length histogram of the trace, from a trace file in the directory
  (``trace.jsonl``, ``trace.csv`` or ``trace.parquet``) or else reconstructed from a run's
  timeline: a finished sample's length is the sum of the span tokens of its final attempt;
- for ``tune.json``, every trial's learnable tokens/s (the rate tune ranks by and built its
  ``pareto`` from) against its mean staleness, with the Pareto front (feasible trials)
  highlighted and the best trial (``best.overall``) as a star;
- a table of the headline numbers, learnable tokens/s among them (what ``compare`` and ``tune``
  rank by), linking each run's ``timeline.html`` where one exists.

Two or more run directories (``sortedrl run``'s, ``simulate``'s) get the same bars and table
from :mod:`sortedrl.plot.report_runs`.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sortedrl.errors import SortedRLError
from sortedrl.metrics import rank_rate
from sortedrl.plot.inputs import (
    PlotError,
    check_compare_runs,
    load_compare,
    load_timeline,
    load_tune,
    trial_policy,
    tune_best,
    tune_front,
)
from sortedrl.plot.page import Link, atomic_write, figure_div, page, table
from sortedrl.run_summary import has_no_bound
from sortedrl.table_notes import trained_note, updates_note
from sortedrl.tables import AS_PERCENT, FORMATS, PERCENT
from sortedrl.timeline import Timeline
from sortedrl.timeline_file import NAMES, find_timeline

# each figure at its precision in the terminal's tables (sortedrl.tables.FORMATS); a ratio as a %
METRICS = (("makespan_s", "makespan (s)", FORMATS["makespan_s"]), ("bubble_ratio", "bubble ratio", AS_PERCENT),
           ("tokens_per_s", "useful tokens/s", FORMATS["tokens_per_s"]),
           ("staleness_mean", "staleness mean (versions)", FORMATS["staleness_mean"]))
TRACE_FILES = ("trace.jsonl", "trace.csv", "trace.parquet")
HIST_BINS = 60
PALETTE = qualitative.Plotly


def response_lengths(tl: Timeline) -> np.ndarray:
    """Lengths of the finished samples: the span tokens of each one's final attempt, summed."""
    sp = tl.columns("span")  # in any order: the sums are of integers, exact (no span table)
    sample, attempt = sp["sample"], sp["attempt"]
    if sample.size == 0:
        return np.zeros(0, dtype=np.int64)
    n = int(sample.max()) + 1
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, sample, attempt)
    final = attempt == last[sample]
    tokens = np.bincount(sample[final], weights=sp["tokens"][final], minlength=n)
    done = np.zeros(n, dtype=bool)
    done[sample[final & (sp["end"] == "finish")]] = True
    return tokens[done].astype(np.int64)


def report_inputs(root: Path) -> list[Path]:
    """Every file a report of ``root`` may read: its ``--out`` may never replace one."""
    return [root / "compare.json", root / "tune.json", *(root / name for name in TRACE_FILES),
            *(p for name in NAMES for p in sorted(root.glob(f"*/{name}")))]


def find_lengths(root: Path, labels: list[str]) -> tuple[np.ndarray, str] | None:
    """The trace's response lengths and where they came from, or None if nothing has them."""
    for name in TRACE_FILES:
        if (root / name).is_file():
            from sortedrl.traces.io import read_trace
            try:
                return read_trace(root / name).response_len, str(root / name)
            except SortedRLError as e:
                raise PlotError(str(e)) from None
    runs = [root / label for label in labels] if labels else sorted(
        {p.parent for name in NAMES for p in root.glob(f"*/{name}")})
    best: tuple[np.ndarray, str] | None = None
    for run in runs:
        path = find_timeline(run)
        if not path.is_file():
            continue
        tl = load_timeline(path)
        lengths = response_lengths(tl)
        if best is None or lengths.size > best[0].size:
            best = lengths, f"{path} ({lengths.size:,} finished samples)"
        if lengths.size >= int(tl.meta["samples_total"]):
            break
    return best


def bar_entries(root: Path) -> tuple[list[dict], str]:
    """Per-policy summaries for the bars, and what they are."""
    if (root / "compare.json").exists():
        entries = load_compare(root / "compare.json")
        check_compare_runs(root, entries)
        return entries, f"{root / 'compare.json'}"
    tune = load_tune(root / "tune.json")
    trials = tune["trials"]
    per_policy, _ = tune_best(tune)
    out = []
    for policy, i in per_policy.items():
        if i is None:
            continue
        s = trials[i]["summary"]
        missing = [k for k, _, _ in METRICS if not isinstance(s.get(k), int | float)]
        if missing:
            raise PlotError(f"{root / 'tune.json'}: trial {i}: "
                            f"summary has no number {missing[0]!r}")
        n = sum(trial_policy(t) == policy for t in trials)
        out.append({**s, "label": f"{policy} (best of {n})", "policy": policy})
    if not out:
        raise PlotError(f"{root / 'tune.json'}: no feasible trial to show")
    what = f"best trial per policy in {root / 'tune.json'}"
    if isinstance(tune.get("best"), dict) and "per_policy" in tune["best"]:
        what += f" (tune's best by {tune.get('objective', 'learnable_tokens_per_s')})"
    missing = [p for p, i in per_policy.items() if i is None]
    if missing:
        what += f"; no feasible trial for: {', '.join(missing)}"
    return out, what


def _name(s: dict) -> str:
    return str(s["label"]) + (" (oracle)" if s.get("oracle") else "")


def bars_figure(entries: list[dict], heading: str = "Policies", legend: str = "policy") -> go.Figure:
    """Four bar charts, one per headline metric, one bar (and legend entry) per policy (per
    run: ``heading`` "Runs", ``legend`` "run").

    The right-hand panels sit far enough right (and their y axes grow their margins) that their
    axis titles clear the left panel's last bar at 800 px; the title names every cluster the
    policies ran on, not only the first one's (compare may give a policy its own cluster)."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=[t for _, t, _ in METRICS],
                        vertical_spacing=0.24, horizontal_spacing=0.2)
    names = [_name(s) for s in entries]
    for i, s in enumerate(entries):
        color = PALETTE[i % len(PALETTE)]
        for k, (key, label, fmt) in enumerate(METRICS):
            v = float(s[key])
            fig.add_trace(go.Bar(
                x=[names[i]], y=[v], name=names[i], legendgroup=names[i], showlegend=k == 0,
                marker={"color": color, "pattern": {"shape": "/" if s.get("oracle") else ""}},
                text=[format(v, fmt)], textposition="outside", cliponaxis=False,
                hovertemplate=f"{html.escape(names[i])}<br>{label}: %{{y:{fmt}}}<extra></extra>"),
                row=k // 2 + 1, col=k % 2 + 1)
            fig.update_yaxes(title_text=label, rangemode="tozero", row=k // 2 + 1, col=k % 2 + 1,
                             tickformat=".0%" if key == "bubble_ratio" else None,
                             automargin=True)
    traces = ", ".join(dict.fromkeys(str(s.get("trace", "?")) for s in entries))
    clusters = ", ".join(dict.fromkeys(str(s.get("cluster", "?")) for s in entries))
    fig.update_layout(title={"text": f"{heading} on {html.escape(traces)} "
                             f"({html.escape(clusters)})", "x": 0.01},
                      height=820, barmode="group", plot_bgcolor="white",
                      legend={"title": {"text": legend}}, margin={"t": 90})
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee")
    fig.update_xaxes(type="category")  # (plotly.js would read labels "1", "10" or a date as numbers)
    return fig


def histogram_figure(lengths: np.ndarray, source: str) -> go.Figure:
    """Response-length histogram (counts per bin, so the page stays small for any trace)."""
    top = int(lengths.max()) if lengths.size else 1
    counts, edges = np.histogram(lengths, bins=HIST_BINS, range=(0, max(top, 1)))
    mids = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure(go.Bar(x=mids, y=counts, width=np.diff(edges), name="samples",
                           marker={"color": "#4c78a8", "line": {"width": 0}},
                           customdata=np.stack([edges[:-1], edges[1:]], axis=1),
                           hovertemplate="%{customdata[0]:.0f} to %{customdata[1]:.0f} tokens<br>"
                                         "%{y} samples<extra></extra>"))
    for name, value, dash in (("mean", float(lengths.mean()), "dash"),
                              ("p50", float(np.median(lengths)), "dot"),
                              ("p99", float(np.percentile(lengths, 99)), "dashdot")):
        fig.add_trace(go.Scatter(x=[value, value], y=[0, int(counts.max())], mode="lines",
                                 name=f"{name} {value:,.0f} tokens",
                                 line={"color": "#e45756", "dash": dash, "width": 1.5}))
    fig.update_layout(title={"text": f"Response lengths of the trace ({lengths.size:,} samples; "
                             f"from {source})", "x": 0.01, "font": {"size": 13}},
                      height=420, bargap=0, plot_bgcolor="white",
                      xaxis_title="response length (tokens)", yaxis_title="samples",
                      legend={"title": {"text": "response length"}})
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee")
    return fig


def rate_name(trials: list[dict]) -> str:
    """What :func:`~sortedrl.metrics.rank_rate` is for these trials: learnable tokens/s, or
    useful tokens/s in summaries written before learnable tokens were counted."""
    has = {"learnable_tokens_per_s" in t["summary"] for t in trials}
    if has == {True}:
        return "learnable tokens/s"
    return "useful tokens/s" if has == {False} else "learnable tokens/s (else useful)"


def pareto_figure(tune: dict) -> go.Figure:
    """Every trial's ranking rate (:func:`~sortedrl.metrics.rank_rate`, learnable tokens/s)
    against mean staleness; the Pareto front highlighted and the best trial starred.

    The y axis is the rate ``tune`` built ``pareto`` from: plotting useful tokens/s instead drew
    trials that waste rollouts (useful but not learnable tokens) above a front they are not on."""
    trials, pareto = tune["trials"], tune_front(tune)
    rate = rate_name(trials)

    def xy(js: list[int]) -> tuple[list[float], list[float]]:
        return ([trials[j]["summary"]["staleness_mean"] for j in js],
                [rank_rate(trials[j]["summary"]) for j in js])

    hover = f"%{{text}}<br>staleness %{{x:.3f}} versions<br>%{{y:,.0f}} {rate}"
    fig = go.Figure()
    policies = list(dict.fromkeys(trial_policy(t) for t in trials))
    for i, policy in enumerate(policies):
        idx = [j for j, t in enumerate(trials) if trial_policy(t) == policy]
        x, y = xy(idx)
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers",
            name=f"{policy} trials", marker={"color": PALETTE[i % len(PALETTE)], "size": 8,
                                             "opacity": 0.6},
            text=[html.escape(_params(trials[j].get("params"))
                              + (" (infeasible)" if trials[j].get("feasible") is False else ""))
                  + f"<br>{trials[j]['summary']['tokens_per_s']:,.0f} useful tokens/s"
                  for j in idx],
            hovertemplate=hover + "<extra></extra>"))
    front = sorted(pareto, key=lambda j: trials[j]["summary"]["staleness_mean"])
    x, y = xy(front)
    fig.add_trace(go.Scatter(
        x=x, y=y, mode="lines+markers",
        name="Pareto front", line={"color": "#222222", "shape": "hv", "width": 2},
        marker={"size": 12, "symbol": "diamond-open", "color": "#222222", "line": {"width": 2}},
        text=[html.escape(f"{trials[j].get('policy', '?')}: {_params(trials[j].get('params'))}")
              for j in front],
        hovertemplate=hover + "<extra>Pareto front</extra>"))
    _, best = tune_best(tune)
    if best is not None:
        x, y = xy([best])
        fig.add_trace(go.Scatter(x=x, y=y, mode="markers",
                                 name="best", marker={"symbol": "star", "size": 18,
                                                      "color": "#f58518"},
                                 text=[html.escape(f"{trial_policy(trials[best])}: "
                                                   f"{_params(trials[best].get('params'))}")],
                                 hovertemplate="best: %{text}<extra></extra>"))
    fig.update_layout(title={"text": f"Tuning: {rate} against staleness "
                             f"({len(trials)} trials, {len(pareto)} on the Pareto front)",
                             "x": 0.01},
                      height=480, plot_bgcolor="white", xaxis_title="staleness mean (versions)",
                      yaxis_title=rate, legend={"title": {"text": "trials"}})
    xs = [float(t["summary"]["staleness_mean"]) for t in trials]
    pad = 0.05 * max(max(xs) - min(min(xs), 0.0), 0.1)
    fig.update_xaxes(showgrid=True, gridcolor="#eeeeee", range=[min(min(xs), 0.0) - pad,
                                                                 max(xs) + pad])
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee")
    return fig


def _params(params: object) -> str:
    if isinstance(params, dict):
        return ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults"
    return "defaults" if params is None else str(params)


# each header with its unit; the bubble as the terminal's `bubble %` columns print it (100 x the
# ratio, the unit in the header); learnable tokens/s beside useful: compare and tune rank by it
NUMBER_COLS = (("makespan (s)", FORMATS["makespan_s"]), ("bubble (%)", PERCENT),
               ("useful tokens/s", FORMATS["tokens_per_s"]),
               ("learnable tokens/s", FORMATS["learnable_tokens_per_s"]),
               ("staleness mean (versions)", FORMATS["staleness_mean"]), ("staleness max (versions)", None),
               ("wasted (tokens)", None), ("efficiency", FORMATS["efficiency"]), ("updates", None))


def headline_numbers(s: dict) -> tuple:
    """A summary's cells under :data:`NUMBER_COLS`. ``-``: learnable tokens/s in a summary from
    before it was counted, and a real run's efficiency (it has no bound: ``has_no_bound``)."""
    return (float(s["makespan_s"]), 100 * float(s["bubble_ratio"]), float(s["tokens_per_s"]),
            s.get("learnable_tokens_per_s", "-"), float(s["staleness_mean"]),
            s.get("staleness_max", ""), s.get("wasted_tokens", ""),
            "-" if has_no_bound(s) else s.get("efficiency", ""), s.get("updates", ""))


def timeline_cell(timeline: Path, base: Path) -> Link | str:
    """A link to a run's ``timeline.html`` from a page written in ``base``, or ``-``."""
    return Link("timeline", os.path.relpath(timeline, base)) if timeline.is_file() else "-"


def headline_table(lead: tuple[str, ...], rows: list[tuple]) -> str:
    """The headline numbers, one precision per column (the default by size printed 718.916
    above 1,062.4): the ``lead`` columns that name each row, :data:`NUMBER_COLS`, then the
    timeline column only when some run has a ``timeline.html`` to link."""
    cols = (*((c, None) for c in lead), *NUMBER_COLS, ("timeline", None))
    keep = len(cols) - (0 if any(isinstance(r[-1], Link) for r in rows) else 1)
    return table([c for c, _ in cols[:keep]], [r[:keep] for r in rows], "summary",
                 [f for _, f in cols[:keep]])


def _summary_table(root: Path, entries: list[dict], base: Path) -> str:
    rows = [(_name(s), "yes" if s.get("oracle") else "no", str(s.get("cluster", "")),
             *headline_numbers(s), timeline_cell(root / str(s["label"]) / "timeline.html", base))
            for s in entries]
    return headline_table(("policy", "oracle", "cluster"), rows)


def report_page(root: Path, out: Path | None = None) -> str:
    """The whole report page for a compare or tune directory, to be written at ``out``."""
    if not root.is_dir():
        raise PlotError(f"{root}: no such directory")
    if not (root / "compare.json").exists() and not (root / "tune.json").exists():
        one = next((name for name in ("summary.json", "timeline.npz", "timeline.jsonl") if (root / name).is_file()), None)
        if one is not None:  # (a simulate, run or forecast directory: one run, which plot draws)
            raise PlotError(f"{root}: one run ({one}), not a compare or tune directory: draw it with "
                            f"`sortedrl plot {root}`, or report it beside other runs with `sortedrl "
                            f"report {root} RUN2 ... --out FILE.html`; report DIR compares the runs of "
                            "`sortedrl compare` or `sortedrl tune` (their --out)")
        raise PlotError(f"{root}: neither compare.json nor tune.json here (run sortedrl compare "
                        "or sortedrl tune with --out first)")
    entries, source = bar_entries(root)
    hatched = (" Hatched bars are oracle runs: upper references that read true lengths, not "
               "deployable policies." if any(s.get("oracle") for s in entries) else "")
    parts = [f"<h1>Report: {html.escape(str(root))}</h1>",
             f'<p class="note">Bars from {html.escape(source)}.{hatched}</p>',
             figure_div(bars_figure(entries), "bars")]
    labels = [str(s["label"]) for s in entries] if (root / "compare.json").exists() else []
    found = find_lengths(root, labels)
    if found is not None and found[0].size:
        parts.append(figure_div(histogram_figure(*found), "lengths"))
    else:
        parts.append('<p class="note">No trace file or run timeline here: no length histogram.</p>')
    if (root / "tune.json").exists():
        tune = load_tune(root / "tune.json")
        parts.append(figure_div(pareto_figure(tune), "pareto"))
        if tune.get("cluster_pareto"):
            from sortedrl.plot.plan import plan_figure

            parts.append(figure_div(plan_figure(tune), "plan"))
    base = (out or root / "report.html").parent
    parts += ["<h2>Headline numbers</h2>", _summary_table(root, entries, base), *_table_notes(entries)]
    return page(f"report: {root.name}", parts)


def _table_notes(entries: list[dict]) -> list[str]:
    """The notes compare and tune print under their tables that change how a row reads: runs
    whose updates differ twofold (a different training run), runs that trained less."""
    said = [updates_note([(str(s["label"]), s["updates"]) for s in entries if "updates" in s]),
            trained_note([(str(s["label"]), s["samples_trained"], s["samples_total"]) for s in entries
                          if "samples_trained" in s and "samples_total" in s])]
    return [f'<p class="note">{html.escape(note)}</p>' for note in said if note]


def write_report(dir: str | Path, path: str | Path | None = None) -> Path:
    """Write the report of ``dir`` (default ``dir/report.html``) atomically; returns the path."""
    root = Path(dir)
    out = Path(path) if path is not None else root / "report.html"
    atomic_write({out: report_page(root, out)})
    return out
