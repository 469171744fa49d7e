"""Metrics: every reported number, computed from a timeline alone.

``docs/metrics.md`` defines each key precisely. Every number is computed on the timeline's
columns with numpy (a ten-million-sample run is summarised in seconds). Float sums are taken
over values in sorted order or with ``math.fsum``, so they do not depend on the order records
were written in: a timeline read back from either file format gives a byte-identical summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from sortedrl.errors import SortedRLError
from sortedrl.timeline import SCHEMA, Timeline

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


def unit_ratio(x: float) -> float:
    """A ratio documented as 0-1 and computed as ``1 - a/b`` (or a difference of two such) held
    in [0, 1]: float error leaves it a few ulps outside (a step whose slots were all busy gave
    ``bubble_ratio`` -4.4e-16, which a table printed as ``-0.0``). ``+ 0.0`` makes a ``-0.0``
    0.0."""
    return min(1.0, max(0.0, x)) + 0.0


def sorted_union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals given as their starts and their ends, each array sorted on its
    own (no interval ends before it starts): the same segments as merging the intervals in
    the order of their starts, without the permutation that pairs each start with its end (a
    10M-sample summary's peak).

    The union breaks before the i-th start when all i intervals that start earlier have ended,
    i.e. when i ends lie below it, and the segment before the break ends at the largest of them.
    """
    if starts.size == 0:
        return starts, ends
    brk = [np.empty(0, dtype=np.int64)]
    for lo in range(1, starts.size, _BLOCK):  # in blocks: the temporaries stay small
        hi = min(starts.size, lo + _BLOCK)
        below = np.searchsorted(ends, starts[lo:hi], side="left")
        brk.append(np.flatnonzero(below == np.arange(lo, hi)) + lo)
    at = np.concatenate(brk)
    return (np.concatenate((starts[:1], starts[at])), np.concatenate((ends[at - 1], ends[-1:])))


_BLOCK = 1 << 20


def union_length(t0: np.ndarray, t1: np.ndarray) -> float:
    """Total length of the union of intervals ``[t0, t1]`` (none ends before it starts:
    timeline readers refuse such a record)."""
    starts, ends = sorted_union(np.sort(t0), np.sort(t1))
    return exact_sum(ends - starts)


def exact_sum(values: np.ndarray) -> float:
    """The correctly rounded sum (``math.fsum``), whatever the order of ``values``."""
    return math.fsum(values.tolist())


SPAN_FIELDS = (("t0", "f8", "t"), ("t1", "f8", "t_end"), ("engine", "i8", "engine"),
               ("sample", "i8", "sample"), ("attempt", "i8", "attempt"),
               ("version", "i8", "version"), ("tokens", "i8", "tokens"))


def span_table(tl: Timeline) -> np.ndarray:
    """The spans as one structured array (t0, t1, engine, sample, attempt, version, tokens,
    end): what the plots index by field name. In canonical order (by start, end, engine,
    sample), so that a plot does not depend on the order its file stored the records in."""
    cols = tl.columns("span")
    order = np.lexsort((cols["sample"], cols["engine"], cols["t_end"], cols["t"]))
    end = cols["end"]  # its few label strings, indexed by the sorted codes (not every span's)
    names = np.array(end.names or [""], dtype=str)
    dtype = np.dtype([(name, typ) for name, typ, _ in SPAN_FIELDS]
                     + [("end", f"U{max(7, names.dtype.itemsize // 4)}")])
    out = np.empty(order.size, dtype=dtype)
    for name, _, field in SPAN_FIELDS:
        out[name] = cols[field][order]
    out["end"] = names[end.codes[order]]
    return out


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
    filtered[tl.columns("filter")["samples"].values] = True
    return {
        "learnable": trained & (update_of == last[groups]),
        "whole": int(np.count_nonzero(whole)),
        "split_samples": int(np.count_nonzero(trained & ~whole[groups])),
        "filtered": filtered,
        "filtered_groups": len(np.unique(groups[filtered])),
    }


def _duration(tl: Timeline, *kinds: str) -> float:
    """Total seconds of the records of ``kinds`` (correctly rounded)."""
    return exact_sum(np.concatenate([tl.ends(k) - tl.columns(k)["t"] for k in kinds]))


