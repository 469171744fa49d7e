"""Interval arithmetic on a timeline: what each engine and the trainer is doing, and when.

The HTML timeline and the Perfetto export draw the same lanes, so the lanes are computed once,
here, from the timeline's records alone. An engine is *rolling out* while it holds at least one
span, *prefilling* during its prefill records (every running sample is stalled then), and *idle*
otherwise; the trainer is *training* during ``train`` records and *syncing* during ``sync``
records. Everything is vectorised with numpy: a million-sample run has millions of intervals.

Large runs are drawn at a fixed resolution (:func:`binned_bars`): each time bin of a lane shows
the share of the bin spent in each state as the thickness of a bar, stacked across the lane, so
that every state's total time is kept while the number of bars stays bounded by the bin count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sortedrl.metrics import makespan_of, sorted_union, span_table
from sortedrl.timeline import Timeline

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends), sorted, disjoint, non-empty
EMPTY: Intervals = (np.zeros(0), np.zeros(0))

DETAIL_LIMIT = 2000
"""Runs with at most this many spans are drawn exactly: one bar per span, exact lanes."""

BINS = 600
"""Time bins of a large run's binned lanes and occupancy curves."""

BAND = 0.8
"""Thickness of a lane's bars, in lanes."""


def union(t0: np.ndarray, t1: np.ndarray) -> Intervals:
    """The union of intervals ``[t0, t1]`` as sorted disjoint intervals (empty ones dropped)."""
    t0, t1 = np.asarray(t0, dtype=float), np.asarray(t1, dtype=float)
    keep = t1 > t0
    t0, t1 = t0[keep], t1[keep]
    if t0.size == 0:
        return EMPTY
    return sorted_union(np.sort(t0), np.sort(t1))


def _inside(x: np.ndarray, iv: Intervals) -> np.ndarray:
    """Whether each point of ``x`` lies inside the disjoint intervals ``iv``."""
    s, e = iv
    i = np.searchsorted(s, x, side="right") - 1
    ok = i >= 0
    out = np.zeros(x.shape, dtype=bool)
    out[ok] = x[ok] < e[i[ok]]
    return out


