"""Event-jump against a brute-force reference that steps every decode step.

The reference below is written from the engine conventions in ``sortedrl/sim/engine.py``'s
docstring, independently of the engine's code: each loop iteration is one decode step. Under the
``sync`` policy every sample of a step is admitted at the step's start, spread over engines in
contiguous blocks, so each engine can be stepped on its own.

Run: pytest tests/test_sim_bruteforce.py
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sortedrl.policies.base import Keep, Policy, Train, WakeOn
from sortedrl.policies.registry import make_policy, run_context
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


class Held:
    """The prompt KV one engine holds: per running sample, or with prefix caching (``group`` >
    0) once per (group, prompt length) while any member runs."""

    def __init__(self, P, group):
        self.P, self.group, self.count = P, group, Counter()

    def key(self, i):
        return (i // self.group, self.P[i]) if self.group else ("sample", i)

    def new(self, i):
        """Prompt tokens sample i must prefill and add."""
        return 0 if self.count[self.key(i)] else self.P[i]

    def join(self, i):
        self.count[self.key(i)] += 1

    def leave(self, i):
        """Prompt tokens freed when sample i stops running."""
        self.count[self.key(i)] -= 1
        return 0 if self.count[self.key(i)] else self.P[i]


def top_up(keep, running, queue, gen0):
    """A standing ``Keep(source, window)`` order: after a step's finishes (before preemption and
    admission, so the new samples share the step's prefill) queue fresh samples from the
    source until ``window`` are running or queued."""
    if keep is None:
        return
    source, window = keep
    while source and len(running) + len(queue) < window:
        i = source.popleft()
        queue.append(i)
        gen0[i] = 0


def brute_engine(t, samples, L, P, cost, cap, K, K_admit, chunk=0, group=0, keep=None):
    """Step one engine decode step by decode step. Returns (spans, end time)."""
    held = Held(P, group)
    if chunk and not cost.prefill_in_step:
        return brute_chunked(t, samples, L, P, cost, cap, K, K_admit, chunk, held, keep)
    first = 0 if cost.prefill_in_step else 1  # does the prefill pass yield a token itself?
    queue = deque(samples)
    gen0 = {i: 0 for i in samples}
    running: list[list] = []  # [sample, tokens, t0, tok0], in admission order
    kv = 0
    spans = []
    while True:
        # boundary: finishes, preemption, admission (+ prefill, then a boundary again)
        for r in [r for r in running if r[1] == L[r[0]]]:
            running.remove(r)
            kv -= held.leave(r[0]) + r[1]
            spans.append((r[2], t, r[0], r[1] - r[3], "finish"))
        top_up(keep, running, queue, gen0)
        while running and kv + len(running) > K:
            r = running.pop()
            kv -= held.leave(r[0]) + r[1]
            spans.append((r[2], t, r[0], r[1] - r[3], "preempt"))
            queue.appendleft(r[0])
            gen0[r[0]] = r[1]
        admitted, tokens, pairs = [], 0, 0
        while queue and len(running) < cap:
            i = queue[0]
            prompt = held.new(i)
            new = prompt + gen0[i]
            if kv + new + 1 + len(running) + 1 > K_admit:
                break
            queue.popleft()
            held.join(i)
            running.append([i, gen0[i] + first, t, gen0[i]])
            kv += new + first
            admitted.append(i)
            work = max(new, 1)  # a full prefix hit computes the last prompt token again
            tokens += work
            pairs += work * (P[i] - prompt) + work * (work + 1) // 2 if new else P[i] + gen0[i]
        if admitted:
            t += cost.prefill(tokens, pairs)
            continue
        if not running:
            assert not queue
            return spans, t
        t += cost.decode_step(len(running), kv)
        for r in running:
            r[1] += 1
        kv += len(running)


def brute_chunked(t, samples, L, P, cost, cap, K, K_admit, chunk, held, keep=None):
    """Chunked prefill, step by step: a step carries one token per running sample and up to
    ``chunk - B`` prompt tokens of the samples being admitted, which join (with their first token)
    after their last chunk. A set of samples is admitted only if its chunks end by the next finish
    of a running sample and the KV after them leaves room for one more step. Preemption as in
    :func:`brute_engine`."""
    queue = deque(samples)
    gen0 = {i: 0 for i in samples}
    running: list[list] = []  # [sample, tokens, t0, tok0]
    kv = 0
    spans = []
    while True:
        for r in [r for r in running if r[1] == L[r[0]]]:
            running.remove(r)
            kv -= held.leave(r[0]) + r[1]
            spans.append((r[2], t, r[0], r[1] - r[3], "finish"))
        top_up(keep, running, queue, gen0)
        while running and kv + len(running) > K:
            r = running.pop()
            kv -= held.leave(r[0]) + r[1]
            spans.append((r[2], t, r[0], r[1] - r[3], "preempt"))
            queue.appendleft(r[0])
            gen0[r[0]] = r[1]
        b0 = len(running)
        horizon = min((L[r[0]] - r[1] for r in running), default=10**9)
        admitted, tokens, pairs, steps, need_kv = [], 0, 0, 0, kv
        while queue and b0 + len(admitted) < cap:
            prompt = held.new(queue[0])
            new = prompt + gen0[queue[0]]
            work = max(new, 1)  # a full prefix hit computes the last prompt token again
            n = -(-(tokens + work) // (chunk - b0))
            if n > horizon or need_kv + new + 1 + b0 * n + b0 + len(admitted) + 1 > K_admit:
                break
            i = queue.popleft()
            held.join(i)
            admitted.append(i)
            tokens += work
            pairs += work * (P[i] - prompt) + work * (work + 1) // 2 if new else P[i] + gen0[i]
            need_kv += new + 1
            steps = n
        if admitted:
            left, t0 = tokens, t
            for _ in range(steps):  # mixed steps: the running batch decodes beside a chunk
                part = min(left, chunk - b0)
                # an MoE step reads the experts its chunk's tokens route to beyond the batch's
                extra = cost.weight_read(b0 + part) - cost.weight_read(b0) if cost.experts else 0.0
                t += cost.decode_step(b0, kv) + extra + cost.prefill_s_per_token * part
                left -= part
                for r in running:
                    r[1] += 1
                kv += b0
            t += cost.admit_step_s + cost.admit_s_per_request * len(admitted) + cost.prefill_s_per_pair * pairs
            for i in admitted:
                running.append([i, gen0[i] + 1, t0, gen0[i]])
            kv = need_kv + b0 * steps
            continue
        if not running:
            assert not queue
            return spans, t
        t += cost.decode_step(len(running), kv)
        for r in running:
            r[1] += 1
        kv += len(running)


def blocks(samples, engines, group):
    """Equal contiguous shares (lower engines take the remainder), cut only where a group starts:
    engine e's block ends at the group start nearest the sum of the shares of engines 0..e (the
    later on a tie), never before the previous cut (the default placement)."""
    size, extra = divmod(len(samples), engines)
    share = [size + (1 if e < extra else 0) for e in range(engines)]
    starts = [pos for pos in range(len(samples) + 1)
              if pos in (0, len(samples)) or samples[pos] // group != samples[pos - 1] // group]
    cuts = [0]
    for e in range(engines - 1):
        target = sum(share[:e + 1])
        nearest = min(starts, key=lambda pos: (abs(pos - target), -pos))
        cuts.append(max(cuts[-1], nearest))
    cuts.append(len(samples))
    return [samples[cuts[e]:cuts[e + 1]] for e in range(engines)]


def brute_sync(trace, cluster, batch):
    """The sync policy by brute force: step after step; returns spans and makespan."""
    cost = cluster.cost()
    L, P = trace.response_len.tolist(), trace.prompt_len.tolist()
    n, group = len(trace), trace.meta.group_size
    spans, t = [], 0.0
    for start in range(0, n, batch * group):
        step = list(range(start, min(n, start + batch * group)))
        ends = []
        for e, chunk in enumerate(blocks(step, cluster.engines, group)):
            if not chunk:
                continue
            sp, end = brute_engine(t, chunk, L, P, cost, cluster.max_num_seqs, cluster.kv_budget,
                                   cluster.kv_admit_budget,
                                   cluster.max_num_batched_tokens if cluster.chunked_prefill else 0,
                                   group if cluster.prefix_caching and group > 1 else 0)
            spans += [(a, b, e, i, k, why) for a, b, i, k, why in sp]
            ends.append(end)
        t = max(ends)
        t += cost.train(sum(P[i] + L[i] for i in step))
        if step[-1] < n - 1:  # the weights go to the engines for the next step (none after the last)
            t += cost.sync()
    return spans, t


@st.composite
def cases(draw):
    n = draw(st.integers(1, 24))
    group = draw(st.sampled_from([1, 2, 3]))
    n = max(group, n - n % group)
    lengths = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n))
    engines = draw(st.integers(1, 3))
    cap = draw(st.integers(1, 6))
    kv = draw(st.integers(max(prompts) + max(lengths) + 3, 200))
    wm = draw(st.sampled_from([0.0, 0.05]))
    costs = dict(
        step_fixed_s=draw(st.sampled_from([0.0, 0.01, 1.0])),
        weight_read_s=draw(st.sampled_from([0.5, 1.0, 0.013])),
        kv_read_s_per_token=draw(st.sampled_from([0.0, 0.001, 0.25])),
        compute_s_per_seq=draw(st.sampled_from([0.0, 0.3, 1.7])),
        prefill_s_per_token=draw(st.sampled_from([0.0, 0.01])),
        prefill_s_per_pair=draw(st.sampled_from([0.0, 0.0001])),
        train_per_token=0.001,
        step_s_per_seq=draw(st.sampled_from([0.0, 0.02])),
        prefill_in_step=draw(st.booleans()),
    )
    if draw(st.integers(0, 3)) == 0:  # an MoE model: a step reads the experts its tokens touch
        costs.update(experts=4, experts_per_token=draw(st.sampled_from([1, 2])), expert_read=0.05)
    batch = draw(st.integers(1, max(1, n // group)))
    chunk = draw(st.sampled_from([0, 0, cap + 1, cap + 7, 64]))  # 0: prefill stalls the engine
    prefix = draw(st.booleans())
    if draw(st.booleans()):  # the members of a group share one prompt length (real traces)
        prompts = [prompts[i - i % group] for i in range(n)]
    return lengths, prompts, group, engines, cap, kv, wm, costs, batch, chunk, prefix


@settings(max_examples=150, deadline=None)
@given(cases())
def test_event_jump_matches_brute_force(case):
    lengths, prompts, group, engines, cap, kv, wm, costs, batch, chunk, prefix = case
    trace = make_trace(lengths, prompts, group_size=group, max_len=max(lengths))
    cluster = tiny_cluster(engines=engines, max_num_seqs=cap, kv=kv, watermark=wm, **costs)
    cluster = dataclasses.replace(cluster, chunked_prefill=chunk > 0, prefix_caching=prefix,
                                  max_num_batched_tokens=chunk or 8192)
    assume(not prompts or max(prompts) + max(lengths) + 1 <= cluster.kv_admit_budget)  # (an
    # impossible cluster is tested elsewhere)
    policy = make_policy("sync", [f"rollout_batch={batch}"], trace)
    got = simulate(trace, policy, cluster)
    want_spans, want_end = brute_sync(trace, cluster, batch)

    key = lambda s: (s[3], s[0], s[5])  # noqa: E731
    got_spans = sorted(((s[0], s[1], s[2], s[3], s[6], s[7]) for s in got.timeline.spans), key=key)
    want_spans = sorted(want_spans, key=key)
    assert [(s[2], s[3], s[4], s[5]) for s in got_spans] == [(s[2], s[3], s[4], s[5]) for s in want_spans]
    np.testing.assert_allclose([s[:2] for s in got_spans], [s[:2] for s in want_spans], rtol=1e-9, atol=1e-9)
    assert got.summary["makespan_s"] == pytest.approx(want_end, rel=1e-9, abs=1e-6)


class KeepWindow(Policy):
    """Standing orders only: keep ``window`` samples admitted, taken from the trace in order,
    and hear a finish only once nothing is left, to train everything."""

    name = "keep_window"

    def __init__(self, window, ctx=None):
        super().__init__(None, ctx)
        self.window, self.queue, self.heard = window, deque(), 0

    def on_start(self, view):
        self.queue.extend(range(view.num_groups * view.group_size))
        return [Keep(self.queue, self.window), WakeOn(drained=True)]

    def on_finished(self, view, samples, engine):
        self.heard += 1
        return [Train(view.finished())] if not view.admitted and not self.queue else []


def brute_keep(trace, cluster, window):
    """``KeepWindow`` on one engine by brute force: the standing top-up after each step's
    finishes (:func:`top_up`), then one update (no sync: nothing runs after it)."""
    cost = cluster.cost()
    L, P = trace.response_len.tolist(), trace.prompt_len.tolist()
    source = deque(range(len(trace)))
    first = [source.popleft() for _ in range(min(window, len(trace)))]
    group = trace.meta.group_size
    sp, end = brute_engine(0.0, first, L, P, cost, cluster.max_num_seqs, cluster.kv_budget,
                           cluster.kv_admit_budget,
                           cluster.max_num_batched_tokens if cluster.chunked_prefill else 0,
                           group if cluster.prefix_caching and group > 1 else 0,
                           keep=(source, window))
    spans = [(a, b, 0, i, k, why) for a, b, i, k, why in sp]
    return spans, end + cost.train(sum(P[i] + L[i] for i in range(len(trace))))


@settings(max_examples=120, deadline=None)
@given(cases(), st.integers(1, 14))
def test_standing_orders_and_batched_finishes_match_brute_force(case, window):
    lengths, prompts, group, _, cap, kv, wm, costs, _, chunk, prefix = case
    trace = make_trace(lengths, prompts, group_size=group, max_len=max(lengths))
    cluster = tiny_cluster(engines=1, max_num_seqs=cap, kv=kv, watermark=wm, **costs)
    cluster = dataclasses.replace(cluster, chunked_prefill=chunk > 0, prefix_caching=prefix,
                                  max_num_batched_tokens=chunk or 8192)
    assume(max(prompts) + max(lengths) + 1 <= cluster.kv_admit_budget)
    policy = KeepWindow(window, run_context(trace))
    got = simulate(trace, policy, cluster, audit=True)
    want_spans, want_end = brute_keep(trace, cluster, window)

    key = lambda s: (s[3], s[0], s[5])  # noqa: E731
    got_spans = sorted(((s[0], s[1], s[2], s[3], s[6], s[7]) for s in got.timeline.spans), key=key)
    want_spans = sorted(want_spans, key=key)
    assert [(s[2], s[3], s[4], s[5]) for s in got_spans] == [(s[2], s[3], s[4], s[5]) for s in want_spans]
    np.testing.assert_allclose([s[:2] for s in got_spans], [s[:2] for s in want_spans], rtol=1e-9, atol=1e-9)
    assert got.summary["makespan_s"] == pytest.approx(want_end, rel=1e-9, abs=1e-6)
    assert policy.heard == 1  # every other finish was served by the standing order alone


def test_finishes_of_one_step_share_one_admit_and_one_prefill():
    # s0 and s1 finish at the same step; the standing order's two top-ups (s2, s3) are one
    # admit at that instant and one prefill with the engine's step, not one each
    trace = make_trace([3, 3, 5, 5, 4])
    policy = KeepWindow(2, run_context(trace))
    got = simulate(trace, policy, tiny_cluster(max_num_seqs=2))
    assert [a[2] for a in got.timeline.admits] == [[0, 1], [2, 3], [4]]
    assert [p[3] for p in got.timeline.prefills] == [[0, 1], [2, 3], [4]]
    assert got.timeline.admits[1][0] == got.timeline.prefills[1][0]
    assert policy.heard == 1


def test_brute_force_reference_is_itself_sane():
    # one engine, no preemption: 1 prefill + (L-1) steps of 2 s each
    trace = make_trace([4])
    spans, end = brute_sync(trace, tiny_cluster(), 1)
    assert spans == [(0.0, 8.0, 0, 0, 4, "finish")]
    assert end == 8.0 + 10.0  # + the update; no sync after the last one
