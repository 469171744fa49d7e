"""The simulator's backend: SimPy processes that execute the controller's actions in simulated time.

One *rollout pool* process drives every engine. It always applies the earliest pending engine
change; when that change lies before the next event anyone else has scheduled (``env.peek()``),
nobody can act in between, so the pool applies it at once without a SimPy timeout. It yields to
SimPy only when another process may act first, or when the change produces an event a policy
must see at its own time. That keeps SimPy events proportional to policy decisions and
notifications, not to finishes, while the order of everything stays exactly that of time, then
SimPy's (time, priority, insertion) tie-break. The trainer and weight syncs are plain processes.

Before any event is dispatched to the policy, every engine is caught up to the current time, so
the policy always sees one consistent instant.

Finishes and standing orders (:mod:`sortedrl.policies.orders`): the engines report finishes to
this backend, which books them with the controller at once. A finish the policy must hear
(a ``WakeOn`` condition holds, or the policy hears every finish) becomes a deferred ``FINISHED``
event as above. Any other finish is served on the spot, with no SimPy event and no policy call:
the controller tops up from the policy's ``Keep`` order **at the finish's instant, inside the
engine step that made it**, before that engine admits from its queue, so the top-up shares the
step's (chunked) prefill: the finishes of one engine step give one admit and one prefill. The
policy is not called there, so no view needs to be consistent; placement reads only the
controller's loads. A finish is deferred like an event instead (keeping the order of
everything) when an event is already pending, when it comes from catching engines up, or when
another engine has a change due at the same instant (a tie, applied first as always).
"""

from __future__ import annotations

from collections import deque
from itertools import groupby

import numpy as np
import simpy

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Event, EventKind, hears_turns
from sortedrl.policies.controller import Backend, Controller
from sortedrl.policies.deferred import typed_view
from sortedrl.policies.view import EngineInfo, int_array
from sortedrl.sim import pool_fast
from sortedrl.sim.attempts import AttemptLengths
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.contention import SharedHost, shares_host
from sortedrl.sim.engine import INF, Engine
from sortedrl.sim.tools import ToolEnv
from sortedrl.sim.turns import TurnEngine, TurnPlan, has_turns
from sortedrl.timeline import Timeline
from sortedrl.traces.schema import Trace
from sortedrl.traces.turns import trajectory_tokens


