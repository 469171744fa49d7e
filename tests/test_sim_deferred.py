"""Finishes booked in batches (policies/deferred.py) give the same run as finishes booked one by one.

A policy that never hears a finish gets its finishes booked just before the next event, on NumPy
views; with ``SimBackend.defer_finishes`` off the controller books each finish as it happens.
Summaries, timelines and the state the policy sees at each call must be identical, byte for
byte, on the bundled trace (rewards, dynamic
sampling, minibatches, KV pressure with preemption) and on random small runs.

Run: pytest tests/test_sim_deferred.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.compare import cluster_for
from sortedrl.policies.registry import make_policy
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.timeline_file import _savez
from sortedrl.traces.io import read_trace
from tests.conftest import make_trace, tiny_cluster

BUNDLED = Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data" / "math-16k.jsonl"


def fingerprint(result) -> tuple[str, bytes]:
    """The summary as JSON and the timeline's columns as the bytes of an .npz."""
    buf = io.BytesIO()
    arrays = {f"{k}.{name}": v for k in ("span", "prefill", "admit", "train", "sync")
              if result.timeline.count(k) for name, v in _flat(result.timeline.columns(k)).items()}
    _savez(buf, arrays.items())
    return json.dumps(result.summary, sort_keys=True, default=str), buf.getvalue()


def _flat(cols: dict) -> dict:
    out = {}
    for name, col in cols.items():
        if hasattr(col, "offsets"):
            out[name + ".offsets"], out[name + ".values"] = col.offsets, col.values
        elif hasattr(col, "codes"):
            out[name] = col.codes
        else:
            out[name] = col
    return out


def state_hash(s) -> str:
    """The controller's public state (what a policy may read through its view), hashed."""
    h = hashlib.sha256()
    for a in (s.state, s.generated, s.response_len, s.reward, s.attempt, s.oldest, s.engine_of, s.started):
        h.update(bytes(a))
    h.update(repr((list(s.buffer), list(s.paused), s.finished_in, s.complete, s.complete_at, s.load,
                   s.admitted, s.started_count, s.next_group, s.version, s.trainer_busy, s.syncing)).encode())
    return h.hexdigest()


def both(monkeypatch, trace, name, sets, cluster):
    """Each way: the summary, the timeline, and the state the policy saw at every call (the
    built-in policies read only some of it, so equal summaries alone would not show a field
    booked wrong, e.g. a group not counted complete or the buffer out of finish order)."""
    runs = []
    for deferred in (True, False):
        monkeypatch.setattr(SimBackend, "defer_finishes", deferred)
        runs.append(watched_run(trace, name, sets, cluster))
    return runs


def watched_run(trace, name, sets, cluster) -> tuple:
    """The summary, the timeline and the state the policy saw at every call, of one run."""
    policy = make_policy(name, sets, trace)
    seen = []
    on_event = policy.on_event

    def watched(event, view):
        seen.append((event.kind.name, state_hash(view._s)))
        return on_event(event, view)

    policy.on_event = watched
    return (*fingerprint(simulate(trace, policy, cluster, audit=True)), seen)


@pytest.mark.parametrize(("name", "sets", "kv"), [
    ("sync", [], 0), ("sync", ["minibatches=2"], 0), ("sync", ["filter_groups=true"], 0),
    ("one_step_off", [], 0), ("one_step_off", ["filter_groups=true"], 0),
    ("oracle_sorted", [], 0), ("oracle_sorted", ["predictor=history"], 0),
    ("sync", [], 20_000), ("one_step_off", [], 20_000), ("oracle_sorted", [], 20_000),
])
def test_bundled_trace_identical(monkeypatch, name, sets, kv):
    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
    if kv:  # small enough to preempt
        cluster = dataclasses.replace(cluster, kv_budget_tokens=kv)
    deferred, direct = both(monkeypatch, trace, name, sets, cluster)
    assert deferred == direct


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_runs_identical(data):
    group = data.draw(st.sampled_from([1, 2, 4]))
    n = group * data.draw(st.integers(1, 10))
    lengths = data.draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    name = data.draw(st.sampled_from(["sync", "one_step_off", "oracle_sorted"]))
    groups = n // group
    trace = make_trace(lengths, group_size=group, steps=[i // group * 2 // groups for i in range(n)])
    cluster = tiny_cluster(engines=data.draw(st.integers(2, 4)), max_num_seqs=data.draw(st.integers(1, 8)),
                           kv=data.draw(st.integers(320, 2000)))
    cluster = cluster_for(make_policy(name, [], trace).placements, cluster)
    with pytest.MonkeyPatch.context() as mp:
        deferred, direct = both(mp, trace, name, [], cluster)
    assert deferred == direct


@pytest.mark.parametrize(("name", "sets", "kv", "aborts"), [
    ("sortedrl", [], 0, True), ("sortedrl", ["mode=partial"], 20_000, True),
    ("sortedrl", ["filter_groups=true"], 0, True), ("partial", [], 20_000, True),
    ("partial", ["keep_partial=false"], 0, True), ("tail_batch", [], 0, True),
    ("async", ["drop_stale=true"], 0, True), ("async", ["eta=0"], 20_000, False),
    ("async", ["filter_groups=true"], 0, False),
])
def test_batched_books_are_the_loops(monkeypatch, name, sets, kv, aborts):
    # a batch of BATCH (64) or more finishes (Controller.samples_finished ->
    # deferred.book_finishes), aborts (Removal._abort_batch) or admissions is booked on NumPy
    # views: from 2, nearly every batch is; with BATCH out of reach, none: the same runs, the
    # same state at every policy call
    from sortedrl.policies import admission, controller, deferred, removal

    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
    if kv:
        cluster = dataclasses.replace(cluster, kv_budget_tokens=kv)
    runs, calls = [], []  # (the batch size in force, the batched path taken)
    for module, fn in ((controller, "book_finishes"), (removal.Removal, "_abort_batch")):
        original = getattr(module, fn)
        monkeypatch.setattr(module, fn, lambda *a, original=original, fn=fn: (
            calls.append((deferred.BATCH, fn)), original(*a))[1])
    for batch in (2, 10**9):  # (from 2: nearly every batch)
        for module in (deferred, removal, admission):
            monkeypatch.setattr(module, "BATCH", batch)
        runs.append(watched_run(trace, name, sets, cluster))
    assert runs[0] == runs[1]
    assert {fn for _, fn in calls} == {"book_finishes", *(["_abort_batch"] if aborts else [])}
    assert {batch for batch, _ in calls} == {2}
