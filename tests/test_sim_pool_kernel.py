"""The compiled pool loop (sim/pool_kernel.py) gives the same run as the Python loop, byte for byte.

``SimBackend.compiled`` on and off: the summary, the timeline's columns (as the bytes of an
.npz) and the controller's state at every policy call must be identical, on the bundled trace
(rewards, dynamic sampling, minibatches, prefix caching on and off, KV pressure with
preemption; the policies that hear finishes through a ``WakeOn`` order too, whose wake-ups the
kernel must stop at) and on random small runs of the kernel's case; each comparison also checks that the
kernel did apply engine changes, and the engines' bookkeeping is audited after each of its calls.

Run: pytest tests/test_sim_pool_kernel.py
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.compare import cluster_for
from sortedrl.errors import PolicyError
from sortedrl.policies.base import Keep, Policy, Train, WakeOn
from sortedrl.policies.registry import make_policy
from sortedrl.sim import pool_fast, pool_keep
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.io import read_trace
from sortedrl.traces.synth import synthesize
from tests.conftest import make_trace
from tests.test_sim_deferred import BUNDLED, fingerprint, state_hash


def both(monkeypatch, trace, name, sets, cluster, audit=True):
    """Each way: the summary, the timeline, the state at every policy call; and the engine
    changes the kernel applied in the compiled run (preemptions alongside)."""
    runs, pools = [], []
    original = SimBackend._compiled_pool

    def kept(self, controller):
        pool = original(self, controller)
        pools.append(pool)
        return pool

    monkeypatch.setattr(SimBackend, "_compiled_pool", kept)
    for compiled in (True, False):
        monkeypatch.setattr(SimBackend, "compiled", compiled)
        policy = make_policy(name, sets, trace)
        seen = []
        on_event = policy.on_event

        def watched(event, view, on_event=on_event, seen=seen):
            seen.append((event.kind.name, event.engine, event.samples, state_hash(view._s)))
            return on_event(event, view)

        policy.on_event = watched
        result = simulate(trace, policy, cluster, audit=audit)
        runs.append((*fingerprint(result), seen, result.summary.get("preemptions")))
    assert pools[1] is None  # (compiled off)
    return runs, pools[0].changes if pools[0] is not None else 0


@pytest.mark.parametrize(("name", "sets", "kv", "caching"), [
    ("sync", [], 0, True), ("sync", [], 0, False), ("sync", ["minibatches=2"], 0, True),
    ("sync", ["filter_groups=true"], 0, True), ("one_step_off", [], 0, True),
    ("one_step_off", ["filter_groups=true"], 0, False), ("oracle_sorted", [], 0, True),
    ("oracle_sorted", ["predictor=history"], 0, False),
    ("sync", [], 20_000, True), ("sync", [], 20_000, False), ("one_step_off", [], 20_000, True),
    ("oracle_sorted", [], 20_000, True),
    ("partial", [], 0, True), ("partial", ["filter_groups=true"], 0, False), ("partial", [], 20_000, True),
    ("tail_batch", [], 0, True), ("tail_batch", [], 20_000, False),
    ("async", [], 0, True), ("async", ["filter_groups=true"], 20_000, True),
    ("sortedrl", [], 0, True), ("sortedrl", [], 20_000, False),
    # a Keep order's top-ups in the kernel: resumed samples, max_span's drops (Python's), budgets
    ("sortedrl", ["mode=partial"], 0, True), ("sortedrl", ["mode=partial", "max_span=0"], 20_000, True),
    ("sortedrl", ["harvest=samples", "oversubscribe=0.5"], 0, False), ("async", ["drop_stale=true"], 0, True),
    ("async", ["recompute_on_sync=true"], 20_000, False), ("async", ["whole_groups=false", "eta=0"], 0, True),
    ("async", ["max_concurrent=100"], 0, True),
])
def test_bundled_trace_identical(monkeypatch, name, sets, kv, caching):
    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
    cluster = dataclasses.replace(cluster, prefix_caching=caching)
    if kv:  # small enough to preempt
        cluster = dataclasses.replace(cluster, kv_budget_tokens=kv)
    (compiled, python), changes = both(monkeypatch, trace, name, sets, cluster)
    assert compiled == python
    if "filter_groups=true" in sets and name != "sync" and name != "one_step_off":
        assert changes == 0  # WakeOn(any_group): a stop at every group completed, left to Python
    else:
        assert changes > len(trace.response_len) / 2  # most of the run's engine changes were the kernel's
    if kv:
        assert python[3] > 0  # it did preempt (in the kernel: the fallback is only for other engines)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_runs_identical(data):
    group = data.draw(st.sampled_from([1, 2, 4]))
    n = group * data.draw(st.integers(1, 12))
    lengths = data.draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    prompts = [p for p in data.draw(st.lists(st.integers(1, 120), min_size=n // group, max_size=n // group))
               for _ in range(group)]  # one prompt length a group (the kernel's prefix-cache key)
    name = data.draw(st.sampled_from(["sync", "one_step_off", "oracle_sorted", "partial", "tail_batch", "async",
                                      "sortedrl"]))
    groups = n // group
    trace = make_trace(lengths, prompt_lens=prompts, group_size=group,
                       steps=[i // group * 2 // groups for i in range(n)])
    seqs = data.draw(st.integers(1, 8))
    cluster = dataclasses.replace(
        preset("h100-llama3.1-8b-2gpu"), max_num_seqs=seqs, kv_budget_tokens=data.draw(st.integers(450, 3000)),
        max_num_batched_tokens=data.draw(st.integers(seqs + 1, 300)), prefix_caching=data.draw(st.booleans()))
    cluster = cluster_for(make_policy(name, [], trace).placements, cluster)
    with pytest.MonkeyPatch.context() as mp:  # (catch-ups in the kernel at most queues, or few)
        mp.setattr(pool_fast, "CATCH_UP_QUEUE", data.draw(st.sampled_from([0, 3, 128])))
        (compiled, python), changes = both(mp, trace, name, [], cluster)
    assert compiled == python
    assert changes > 0


@pytest.mark.parametrize(("name", "sets", "kv"), [
    ("async", [], 0), ("async", ["recompute_on_sync=true"], 20_000), ("async", ["filter_groups=true"], 0),
    ("async", ["drop_stale=true"], 20_000), ("async", ["whole_groups=false", "eta=0"], 0),
    ("async", ["eta=0"], 20_000)])
def test_catching_up_in_the_kernel_is_identical(monkeypatch, name, sets, kv):
    # SimBackend._catch_up hands an engine's due changes to the kernel (FastPool.catch_up) from
    # CATCH_UP_QUEUE queued samples: at 0, every change a catch-up makes (async's, after an
    # update's top-ups); every finish is booked and deferred as Python's catch-up defers it,
    # with no Keep top-up, one engine after another
    monkeypatch.setattr(pool_fast, "CATCH_UP_QUEUE", 0)
    calls = []
    catch_up = pool_fast.FastPool.catch_up
    monkeypatch.setattr(pool_fast.FastPool, "catch_up",
                        lambda self, j, now: (calls.append(j), catch_up(self, j, now))[1])
    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b"))
    if kv:
        cluster = dataclasses.replace(cluster, kv_budget_tokens=kv)
    (compiled, python), changes = both(monkeypatch, trace, name, sets, cluster)
    assert compiled == python
    assert calls  # (changes: the pool's calls', where any_group leaves none)


def test_a_finish_that_holds_the_host_runs_in_python(monkeypatch):
    """A policy that hears finishes on a cluster whose policy takes host time per event
    (``policy_event_s``): a finish served without an event holds its engine, in Python."""
    trace = read_trace(BUNDLED)
    gpu = preset("h100-llama3.1-8b-2gpu")
    base = dataclasses.replace(gpu, costs=dataclasses.replace(gpu.cost(), policy_event_s=0.001))
    monkeypatch.setattr(SimBackend, "compiled", True)
    pools = []
    original = SimBackend._compiled_pool
    monkeypatch.setattr(SimBackend, "_compiled_pool", lambda self, ctl: pools.append(original(self, ctl)))
    for name in ("partial", "sync"):
        simulate(trace, make_policy(name, [], trace), cluster_for(make_policy(name, [], trace).placements, base))
    assert pools[0] is None and isinstance(pools[1], pool_fast.FastPool)


def test_auto_uses_the_kernel_from_its_size(monkeypatch):
    """``auto`` below AUTO_SAMPLES samples: Python (numba's start-up would cost more)."""
    trace = read_trace(BUNDLED)
    assert len(trace.response_len) < pool_fast.AUTO_SAMPLES
    cluster = cluster_for(make_policy("sync", [], trace).placements, preset("h100-llama3.1-8b-2gpu"))
    pools = []
    original = SimBackend._compiled_pool
    monkeypatch.setattr(SimBackend, "_compiled_pool", lambda self, ctl: pools.append(original(self, ctl)))
    simulate(trace, make_policy("sync", [], trace), cluster)
    monkeypatch.setattr(pool_fast, "AUTO_SAMPLES", len(trace.response_len))
    simulate(trace, make_policy("sync", [], trace), cluster)
    assert pools[0] is None and isinstance(pools[1], pool_fast.FastPool)


def test_auto_hands_a_run_back_once_the_kernel_stops_too_often(monkeypatch):
    """``auto``: once GUARD_CALLS calls made fewer than GUARD_CHANGES changes a call, the run
    goes on in Python (each call copies every engine's samples both ways); the same run."""
    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy("sync", [], trace).placements, preset("h100-llama3.1-8b-2gpu"))
    python = fingerprint(simulate(trace, make_policy("sync", [], trace), cluster))
    monkeypatch.setattr(pool_fast, "AUTO_SAMPLES", 1)
    monkeypatch.setattr(pool_fast, "GUARD_CHANGES", 10**9)
    monkeypatch.setattr(pool_fast, "GUARD_CALLS", 4)  # (the bundled run makes 8 calls)
    pools = []
    original = SimBackend._compiled_pool
    monkeypatch.setattr(SimBackend, "_compiled_pool", lambda self, ctl: pools.append(original(self, ctl)) or pools[-1])
    assert fingerprint(simulate(trace, make_policy("sync", [], trace), cluster)) == python
    assert pools[0].calls == pool_fast.GUARD_CALLS and pools[0].changes > 0


