"""The cluster-planning figure of a tune report: wall-clock against GPU-hours for every trial,
the Pareto front (with staleness as the third objective) and its knee marked.

Drawn when ``tune.json`` has ``cluster_pareto`` (a tune over ``--param cluster.*``); see
``sortedrl/tune/search.py`` for how the front and the knee are chosen.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go


def plan_figure(tune: dict) -> go.Figure:
    trials = [t for t in tune["trials"] if "gpu_hours" in t["summary"]]
    plan = tune["cluster_pareto"]
    by_id = {t["id"]: t for t in trials}

    def label(t: dict) -> str:
        params = ", ".join(f"{k}={v}" for k, v in t["params"].items()) or "defaults"
        return html.escape(f"{t['policy']}: {params}; staleness {t['summary']['staleness_mean']:.2f}")

    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[t["summary"]["gpu_hours"] for t in trials], y=[t["summary"]["makespan_s"] for t in trials],
        mode="markers", name="trials", marker={"size": 8, "opacity": 0.5, "color": "#4c78a8"},
        text=[label(t) for t in trials],
        hovertemplate="%{text}<br>%{x:.3f} GPU-h<br>%{y:,.1f} s<extra></extra>"))
    front = [by_id[i] for i in plan["front"] if i in by_id]
    front.sort(key=lambda t: t["summary"]["gpu_hours"])
    fig.add_trace(go.Scatter(
        x=[t["summary"]["gpu_hours"] for t in front], y=[t["summary"]["makespan_s"] for t in front],
        mode="lines+markers", name="Pareto front (wall-clock, GPU-hours, staleness)",
        line={"color": "#222222", "width": 2},
        marker={"size": 12, "symbol": "diamond-open", "color": "#222222"},
        text=[label(t) for t in front],
        hovertemplate="%{text}<br>%{x:.3f} GPU-h<br>%{y:,.1f} s<extra>front</extra>"))
    if plan.get("knee") in by_id:
        k = by_id[plan["knee"]]
        fig.add_trace(go.Scatter(
            x=[k["summary"]["gpu_hours"]], y=[k["summary"]["makespan_s"]], mode="markers+text",
            name="knee", text=["knee"], textposition="top right",
            marker={"symbol": "star", "size": 18, "color": "#f58518"},
            hovertext=[label(k)], hovertemplate="%{hovertext}<extra>knee</extra>"))
    fig.update_layout(title={"text": f"Cluster planning: wall-clock against GPU-hours "
                                     f"({len(trials)} trials, {len(front)} on the front)", "x": 0.01},
                      height=480, plot_bgcolor="white", xaxis_title="GPU-hours",
                      yaxis_title="wall-clock (s)")
    fig.update_xaxes(showgrid=True, gridcolor="#eeeeee")
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee")
    return fig
