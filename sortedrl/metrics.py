"""Metrics: every reported number, computed from a timeline alone.

``docs/metrics.md`` defines each key precisely. Float sums are taken in a canonical order
(spans sorted by start, end, engine, sample) or with ``math.fsum``, so they do not depend on the
order records were written in: a timeline read back from JSONL gives a byte-identical summary.
"""

from __future__ import annotations

import math
from operator import itemgetter

import numpy as np

from sortedrl.timeline import Timeline

CONTRACT_KEYS = (
    "makespan_s", "lower_bound_s", "efficiency", "bubble_ratio", "gpu_idle_ratio",
    "generated_tokens", "useful_tokens", "wasted_tokens", "tokens_per_s", "updates",
    "samples_total", "samples_trained", "staleness_mean", "staleness_p95", "staleness_max",
    "learnable_tokens", "learnable_tokens_per_s", "groups_trained_whole", "samples_in_split_groups",
    "filtered_groups", "filtered_tokens", "policy", "params", "trace", "cluster", "seed",
)


def rank_rate(summary: dict) -> float:
    """The rate policies are ranked by (``compare``, ``tune``, the report): learnable tokens/s,
    or useful tokens/s for a summary written before learnable tokens were counted."""
    return summary.get("learnable_tokens_per_s", summary["tokens_per_s"])


