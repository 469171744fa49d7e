"""Multi-turn event-jump against a brute-force reference that steps every decode step.

The reference is written from the conventions in ``sortedrl/sim/engine.py``, ``sim/turns.py``
and ``sim/tools.py``, independently of their code. All engines are stepped together, one decode
step or prefill at a time, beside a sandbox pool:

- a turn that ends leaves the batch (span end ``tool``); its context (prompt + tokens) stays in
  the engine's cache, least recently cached evicted first whenever running KV + cache exceeds
  the budget; it asks for a sandbox, first come first served;
- a tool call that returns joins its engine's queue; it is admitted at the engine's next step
  boundary, after that boundary's finishes, prefilling only its tool output when its context is
  still cached, else all of it (the generated part counted as recomputed);
- a weight sync empties the cache;
- with ``tool_holds_slot`` a turn that ends keeps its slot and its context's KV (prompt + tokens)
  out of what the running batch may use until its tool returns; it then goes to the head of its
  engine's queue (behind others back the same way) and prefills only its tool output. With
  prefix caching a group's shared prompt is held once while a member runs or holds a slot.

Each tool call's latency has an irrational part of its own (a multiple of sqrt(2) plus a small
multiple of the square root of a prime no other call uses): a return is then never at a step
boundary (costs here are sums of decimal constants, and a time that includes a latency comes
after that call's return), so the order of simultaneous events never matters. With multiples of
sqrt(2) alone, two calls chained through the tool pool could tie with a boundary.

Run: pytest tests/test_sim_turns_bruteforce.py
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import OrderedDict, deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from tests.conftest import tiny_cluster
from tests.test_sim_bruteforce import Held, blocks
from tests.turns_helpers import make_turn_trace

INF = math.inf


class BruteEngine:
    """One engine's state, stepped by :func:`brute_step`."""

    def __init__(self, index, P, group):
        self.index, self.held = index, Held(P, group)
        self.queue: deque[int] = deque()
        self.gen0: dict[int, int] = {}
        self.fresh: dict[int, int] = {}  # queued after a tool call: tool tokens not prefilled
        self.running: list[list] = []  # [sample, tokens, t0, tok0]
        self.cache: OrderedDict[int, tuple[int, int]] = OrderedDict()  # sample -> (KV, own)
        self.holding: dict[int, tuple[int, int]] = {}  # away holding a slot -> (KV, own)
        self.kept: dict[int, int] = {}  # back from a held slot, queued -> own tokens kept
        self.kv = 0
        self.t = INF  # next boundary (INF: idle)

    def budgets(self, w):
        """(slots, KV budget, admission KV budget) left beside the held slots."""
        held = sum(kv for kv, _ in self.holding.values())
        return w["cap"] - len(self.holding), w["K"] - held, w["K_admit"] - held

    def fit(self, K):
        while self.cache and self.kv + sum(v[0] for v in self.cache.values()) > K:
            self.cache.popitem(last=False)


def brute_step(eng, w):
    """Process one boundary of ``eng`` at ``eng.t`` (``w``: the world: costs, turns, pool)."""
    t, cost, P = eng.t, w["cost"], w["P"]
    K = eng.budgets(w)[1]
    for r in [r for r in eng.running if r[1] == w["end"][r[0]]]:
        i = r[0]
        eng.running.remove(r)
        eng.kv -= eng.held.leave(i) + r[1]
        last = w["turn"][i] == len(w["turns"][i]) - 1
        w["spans"].append((r[2], t, eng.index, i, r[1] - r[3], "finish" if last else "tool"))
        if last:
            continue
        if w["holds"] and eng.held.group:  # a holder of its group's prompt, held once
            eng.kv += eng.held.new(i)
            eng.held.join(i)
            eng.holding[i] = (r[1], r[1])
            K = eng.budgets(w)[1]
        elif w["holds"]:
            eng.holding[i] = (P[i] + r[1], r[1])
            K = eng.budgets(w)[1]
        elif w["caching"]:
            eng.cache[i] = (P[i] + r[1], r[1])
        w["asks"].append((i, t))  # a sandbox is asked for, first come first served
    while eng.running and eng.kv + len(eng.running) > K:
        r = eng.running.pop()
        eng.kv -= eng.held.leave(r[0]) + r[1]
        w["spans"].append((r[2], t, eng.index, r[0], r[1] - r[3], "preempt"))
        eng.queue.appendleft(r[0])
        eng.gen0[r[0]] = r[1]
    first = 0 if cost.prefill_in_step else 1
    admitted, tokens, pairs, redone = [], 0, 0, 0
    cap, K, K_admit = eng.budgets(w)
    while eng.queue and len(eng.running) < cap and w["enabled"]:
        i = eng.queue[0]
        g0 = eng.gen0[i]
        prompt = eng.held.new(i)
        new = prompt + g0
        if eng.kv + new + 1 + len(eng.running) + 1 > K_admit:
            break
        eng.queue.popleft()
        del eng.gen0[i]
        eng.held.join(i)
        work = max(new, 1)
        r_i = g0
        if i in eng.fresh:
            fresh = eng.fresh.pop(i)
            own = eng.kept.pop(i) if i in eng.kept else eng.cache.pop(i, (0, 0))[1]
            work, r_i = ((g0 - own) or 1, 0) if own else (work, g0 - fresh)
        eng.running.append([i, g0 + first, t, g0])
        eng.kv += new + first
        admitted.append(i)
        tokens += work
        pairs += work * (P[i] + g0 - work) + work * (work + 1) // 2
        redone += r_i
    if admitted:
        eng.fit(K)
        w["prefills"].append((t, eng.index, tuple(admitted), tokens, redone))
        eng.t = t + cost.prefill(tokens, pairs)
        return
    if not eng.running:
        eng.fit(K)  # (idle too: the cache over its budget is evicted after every change; fuzzing)
        eng.t = INF
        return
    eng.t = t + cost.decode_step(len(eng.running), eng.kv)
    for r in eng.running:
        r[1] += 1
    eng.kv += len(eng.running)
    eng.fit(K)