def difference(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` (both sorted and disjoint)."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    cuts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = (lo + hi) / 2
    keep = _inside(mid, a) & ~_inside(mid, b)
    return union(lo[keep], hi[keep])


def complement(iv: Intervals, lo: float, hi: float) -> Intervals:
    """``[lo, hi]`` minus ``iv``."""
    return difference(union(np.array([lo]), np.array([hi])), iv)


def total(iv: Intervals) -> float:
    return float(np.sum(iv[1] - iv[0]))


def close_gaps(iv: Intervals, gap: float) -> Intervals:
    """Merge intervals separated by less than ``gap`` (the envelope at that resolution)."""
    s, e = iv
    if s.size < 2:
        return iv
    brk = np.flatnonzero(s[1:] - e[:-1] >= gap) + 1
    return np.concatenate(([s[0]], s[brk])), np.concatenate((e[brk - 1], [e[-1]]))


def covered(iv: Intervals, edges: np.ndarray) -> np.ndarray:
    """Time covered by ``iv`` within each bin ``[edges[k], edges[k+1]]``."""
    s, e = iv
    if s.size == 0:
        return np.zeros(edges.size - 1)
    cum = np.concatenate(([0.0], np.cumsum(e - s)))  # cum[k]: length of the first k intervals
    i = np.searchsorted(s, edges, side="right")  # intervals starting at or before each edge
    j = np.maximum(i - 1, 0)  # the last of them: only it can be cut by the edge
    upto = np.where(i > 0, cum[j] + np.minimum(edges, e[j]) - s[j], 0.0)
    return np.diff(upto)


@dataclass
class Bars:
    """Horizontal bars in lane coordinates: start, length (s), centre and thickness (lanes)."""

    base: np.ndarray
    length: np.ndarray
    y: np.ndarray
    thickness: np.ndarray

    @classmethod
    def exact(cls, iv: Intervals, lane: int, band: float = BAND) -> Bars:
        s, e = iv
        return cls(s, e - s, np.full(s.size, float(lane)), np.full(s.size, band))

    @classmethod
    def concat(cls, parts: list[Bars]) -> Bars:
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("base", "length", "y", "thickness")))

    def time(self, band: float = BAND) -> float:
        """Seconds the bars stand for (a bar ``t`` thick counts ``t / band`` of its length)."""
        return float(np.sum(self.length * self.thickness) / band)


def binned_bars(states: list[Intervals], edges: np.ndarray, lane: int,
                band: float = BAND) -> list[Bars]:
    """Each state's share of each time bin as a bar that thick, stacked across the lane.

    ``states`` must partition the time of ``edges``. In each bin the first state fills the
    lane's band from ``lane + band / 2`` (the bottom of the lane on a reversed axis), the next
    above it, and so on, so a lane reads as a stacked area chart of the states' shares. Runs of
    bins with equal shares become one bar, and every state keeps its total time.
    """
    width = np.diff(edges)
    below = np.zeros(width.size)
    out = []
    for iv in states:
        f = np.round(covered(iv, edges) / width, 9)
        key = np.stack([f, np.round(below, 9)])
        start = np.flatnonzero(np.r_[True, np.any(key[:, 1:] != key[:, :-1], axis=0)])
        stop = np.r_[start[1:], f.size]
        keep = f[start] > 0
        start, stop = start[keep], stop[keep]
        share, under = f[start], below[start]
        out.append(Bars(edges[start], edges[stop] - edges[start],
                        lane + band / 2 - band * (under + share / 2), band * share))
        below = below + f
    return out


def running_steps(t0: np.ndarray, t1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact number of running spans as a step function: from ``t[k]`` on it is ``n[k]``."""
    if t0.size == 0:
        return np.array([0.0]), np.array([0])
    t = np.concatenate([t0, t1])
    d = np.concatenate([np.ones(t0.size, dtype=np.int64), -np.ones(t1.size, dtype=np.int64)])
    order = np.lexsort((d, t))  # at equal times, ends (-1) before starts (+1)
    t, n = t[order], np.cumsum(d[order])
    last = np.flatnonzero(np.r_[t[1:] != t[:-1], True])  # keep the count after all changes at t
    return np.r_[0.0, t[last]], np.r_[0, n[last]]


def occupancy(t0: np.ndarray, t1: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean number of running spans in each bin (span-seconds in the bin / bin width)."""
    if t0.size == 0:
        return np.zeros(edges.size - 1)

    def integral(x: np.ndarray) -> np.ndarray:  # span-seconds before each x
        out = np.zeros(x.size)
        for ts, sign in ((np.sort(t0), 1.0), (np.sort(t1), -1.0)):
            cum = np.concatenate(([0.0], np.cumsum(ts)))
            k = np.searchsorted(ts, x, side="right")
            out += sign * (k * x - cum[k])
        return out

    return np.diff(integral(edges)) / np.diff(edges)


@dataclass
class Lanes:
    """The lanes of one run; interval sets are exact (see :func:`binned_bars` for large runs)."""

    engines: int
    capacity: int  # slots per engine (max_num_seqs)
    makespan: float
    rollout: list[Intervals]  # per engine: holding spans, not prefilling
    prefill: list[Intervals]  # per engine
    idle: list[Intervals]  # per engine: holding no span and not prefilling
    train: Intervals
    sync: Intervals
    trainer_idle: Intervals
    spans: np.ndarray  # the span table (sortedrl.metrics.span_table)
    offload: Intervals | None = None  # colocated: engines moving weights/KV out (vLLM sleep)
    onload: Intervals | None = None  # and back in (wake); None when the run has neither
    tool: Intervals | None = None  # multi-turn: some tool call runs in a sandbox
    sandbox_full: Intervals | None = None  # some trajectory waits for a sandbox (none free)
    away: tuple[np.ndarray, np.ndarray] | None = None  # trajectories away on tool calls (steps)

    @property
    def detailed(self) -> bool:
        return self.spans.size <= DETAIL_LIMIT

    def edges(self, bins: int = BINS) -> np.ndarray:
        return np.linspace(0.0, self.makespan if self.makespan > 0 else 1.0, bins + 1)


def _intervals(tl: Timeline, kind: str) -> Intervals:
    return union(tl.columns(kind)["t"], tl.ends(kind))


def lanes(tl: Timeline) -> Lanes:
    """Compute every lane of ``tl``."""
    engines = int(tl.meta["engines"])
    sp = span_table(tl)
    makespan = makespan_of(tl)
    pf = tl.columns("prefill")
    pf_engine, pf_t, pf_t_end = pf["engine"], pf["t"], pf["t_end"]  # each read once
    rollout, prefill, idle = [], [], []
    for e in range(engines):
        mine = sp["engine"] == e
        active = union(sp["t0"][mine], sp["t1"][mine])
        pe = pf_engine == e
        p = union(pf_t[pe], pf_t_end[pe])
        rollout.append(difference(active, p))
        prefill.append(p)
        both = union(np.concatenate([active[0], p[0]]), np.concatenate([active[1], p[1]]))
        idle.append(complement(both, 0.0, makespan))
    train = _intervals(tl, "train")
    sync = difference(_intervals(tl, "sync"), train)
    busy = union(np.concatenate([train[0], sync[0]]), np.concatenate([train[1], sync[1]]))
    moved = tl.count("offload") or tl.count("onload")
    moves = [_intervals(tl, k) if moved else None for k in ("offload", "onload")]
    return Lanes(engines, int(tl.meta["max_num_seqs"]), makespan, rollout, prefill, idle, train,
                 sync, complement(busy, 0.0, makespan), sp, *moves, *tool_lanes(tl))


def tool_lanes(tl: Timeline) -> tuple:
    """Multi-turn runs: when some tool call runs in a sandbox and none waits for one, when the
    pool is full (some trajectory waits), and the trajectories away on a tool call (asked to
    back) as a step function (:func:`running_steps`); all ``None`` without tool calls."""
    if not tl.count("tool"):
        return None, None, None
    calls = tl.columns("tool")
    asked, start, back = calls["t"], calls["t_start"], calls["t_end"]
    waiting = start > asked
    full = union(asked[waiting], start[waiting])
    return difference(union(start, back), full), full, running_steps(asked, back)