class SimBackend(Backend):
    """Runs a trace on a simulated :class:`~sortedrl.sim.cluster_spec.Cluster`."""

    # a policy that never hears a finish gets its finishes booked in batches (policies/deferred.py);
    # False books each as it happens (the tests compare the two)
    defer_finishes = True
    # the pool's common case compiled (sim/pool_fast.py): "auto" from AUTO_SAMPLES samples up,
    # True wherever the run allows it, False never; the results are the same either way
    compiled: bool | str = "auto"

    def __init__(self, trace: Trace, cluster: Cluster, timeline: Timeline, progress=None,
                 audit: bool = False, attempt_lengths: dict | None = None, seed: int = 0,
                 regen: str = "resample") -> None:
        self.env = simpy.Environment()
        self.cluster = cluster
        self.placement = cluster.placement
        self.cost = cluster.cost()
        self.timeline = timeline
        # per sample, typed arrays (4 bytes a sample, not a list of boxed ints)
        self._lengths = int_array("i", trace.response_len)  # of each sample's current attempt
        self._attempts = AttemptLengths(trace, seed, regen)  # a regenerated attempt's draw
        self._replay = attempt_lengths  # (sample, attempt) -> length a real run showed
        self._plen = int_array("i", trace.prompt_len)
        self._progress = progress
        self.audit = audit  # re-check every engine's bookkeeping after each change (tests)
        c = cluster
        self.tools: ToolEnv | None = None  # trajectories with turns: tool calls (sim/tools.py)
        lengths, engine, kw = self._lengths, Engine, {}
        if has_turns(trace):
            plan = TurnPlan(trace, self._lengths, max_context=c.kv_admit_budget - 1)
            self.tools = ToolEnv(self, plan, c.tool_pool)
            lengths, engine = self.tools.plan.end, TurnEngine
            kw = dict(ctx=self.tools.plan.ctx, sleeps=c.placement == "colocated" and c.sleep,
                      caching=c.prefix_caching, holds_slot=c.tool_holds_slot)
            gen, tool = trajectory_tokens(trace)  # (the longest recorded context: check_trace_fits' too)
            c.check_fits(int(np.max(trace.prompt_len + gen + tool)), c.where)
        self.engines = [
            engine(e, self.cost, c.max_num_seqs, c.kv_budget, c.kv_admit_budget, lengths,
                   self._plen, timeline, c.max_num_batched_tokens if c.chunked_prefill else 0,
                   trace.meta.group_size, c.prefix_caching,
                   **(dict(kw, router=self.tools.router(e)) if self.tools else {}))
            for e in range(c.engines)
        ]
        if self.tools is not None:
            self.tools.engines = self.engines
        # engines and trainer sharing a host's cores (sim/contention.py); None: separate devices
        self._host = SharedHost(self.cost, self.engines, c.placement) if shares_host(self.cost, c.placement) else None
        self._next = [INF] * len(self.engines)  # next change time of each engine
        for e in self.engines:
            e._slots = self._next
        self._deferred: deque[tuple[float, Event]] = deque()
        self._advancing: Engine | None = None  # the engine whose change is being applied
        self._catching_up = False
        self._instant: float | None = None  # the time of a finish being served (see above)
        self._held: list[Engine] = []  # engines whose served finish holds their host for policy_event_s
        self._proc = None
        self._fast = None  # the compiled pool loop, where the run allows it (set in run())
        self._asleep = False  # colocated: the engines are offloaded for an update
        self._waiting = False
        self._poked = False
        self.ctl: Controller | None = None

    # -- Backend interface -----------------------------------------------------------------------

    def engine_infos(self) -> list[EngineInfo]:
        return [e.pub for e in self.engines]

    def now(self) -> float:
        return self.env.now if self._instant is None else self._instant

    def admit(self, engine: int, samples: list[int], generated: list[int]) -> None:
        attempt, lengths = self.ctl.s.attempt, self._lengths
        if self._replay is not None:  # a replay that knows earlier attempts' lengths; the last is the trace's
            for i in samples:
                lengths[i] = self._replay.get((i, attempt[i]), self._attempts.length(i, 0))
        elif any(map(attempt.__getitem__, samples)):  # (first attempts keep the trace's length)
            again = [i for i in samples if attempt[i]]
            for i, n in zip(again, self._attempts.lengths(again, [attempt[i] for i in again]), strict=True):
                lengths[i] = n
        eng = self.engines[engine]
        if self.tools is not None:  # tool output joins the context; mid-call samples wait for it
            samples, generated = self.tools.admit(engine, samples, generated)
        now = self.env.now if self._instant is None else self._instant
        eng.admit(samples, generated, now)
        if self._host is not None:
            self._host.busy_may_change(now)
        if self._waiting:  # else _poke has nothing to do (the pool is applying a change)
            self._poke()

    def abort(self, samples: list[int]) -> list[int]:
        now, touched, out = self.now(), set(), []
        tools = self.tools
        queued = self._queued_aborts(samples) if tools is None else None
        if queued is not None:  # (distinct samples, no tools: each engine's run of them at once)
            for j, run in groupby(samples, self.ctl.s.engine_of.__getitem__):
                out += self.engines[j].abort_each(list(run), now, queued)
                touched.add(self.engines[j].pub.index)
            samples = ()
        for i in samples:
            if tools is not None and tools.away(i):  # on a tool call: stops at the turn boundary
                out.append(tools.pause(i))
                continue
            e = self.engines[self.ctl.s.engine_of[i]]
            if queued is not None and i in queued:
                out.append(queued[i])
            else:
                out.append(e.abort(i, now) if tools is None else tools.aborted(e, i, e.abort(i, now)))
            touched.add(e.pub.index)
        for e in sorted(touched):
            self.engines[e].plan()
        if self._host is not None:
            self._host.busy_may_change(now)
        self._poke()
        return out

    def _queued_aborts(self, samples: list[int]) -> dict[int, int]:
        """Abort the queued ones of ``samples`` (distinct) an engine at a time, each engine's
        queue in one pass (one by one, each removal scans the queue); returns their kept
        tokens, or None for a few samples or a sample listed twice (aborted one by one). A
        queued sample's abort touches only its engine's queue, so the running ones after it
        are aborted as before, in order."""
        if len(samples) < 16 or len(set(samples)) != len(samples):
            return None
        engine_of, by_engine = self.ctl.s.engine_of, {}
        for i in samples:
            e = self.engines[engine_of[i]]
            if i in e._gen0:
                by_engine.setdefault(e, set()).add(i)
        out: dict[int, int] = {}
        for e, gone in by_engine.items():
            out.update(e.abort_queued(gone))
        return out

    def train(self, samples: list[int], version: int) -> None:
        at = np.asarray(samples, dtype=np.int64)  # prompt + response of each, as Python ints
        lengths = (typed_view(self._plen, np.int32)[at].astype(np.int64) + typed_view(self._lengths, np.int32)[at]).tolist()
        if self.tools is not None:  # the tool output is in the trained sequence (masked)
            lengths = [n + self.tools.plan.ctx[i] for n, i in zip(lengths, samples, strict=True)]
        tokens = sum(lengths)
        start = self.env.now
        if self.placement == "colocated":  # the shared GPUs finish their in-flight steps first
            start = max([start] + [e.pub.t for e in self.engines])
        dur = self.cost.update(lengths)
        if self.placement == "colocated" and not self._asleep:  # vLLM sleep: engines step aside
            self._asleep = True
            if self.cost.offload_s > 0:
                self.timeline.offload(start, start + self.cost.offload_s, version)
                start += self.cost.offload_s
        self.env.process(self._train(start, dur, version, samples, tokens))

    def sync(self, version: int) -> None:
        now = start = self.env.now
        if self.placement == "colocated":  # the shared GPUs finish their in-flight steps first
            start = max([start] + [e.pub.t for e in self.engines])
        for e in self.engines:  # each stops at its next step boundary (colocated: idle already)
            e.begin_sync(now)
        self._poke()
        self.env.process(self._sync(start, self.cost.sync(), version))

    def set_rollout(self, enabled: bool) -> None:
        now, onload = self.env.now, 0.0
        if enabled and self._asleep:  # vLLM wake-up: weights back in before rollout resumes
            self._asleep = False
            if self.cost.onload_s > 0 and not self.ctl.done:
                onload = self.cost.onload_s
                self.timeline.onload(now, now + onload, self.ctl.s.version)
        for e in self.engines:
            e.set_enabled(enabled, now)
            if onload:
                e.hold(now, onload)
        self._poke()

    def run(self, controller: Controller) -> None:
        self.ctl = controller
        if self.tools is not None:
            self.tools.ctl, self.tools.hears = controller, hears_turns(controller.policy)
        # finishes come here first (``samples_finished``), or, for a policy that never hears
        # one (nothing to serve or defer), straight to the controller's bookkeeping: in batches
        # booked before its next event (policies/deferred.py) where the rewards are an array
        to = self if controller.policy.listens_to_finishes else controller
        if (to is controller and self.defer_finishes and self.tools is None
                and isinstance(controller._rewards, (memoryview, type(None)))):
            to = controller.defer_finishes(self._lengths)  # booked in batches, before each event
        # (a deferred sink's list, which the engines append to: never a TurnEngine's)
        kw = {"pending": to.pending} if to is controller.deferred else {}
        for e in self.engines:
            e.bind(to, controller.s.attempt, controller.s.oldest, **kw)
        self._fast = self._compiled_pool(controller)
        self._proc = self.env.process(self._pool())
        self._dispatch(controller.start)
        self.env.run()

    def _compiled_pool(self, controller: Controller):
        """The compiled pool loop (sim/pool_fast.py) if this run may use it, else None."""
        n = len(self._lengths)
        if not self.compiled or (self.compiled == "auto" and n < pool_fast.AUTO_SAMPLES):
            return None
        if not pool_fast.usable(self, controller):
            return None
        return pool_fast.FastPool(self, n, guard=self.compiled == "auto")

    # -- processes ---------------------------------------------------------------------------------

    def _train(self, start: float, dur: float, version: int, samples: list[int], tokens: int):
        if self._host is not None:  # after every action of this instant: who else is busy now
            self._catch_up()
            dur = self._host.update_starts(start, dur)
            self._poke()
        yield self.env.timeout(start + dur - self.env.now)
        if self._host is not None:
            self._catch_up()
            self._host.update_ends(self.env.now)
        self.timeline.train(start, start + dur, version, samples, tokens)
        if self._progress is not None:
            self._progress(len(samples))
        self._dispatch(self.ctl.update_done)

    def _sync(self, start: float, dur: float, version: int):
        yield self.env.timeout(start + dur - self.env.now)
        # an engine takes the new weights at a step boundary: one still in the step (or chunked
        # prefill) it was in when the sync began finishes it first, and the engines resume
        # together, as verl's and AReaL's collective weight update does
        ready = max([self.env.now] + [e.pub.t for e in self.engines])
        if ready > self.env.now:
            yield self.env.timeout(ready - self.env.now)
        for e in self.engines:
            e.end_sync(self.env.now, version)
        self.timeline.sync(start, self.env.now, version)
        self._poke()
        self._dispatch(self.ctl.sync_done)

    def _pool(self):
        env, engines, nexts, deferred, advance = self.env, self.engines, self._next, self._deferred, self._advance
        fast = self._fast
        while True:
            if deferred:
                t, event = deferred.popleft()
                if t > env.now:
                    yield env.timeout(t - env.now)  # nothing else is due before t
                self._dispatch(lambda ev=event: self.ctl.dispatch(ev))
                if self.cost.policy_event_s > 0 and event.engine is not None:
                    self.engines[event.engine].hold(env.now, self.cost.policy_event_s)  # the policy's time
                continue
            t = min(nexts)
            if t == INF or (t > env.now and t >= env.peek()):
                self._waiting = True
                try:
                    yield env.timeout(t - env.now) if t < INF else env.event()
                except simpy.Interrupt:
                    self._poked = False
                self._waiting = False
                continue
            if fast is not None:  # the same changes, compiled, until Python must act
                e = fast.run(env.now, env.peek())
                if e >= 0:  # a change the kernel does not make
                    advance(engines[e])
                continue
            advance(engines[nexts.index(t)])

    def _advance(self, eng: Engine) -> None:
        """Apply ``eng``'s next change; its finishes arrive through :meth:`samples_finished`."""
        when = changed_at = eng.next_t
        self._advancing = eng
        eng.advance()
        self._advancing = None
        if self._held:  # the host time of finishes served without an event
            for held in self._held:
                held.hold(held.pub.t, self.cost.policy_event_s)
            self._held.clear()
        if not eng.idle_reported and not eng.pub.run and not eng.pub.queue:  # eng.idle, inlined
            when = max(when, self.env.now)
            eng.idle_reported = True
            self._deferred.append((when, Event(EventKind.ENGINE_IDLE, eng.pub.index)))
        if self._host is not None and not self._catching_up:  # (else at the catch-up's end)
            # re-cost at the change's time once no other engine has a change due by then (a tied
            # engine's own advance does it; eng's base may have moved on: a hold, a prefill)
            k = eng.pub.index
            if all(t > changed_at for j, t in enumerate(self._next) if j != k):
                self._host.busy_may_change(changed_at)
        if self.audit:
            eng.audit()

    # -- callbacks from the engines ----------------------------------------------------------------

    def samples_finished(self, samples: list[int], lengths: list[int]) -> None:
        """An engine's step finished ``samples``: book them, then serve or defer (module doc)."""
        ctl, eng = self.ctl, self._advancing
        ctl.samples_finished(samples, lengths)
        if not ctl.policy.listens_to_finishes:
            return
        t = eng.pub.t
        if (self._deferred or self._catching_up or self._next.count(t) > 1
                or ctl.hears(samples)):  # (no engine is due before t here: a count finds ties)
            when = max(t, self.env.now)
            self._deferred.append((when, Event(EventKind.FINISHED, eng.pub.index, tuple(samples))))
            return
        self._instant = t
        try:
            ctl.serve_keep()
        finally:
            self._instant = None
        if self.cost.policy_event_s > 0:
            self._held.append(eng)

    def sample_preempted(self, sample: int, tokens: int) -> None:
        self.ctl.sample_preempted(sample, tokens)

    def _catch_up(self) -> None:
        """Apply every engine change due at or before now (their events are deferred)."""
        now = self.env.now
        if now == INF:  # every engine would be due at once, forever
            raise ConfigError("the simulated clock overflowed to infinity: a cost in the cluster "
                              "(or a tool latency in the trace) is far too large")
        self._catching_up = True
        fast = self._fast
        try:
            for j, eng in enumerate(self.engines):
                while eng.next_t <= now:
                    if fast is not None and fast.catches_up(j):  # (a big admission: compiled)
                        fast.catch_up(j, now)
                    else:
                        self._advance(eng)
        finally:
            self._catching_up = False
        if self._host is not None:
            self._host.busy_may_change(now)

    def _dispatch(self, fn) -> None:
        self._catch_up()
        fn()
        self._poke()  # the event may have changed any engine's next change

    def _poke(self) -> None:
        """Wake the pool so it re-plans (it is waiting on a timeout that may now be wrong)."""
        if self._waiting and not self._poked and self._proc is not None:
            self._poked = True
            self._proc.interrupt()

