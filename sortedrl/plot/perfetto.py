"""Export a timeline in Chrome's trace-event format, for Perfetto (ui.perfetto.dev) and
chrome://tracing, which zoom smoothly through millions of events where a browser plot cannot.

The file is ``{"traceEvents": [...], "displayTimeUnit": "ms"}``. Times are microseconds since
the start of the run. One process per engine (``pid = engine + 1``) and one for the trainer
(``pid = engines + 1``), each named by a ``process_name`` metadata event:

- engine, thread 0 ``activity``: complete events (``"ph": "X"``) ``rollout`` (holding spans, not
  prefilling) and ``prefill`` (one per prefill record, with its samples and tokens);
- engine, threads ``slot k`` (k = 0, 1, ...): one complete event per span, named ``sample I``,
  with its attempt, version, tokens and how it ended; spans are packed greedily onto the fewest
  slots, so a slot never holds two spans at once;
- engine, counter ``running samples``: the running batch size, one event per change;
- trainer, thread 0 ``train`` (one event per update) and thread 1 ``sync`` (one per sync);
- multi-turn runs, process ``tools`` (``pid = engines + 2``): threads ``sandbox k``, one complete
  event per tool call while it runs (``sample I turn T``, with the seconds it waited for the
  sandbox), packed like the slots (detailed runs only), and the counters ``away on tool calls``
  and ``waiting for a sandbox``, one event per change.

A run with more than :data:`~sortedrl.plot.lanes.DETAIL_LIMIT` spans is exported bounded
instead: no slot threads; the activity thread holds ``active`` events, the stretches during which
the engine held a span, with idle gaps shorter than one of :data:`EXPORT_BINS` time bins closed;
and the counters ``running samples`` (mean per bin) and ``prefill share`` (share of each bin spent
prefilling) have one event per bin. Trainer events stay exact up to :data:`TRAINER_LIMIT` updates
and are binned the same way beyond.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

import numpy as np

from sortedrl.plot import lanes as L
from sortedrl.plot.page import atomic_write
from sortedrl.timeline import Timeline

EXPORT_BINS = 2000
TRAINER_LIMIT = 10_000
US = 1e6  # microseconds per second


def _us(t: float) -> float:
    return round(float(t) * US, 3)


def _x(name: str, t0: float, t1: float, pid: int, tid: int, cat: str,
       args: dict | None = None) -> dict:
    ev = {"name": name, "cat": cat, "ph": "X", "ts": _us(t0), "dur": round(_us(t1) - _us(t0), 3),
          "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def _meta(kind: str, pid: int, name: str | int, tid: int | None = None) -> dict:
    ev: dict = {"name": kind, "ph": "M", "pid": pid, "args": {}}
    if tid is not None:
        ev["tid"] = tid
    ev["args"]["sort_index" if kind.endswith("sort_index") else "name"] = name
    return ev


def assign_slots(t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Pack intervals onto the fewest tracks so that no track holds two at once (greedy)."""
    slots = np.zeros(t0.size, dtype=np.int64)
    busy: list[tuple[float, int]] = []  # (end, slot)
    free: list[int] = []
    n = 0
    for j in np.lexsort((t1, t0)):
        while busy and busy[0][0] <= t0[j]:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            slot = heapq.heappop(free)
        else:
            slot, n = n, n + 1
        slots[j] = slot
        heapq.heappush(busy, (float(t1[j]), slot))
    return slots


