"""The terminal view of cluster planning (``tune --param cluster.*``): the trials on the Pareto
front of wall-clock against GPU-hours (and staleness), fastest first, with the knee marked.
How the front and the knee are chosen: :func:`sortedrl.tune.search.cluster_front` and
:func:`sortedrl.tune.search.knee`."""

from __future__ import annotations

from sortedrl.tables import Col, fmt, render

PLAN_COLS = [Col("", left=True), Col("policy", left=True), Col("trial"), Col("shape", left=True),
             Col("wall", "s"), Col("GPU-h"), Col("stale mean", "versions", hide=1)]


def plan_text(result: dict, width: int | None) -> str:
    plan = result["cluster_pareto"]
    by_id = {t["id"]: t for t in result["trials"]}
    rows = []
    for i in plan["front"]:
        t, s = by_id[i], by_id[i]["summary"]
        shape = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in t["params"].items()
                          if k.startswith("cluster.")) or "base"
        rows.append(["knee" if i == plan["knee"] else "", t["policy"], str(i), shape,
                     *(fmt(k, s[k]) for k in ("makespan_s", "gpu_hours", "staleness_mean"))])
    n = len(result.get("skipped", []))
    notes = [f"{n} trial{'s' * (n != 1)} skipped (cannot run: see tune.json 'skipped')"] if n else []
    if plan["knee"] is None and len(plan["front"]) == 1:  # (no line to beat: nothing to trade)
        notes.append("no knee: one shape is both the fastest and the cheapest, so there is no trade "
                     "to make")
    elif plan["knee"] is None:
        notes.append("no knee: no shape on the front beats the straight line from the fastest to "
                     "the cheapest (each step trades wall-clock for GPU-hours at the same rate or "
                     "worse)")
    return render(PLAN_COLS, rows, width, "Cluster plan: the front of wall-clock against GPU-hours "
                  "(and staleness), fastest first; the knee is the best trade", notes)