def test_calls_cut_short_give_the_same_run(monkeypatch):
    """A call stops after ``max_changes`` changes (so that Ctrl-C and the progress bar never
    wait long) and the pool calls again: the same run, with preemption and a WakeOn policy."""
    trace = read_trace(BUNDLED)
    original = pool_fast.FastPool.__init__

    def capped(self, *args, **kw):
        original(self, *args, **kw)
        self.max_changes = 3

    for name in ("sync", "partial"):
        cluster = cluster_for(make_policy(name, [], trace).placements, preset("h100-llama3.1-8b-2gpu"))
        cluster = dataclasses.replace(cluster, kv_budget_tokens=20_000)
        (compiled, python), changes = both(monkeypatch, trace, name, [], cluster)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pool_fast.FastPool, "__init__", capped)
            (short, _), _ = both(mp, trace, name, [], cluster)
        assert short == compiled == python and changes > len(trace.response_len) / 2


def test_keep_past_the_checked_front_gives_the_same_run(monkeypatch):
    """A Keep order's top-ups past the queue's front that pool_keep checked (FRONT samples) are
    Python's: the kernel hands it the change that might need them. A front of 2 makes that
    happen all the time; the same run, and the kernel still applied changes."""
    trace = read_trace(BUNDLED)
    for name, sets in (("sortedrl", ["mode=partial"]), ("async", ["eta=0"])):
        cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
        (compiled, python), changes = both(monkeypatch, trace, name, sets, cluster)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pool_keep, "FRONT", 2)
            (short, _), short_changes = both(mp, trace, name, sets, cluster)
        assert short == compiled == python
        assert changes > len(trace.response_len) / 2 and 0 < short_changes < changes


