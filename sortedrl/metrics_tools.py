"""Metrics of multi-turn runs: where tool calls put the rollout slots' idle time.

A trajectory away on a tool call holds no slot, so tool latency is a bubble of its own kind: a
slot idles because its sequence waits on the environment, not because no sequence is left to
run (the length tail). ``docs/metrics.md`` defines each key; they appear in a summary only when
the run made tool calls, so single-turn summaries are unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from sortedrl.metrics import sorted_union, union_length, unit_ratio


def tool_summary(tl, t0: np.ndarray, t1: np.ndarray, capacity: int, busy_slots: float) -> dict:
    """The tool keys of the summary, plus ``rollout_s`` and ``bubble_ratio`` recomputed with
    the tool calls inside rollout; ``{}`` when the run made none."""
    calls = tl.count("tool")
    if not calls:
        return {}
    cols = tl.columns("tool")
    asked, start, back = cols["t"], cols["t_start"], cols["t_end"]
    tool_s = math.fsum((back - start).tolist())
    wait_s = math.fsum((start - asked).tolist())
    if tl.meta.get("placement", "colocated") == "colocated":  # rollout stops for these
        asked, back = outside(asked, back, *_stopped(tl))
    rollout_s = union_length(np.concatenate((t0, asked)), np.concatenate((t1, back)))
    slot_s = capacity * rollout_s
    bubble = unit_ratio(1.0 - busy_slots / slot_s) if slot_s > 0 else 0.0
    tool_idle = _idle_for_tools(t0, t1, asked, back, capacity)
    bubble_tool = unit_ratio(tool_idle / slot_s) if slot_s > 0 else 0.0
    return {
        "rollout_s": rollout_s,
        "bubble_ratio": bubble,
        "tool_calls": calls,
        "tool_s": tool_s,
        "sandbox_wait_s": wait_s,
        "bubble_tool_ratio": bubble_tool,
        "bubble_tail_ratio": unit_ratio(bubble - bubble_tool),
    }


def _stopped(tl) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint windows in which a colocated cluster's rollout is stopped: updates, syncs,
    offloads and onloads (a tool call that runs on through one is not rollout time there)."""
    kinds = [k for k in ("train", "sync", "offload", "onload") if tl.count(k)]
    if not kinds:
        return np.empty(0), np.empty(0)
    return sorted_union(np.sort(np.concatenate([tl.columns(k)["t"] for k in kinds])),
                        np.sort(np.concatenate([tl.ends(k) for k in kinds])))


def outside(t0: np.ndarray, t1: np.ndarray, w0: np.ndarray, w1: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The parts of intervals ``[t0, t1]`` outside the disjoint sorted windows ``[w0, w1]``;
    intervals that meet no window come back as they were, in their order, the pieces of the
    others after them."""
    first = np.searchsorted(w1, t0, side="right")  # the first window ending after the start
    last = np.searchsorted(w0, t1, side="left")  # windows before this index start before the end
    cut = first < last
    if not cut.any():
        return t0, t1
    pieces0, pieces1 = [t0[~cut]], [t1[~cut]]
    for a, b, k0, k1 in zip(t0[cut].tolist(), t1[cut].tolist(), first[cut].tolist(),
                            last[cut].tolist(), strict=True):
        edges = [a, *(x for k in range(k0, k1) for x in (w0[k], w1[k])), b]
        keep = [(lo, hi) for lo, hi in zip(edges[::2], edges[1::2], strict=True) if hi > lo]
        pieces0.append(np.array([lo for lo, _ in keep], dtype=t0.dtype))
        pieces1.append(np.array([hi for _, hi in keep], dtype=t1.dtype))
    return np.concatenate(pieces0), np.concatenate(pieces1)


def _idle_for_tools(t0, t1, asked, back, capacity: int) -> float:
    """Slot-seconds idle because a trajectory was away on a tool call: at each instant, the
    fewer of the idle slots and the samples away (waiting for a sandbox or in one)."""
    times = np.concatenate((t0, t1, asked, back))
    running = np.concatenate((np.ones_like(t0), -np.ones_like(t1), np.zeros_like(asked),
                              np.zeros_like(back)))
    away = np.concatenate((np.zeros_like(t0), np.zeros_like(t1), np.ones_like(asked),
                           -np.ones_like(back)))
    order = np.argsort(times, kind="stable")
    times = times[order]
    idle = np.maximum(capacity - np.cumsum(running[order]), 0.0)
    blamed = np.minimum(idle, np.cumsum(away[order]))[:-1]
    return math.fsum((np.diff(times) * blamed).tolist())