def _trained(tl: Timeline, n_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: the policy version of the update that trained it, and that update's index
    (-1: never trained). A sample trained twice counts in its last update."""
    tr = tl.columns("train")
    samples = tr["samples"]
    update = samples.record_of_value()
    if samples.values.size and np.bincount(samples.values).max() > 1:
        keep = np.zeros(samples.values.size, dtype=bool)  # the last occurrence of each sample
        _, last = np.unique(samples.values[::-1], return_index=True)
        keep[samples.values.size - 1 - last] = True
        update, values = update[keep], samples.values[keep]
    else:
        values = samples.values
    trained_ver = np.full(n_samples, -1, dtype=np.int64)
    update_of = np.full(n_samples, -1, dtype=np.int64)
    trained_ver[values] = tr["version"][update]
    update_of[values] = update
    return trained_ver, update_of


def _engine_busy(sp: Mapping, pf: Mapping, makespan: float) -> float:
    """Seconds each engine holds a span or prefills, summed over engines: each engine's union,
    with engine ``e``'s intervals shifted by ``e * (makespan + 1)`` past the others', so that
    the unions of several engines are one union of their shifted intervals. Taken in at most
    ``_PASSES`` groups of engines, each reading the times once (a spilled timeline holds one
    field at a time: the peak of a 10M-sample summary)."""
    sp_engine, pf_engine = sp["engine"], pf["engine"]
    engines = max(int(sp_engine.max(initial=-1)), int(pf_engine.max(initial=-1))) + 1
    per_pass = max(1, -(-engines // _PASSES))
    scale = makespan + 1.0
    lengths = []
    for lo in range(0, engines, per_pass):
        in_sp = (sp_engine >= lo) & (sp_engine < lo + per_pass)
        in_pf = (pf_engine >= lo) & (pf_engine < lo + per_pass)
        starts = _shifted(sp, pf, in_sp, in_pf, "t", scale)
        ends = _shifted(sp, pf, in_sp, in_pf, "t_end", scale)
        if starts.size:
            seg_starts, seg_ends = sorted_union(starts, ends)
            lengths.append(seg_ends - seg_starts)
    return exact_sum(np.concatenate(lengths)) if lengths else 0.0


_PASSES = 8


def _shifted(sp: Mapping, pf: Mapping, in_sp: np.ndarray, in_pf: np.ndarray, field: str,
             scale: float) -> np.ndarray:
    """``field`` of the chosen spans and prefills, each shifted by its engine times ``scale``
    (``float(e) * scale`` added to it: the floats one engine at a time gave), sorted."""
    out = np.concatenate((sp["engine"][in_sp], pf["engine"][in_pf])).astype(np.float64)
    out *= scale
    out += np.concatenate((sp[field][in_sp], pf[field][in_pf]))
    out.sort()
    return out


def _samples_named(tl: Timeline, sp: Mapping) -> int:
    """One past the highest sample a span, an update or a filter names: the size of the
    per-sample arrays (every figure is the same for any size at least this; sizing them by the
    meta's ``samples_total`` made a hand-edited 2**31 ask for tens of GB)."""
    named = [sp["sample"], tl.columns("train")["samples"].values,
             tl.columns("filter")["samples"].values]
    return max((int(a.max()) + 1 for a in named if a.size), default=0)


def _token_use(tl: Timeline, sp: Mapping, n_samples: int, group_size: int) -> dict:
    """Tokens generated, useful (a span of the attempt its sample was trained on), learnable
    and filtered; the groups (:func:`_group_learning`); the staleness of useful tokens. Per-span
    temporaries are int32 or bool, and each span field is let go once used (a spilled
    timeline's fields are then freed: the peak of a 10M-sample summary)."""
    trained_ver, update_of = _trained(tl, n_samples)
    smp, att = sp["sample"], sp["attempt"]
    last_att = np.full(n_samples, -1, dtype=np.int32)
    if smp.size and att.max() == 0:
        last_att[smp] = 0  # nothing was ever regenerated (np.maximum.at is slow)
    elif smp.size:
        np.maximum.at(last_att, smp, att)
    last = att == last_att[smp]
    del att, last_att
    useful_mask = (trained_ver >= 0)[smp] & last
    tok = sp["tokens"]
    groups = _group_learning(tl, update_of, group_size)
    stale = trained_ver[smp[useful_mask]]  # minus each span's version, in place (the peak)
    stale -= sp["version"][useful_mask]
    return {
        "generated": int(tok.sum()),
        "useful": int(tok[useful_mask].sum()),
        "learnable": int(tok[useful_mask & groups["learnable"][smp]].sum()),
        "filtered": int(tok[groups["filtered"][smp] & last].sum()),
        "groups": groups,
        "staleness": _staleness(stale, tok[useful_mask]),
    }


def _staleness(stale: np.ndarray, weights: np.ndarray) -> tuple[float, int, int]:
    """Token-weighted mean, p95 and max of the staleness of trained tokens (versions; a trained
    span with no tokens, such as one aborted in its prefill, counts for none); ``stale``
    (int64, the caller's) is overwritten."""
    total = int(weights.sum())
    if total <= 0:
        return 0.0, 0, 0
    low = int(stale.min())
    mean = float(np.dot(stale, weights)) / float(total)
    stale -= low  # in place (the caller's temporary): a 10M-sample summary's peak
    per_value = np.bincount(stale, weights=weights)  # exact: integer sums below 2**53
    cum = np.cumsum(per_value)
    p95 = int(np.searchsorted(cum, 0.95 * cum[-1])) + low
    high = int(np.flatnonzero(per_value)[-1]) + low  # a span without tokens has no staleness
    return mean, p95, high


# the meta record's fields a summary is computed from (docs/metrics.md)
SUMMARY_META = ("samples_total", "engines", "max_num_seqs", "gpus", "tp", "trainer_gpus",
                "lower_bound_s", "policy", "params", "trace", "cluster", "seed")


def missing_meta(meta: dict) -> str | None:
    """Why a summary cannot be computed from ``meta`` (a field it needs is absent), or None."""
    missing = [key for key in SUMMARY_META if key not in meta]
    if not missing:
        return None
    return (f"the timeline's meta record has no {', '.join(map(repr, missing))} (every timeline "
            "that `sortedrl simulate` or `sortedrl run` writes has them)")


def makespan_of(tl: Timeline) -> float:
    """The last end of any record: the run's makespan (0 for an empty timeline)."""
    return max((float(tl.ends(kind).max()) for kind in SCHEMA if tl.count(kind)), default=0.0)


def summarize(tl: Timeline) -> dict:
    """The summary of a run (the ``summary.json`` contract, plus a few extra keys).

    Vectorised over the timeline's columns; every float is a correctly rounded sum or a sum over
    values in sorted order, so the summary does not depend on the order records were written in.
    """
    m = tl.meta
    if why := missing_meta(m):
        raise SortedRLError(why)
    n_samples = int(m["samples_total"])
    capacity = int(m["engines"]) * int(m["max_num_seqs"])

    # A spilled timeline (timeline_spill) loads a field when asked and frees it once no name
    # holds it: so each phase below names only the span fields it needs (a 10M-sample summary).
    sp = tl.columns("span")
    makespan = makespan_of(tl)

    # rollout slot-time
    slot_s = np.subtract(sp["t_end"], sp["t"])
    slot_s.sort()
    busy_slots = float(np.sum(slot_s))
    del slot_s
    starts, ends = sorted_union(np.sort(sp["t"]), np.sort(sp["t_end"]))
    rollout_s = exact_sum(ends - starts)
    del starts, ends
    bubble = unit_ratio(1.0 - busy_slots / (capacity * rollout_s)) if rollout_s > 0 else 0.0
    tools = tool_summary(tl, sp["t"], sp["t_end"], capacity, busy_slots)  # multi-turn only, else {}
    if tools:  # a trajectory away on a tool call is still rolling out
        rollout_s, bubble = tools.pop("rollout_s"), tools.pop("bubble_ratio")

    # GPU time: an engine is active while it holds a span or prefills
    tp, gpus = int(m["tp"]), int(m["gpus"])
    pf = tl.columns("prefill")
    engine_busy = _engine_busy(sp, pf, makespan)
    train_s, sync_s = _duration(tl, "train"), _duration(tl, "sync")
    offload_s = _duration(tl, "offload", "onload")
    gpu_busy = (engine_busy * tp + train_s * int(m["trainer_gpus"]) + sync_s * gpus
                + offload_s * gpus)
    gpu_idle = unit_ratio(1.0 - gpu_busy / (gpus * makespan)) if makespan > 0 else 0.0

    tokens = _token_use(tl, sp, _samples_named(tl, sp), int(m.get("group_size", 1)))
    generated, useful, learnable = tokens["generated"], tokens["useful"], tokens["learnable"]
    groups = tokens["groups"]

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
        "updates": tl.count("train"),
        "samples_total": n_samples,
        "samples_trained": int(tl.columns("train")["samples"].values.size),
        "staleness_mean": tokens["staleness"][0],
        "staleness_p95": tokens["staleness"][1],
        "staleness_max": tokens["staleness"][2],
        "learnable_tokens": learnable,
        "learnable_tokens_per_s": learnable / makespan if makespan > 0 else 0.0,
        "groups_trained_whole": groups["whole"],
        "samples_in_split_groups": groups["split_samples"],
        "filtered_groups": groups["filtered_groups"],
        "filtered_tokens": tokens["filtered"],
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
        "recomputed_tokens": int(pf["recomputed"].sum()),
        "preemptions": int(np.count_nonzero(sp["end"] == "preempt")),
        **tools,
    }
    # + 0.0: a ratio that rounds to zero from below (float error) is 0, not -0
    return {k: (round(v, 6) + 0.0 if isinstance(v, float) else v) for k, v in out.items()}


from sortedrl.metrics_tools import tool_summary  # noqa: E402  (it uses union_length above)