class BadKeep(Policy):
    """Keeps 8 admitted from a queue that lists one sample twice, or names no sample."""

    name = "bad_keep"
    listens_to_finishes = True
    bad = 5

    def on_start(self, view):
        ids = list(range(view.num_groups * view.group_size))
        return [Keep(deque(ids[:30] + [self.bad] + ids[30:]), 8), WakeOn(drained=True)]

    def on_finished(self, view, samples, engine):
        return []


@pytest.mark.parametrize("bad", [5, 10**9, 2**70])
def test_a_bad_id_in_a_keep_queue_gives_python_s_error(monkeypatch, bad):
    """The kernel admits only the queue's front it checked; the controller meets the bad id
    itself and says the same as without the kernel."""
    trace = read_trace(BUNDLED)
    cluster = preset("h100-llama3.1-8b-2gpu")
    errors = []
    for compiled in (True, False):
        monkeypatch.setattr(SimBackend, "compiled", compiled)
        monkeypatch.setattr(BadKeep, "bad", bad)
        with pytest.raises(PolicyError) as e:
            simulate(trace, BadKeep(), cluster)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert "illegal action from the Keep order's queue" in errors[0]


class OwnKeep(Policy):
    """Keeps 8 admitted from a queue of the policy's own ids (``kind``), with a budget, and
    trains whatever has finished once nothing is admitted."""

    name = "own_keep"
    listens_to_finishes = True
    kind, budget = int, None

    def on_start(self, view):
        ids = [self.kind(i) for i in range(view.num_groups * view.group_size)]
        return [Keep(deque(ids), 8, budget=self.budget), WakeOn(drained=True)]

    def on_finished(self, view, samples, engine):
        return [Train(view.finished())] if not view.busy and not view.admitted else []



