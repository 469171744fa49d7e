"""Actions a policy takes in the middle of another engine's decode step.

The engine state between two changes is a closed form; an action at an arbitrary time has to
invert it (tokens completed so far) and let the step in flight finish for everyone else. These
cases are small enough to compute by hand: every decode step costs step_fixed_s + weight_read_s = 2 s, and a
prefill of T tokens costs step_fixed_s + max(weight_read_s, 0.5 s x T).

Run: pytest tests/test_sim_actions.py
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sortedrl.policies.base import Abort, Admit, EventKind, Policy, SampleState, Train
from sortedrl.policies.registry import policy_class
from sortedrl.sim.attempts import AttemptLengths
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.run import run_context, simulate
from tests.conftest import make_trace, tiny_cluster
from tests.test_sim_deferred import fingerprint


class Scripted(Policy):
    """Admits per a plan; on a sample's finish applies scripted actions; trains at the end."""

    name = "scripted"

    def __init__(self, start, on_finish, ctx=None):
        super().__init__(None, ctx)
        self.start, self.on_finish, self.seen = start, on_finish, []

    def on_event(self, event, view):
        if event.kind == EventKind.STARTED:
            return list(self.start)
        out = []
        if event.kind == EventKind.FINISHED:
            for i in event.samples:
                self.seen.append((i, tuple(view.generated(j) for j in range(len(view._s.state)))))
                out += self.on_finish.get(i, [])
        done = all(view.state(i) == SampleState.FINISHED for i in range(len(view._s.state)))
        if done and not view.trainer_busy and not view.admitted and view.finished_count:
            out.append(Train(view.finished()))
        return out


def spans_of(result):
    return sorted((s[3], s[0], s[1], s[2], s[6], s[7]) for s in result.timeline.spans)


def test_abort_mid_step_keeps_completed_tokens_and_resumes_elsewhere():
    # s0: prompt 1, 3 tokens on engine 0: prefill 0-2, steps end 4, 6 -> finishes at 6.
    # s1: prompt 4, 20 tokens on engine 1: prefill 0-3 (1 + 0.5*4), steps end 5, 7, ...
    # At 6 s1 is mid-step with 2 tokens; it is paused and resumed on engine 0: prefill of
    # 4 + 2 tokens = 1 + 3 = 4 s (6-10), its 3rd token; 17 more steps -> finishes at 44.
    trace = make_trace([3, 20], prompt_lens=[1, 4])
    cluster = tiny_cluster(engines=2, max_num_seqs=1, prefill_s_per_token=0.5)
    policy = Scripted([Admit((0,), 0), Admit((1,), 1)],
                      {0: [Abort((1,), keep_tokens=True), Admit((1,), 0)]}, run_context(trace))
    r = simulate(trace, policy, cluster, audit=True)
    assert spans_of(r) == [
        (0, 0.0, 6.0, 0, 3, "finish"),
        (1, 0.0, 6.0, 1, 2, "abort"),
        (1, 6.0, 44.0, 0, 18, "finish"),
    ]
    assert policy.seen[0] == (0, (3, 2))  # the view shows s1's completed tokens at t=6
    assert r.summary["recomputed_tokens"] == 2
    assert r.summary["useful_tokens"] == r.summary["generated_tokens"] == 23
    assert r.timeline.trains[0][0] == 44.0  # engine 1's in-flight step (ends 7) is long over


def test_abort_without_keeping_tokens_wastes_them():
    trace = make_trace([3, 20], prompt_lens=[1, 4])
    cluster = tiny_cluster(engines=2, max_num_seqs=1, prefill_s_per_token=0.5)
    policy = Scripted([Admit((0,), 0), Admit((1,), 1)],
                      {0: [Abort((1,), keep_tokens=False), Admit((1,), 0)]}, run_context(trace))
    r = simulate(trace, policy, cluster, audit=True, regen="same")  # the recorded length again
    # regenerated from scratch on engine 0: prefill of 4 tokens 6-9, 19 steps -> 47
    assert spans_of(r)[1:] == [(1, 0.0, 6.0, 1, 2, "abort"), (1, 6.0, 47.0, 0, 20, "finish")]
    s = r.summary
    assert (s["generated_tokens"], s["useful_tokens"], s["wasted_tokens"]) == (25, 23, 2)
    assert s["recomputed_tokens"] == 0


