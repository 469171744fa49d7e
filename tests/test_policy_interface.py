"""Policy interface v2: hooks with defaults, the old single ``on_event`` still running, standing
orders served without policy calls, one-line errors, and the example policy of docs/policies.md.

Run: pytest tests/test_policy_interface.py
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import deque
from pathlib import Path

import pytest

from sortedrl.errors import ConfigError, PolicyError
from sortedrl.policies.base import (
    Admit,
    Event,
    EventKind,
    Keep,
    Policy,
    Sync,
    Train,
    WakeOn,
)
from sortedrl.policies.checks import check_policy_class
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.registry import make_policy, run_context
from sortedrl.policies.sync import SyncPolicy
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policies.md"


class OldSync(Policy):
    """``sync`` as a user wrote it against the old interface: one ``on_event`` switch."""

    name = "old_sync"

    def on_event(self, event, view):
        if event.kind in (EventKind.STARTED, EventKind.SYNC_DONE):
            groups = view.next_groups(self.ctx.prompts_per_step)
            self.step = [i for g in groups for i in view.group_samples(g)]
            return [Admit(tuple(self.step))] if groups else []
        if event.kind == EventKind.ENGINE_IDLE and not view.admitted and self.step:
            batch, self.step = self.step, []
            return [Train(tuple(batch))]
        if event.kind == EventKind.UPDATE_DONE:
            return [Sync()]
        return []


def test_an_old_on_event_policy_runs_and_matches_the_builtin():
    trace = make_trace([5, 9, 3, 7, 30, 2, 11, 4], group_size=2, steps=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster = tiny_cluster(engines=2, max_num_seqs=2, kv=200)
    old = simulate(trace, OldSync(ctx=run_context(trace)), cluster)
    new = simulate(trace, make_policy("sync", [], trace), cluster)
    assert OldSync.listens_to_finishes  # it overrides on_event: it hears every finish, as before
    assert old.summary["makespan_s"] == new.summary["makespan_s"]
    assert old.timeline.spans == new.timeline.spans and old.timeline.trains == new.timeline.trains


def test_the_router_sends_each_event_to_its_hook_with_defaults():
    seen = []

    class Hooks(Policy):
        def on_start(self, view):
            seen.append("start")
            return []

        def on_idle(self, view, engine):
            seen.append(("idle", engine))
            return []

    p = Hooks()
    view = None
    assert p.on_event(Event(EventKind.STARTED), view) == []
    assert p.on_event(Event(EventKind.ENGINE_IDLE, 3), view) == []
    assert p.on_event(Event(EventKind.UPDATE_DONE), view) == [Sync()]  # the default
    assert p.on_event(Event(EventKind.SYNC_DONE), view) == []
    assert p.on_event(Event(EventKind.TURN_DONE, 0, (1,)), view) == []  # room for turns
    assert seen == ["start", ("idle", 3)]
    assert not Hooks.listens_to_finishes  # no on_finished: finishes are served without it


def test_subclasses_of_a_policy_inherit_what_it_hears():
    class Wrapped(SyncPolicy):
        def on_event(self, event, view):
            return super().on_event(event, view)

    assert not SyncPolicy.listens_to_finishes and not Wrapped.listens_to_finishes


def test_a_policy_without_a_start_is_one_error_line(tmp_path, monkeypatch):
    (tmp_path / "idle_policy.py").write_text(
        "from sortedrl.policies.base import Policy\n"
        "class Idle(Policy):\n    name = 'idle'\n"
        "class Shadowed(Policy):\n    on_idle = 3\n    def on_start(self, view):\n        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = make_trace([3, 4])
    with pytest.raises(ConfigError, match=r"^policy Idle overrides neither on_event nor on_start, "
                                          r"so it would never admit a sample: implement on_start"):
        make_policy("idle_policy:Idle", [], trace)
    with pytest.raises(ConfigError, match=r"^policy Shadowed: on_idle is not a method"):
        check_policy_class(sys.modules["idle_policy"].Shadowed)


def test_a_standing_order_from_a_policy_that_does_not_listen_is_one_error_line():
    class Deaf(Policy):
        listens_to_finishes = False

        def on_start(self, view):
            return [Keep(deque(range(2)), 1)]

    trace = make_trace([3, 4])
    Deaf.name = "deaf"
    with pytest.raises(PolicyError) as e:
        simulate(trace, Deaf(ctx=run_context(trace)), tiny_cluster())
    assert str(e.value).startswith(  # named by the hook that gave it, at its line
        f"policy deaf gave a standing order (from on_start at {__file__}:{Deaf.on_start.__code__.co_firstlineno}) "
        "but does not listen to finishes: set listens_to_finishes = True")


class Budgeted(Policy):
    """Keep 2 admitted, at most 3 in all; then admit the rest itself once drained."""

    name = "budgeted"

    def __init__(self, ctx=None):
        super().__init__(None, ctx)
        self.queue, self.calls = SampleQueue(), 0

    def on_start(self, view):
        self.queue.add_fresh(view.num_groups * view.group_size)
        return [Keep(self.queue, 2, budget=3), WakeOn(finished=view.num_groups * view.group_size,
                                                      drained=True)]

    def on_finished(self, view, samples, engine):
        self.calls += 1
        if view.finished_count == view.num_groups * view.group_size and not view.busy:
            return [Train(view.finished())]
        if not view.admitted:  # drained: the budget ran out, not the queue
            return [Admit(tuple(self.queue.popleft() for _ in range(len(self.queue))))]
        return []


def test_keep_respects_window_and_budget_and_wakes_only_when_asked():
    trace = make_trace([4, 6, 3, 5, 2])
    policy = Budgeted(run_context(trace))
    r = simulate(trace, policy, tiny_cluster(max_num_seqs=4))
    admits = [a[2] for a in r.timeline.admits]
    assert admits == [[0, 1], [2], [3, 4]]  # window 2, budget 3; then the policy's own admit
    assert policy.calls == 2  # drained once (budget spent), then all five finished
    assert r.summary["samples_trained"] == 5


def test_wake_on_groups_counts_complete_groups_of_the_asked_size():
    class Pairs(Policy):
        name = "pairs"

        def on_start(self, view):
            self.heard = []
            return [Admit(tuple(range(6))), WakeOn(groups=1, members=2)]

        def on_finished(self, view, samples, engine):
            self.heard.append((view.complete_groups, samples))
            return [WakeOn()] if len(self.heard) == 1 else []

        def on_idle(self, view, engine):
            if view.admitted or not view.finished_count or view.busy:
                return []
            return [Train(view.finished())]

    trace = make_trace([2, 9, 4, 3, 8, 20], group_size=3)  # groups {0, 1, 2} and {3, 4, 5}
    policy = Pairs(ctx=run_context(trace))
    simulate(trace, policy, tiny_cluster(max_num_seqs=6))
    # finishes in order 0, 3, 2: heard once, at sample 2 (group 0 has two members done), with
    # every sample finished since the start; then WakeOn() silenced it
    assert len(policy.heard) == 1
    complete, samples = policy.heard[0]
    assert complete == 1 and samples == (0, 3, 2)


def test_example_policy_in_the_docs_runs(tmp_path, monkeypatch):
    code = re.search(r"### Writing a policy.*?```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    assert 18 <= len(code.strip().splitlines()) <= 26
    (tmp_path / "harvest_example.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    lengths = [5, 9, 3, 7, 30, 2, 11, 4, 6, 8, 12, 1] * 2
    trace = make_trace(lengths, group_size=2)
    cluster = dataclasses.replace(tiny_cluster(engines=3, max_num_seqs=2, kv=300), train_gpus=1,
                                  placement="disaggregated")
    policy = make_policy("harvest_example:Harvest", [], trace)
    calls = []
    hook = policy.on_finished
    policy.on_finished = lambda *a: calls.append(1) or hook(*a)
    r = simulate(trace, policy, cluster)
    assert r.summary["samples_trained"] == len(lengths)
    assert sorted(i for t in r.timeline.trains for i in t[3]) == list(range(len(lengths)))
    assert all(len(t[3]) <= 4 for t in r.timeline.trains)  # batch = the engines' 4 slots
    # woken once per batch (and at each sync), not per finish
    assert len(calls) <= 2 * len(r.timeline.trains) and len(calls) < len(lengths)