def brute_rollout(t, samples, engines, w):
    """One sync step's rollout from time ``t``; returns the time the last sample finished."""
    for e, chunk in enumerate(blocks(samples, len(engines), w["group"])):
        for i in chunk:
            engines[e].queue.append(i)
            engines[e].gen0[i] = 0
            w["engine_of"][i] = e
        if chunk:
            engines[e].t = t
    busy, waiting, back, seq, end = 0, deque(), [], 0, t
    while True:
        eng = min(engines, key=lambda e: (e.t, e.index))
        due = back[0][0] if back else INF
        if due == INF and eng.t == INF:
            return end
        if due < eng.t:  # tool calls return (all those due now), then rejoin their engines
            now = due
            while back and back[0][0] == now:
                _, _, i, asked, started = heapq.heappop(back)
                busy -= 1
                turn = w["turn"][i]
                w["tools"].append((asked, started, now, w["engine_of"][i], i, 0, turn,
                                   w["turns"][i][turn][2]))
                _rejoin(i, engines[w["engine_of"][i]], now, w)
        else:
            now = end = eng.t
            brute_step(eng, w)
            waiting.extend(w["asks"])
            w["asks"].clear()
        while waiting and busy < w["pool"]:
            i, asked = waiting.popleft()
            busy += 1
            seq += 1
            heapq.heappush(back, (now + w["turns"][i][w["turn"][i]][1], seq, i, asked, now))


def _rejoin(i, eng, now, w):
    turn = w["turn"][i]
    gen, _, tool_tok = w["turns"][i][turn]
    w["done"][i] += gen
    w["ctx"][i] += tool_tok
    w["turn"][i] = turn + 1
    w["end"][i] = w["done"][i] + w["ctx"][i] + w["turns"][i][turn + 1][0]
    if i in eng.holding:  # its held slot: first in the queue, after those back before it
        eng.kept[i] = eng.holding.pop(i)[1]
        if eng.held.group:
            eng.kv -= eng.held.leave(i)
        first = next((k for k, j in enumerate(eng.queue) if j not in eng.kept), len(eng.queue))
        eng.queue.insert(first, i)
    else:
        eng.queue.append(i)
    eng.gen0[i] = w["done"][i] + w["ctx"][i]
    eng.fresh[i] = tool_tok
    if eng.t == INF:
        eng.t = now


def brute_sync_turns(turns, P, cluster, group, batch):
    """The sync policy on a trace with turns, by brute force: (spans, tools, prefills, end)."""
    cost = cluster.cost()
    n = len(turns)
    w = dict(cost=cost, P=P, turns=turns, group=group, pool=cluster.tool_pool,
             caching=cluster.prefix_caching, holds=cluster.tool_holds_slot,
             K=cluster.kv_budget, K_admit=cluster.kv_admit_budget,
             cap=cluster.max_num_seqs, enabled=True, spans=[], tools=[], prefills=[], asks=[],
             turn=[0] * n, done=[0] * n, ctx=[0] * n, end=[row[0][0] for row in turns],
             engine_of=[-1] * n)
    prefix_group = group if cluster.prefix_caching and group > 1 else 0
    t = 0.0
    for start in range(0, n, batch * group):
        step = list(range(start, min(n, start + batch * group)))
        engines = [BruteEngine(e, P, prefix_group) for e in range(cluster.engines)]
        t = brute_rollout(t, step, engines, w)
        t += cost.train(sum(P[i] + w["done"][i] + turns[i][-1][0] + w["ctx"][i] for i in step))
        if step[-1] < n - 1:  # the weights go to the engines for the next step (none after the last)
            t += cost.sync()
    return w["spans"], w["tools"], w["prefills"], t


ROOT2 = math.sqrt(2.0)
ODD_PRIMES = [p for p in range(3, 200) if all(p % d for d in range(2, int(p ** 0.5) + 1))]


