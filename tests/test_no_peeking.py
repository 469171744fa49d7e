"""The no-peeking contract: a policy cannot reach any sample's true length.

A prying policy walks every object reachable from what it is given (the view, the event, its
run context, and the class attributes and closures along the way) at every event, and looks for
the simulator's private objects: the trace, its response-length array, the backend, the engines
and their finish heaps, and the draw of future attempts' lengths (``--regen resample``). It must never find them.
It also asks the view for unfinished lengths directly, which must fail.

Run: pytest tests/test_no_peeking.py
"""

from __future__ import annotations

import dataclasses
import gc
import types

import pytest

from sortedrl.compare import cluster_for
from sortedrl.errors import PolicyError
from sortedrl.policies.base import EventKind, Policy, SampleState
from sortedrl.policies.controller import Controller
from sortedrl.policies.predictors import OracleLengths
from sortedrl.policies.registry import make_policy, run_context
from sortedrl.policies.sync import SyncPolicy
from sortedrl.sim.backend import SimBackend
from sortedrl.timeline import Timeline
from tests.conftest import make_trace, tiny_cluster

CODE = (types.ModuleType, types.BuiltinFunctionType, types.CodeType,
        types.MethodDescriptorType, types.WrapperDescriptorType, types.GetSetDescriptorType,
        types.MemberDescriptorType)


def reachable(*roots) -> dict[int, object]:
    """Every data object reachable from ``roots``: through references, the class attributes of
    every object's class and its bases (classes of sortedrl and of the tests: a third-party
    class holds no data of a run), and the closures and defaults of every function and method
    (but not modules or a function's globals, which are code, not data)."""
    seen: dict[int, object] = {}
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, CODE):
            continue
        seen[id(obj)] = obj
        if isinstance(obj, types.MethodType):
            stack += [obj.__self__, obj.__func__]
            continue
        if isinstance(obj, types.FunctionType):
            cells = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
            stack += cells + list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
            continue
        if isinstance(obj, type):
            if obj.__module__.startswith(("sortedrl", "tests")) or obj.__module__ == __name__:
                for klass in obj.__mro__:
                    stack += list(vars(klass).values())
            continue
        stack.append(type(obj))
        stack.extend(gc.get_referents(obj))
    return seen


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def future_attempts(backend) -> dict[str, object]:
    """What knows the lengths of attempts not yet made: the backend's draw and its tables."""
    draw = backend._attempts
    return {"attempt draw": draw, "recorded lengths": draw._recorded, "prompt members": draw._members}


class Prying(SyncPolicy):
    name = "prying"

    def __init__(self, forbidden, params=None, ctx=None):
        super().__init__(params, ctx)
        self.forbidden = forbidden
        self.found = []
        self.walks = 0
        self.refused = 0

    def on_event(self, event, view):
        seen = reachable(view, event, self.ctx)
        self.walks += 1
        self.found += [name for name, obj in self.forbidden().items() if id(obj) in seen]
        for i in range(len(view._s.state)):
            if view.state(i) not in (SampleState.FINISHED, SampleState.TRAINED):
                with pytest.raises(PolicyError, match="has not finished"):
                    view.response_len(i)
                self.refused += 1
        return super().on_event(event, view)


def test_a_policy_cannot_reach_true_lengths():
    trace = make_trace([5, 9, 3, 7, 30, 2], group_size=2)
    cluster = tiny_cluster(engines=2, max_num_seqs=2, kv=60)
    timeline = Timeline({})
    backend = SimBackend(trace, cluster, timeline)
    forbidden = lambda: {  # noqa: E731
        "trace": trace, "response_len": trace.response_len, "backend": backend,
        "lengths list": backend._lengths, **{f"engine {e.pub.index}": e for e in backend.engines},
        **{f"heap {e.pub.index}": e._heap for e in backend.engines},
        **future_attempts(backend),
    }
    policy = Prying(forbidden, ctx=run_context(trace))
    Controller(policy, trace.prompt_id, trace.prompt_len.tolist(), 2, backend, timeline).run()
    assert policy.walks >= 4 and policy.refused > 0
    assert policy.found == []


class Wrapped(Policy):
    """Runs a built-in policy and walks from the view, the event and the policy itself."""

    def __init__(self, inner, forbidden):
        super().__init__(None, inner.ctx)
        self.inner, self.forbidden, self.found, self.walks = inner, forbidden, [], 0
        self.name, self.placements = inner.name, inner.placements
        self.listens_to_finishes = inner.listens_to_finishes

    def on_event(self, event, view):
        seen = reachable(view, event, self.inner)
        self.walks += 1
        self.found += [name for name, obj in self.forbidden().items() if id(obj) in seen]
        return self.inner.on_event(event, view)