@pytest.mark.parametrize(("kind", "budget"), [(int, 2**64), (np.int64, None)])
def test_a_keep_queue_of_numpy_ids_or_a_huge_budget_gives_the_same_run(monkeypatch, kind, budget):
    """NumPy ids are the controller's to admit (its records keep the policy's objects): each
    such call counts for the guard; a budget past int64 is no limit, in the kernel too."""
    trace = read_trace(BUNDLED)
    monkeypatch.setattr(OwnKeep, "kind", kind)
    monkeypatch.setattr(OwnKeep, "budget", budget)
    runs, pools = [], []
    original = SimBackend._compiled_pool
    monkeypatch.setattr(SimBackend, "_compiled_pool", lambda self, c: pools.append(original(self, c)) or pools[-1])
    for compiled in (True, False):
        monkeypatch.setattr(SimBackend, "compiled", compiled)
        runs.append(fingerprint(simulate(trace, OwnKeep(), preset("h100-llama3.1-8b-2gpu"), audit=True)))
    assert runs[0] == runs[1]
    if kind is int:
        assert pools[0].changes > len(trace.response_len) / 2
    else:
        assert pools[0].changes < pools[0].calls


class HugeWake(OwnKeep):
    """OwnKeep, hearing only at 2**70 finishes (never) or when drained."""

    name = "huge_wake"

    def on_start(self, view):
        return [Keep(deque(range(view.num_groups * view.group_size)), 8),
                WakeOn(finished=2**70, groups=2**70, drained=True)]