def test_admit_mid_step_joins_at_the_next_step_boundary():
    # sA: prompt 1, 10 tokens, engine 0: prefill 0-2, steps end 4, 6, ...
    # sB: prompt 4, 2 tokens, engine 1: prefill 0-3, one step 3-5 -> finishes at 5.
    # At 5 sC (prompt 1, 2 tokens) is queued on engine 0, mid-step 4-6: it is prefilled 6-8
    # (sA stalls), then the step 8-10 finishes it; sA needs 7 more steps after 6: ends at 22.
    trace = make_trace([10, 2, 2], prompt_lens=[1, 4, 1])
    cluster = tiny_cluster(engines=2, max_num_seqs=2, prefill_s_per_token=0.5)
    policy = Scripted([Admit((0,), 0), Admit((1,), 1)], {1: [Admit((2,), 0)]}, run_context(trace))
    r = simulate(trace, policy, cluster, audit=True)
    assert spans_of(r) == [
        (0, 0.0, 22.0, 0, 10, "finish"),
        (1, 0.0, 5.0, 1, 2, "finish"),
        (2, 6.0, 10.0, 0, 2, "finish"),
    ]
    prefills = [(p[0], p[1], p[2], p[3]) for p in r.timeline.prefills]
    assert (6.0, 8.0, 0, [2]) in prefills


class Chaos(Policy):
    """Random legal actions on every finish: pause, drop, migrate, resume. For invariants."""

    name = "chaos"

    def __init__(self, seed, ctx=None):
        super().__init__(None, ctx)
        self.rng = random.Random(seed)

    def on_event(self, event, view):
        rng, n = self.rng, len(view._s.state)
        out = []
        if event.kind == EventKind.STARTED:
            out.append(Admit(tuple(range(n))))
        elif event.kind in (EventKind.FINISHED, EventKind.ENGINE_IDLE):
            running = [i for e in range(view.engines) for i in view.running(e) + view.queued(e)]
            if running and rng.random() < 0.5:
                victims = tuple(rng.sample(running, k=rng.randint(1, min(3, len(running)))))
                out.append(Abort(victims, keep_tokens=rng.random() < 0.6))
                out.append(Admit(victims, rng.randrange(view.engines)))
            waiting = tuple(i for i in range(n) if view.state(i) in (SampleState.PAUSED,
                                                                     SampleState.WAITING))
            if waiting:
                out.append(Admit(waiting))
        done = all(view.state(i) in (SampleState.FINISHED, SampleState.TRAINED) for i in range(n))
        if done and view.finished_count and not view.trainer_busy and not view.admitted:
            out.append(Train(view.finished()))
        return out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=14), st.integers(1, 3),
       st.integers(1, 4), st.integers(0, 10_000), st.sampled_from([0.0, 0.01]),
       st.sampled_from([0, 5, 12]))
def test_random_mid_step_actions_keep_every_invariant(lengths, engines, cap, seed, kv_read_s_per_token, chunk):
    trace = make_trace(lengths, prompt_lens=[1 + (i * 7) % 9 for i in range(len(lengths))])
    cluster = tiny_cluster(engines=engines, max_num_seqs=cap, kv=200, prefill_s_per_token=0.37,
                           kv_read_s_per_token=kv_read_s_per_token)
    cluster = dataclasses.replace(cluster, chunked_prefill=chunk > 0,
                                  max_num_batched_tokens=chunk or 8192)  # 0: prefill stalls
    r = simulate(trace, Chaos(seed, run_context(trace)), cluster, audit=True)
    draw = AttemptLengths(trace, seed=0)  # a regenerated attempt's own length (--regen resample)
    last = {}
    for t0, t1, _e, i, att, _v, k, end in r.timeline.spans:
        assert t0 <= t1
        last.setdefault(i, []).append((att, t0, t1, k, end))
    for i, spans in last.items():
        spans.sort(key=lambda s: s[1])
        assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:], strict=False))
        final = max(s[0] for s in spans)
        assert sum(s[3] for s in spans if s[0] == final) == draw.length(i, final)
        assert [s[4] for s in spans if s[0] == final][-1] == "finish"
    s = r.summary
    assert s["useful_tokens"] == sum(draw.length(i, max(a for a, *_ in last[i])) for i in last)
    assert s["generated_tokens"] == s["useful_tokens"] + s["wasted_tokens"]


USER_POLICY = """
from sortedrl.policies.sync import SyncPolicy

class MySync(SyncPolicy):
    name = "my_sync"
"""