@pytest.mark.parametrize("name, sets", [
    ("sync", []), ("sortedrl", []), ("sortedrl", ["mode=partial"]), ("partial", []),
    ("tail_batch", []), ("async", []), ("one_step_off", []),
    ("oracle_sorted", ["predictor=history"]),
])
def test_no_builtin_policy_reaches_true_lengths(name, sets):
    trace = make_trace([5, 9, 3, 7, 30, 2, 11, 4], group_size=2, steps=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster = dataclasses.replace(tiny_cluster(engines=3, max_num_seqs=2, kv=80), train_gpus=1)
    timeline = Timeline({})
    inner = make_policy(name, sets, trace)
    cluster = cluster_for(inner.placements, cluster)
    backend = SimBackend(trace, cluster, timeline)
    forbidden = lambda: {  # noqa: E731
        "trace": trace, "response_len": trace.response_len, "backend": backend,
        "lengths list": backend._lengths, **{f"engine {e.pub.index}": e for e in backend.engines},
        **future_attempts(backend),
    }
    policy = Wrapped(inner, forbidden)
    Controller(policy, trace.prompt_id, trace.prompt_len.tolist(), 2, backend, timeline).run()
    assert policy.walks > 3 and policy.found == []
    assert not inner.oracle


def test_the_oracle_is_explicit_and_labelled():
    trace = make_trace([5, 9, 3, 7])
    policy = make_policy("oracle_sorted", [], trace)
    assert policy.oracle and isinstance(policy.predictor, OracleLengths)
    assert id(policy.predictor._true) not in reachable(trace)  # a copy, handed over explicitly
    assert make_policy("oracle_sorted", ["predictor=history"], trace).oracle is False


def test_the_walk_would_find_a_leak():
    # the same walk from an object that does hold the backend finds the lengths
    trace = make_trace([5, 9])
    backend = SimBackend(trace, tiny_cluster(), Timeline({}))
    assert id(backend._lengths) in reachable(types.SimpleNamespace(b=backend))


def test_events_carry_no_lengths():
    fields = {f for f in ("kind", "engine", "samples")}
    from sortedrl.policies.base import Event
    assert set(Event.__slots__) == fields
    assert EventKind.FINISHED.value == "finished"


def test_the_walk_follows_class_attributes_and_closures():
    trace = make_trace([5, 9], group_size=2)
    backend = SimBackend(trace, tiny_cluster(), Timeline({}))
    draw = backend._attempts

    class Stash(SyncPolicy):
        name = "stash"
        kept = draw  # a class attribute

    def make_peek():
        held = backend._lengths
        return lambda: held  # a closure

    assert id(draw) in reachable(Stash())
    assert id(backend._lengths) in reachable(types.SimpleNamespace(f=make_peek()))
    assert id(backend._lengths) in reachable(types.SimpleNamespace(f=lambda x=backend._lengths: x))
    # and a policy's own class and the registry's classes do not hold any of it
    assert id(draw) not in reachable(make_policy("sortedrl", [], trace))


# -- trajectories with turns: turn boundaries are events, future turns and tool latencies unseen --

TURNS = [[(5, 2.0, 3), (4, 0.0, 0)], [(9, 1.0, 2)], [(3, 4.0, 1), (2, 1.0, 5), (6, 0.0, 0)],
         [(7, 0.0, 0)], [(2, 0.5, 2), (28, 0.0, 0)], [(2, 0.0, 0)], [(4, 3.0, 4), (7, 0.0, 0)],
         [(4, 0.0, 0)]]


class WrappedTurns(Wrapped):
    """:class:`Wrapped` that also listens to turn boundaries and walks from them."""

    listens_to_turns = True

    def __init__(self, inner, forbidden):
        super().__init__(inner, forbidden)
        self.turn_events = 0

    def on_event(self, event, view):
        if event.kind != EventKind.TURN_DONE:
            return super().on_event(event, view)
        self.turn_events += 1
        seen = reachable(view, event, self.inner)
        self.found += [name for name, obj in self.forbidden().items() if id(obj) in seen]
        return self.inner.on_turn_done(view, event.samples, event.engine)


@pytest.mark.parametrize("name, sets", [
    ("sync", []), ("sortedrl", []), ("sortedrl", ["mode=partial"]), ("partial", []),
    ("tail_batch", []), ("async", []), ("one_step_off", []),
    ("oracle_sorted", ["predictor=history"]),
])
def test_no_builtin_policy_reaches_future_turns(name, sets):
    from tests.turns_helpers import make_turn_trace

    trace = make_turn_trace(TURNS, group_size=2, steps=[0, 0, 0, 0, 1, 1, 1, 1])
    cluster = dataclasses.replace(tiny_cluster(engines=3, max_num_seqs=2, kv=80), train_gpus=1,
                                  tool_pool=2)
    timeline = Timeline({})
    inner = make_policy(name, sets, trace)
    cluster = cluster_for(inner.placements, cluster)
    backend = SimBackend(trace, cluster, timeline)
    tools = backend.tools
    forbidden = lambda: {  # noqa: E731
        "trace": trace, "response_len": trace.response_len, "backend": backend,
        "lengths list": backend._lengths, **{f"engine {e.pub.index}": e for e in backend.engines},
        **future_attempts(backend),
        "turn plan": tools.plan, "turn ends": tools.plan.end, "turn lengths": trace.turn_gen,
        "tool latencies": trace.turn_tool_s, "tool output": trace.turn_tool_tokens,
        "tool environment": tools, "tool calls in flight": tools.active,
        "sandbox queue": tools.waiting, **{f"cache {e.pub.index}": e.cache for e in backend.engines},
    }
    policy = WrappedTurns(inner, forbidden)
    Controller(policy, trace.prompt_id, trace.prompt_len.tolist(), 2, backend, timeline).run()
    assert policy.turn_events > 0 and policy.walks > 3 and policy.found == []
    assert len(timeline.tools) >= 5  # a call at every recorded boundary (more if regenerated)