def test_a_wake_on_count_past_int64_gives_the_same_run(monkeypatch):
    trace = read_trace(BUNDLED)
    runs = []
    for compiled in (True, False):
        monkeypatch.setattr(SimBackend, "compiled", compiled)
        runs.append(fingerprint(simulate(trace, HugeWake(), preset("h100-llama3.1-8b-2gpu"), audit=True)))
    assert runs[0] == runs[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=9), st.sampled_from([1, 2, 3, 8]), st.data())
def test_the_kernels_spreading_is_placement_spread(loads, group, data):
    """The kernel spreads a Keep order's top-ups (two or more samples) in a workspace of its own
    (it allocates nothing): the same blocks as placement.spread, any loads, any ids."""
    from sortedrl.policies.placement import spread
    from sortedrl.sim import pool_kernel as k
    samples = data.draw(st.lists(st.integers(0, 60), min_size=2, max_size=40))
    scratch = np.full((7, len(loads)), -7, dtype=np.int64)  # (whatever a last call left there)
    kq = np.array(samples, dtype=np.int64)
    k._shares(np.array(loads, dtype=np.int64), len(samples), scratch)
    count = k._blocks(kq, scratch[k.SHARE], group, scratch)
    got = [(int(scratch[k.BLOCK_ENGINE, r]), samples[scratch[k.BLOCK_FIRST, r]:scratch[k.BLOCK_END, r]])
           for r in range(count)]
    assert got == spread(samples, list(loads), group)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2**31 - 1)), min_size=1, max_size=30))
def test_preemptions_booked_at_once_are_the_calls_one_by_one(rows):
    """The kernel's preemptions are booked in one call (Controller.samples_preempted): the
    tokens each sample keeps are those of its last row, as sample_preempted row by row."""
    from sortedrl.policies.controller import Controller
    from sortedrl.timeline import Timeline
    from tests.conftest import tiny_cluster
    trace = make_trace([5] * 8, group_size=2)

    def controller():
        tl = Timeline({})
        return Controller(make_policy("sync", [], trace), trace.prompt_id, trace.prompt_len.tolist(), 2,
                          SimBackend(trace, tiny_cluster(), tl), tl)
    one_by_one, at_once = controller(), controller()
    for i, tokens in rows:
        one_by_one.sample_preempted(i, tokens)
    at_once.samples_preempted(np.array(rows, dtype=np.int64))
    assert at_once.s.generated == one_by_one.s.generated
    assert list(at_once.s.generated) == [dict(rows).get(i, 0) for i in range(8)]  # (a dict keeps the last)


@pytest.mark.parametrize(("name", "sets"), [("sync", []), ("sortedrl", []), ("async", [])])
def test_a_queue_stored_by_its_ends_is_the_queue_rebuilt(monkeypatch, name, sets):
    """FastPool stores an engine's queue by its changed ends (the samples left from the highest
    head on stay in the deque): after every call the deque and its kept tokens are the kernel's
    queue, as a rebuild would make them; KV pressure puts preempted samples back at the front."""
    trace = synthesize("math-16k", prompts=256, group_size=8, steps=2, seed=0)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
    cluster = dataclasses.replace(cluster, kv_budget_tokens=60_000)
    store, ends = pool_fast.FastPool._store_queue, []

    def checked(self, eng, queue, head, tail, top, margin):
        want = queue[head:tail].tolist()
        gen0 = dict(zip(want, self.smp[self.k.GEN0][queue[head:tail]].tolist(), strict=True))
        loaded = margin + len(eng.pub.queue)  # (kept: its ends written; put back: a front)
        ends.append((top < loaded and top - margin <= tail - head, head < top))
        store(self, eng, queue, head, tail, top, margin)
        assert list(eng.pub.queue) == want and eng._gen0 == gen0

    monkeypatch.setattr(pool_fast.FastPool, "_store_queue", checked)
    monkeypatch.setattr(SimBackend, "compiled", True)
    simulate(trace, make_policy(name, sets, trace), cluster, audit=True)
    assert any(kept and back for kept, back in ends)  # (both ends changed around the loaded samples)