def trace_events(tl: Timeline, ln: L.Lanes | None = None) -> dict:
    """The trace-event document of ``tl`` (see the module docstring); ``ln``: its lanes if the
    caller has them (``plot --perfetto`` draws the page and the trace from one span table)."""
    ln = ln if ln is not None else L.lanes(tl)
    E, sp = ln.engines, ln.spans
    prefills = tl.rows("prefill") if ln.detailed else []
    events: list[dict] = []
    edges = ln.edges(EXPORT_BINS)
    for e in range(E):
        pid = e + 1
        events += [_meta("process_name", pid, f"engine {e}"),
                   _meta("process_sort_index", pid, e), _meta("thread_name", pid, "activity", 0)]
        mine = sp[sp["engine"] == e]
        if ln.detailed:
            s, t = ln.rollout[e]
            events += [_x("rollout", a, b, pid, 0, "rollout") for a, b in zip(s, t, strict=True)]
            events += [_x("prefill", a, b, pid, 0, "prefill",
                          {"samples": len(ss), "tokens": k, "recomputed": r})
                       for a, b, en, ss, k, r in prefills if en == e]
            slots = assign_slots(mine["t0"], mine["t1"])
            for k in range(int(slots.max()) + 1 if slots.size else 0):
                events.append(_meta("thread_name", pid, f"slot {k}", k + 1))
            for row, k in zip(mine, slots, strict=True):
                args = {"sample": int(row["sample"]), "attempt": int(row["attempt"]),
                        "version": int(row["version"]), "tokens": int(row["tokens"]),
                        "end": str(row["end"])}
                events.append(_x(f"sample {row['sample']}", row["t0"], row["t1"], pid, int(k) + 1,
                                 "span", args))
            ts, n = L.running_steps(mine["t0"], mine["t1"])
            events += [{"name": "running samples", "ph": "C", "ts": _us(a), "pid": pid,
                        "args": {"running": int(c)}} for a, c in zip(ts, n, strict=True)]
        else:
            gap = float(edges[1] - edges[0])
            active = L.close_gaps(L.union(mine["t0"], mine["t1"]), gap)
            events += [_x("active", a, b, pid, 0, "rollout") for a, b in zip(*active, strict=True)]
            occ = L.occupancy(mine["t0"], mine["t1"], edges)
            share = L.covered(ln.prefill[e], edges) / np.diff(edges)
            for a, c, p in zip(edges[:-1], occ, share, strict=True):
                events.append({"name": "running samples", "ph": "C", "ts": _us(a), "pid": pid,
                               "args": {"running": round(float(c), 3)}})
                events.append({"name": "prefill share", "ph": "C", "ts": _us(a), "pid": pid,
                               "args": {"prefill": round(float(p), 4)}})
    pid = E + 1
    events += [_meta("process_name", pid, "trainer"), _meta("process_sort_index", pid, E),
               _meta("thread_name", pid, "train", 0), _meta("thread_name", pid, "sync", 1)]
    if ln.detailed or tl.count("train") + tl.count("sync") <= TRAINER_LIMIT:
        events += [_x(f"update {u}", a, b, pid, 0, "train",
                      {"version": v, "samples": len(ss), "tokens": k})
                   for u, (a, b, v, ss, k) in enumerate(tl.rows("train"))]
        events += [_x(f"sync to version {v}", a, b, pid, 1, "sync", {"version": v})
                   for a, b, v in tl.rows("sync")]
    else:
        gap = float(edges[1] - edges[0])
        for tid, (name, iv) in enumerate((("train", ln.train), ("sync", ln.sync))):
            events += [_x(name, a, b, pid, tid, name)
                       for a, b in zip(*L.close_gaps(iv, gap), strict=True)]
    if tl.count("offload") or tl.count("onload"):  # colocated engines stepping aside per update
        events += [_meta("thread_name", pid, "offload", 2), _meta("thread_name", pid, "onload", 3)]
        events += [_x(f"{kind} (version {v})", a, b, pid, tid, kind, {"version": v})
                   for tid, kind in ((2, "offload"), (3, "onload"))
                   for a, b, v in tl.rows(kind)]
    if tl.count("tool"):
        events += _tool_events(tl, ln, E + 2)
    m = tl.meta
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"policy": m.get("policy"), "trace": m.get("trace"),
                          "cluster": m.get("cluster"), "detailed": ln.detailed}}


def _tool_events(tl: Timeline, ln: L.Lanes, pid: int) -> list[dict]:
    """The ``tools`` process of a multi-turn run (see the module docstring)."""
    events = [_meta("process_name", pid, "tools"), _meta("process_sort_index", pid, pid - 1)]
    calls = tl.columns("tool")
    asked, start, back = calls["t"], calls["t_start"], calls["t_end"]
    if ln.detailed:
        slots = assign_slots(start, back)
        events += [_meta("thread_name", pid, f"sandbox {k}", k) for k in range(int(slots.max()) + 1)]
        for (t, ts, te, e, i, a, turn, tokens), k in zip(tl.rows("tool"), slots.tolist(), strict=True):
            events.append(_x(f"sample {i} turn {turn}", ts, te, pid, k, "tool",
                             {"sample": i, "attempt": a, "turn": turn, "engine": e,
                              "tokens": tokens, "waited_s": round(ts - t, 6)}))
    for name, key, (ts, n) in (("away on tool calls", "away", ln.away),
                               ("waiting for a sandbox", "waiting", L.running_steps(asked, start))):
        events += [{"name": name, "ph": "C", "ts": _us(a), "pid": pid, "args": {key: int(c)}}
                   for a, c in zip(ts, n, strict=True)]
    return events


def perfetto_json(tl: Timeline, ln: L.Lanes | None = None) -> str:
    return json.dumps(trace_events(tl, ln), separators=(",", ":")) + "\n"


def write_perfetto(tl: Timeline, path: str | Path) -> Path:
    """Write the trace-event JSON of ``tl`` to ``path`` atomically; returns the path."""
    path = Path(path)
    atomic_write({path: perfetto_json(tl)})
    return path
