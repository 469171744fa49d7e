"""The tool environment of agentic rollouts: a pool of sandboxes that tool calls queue for.

Between two turns of a trajectory (:mod:`sortedrl.sim.turns`) the sample is away from its
engine, holding no slot: it waits for a sandbox (the cluster's ``tool_pool``, first come first
served, as a SandboxFusion or Docker pool with a concurrency limit), runs its tool call for the
trace's ``turn_tool_s`` seconds, and returns to its engine's queue with the tool output to
prefill. When the cluster's ``tool_holds_slot`` says a tool call keeps its slot (a synchronous
agent loop that blocks a batch slot), its slot and KV stay reserved on the engine meanwhile and
it rejoins at the head of the queue. Each call is one record of kind ``tool`` in the timeline:
asked at ``t``, a sandbox from ``t_start``, back at ``t_end`` with ``tokens`` tokens of output.

The policy sees a trajectory's turn boundaries (a ``TURN_DONE`` event to policies that listen)
and samples away on a tool call (``ClusterView.in_tool``; they count in their engine's load),
never a future turn's length or a tool call's latency. A policy may abort a sample that is away:
keeping its tokens, it pauses at the turn boundary (its tool call runs on and its output is kept,
as verl's partial agent loop resumes after the tool); dropping them, a call still queued for a
sandbox never gets one (nothing would read its result), and a running call's result is thrown
away when it returns (the sandbox stays busy until then: a running tool is not killed).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from sortedrl.policies.base import Event, EventKind, SampleState
from sortedrl.sim.turns import TurnPlan

ADMITTED, PAUSED = SampleState.ADMITTED, SampleState.PAUSED


@dataclass(slots=True)
class ToolCall:
    sample: int
    attempt: int
    turn: int
    engine: int  # where the sample left from (its cached context is there)
    asked: float  # left the engine and asked for a sandbox, s
    started: float = -1.0  # got a sandbox, s
    seconds: float = 0.0
    tokens: int = 0  # tool-output tokens appended to the context


class _Router:
    """What an engine reports its finishes to: a turn end goes to the tool environment, the end
    of a trajectory's last turn on to whoever the engine was bound to (the backend's receiver)."""

    def __init__(self, tools: ToolEnv, engine: int) -> None:
        self._tools, self._engine = tools, engine
        self.inner = None  # set when the engine is bound
        self.done: list[int] | None = None  # the trajectories that ended in the last report

    def samples_finished(self, samples: list[int], ends: list[int]) -> None:
        self.done = done = self._tools.turns_ended(self._engine, samples)
        if done:
            self.inner.samples_finished(done, self._tools.backend._lengths)

    def sample_preempted(self, sample: int, tokens: int) -> None:
        self.inner.sample_preempted(sample, tokens - self._tools.plan.ctx[sample])


class ToolEnv:
    """Sandbox pool, tool calls in flight, and the turn bookkeeping a backend delegates here."""

    def __init__(self, backend, plan: TurnPlan, pool: int) -> None:
        self.backend = backend
        self.env = backend.env
        self.plan = plan
        self.pool = pool
        self.busy = 0  # sandboxes in use
        self.peak = 0  # most sandboxes ever in use at once
        self.waiting: deque[ToolCall] = deque()  # FIFO for a free sandbox
        self.active: dict[int, ToolCall] = {}  # sample -> its current attempt's call
        self.cached_on: dict[int, int] = {}  # sample -> engine whose cache holds its context
        self.fresh: dict[int, int] = {}  # paused sample -> tool-output tokens not yet prefilled
        self._back: list[ToolCall] = []  # calls returned at this instant, to rejoin their engines
        self.ctl = None
        self.hears = False  # the policy gets TURN_DONE events (set when the run starts)
        self.engines: list = []

    def router(self, engine: int) -> _Router:
        return _Router(self, engine)

    # -- turns ending on an engine -----------------------------------------------------------

    def turns_ended(self, engine: int, samples: list[int]) -> list[int]:
        """Samples an engine reports finished at its time: those whose turn was not their last
        leave for a tool call; the trajectories that ended are returned."""
        plan, eng = self.plan, self.engines[engine]
        done = [i for i in samples if plan.is_last(i)]
        if len(done) == len(samples):
            return samples
        t, plen = eng.pub.t, self.backend._plen
        spans = self.backend.timeline.spans
        first = len(spans) - len(samples)  # the engine just wrote one span end per sample
        for j, i in enumerate(samples):
            if plan.is_last(i):
                continue
            row = spans[first + j]
            assert row[3] == i and row[7] == "finish"
            spans[first + j] = row[:7] + ("tool",)  # the turn ended: a tool call follows
            if eng.holds_slot:  # a synchronous agent loop: the slot and the KV stay its own
                eng.hold_slot(i, plan.end[i])
            elif eng.caching:
                held = plan.end[i]
                eng.cache.put(i, plen[i] + held, held)
                self.cached_on[i] = engine
            eng.pub.away[i] = plan.end[i] - plan.ctx[i]  # through the turn that ended
            seconds, tokens = plan.tool_call(i)
            call = ToolCall(i, plan.attempt[i], plan.turn[i], engine, t, seconds=seconds, tokens=tokens)
            self.active[i] = call
            if self.busy < self.pool:
                self._start(call, t)
            else:
                self.waiting.append(call)
        if self.hears:
            turned = tuple(i for i in samples if i not in done)
            event = Event(EventKind.TURN_DONE, engine, turned)
            self.backend._deferred.append((max(t, self.env.now), event))
        return done

    # -- the sandbox pool ---------------------------------------------------------------------

    def _start(self, call: ToolCall, t: float) -> None:
        self.busy += 1
        self.peak = max(self.peak, self.busy)
        call.started = t
        # a turn applied at t when SimPy's clock reads an ulp past it (now + (t - now) != t)
        # and a tool call of 0 s: it returns now, not an ulp in the past
        ev = self.env.timeout(max(0.0, t + call.seconds - self.env.now))
        ev.callbacks.append(lambda _ev, call=call: self._returned(call))

    def _returned(self, call: ToolCall) -> None:
        now = self.env.now
        self.busy -= 1
        self.backend.timeline.tool(call.asked, call.started, now, call.engine, call.sample,
                                   call.attempt, call.turn, call.tokens)
        attempt = self.ctl.s.attempt
        while self.waiting and self.busy < self.pool:
            nxt = self.waiting.popleft()
            # a dropped trajectory keeps its call in ``active`` until re-admitted: its attempt
            # says it is void, and a void call gets no sandbox
            if self.active.get(nxt.sample) is nxt and attempt[nxt.sample] == nxt.attempt:
                self._start(nxt, now)
        self._back.append(call)
        if len(self._back) == 1:  # calls back at the same instant rejoin their engines together
            self.env.timeout(0).callbacks.append(self._rejoin)

    def _rejoin(self, _event) -> None:
        back, self._back = self._back, []
        b, s = self.backend, self.ctl.s
        b._catch_up()
        for call in back:
            i = call.sample
            if self.active.get(i) is not call or s.attempt[i] != call.attempt:
                continue  # the trajectory was dropped meanwhile: the result is thrown away
            del self.active[i]
            self.plan.next_turn(i)
            if s.state[i] == ADMITTED:
                e = s.engine_of[i]
                self.engines[e].pub.away.pop(i, None)
                self._requeue(i, e, call.tokens, self.env.now)
            else:  # paused at the turn boundary: the tool output waits to be prefilled
                self.fresh[i] = call.tokens
        b._poke()

    def _requeue(self, i: int, engine: int, fresh: int, now: float) -> None:
        self._drop_cached_elsewhere(i, engine)
        eng = self.engines[engine]
        if i in eng.held:  # its slot waited for it: it goes first, its context in place
            eng.rejoin(i, self.plan.context(i), fresh, now)
            return
        eng.resume[i] = fresh
        eng.admit([i], [self.plan.context(i)], now)

    def _drop_cached_elsewhere(self, i: int, engine: int) -> None:
        """Sample i resumes on ``engine``: a context cached on another engine is no use."""
        where = self.cached_on.get(i)
        if where is not None and where != engine:
            self.engines[where].cache.take(i)
            del self.cached_on[i]

    # -- the backend's calls -------------------------------------------------------------------

    def admit(self, engine: int, samples: list[int], generated: list[int]) -> tuple[list, list]:
        """The samples and engine-side tokens to queue on ``engine`` now; a sample whose tool
        call is still running waits for it, away on ``engine``."""
        plan, attempt = self.plan, self.ctl.s.attempt
        eng = self.engines[engine]
        out, gen = [], []
        for i, g in zip(samples, generated, strict=True):
            if plan.attempt[i] != attempt[i]:
                self._forget(i)
                plan.start_attempt(i, attempt[i])
            if i in self.active:
                eng.pub.away[i] = plan.end[i] - plan.ctx[i]  # through the turn that ended
                continue
            self._drop_cached_elsewhere(i, engine)
            fresh = self.fresh.pop(i, 0)
            if fresh or i in self.cached_on:
                eng.resume[i] = fresh
            out.append(i)
            gen.append(g + plan.ctx[i])
        return out, gen

    def _forget(self, i: int) -> None:
        """A dropped attempt: its cached context, pending tool output and tool call are void."""
        self._drop_cached_elsewhere(i, -1)
        self.fresh.pop(i, None)
        self.active.pop(i, None)

    def away(self, i: int) -> bool:
        return i in self.active

    def pause(self, i: int) -> int:
        """A policy aborts a sample away on a tool call: it stops at the turn boundary (a slot it
        held is given up; its context stays only in the evictable prefix cache, if any)."""
        eng = self.engines[self.ctl.s.engine_of[i]]
        eng.pub.away.pop(i, None)
        if i in eng.held:
            self._uncache(eng, i, eng.release_slot(i, self.backend.now()))
            eng.plan()
        return self.plan.end[i] - self.plan.ctx[i]  # through the turn that just ended

    def aborted(self, eng, i: int, tokens: int) -> int:
        """An engine aborted sample i holding ``tokens``: the tokens it generated."""
        pending = eng.resume.pop(i, None)
        if pending is not None:  # queued after a tool call, never prefilled since
            self.fresh[i] = pending
            self._uncache(eng, i, eng._kept.pop(i, 0))
        return tokens - self.plan.ctx[i]

    def _uncache(self, eng, i: int, own: int) -> None:
        """A context that a held slot kept (``own`` tokens) is left like any finished request's
        blocks: in the engine's prefix cache, evictable, or gone without prefix caching."""
        if own and eng.caching:
            eng.cache.put(i, self.backend._plen[i] + own, own)
            self.cached_on[i] = eng.pub.index