def tool_latency(multiple: int, call: int) -> float:
    """The latency of the ``call``-th tool call drawn: irrational, and independent of the others'
    over the rationals (module docstring)."""
    return multiple * ROOT2 + 0.01 * math.sqrt(ODD_PRIMES[call])


@st.composite
def cases(draw):
    group = draw(st.sampled_from([1, 2]))
    n = group * draw(st.integers(1, 6))
    turns, calls = [], iter(range(len(ODD_PRIMES)))
    for _ in range(n):
        k = draw(st.integers(1, 3))
        turns.append([(draw(st.integers(1, 12)), tool_latency(draw(st.integers(1, 5)), next(calls)),
                       draw(st.integers(0, 8))) for _ in range(k)])
    prompts = draw(st.lists(st.integers(1, 10), min_size=n, max_size=n))
    if draw(st.booleans()):
        prompts = [prompts[i - i % group] for i in range(n)]
    longest = max(prompts) + max(sum(g for g, _, _ in row) + sum(k for _, _, k in row[:-1])
                                 for row in turns)
    costs = dict(
        step_fixed_s=draw(st.sampled_from([0.01, 1.0])),
        weight_read_s=draw(st.sampled_from([0.5, 1.0, 0.013])),
        kv_read_s_per_token=draw(st.sampled_from([0.0, 0.001, 0.25])),
        compute_s_per_seq=draw(st.sampled_from([0.0, 0.3])),
        prefill_s_per_token=draw(st.sampled_from([0.0, 0.01, 0.2])),
        prefill_s_per_pair=draw(st.sampled_from([0.0, 0.0001])),
        train_per_token=0.001,
        prefill_in_step=draw(st.booleans()),
    )
    cluster = tiny_cluster(engines=draw(st.integers(1, 2)), max_num_seqs=draw(st.integers(1, 4)),
                           kv=draw(st.integers(longest + 3, longest + 60)), **costs)
    cluster = dataclasses.replace(cluster, tool_pool=draw(st.sampled_from([1, 1, 2, 3])),
                                  prefix_caching=draw(st.booleans()),
                                  tool_holds_slot=draw(st.booleans()))
    batch = draw(st.integers(1, n // group))
    return turns, prompts, group, cluster, batch


@settings(max_examples=150, deadline=None)
@given(cases())
def test_event_jump_matches_brute_force_with_turns(case):
    turns, prompts, group, cluster, batch = case
    trace = make_turn_trace(turns, prompts, group_size=group)
    got = simulate(trace, make_policy("sync", [f"rollout_batch={batch}"], trace), cluster,
                   audit=True)
    want_spans, want_tools, want_prefills, want_end = brute_sync_turns(
        [[(g, s, k) if j < len(row) - 1 else (g, 0.0, 0) for j, (g, s, k) in enumerate(row)]
         for row in turns], prompts, cluster, group, batch)

    key = lambda s: (s[3], s[0], s[5])  # noqa: E731
    got_spans = sorted(((s[0], s[1], s[2], s[3], s[6], s[7]) for s in got.timeline.spans), key=key)
    want_spans = sorted(want_spans, key=key)
    assert [s[2:] for s in got_spans] == [s[2:] for s in want_spans]
    np.testing.assert_allclose([s[:2] for s in got_spans], [s[:2] for s in want_spans],
                               rtol=1e-9, atol=1e-9)
    got_tools = sorted(got.timeline.tools, key=lambda r: (r[4], r[6]))
    want_tools = sorted(want_tools, key=lambda r: (r[4], r[6]))
    assert [r[3:] for r in got_tools] == [r[3:] for r in want_tools]
    np.testing.assert_allclose([r[:3] for r in got_tools], [r[:3] for r in want_tools],
                               rtol=1e-9, atol=1e-9)
    assert sorted((p[2], tuple(p[3]), p[4], p[5]) for p in got.timeline.prefills) == sorted(
        (e, a, tok, red) for _, e, a, tok, red in want_prefills)
    assert got.summary["makespan_s"] == pytest.approx(want_end, rel=1e-9, abs=1e-6)
    assert 0.0 < got.summary["efficiency"] <= 1.0  # the lower bound counts the tool chain


def test_the_reference_is_itself_sane():
    # the hand-computed case of tests/test_sim_turns.py: two trajectories, pool of 2, 29 s
    turns = [[(2, 5.0, 4), (3, 0.0, 0)]] * 2
    cluster = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5), tool_pool=2)
    spans, tools, prefills, end = brute_sync_turns(turns, [2, 2], cluster, 1, 2)
    assert end == 29.0
    assert sorted(tools) == [(5.0, 5.0, 10.0, 0, 0, 0, 0, 4), (5.0, 5.0, 10.0, 0, 1, 0, 0, 4)]
    assert prefills == [(0.0, 0, (0, 1), 4, 0), (10.0, 0, (0, 1), 8, 0)]
    # a held slot (max_num_seqs 1): the second trajectory waits for the first one's (42 s)
    held = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5, max_num_seqs=1), tool_holds_slot=True)
    assert brute_sync_turns(turns, [2, 2], held, 1, 2)[3] == 42.0