def merge_intervals(t0: np.ndarray, t1: np.ndarray, presorted: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[t0, t1]`` as sorted, disjoint ``(starts, ends)``."""
    if presorted:
        a, b = t0, t1
    else:
        order = np.lexsort((t1, t0))
        a, b = t0[order], t1[order]
    reach = np.maximum.accumulate(b)
    brk = np.flatnonzero(a[1:] > reach[:-1]) + 1  # a new merged segment starts here
    starts = np.concatenate(([a[0]], a[brk]))
    ends = np.concatenate((reach[brk - 1], [reach[-1]]))
    return starts, ends


def union_length(t0: np.ndarray, t1: np.ndarray, presorted: bool = False) -> float:
    """Total length of the union of intervals ``[t0, t1]``."""
    if t0.size == 0:
        return 0.0
    starts, ends = merge_intervals(t0, t1, presorted)
    return math.fsum((ends - starts).tolist())


SPAN_DTYPE = np.dtype([("t0", "f8"), ("t1", "f8"), ("engine", "i8"), ("sample", "i8"),
                       ("attempt", "i8"), ("version", "i8"), ("tokens", "i8"), ("end", "U7")])


def span_table(tl: Timeline) -> np.ndarray:
    """The spans as one structured array (fast even for millions of spans)."""
    return np.fromiter(tl.spans, dtype=SPAN_DTYPE, count=len(tl.spans))


def _group_learning(tl: Timeline, update_of: np.ndarray, group_size: int) -> dict:
    """Which trained samples a GRPO update can learn from, group by group (docs/metrics.md).

    A trained sample is *learnable* when its update is the last one that trains a member of its
    group: there every trained member's reward is in the group's baseline. A group trained whole
    (all its trained samples in one update) is learnable entirely; a group spread over several
    updates is learnable only in its last one. Filtered groups (dynamic sampling) were dropped.
    """
    n_samples = update_of.size
    groups = np.arange(n_samples, dtype=np.int64) // max(1, group_size)
    n_groups = int(groups[-1]) + 1 if n_samples else 0
    trained = update_of >= 0
    last = np.full(n_groups, -1, dtype=np.int64)
    first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(last, groups[trained], update_of[trained])
    np.minimum.at(first, groups[trained], update_of[trained])
    whole = (last >= 0) & (first == last)
    filtered = np.zeros(n_samples, dtype=bool)
    for _, samples in tl.filters:
        filtered[np.asarray(samples, dtype=np.int64)] = True
    return {
        "learnable": trained & (update_of == last[groups]),
        "whole": int(np.count_nonzero(whole)),
        "split_samples": int(np.count_nonzero(trained & ~whole[groups])),
        "filtered": filtered,
        "filtered_groups": len(np.unique(groups[filtered])),
    }


def summarize(tl: Timeline) -> dict:
    """The summary of a run (the ``summary.json`` contract, plus a few extra keys)."""
    m = tl.meta
    n_samples = int(m["samples_total"])
    capacity = int(m["engines"]) * int(m["max_num_seqs"])

    sp = span_table(tl)
    sp = sp[np.lexsort((sp["sample"], sp["engine"], sp["t1"], sp["t0"]))]  # canonical order
    t0, t1, eng, smp = sp["t0"], sp["t1"], sp["engine"], sp["sample"]
    att, ver, tok = sp["attempt"], sp["version"], sp["tokens"]

    end1, end0 = itemgetter(1), itemgetter(0)
    ends = [float(t1.max()) if t1.size else 0.0]
    for rows, get in ((tl.prefills, end1), (tl.trains, end1), (tl.syncs, end1),
                      (tl.offloads, end1), (tl.onloads, end1),
                      (tl.admits, end0), (tl.aborts, end0), (tl.discards, end0),
                      (tl.filters, end0)):
        if rows:
            ends.append(max(map(get, rows)))
    makespan = float(max(ends))

    # rollout slot-time
    busy_slots = float(np.sum(t1 - t0))
    rollout_s = union_length(t0, t1, presorted=True)
    bubble = 1.0 - busy_slots / (capacity * rollout_s) if rollout_s > 0 else 0.0
    tools = tool_summary(tl, t0, t1, capacity, busy_slots)  # multi-turn runs only: else {}
    if tools:  # a trajectory away on a tool call is still rolling out
        rollout_s, bubble = tools.pop("rollout_s"), tools.pop("bubble_ratio")

    # GPU time: an engine is active while it holds a span or prefills; the engines' unions in
    # one pass, each engine shifted past the others
    tp, gpus = int(m["tp"]), int(m["gpus"])
    if tl.prefills:
        p0, p1, pe = (np.fromiter(map(itemgetter(k), tl.prefills), dtype=float if k < 2 else np.int64,
                                  count=len(tl.prefills)) for k in (0, 1, 2))
        a0, a1, ae = np.concatenate((t0, p0)), np.concatenate((t1, p1)), np.concatenate((eng, pe))
    else:
        a0, a1, ae = t0, t1, eng
    shift = (makespan + 1.0) * ae
    engine_busy = union_length(a0 + shift, a1 + shift)
    train_s = math.fsum(r[1] - r[0] for r in tl.trains)
    sync_s = math.fsum(r[1] - r[0] for r in tl.syncs)
    offload_s = math.fsum(r[1] - r[0] for r in tl.offloads + tl.onloads)
    gpu_busy = (engine_busy * tp + train_s * int(m["trainer_gpus"]) + sync_s * gpus
                + offload_s * gpus)
    gpu_idle = 1.0 - gpu_busy / (gpus * makespan) if makespan > 0 else 0.0

    # tokens: a span is useful when its sample was trained on that attempt
    trained_ver = np.full(n_samples, -1, dtype=np.int64)
    update_of = np.full(n_samples, -1, dtype=np.int64)
    for u, (_, _, v, samples, _) in enumerate(tl.trains):
        idx = np.asarray(samples, dtype=np.int64)
        trained_ver[idx] = v
        update_of[idx] = u
    last_att = np.full(n_samples, -1, dtype=np.int64)
    if smp.size and att.max() == 0:
        last_att[smp] = 0  # nothing was ever regenerated (np.maximum.at is slow)
    elif smp.size:
        np.maximum.at(last_att, smp, att)
    useful_mask = (trained_ver[smp] >= 0) & (att == last_att[smp]) if smp.size else np.zeros(0, bool)
    generated = int(tok.sum())
    useful = int(tok[useful_mask].sum())

    groups = _group_learning(tl, update_of, int(m.get("group_size", 1)))
    learnable = int(tok[useful_mask & groups["learnable"][smp]].sum()) if smp.size else 0
    filtered = groups["filtered"]
    filtered_tokens = int(tok[filtered[smp] & (att == last_att[smp])].sum()) if smp.size else 0

    stale = trained_ver[smp[useful_mask]] - ver[useful_mask]
    weights = tok[useful_mask]
    if weights.sum() > 0:
        s_mean = float(np.dot(stale, weights)) / float(weights.sum())
        order = np.argsort(stale, kind="stable")
        cum = np.cumsum(weights[order])
        s_p95 = int(stale[order][np.searchsorted(cum, 0.95 * cum[-1])])
        s_max = int(stale.max())
    else:
        s_mean, s_p95, s_max = 0.0, 0, 0

    lower = float(m["lower_bound_s"])
    out = {
        "makespan_s": makespan,
        "lower_bound_s": lower,
        "efficiency": lower / makespan if makespan > 0 else 0.0,
        "bubble_ratio": bubble,
        "gpu_idle_ratio": gpu_idle,
        "generated_tokens": generated,
        "useful_tokens": useful,
        "wasted_tokens": generated - useful,
        "tokens_per_s": useful / makespan if makespan > 0 else 0.0,
        "updates": len(tl.trains),
        "samples_total": n_samples,
        "samples_trained": int(sum(len(r[3]) for r in tl.trains)),
        "staleness_mean": s_mean,
        "staleness_p95": s_p95,
        "staleness_max": s_max,
        "learnable_tokens": learnable,
        "learnable_tokens_per_s": learnable / makespan if makespan > 0 else 0.0,
        "groups_trained_whole": groups["whole"],
        "samples_in_split_groups": groups["split_samples"],
        "filtered_groups": groups["filtered_groups"],
        "filtered_tokens": filtered_tokens,
        "policy": m["policy"],
        "params": m["params"],
        "trace": m["trace"],
        "cluster": m["cluster"],
        "seed": m["seed"],
        # extras
        "regen": m.get("regen", "same"),
        "regen_sigma": m.get("regen_sigma", 0.0),
        "oracle": bool(m.get("oracle", False)),
        "auto_params": m.get("auto_params", {}),  # resolved values of knobs left at 0 (auto)
        "rollout_s": rollout_s,
        "train_s": train_s,
        "sync_s": sync_s,
        "offload_s": offload_s,
        "recomputed_tokens": int(sum(map(itemgetter(5), tl.prefills))),
        "preemptions": int(np.count_nonzero(sp["end"] == "preempt")),
        **tools,
    }
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


from sortedrl.metrics_tools import tool_summary  # noqa: E402  (it uses union_length above)
