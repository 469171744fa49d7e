"""What a controller does to a simulated engine mid-interval, and the engine's bookkeeping audit.

Split from :mod:`sortedrl.sim.engine`, which holds the state machine (planning and applying the
next change, admitting from the queue). The actions here arrive at arbitrary instants: each first
moves the engine's base to a step boundary (:meth:`EngineActions.materialize`), applies itself,
then re-plans. They run per policy action, not per token, so they are written for clarity.
It also holds the small helpers both halves use: a sample's shared-prompt key and its joining
or leaving the prefix cache (which the hot path inlines), a resumed sample's prefill, and the
preemption of a sample when the next step has no KV room.
"""

from __future__ import annotations

import math


class EngineActions:
    """Actions on an engine (the mix-in half of :class:`~sortedrl.sim.engine.Engine`)."""

    def materialize(self, now: float) -> None:
        """Move the base to the first step boundary at or after ``now``.

        Changes due at or before ``now`` must have been applied already (the backend catches
        up every engine before it dispatches an event).
        """
        p = self.pub
        if now <= p.t or p.frozen:
            return
        p.prefilling = ()
        b = len(p.run)
        if b == 0:
            p.t = now
            return
        elapsed = now - p.t
        k = self.cost.decode_steps_within(elapsed, b, p.kv)
        if self._next_k:  # never past the pending change, planned after now: where the plan's closed
            # form and decode_steps_within round one instant apart, now lies in the change's last
            # step (it was an assertion a fuzzer's run stopped at, once in about 30,000 runs)
            k = min(k, self._next_k - 1)
        if self.cost.decode_time(k, b, p.kv) == elapsed:
            p.t, done, p.inflight = now, k, 0
        else:  # (the step still running ends after now: a sum that rounds to now is an ulp past it,
            # else an action at now took that step's token as made: a finishing sample aborted
            # whole, and re-prefilled with every token it had; a review's case)
            end = p.t + self.cost.decode_time(k + 1, b, p.kv)
            p.t, done, p.inflight = end if end > now else math.nextafter(now, math.inf), k + 1, 1
        p.step += done
        p.kv += done * b

    def admit(self, samples: list[int], generated: list[int], now: float) -> None:
        self.materialize(now)
        if len(samples) != len(generated):
            raise ValueError(f"admit: {len(samples)} samples but {len(generated)} token counts")
        self.pub.queue.extend(samples)
        self._gen0.update(zip(samples, generated, strict=True))
        self.idle_reported = False
        if not self._reporting:  # else advance() admits and re-plans once the report returns
            self.plan()

    def abort_queued(self, samples: set[int]) -> dict[int, int]:
        """``abort`` of each of ``samples``, all queued here, in one pass over the queue;
        returns the tokens each keeps."""
        queue = self.pub.queue
        rest = [i for i in queue if i not in samples]
        queue.clear()
        queue.extend(rest)
        return {i: self._gen0.pop(i) for i in samples}

    def abort(self, sample: int, now: float) -> int:
        """Remove a queued or running sample; return the tokens it keeps."""
        p = self.pub
        if sample in self._gen0:
            p.queue.remove(sample)
            return self._gen0.pop(sample)
        self.materialize(now)
        return self._stop_running(sample, now)

    def abort_each(self, samples: list[int], now: float, done: dict[int, int]) -> list[int]:
        """:meth:`abort` of each of ``samples`` (distinct, all this engine's), in order, the
        tokens each keeps; ``done``: those of queued ones aborted already (:meth:`abort_queued`).
        A harvest aborts thousands of running samples: one call, not one each."""
        out, moved, gen0 = [], False, self._gen0
        for i in samples:
            tok = done.get(i)
            if tok is None and i not in gen0:
                if not moved:  # (abort moves the base for each running sample: once does)
                    self.materialize(now)
                    moved = True
                tok = self._stop_running(i, now)
            elif tok is None:
                tok = self.abort(i, now)
            out.append(tok)
        return out

    def _stop_running(self, sample: int, now: float) -> int:
        """A running sample's abort at ``now``, the base moved there: its span ends; returns
        the tokens it keeps."""
        p = self.pub
        off, t0, tok0, ver = p.run.pop(sample)
        del self._live[sample]
        self._stale += 1  # its heap entry stays, to be skipped
        if now < p.t and sample in p.prefilling:
            tok = tok0
            p.prefilling = tuple(j for j in p.prefilling if j != sample)
        elif now < p.t and p.inflight:
            tok = p.step - p.inflight + off
        else:
            tok = p.step + off
        p.kv -= self._leave(sample) + p.step + off
        if not p.frozen:  # a frozen sample's span already ended when the sync began
            # SimPy's clock can trail the engine's by an ulp (now + (t - now) != t)
            self._spans.append((t0, max(now, t0), p.index, sample, self._attempt[sample], ver,
                                tok - tok0, "abort"))
        return tok

    def set_enabled(self, enabled: bool, now: float) -> None:
        self.materialize(now)
        self.enabled = enabled
        self.plan()

    def hold(self, now: float, seconds: float) -> None:
        """The host is busy for ``seconds`` (reacting to an event): the engine does not step."""
        self.materialize(now)
        p = self.pub
        if not p.frozen:
            p.t = max(p.t, now) + seconds
            self.plan()

    def begin_sync(self, now: float) -> None:
        """Stop at the next step boundary for a weight sync; running spans end there."""
        self.materialize(now)
        p = self.pub
        for i, (off, t0, tok0, ver) in p.run.items():
            self._spans.append((t0, p.t, p.index, i, self._attempt[i], ver, p.step + off - tok0, "sync"))
        p.frozen = self.stalled = True
        self.plan()

    def end_sync(self, now: float, version: int) -> None:
        """New weights are in: running samples continue (KV kept) under ``version``."""
        p = self.pub
        p.t = max(p.t, now)
        p.inflight = 0
        p.prefilling = ()
        p.version = version
        for i, (off, _, _, _) in p.run.items():
            p.run[i] = (off, p.t, p.step + off, version)
        p.frozen = self.stalled = False
        self.plan()

    def _preempt(self) -> None:
        """The next decode step has no KV room: the most recently admitted sample goes back to
        the head of the queue, keeping its tokens (recomputed when it is readmitted)."""
        p = self.pub
        i, (off, t0, tok0, ver) = p.run.popitem()  # the most recently admitted
        del self._live[i]
        self._stale += 1
        tok = p.step + off
        p.kv -= self._leave(i) + tok
        self._spans.append((t0, p.t, p.index, i, self._attempt[i], ver, tok - tok0, "preempt"))
        p.queue.appendleft(i)
        self._gen0[i] = tok
        self.preemptions += 1
        self._ctl.sample_preempted(i, tok)

    def audit(self) -> None:
        """Check the engine's bookkeeping against first principles (tests call this)."""
        p = self.pub
        kv = 0
        low = 0 if self.cost.prefill_in_step else 1
        prompts: dict[object, int] = {}  # shared prompt (or sample) -> tokens held once
        members: dict[object, int] = {}
        for i, (off, _, _, _) in p.run.items():
            key = self._key(i) if self._group else ("sample", i)
            prompts[key] = self._prompt_len[i]
            members[key] = members.get(key, 0) + 1
            kv += p.step + off
            assert low <= p.step + off <= self._lengths[i], "a running sample's tokens are out of range"
        for key, prompt in self._audit_held():  # held slots holding a shared prompt (sim/turns.py)
            prompts[key] = prompt
            members[key] = members.get(key, 0) + 1
        kv += sum(prompts.values())
        assert kv == p.kv, f"engine {p.index}: kv bookkeeping {p.kv} != {kv}"
        if self._group:
            assert members == self._members, f"engine {p.index}: group members {self._members}"
        assert len(p.run) <= p.max_num_seqs, f"engine {p.index}: over max_num_seqs"
        assert p.kv <= self.kv_budget, f"engine {p.index}: KV {p.kv} over budget {self.kv_budget}"
        assert len(p.queue) == len(self._gen0)
        stale = sum(1 for _, seq, i in self._heap if self._live.get(i) != seq)
        assert stale == self._stale, f"engine {p.index}: {self._stale} stale heap entries counted, {stale} found"

    # -- prefix caching (the hot path inlines these) ---------------------------------------------

    def _audit_held(self) -> list[tuple[int, int]]:
        """(shared prompt key, prompt tokens) of each slot held through a tool call that holds
        its group's prompt: none here (:class:`~sortedrl.sim.turns.TurnEngine` has them)."""
        return []

    def _key(self, sample: int) -> int:
        """The shared prompt of ``sample``: its group and prompt length in one int (a prompt
        length never reaches 2**32 tokens: no KV budget holds it)."""
        return (sample // self._group) << 32 | self._prompt_len[sample]

    def _join(self, sample: int) -> None:
        if self._group:
            key = self._key(sample)
            self._members[key] = self._members.get(key, 0) + 1

    def _leave(self, sample: int) -> int:
        """A running sample leaves: the prompt KV tokens freed with it."""
        if not self._group:
            return self._prompt_len[sample]
        key = self._key(sample)
        left = self._members[key] - 1
        if left:
            self._members[key] = left
            return 0
        del self._members[key]
        return self._prompt_len[sample]

    def _resumed(self, sample: int, g0: int, work: int, take: bool = True) -> tuple[int, int]:
        """A sample back from a tool call: ``(tokens to prefill, tokens recomputed)``; all of
        its context but the new tool output is recomputation (``take``: it is admitted now).
        :class:`~sortedrl.sim.turns.TurnEngine` computes less when the context is cached."""
        fresh = self.resume.pop(sample) if take else self.resume[sample]
        return work, g0 - fresh

    @property
    def idle(self) -> bool:
        return not self.pub.run and not self.pub.queue