def test_user_policy_by_module_and_class(tmp_path, monkeypatch):
    (tmp_path / "my_policies.py").write_text(USER_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = policy_class("my_policies:MySync")
    assert cls.__name__ == "MySync" and cls.name == "my_sync"
    trace = make_trace([3, 4])
    r = simulate(trace, cls(None, run_context(trace)), tiny_cluster())
    assert r.summary["policy"] == "my_sync" and r.summary["samples_trained"] == 2


def test_user_policy_errors():
    import pytest

    from sortedrl.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot import module 'no_such_mod'"):
        policy_class("no_such_mod:X")
    with pytest.raises(ConfigError, match="'SyncParams' is not a Policy subclass in sortedrl.policies.sync"):
        policy_class("sortedrl.policies.sync:SyncParams")
    with pytest.raises(ConfigError, match="^--policy 'sortedrl.policies.sync:Nope': no name 'Nope' in "
                                          "module sortedrl.policies.sync$"):
        policy_class("sortedrl.policies.sync:Nope")


def test_a_sync_shorter_than_the_step_in_flight_ends_at_its_boundary():
    # One engine, 4 samples of prompt 5 and lengths 1-4, async with recompute_on_sync, batch 1,
    # on a disaggregated cluster (update 0.5 s, weight push 0.3 s). s0-s2: prefill 0-2 (15
    # tokens: 1 + 1 s); s0 finishes at 2 and trains 2-2.5; the push begins at 2.5, inside the
    # step 2-4 that gives s1 its 2nd and last token. The engine takes the new weights at that
    # step's boundary, so the sync ends at 4, not 2.8. (Before, the policy heard the sync at
    # 2.8, aborted s1 mid-step keeping the token the sync's span had already counted, and its
    # re-admission generated one token past its length: the audit's "tokens out of range".)
    # The 2nd push (4.5) waits in the same way for s3's prefill, 4-6.
    trace = make_trace([1, 2, 3, 4], prompt_lens=[5] * 4)
    cluster = dataclasses.replace(tiny_cluster(engines=1, kv=1000, sync_s=0.3, train_fix=0.5),
                                  gpus=2, train_gpus=1, placement="disaggregated")
    policy = policy_class("async")(policy_class("async").Params(batch=1, recompute_on_sync=True),
                                   run_context(trace))
    r = simulate(trace, policy, cluster, audit=True)
    assert r.timeline.rows("sync")[:2] == [(2.5, 4.0, 1), (4.5, 6.0, 2)]
    tokens, finishes = [0] * 4, [0] * 4
    for i, _t0, _t1, _e, k, end in spans_of(r):
        tokens[i] += k
        finishes[i] += end == "finish"
    assert tokens == [1, 2, 3, 4] and finishes == [1] * 4
    assert r.summary["makespan_s"] == 16.5  # the last update's end: no push after it


def test_the_view_gives_a_queued_sample_the_tokens_it_holds_not_none():
    # One sequence an engine. s2 and s3 wait in engine 0's queue behind s0; at s0's finish (t=6)
    # s2 starts, and s1 is paused on engine 1 with its 2 completed tokens and queued on engine 0
    # behind s3. A queued sample holds what it resumes from: 0 fresh (s3), 2 kept (s1);
    # view.generated returned None for both, where the real runner's engine gives the kept
    # tokens (plus any generated since).
    trace = make_trace([3, 20, 10, 4], prompt_lens=[1, 4, 1, 1])
    cluster = tiny_cluster(engines=2, max_num_seqs=1, prefill_s_per_token=0.5)
    policy = Scripted([Admit((0, 2, 3), 0), Admit((1,), 1)],
                      {0: [Abort((1,), keep_tokens=True), Admit((1,), 0)]}, run_context(trace))
    simulate(trace, policy, cluster, audit=True)
    # at 6, s3 queued fresh (s2 is being prefilled); at s2's finish, s1 queued with its 2 tokens
    assert policy.seen[:2] == [(0, (3, 2, 0, 0)), (2, (3, 2, 10, 0))]


def test_an_action_at_an_instant_a_change_was_planned_an_ulp_after_keeps_the_books():
    """Two engines' changes fall at one instant (27.3907 s), but the plan's closed form put
    engine 1's an ulp after the other's, which decode_steps_within counted as done: the policy's
    abort then stopped the run at `materialize past a pending change` (helper 204's fuzzing,
    once in about 30,000 abort-heavy runs). The action's base is now the end of that step."""
    from sortedrl.policies.registry import make_policy

    trace = make_trace([1, 2, 1, 2, 3, 1, 1, 1], [2, 2, 2, 2, 3, 3, 3, 3], group_size=4, max_len=3)
    cluster = tiny_cluster(engines=2, max_num_seqs=1, kv=8, kv_read_s_per_token=0.01,
                           train_per_token=1e-4, prefill_in_step=True, admit_step_s=0.05)
    policy = make_policy("sortedrl", ["harvest=samples", "mode=on_policy"], trace)
    result = simulate(trace, policy, cluster, audit=True, regen="same", seed=3)  # (audits each change)
    assert result.summary["samples_trained"] == 8
    assert sorted(i for row in result.timeline.trains for i in row[3]) == list(range(8))


def test_an_abort_in_a_step_whose_end_rounds_to_the_abort_leaves_that_steps_token_unmade():
    """The step still running at an abort ends after it; its end, summed as t + the steps' time,
    rounded to the abort's own instant (13.87 s), and the abort took that step's token as made: a
    sample about to finish was aborted with all 30 of its tokens (the view said 29), then
    re-prefilled and ended before it started (a review's case: the audit's "tokens out of range")."""
    from sortedrl.compare import cluster_for
    from sortedrl.policies.registry import make_policy

    lengths = [20] * 48
    lengths[4] = lengths[7] = 30
    trace = make_trace(lengths, [2] * 48, group_size=2, steps=[0] * 16 + [1] * 16 + [2] * 16)
    base = dataclasses.replace(
        tiny_cluster(engines=4, max_num_seqs=2, kv=36, kv_read_s_per_token=1e-3, prefill_s_per_token=1e-2,
                     train_per_token=1e-3, step_fixed_s=0.1, weight_read_s=0.3),
        train_gpus=1, placement="disaggregated", prefix_caching=True)
    policy = make_policy("partial", ["over_sample=2.0", "keep_partial=True", "max_span=0", "rollout_batch=2"], trace)
    result = simulate(trace, policy, cluster_for(policy.placements, base), audit=True)
    spans = [row for row in result.timeline.spans if row[3] == 7]
    assert all(end >= start for start, end, *_ in spans)
    assert sum(row[6] for row in spans) == 30 and spans[-1][7] == "finish"
    assert result.summary["wasted_tokens"] == 0 and result.summary["samples_trained"] == 48


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_queued_aborts_in_one_pass_are_aborts_one_by_one(data):
    """An abort of many samples removes an engine's queued ones in one pass over its queue
    (SimBackend._queued_aborts) and each engine's run of the samples in one call
    (Engine.abort_each): the same run as aborting each in turn, running ones between."""
    n = data.draw(st.integers(20, 40))
    lengths = [1] + data.draw(st.lists(st.integers(2, 30), min_size=n - 1, max_size=n - 1))  # 0 first
    victims = data.draw(st.lists(st.integers(1, n - 1), min_size=16, unique=True))
    keep = data.draw(st.booleans())
    trace = make_trace(lengths)
    runs = []
    for batched in (True, False):
        policy = Scripted([Admit(tuple(range(0, n, 2)), 0), Admit(tuple(range(1, n, 2)), 1)],
                          {0: [Abort(tuple(victims), keep_tokens=keep), Admit(tuple(victims))]})
        with pytest.MonkeyPatch.context() as mp:
            if not batched:
                mp.setattr(SimBackend, "_queued_aborts", lambda self, samples: None)  # (one by one)
            runs.append(fingerprint(simulate(trace, policy, tiny_cluster(engines=2, max_num_seqs=2),
                                             audit=True)))
    assert runs[0] == runs[1]


@pytest.mark.parametrize(("name", "sets"), [("sortedrl", []), ("sortedrl", ["mode=partial"]),
                                            ("partial", []), ("tail_batch", [])])
def test_a_policys_harvest_aborted_an_engine_at_a_time_is_the_same_run(name, sets):
    """The built-in policies' harvests abort thousands of queued and running samples: aborted in
    runs of one engine's samples (SimBackend.abort, Engine.abort_each) or one by one, the same
    summary, timeline and state at every policy call."""
    from sortedrl.compare import cluster_for
    from sortedrl.policies.registry import make_policy
    from sortedrl.sim.cluster import preset
    from sortedrl.sim.engine import Engine
    from sortedrl.traces.io import read_trace
    from tests.test_sim_deferred import BUNDLED, watched_run

    trace = read_trace(BUNDLED)
    cluster = cluster_for(make_policy(name, sets, trace).placements, preset("h100-llama3.1-8b-2gpu"))
    runs, running = [], []
    each = Engine.abort_each

    def counted(self, samples, now, done):
        running.append(sum(i in self.pub.run for i in samples))
        return each(self, samples, now, done)

    for batched in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Engine, "abort_each", counted)
            if not batched:
                mp.setattr(SimBackend, "_queued_aborts", lambda self, samples: None)
            runs.append(watched_run(trace, name, sets, cluster))
        if batched:
            assert sum(running) > 100  # (running samples were aborted in runs)
            running.clear()
    assert runs[0] == runs[1] and not running
