"""One simulated rollout engine: continuous batching as a state machine that jumps between changes.

The engine behaves like vLLM's scheduler at the granularity that matters for scheduling:
``max_num_seqs`` running sequences at most, a KV-token budget, FCFS admission from its queue with
head-of-line blocking, and, when the next decode step cannot get KV space, preemption of the most
recently admitted sequence, which goes back to the front of the queue keeping its tokens and is
recomputed (re-prefilled) when readmitted.

It never steps token by token. Its state is exact at a *base* point ``(t, step, kv)``; between
two membership changes the batch is constant, so the time of the next change (a finish, a KV
overflow, an admission) comes from the closed form in :mod:`sortedrl.sim.cost`, and a heap of
absolute finish steps gives the next finish.

Conventions (the brute-force reference in the tests uses the same ones):
- a running sample with ``g`` tokens holds ``prompt + g`` KV tokens; a decode step reads the KV
  held before it, then gives every running sample one token;
- admission prefills ``prompt + g`` tokens (``g > 0`` is recomputation) and stalls the engine for
  the prefill time; the prefill pass yields the sample's next token, or, when the cost model says
  ``prefill_in_step`` (vLLM V1 batching a prefill into the next step), that step does;
- the head of the queue is admitted when ``kv + prompt + g + 1 + (B + 1) <= kv_admit_budget``,
  leaving room for one more decode step; a step runs only when ``kv + B <= kv_budget``;
- with chunked prefill (``chunk_budget``, vLLM V1's ``max_num_batched_tokens``; the GPU presets)
  an admission is no stall: the ``B`` running samples keep decoding in ``n = ceil(T / (budget -
  B))`` mixed steps that also carry the ``T`` prompt tokens, each costing a decode step of the
  ``B`` plus its chunk's prefill compute; the last chunk yields the new samples' first token.
  Samples join FCFS while the chunks end by the next finish of a running sample (else the
  admission waits for that finish: the closed form needs a constant batch) and ``kv + T + new +
  n·B`` leaves room for one more step. An action mid-phase lets the phase finish, as mid-step;
- with prefix caching, the samples of one GRPO group (same prompt) that run on the engine hold
  their prompt's KV once, counted from the first member's admission to the last one's leaving;
  a member joining while the prompt is held prefills only ``g`` (or 1: the last prompt token);
- an action that arrives mid-step lets the step finish for everyone else (the engine's base moves
  to the end of that step); an aborted sample keeps only its completed tokens.

The engine is split in two: :class:`EngineState` is what a policy may see; :class:`Engine` adds
the private finish heap, which encodes true lengths and is never exposed.
"""

from __future__ import annotations

import heapq
import math

from sortedrl.sim.cost import CostModel
from sortedrl.sim.engine_state import EngineState
from sortedrl.timeline import Timeline

INF = math.inf


class Engine:
    """A rollout engine with private knowledge of true lengths (the simulator's side only)."""

    def __init__(self, index: int, cost: CostModel, max_num_seqs: int, kv_budget: int,
                 kv_admit_budget: int, lengths: list[int], prompt_len: list[int],
                 timeline: Timeline, chunk_budget: int = 0, group_size: int = 1,
                 prefix_caching: bool = False) -> None:
        self.pub = EngineState(index, max_num_seqs, cost)
        # chunked prefill: tokens per step (vLLM max_num_batched_tokens); 0 = a prefill stalls
        self.chunk = 0 if cost.prefill_in_step else chunk_budget
        # prefix caching: a group's prompt is prefilled and held once while a member runs here
        self._group = group_size if prefix_caching and group_size > 1 else 0
        # (group, prompt length) -> its running samples here; members of a group normally share
        # one prompt length, and samples whose lengths differ are not taken to share a prompt
        self._members: dict[tuple[int, int], int] = {}
        self.cost = cost
        self.K = kv_budget
        self.K_admit = kv_admit_budget
        self._L = lengths
        self._p = prompt_len
        self._attempt: list[int] = []
        self._oldest: list[int] = []
        self._ctl = None
        self._spans = timeline.spans
        self._prefills = timeline.prefills
        self._heap: list[tuple[int, int, int]] = []  # (finish step, seq, sample)
        self._live: dict[int, int] = {}  # sample -> seq of its valid heap entry
        self._seq = 0
        self._gen0: dict[int, int] = {}  # queued sample -> tokens it resumes from
        # multi-turn (sim/turns.py): queued sample back from a tool call -> its tool-output
        # tokens, never prefilled before (the rest of its context is recomputed, or cached)
        self.resume: dict[int, int] = {}
        self.enabled = True  # rollout allowed (colocated placement turns it off to train)
        self.stalled = False  # a weight sync is loading new weights
        self._slots: list[float] = [INF] * (index + 1)  # the backend's list of next times
        self.next_t = INF
        self._next_k = 0
        self.idle_reported = True
        self.preemptions = 0

    def bind(self, controller: object, attempt: list[int], oldest: list[int]) -> None:
        """Report finishes and preemptions to ``controller``; read attempts from its list and
        record in ``oldest`` the version of each sample's first kept token when it starts."""
        self._ctl = controller
        self._attempt = attempt
        self._oldest = oldest

    # -- planning ------------------------------------------------------------------------------

    def _admissible(self) -> bool:
        p = self.pub
        q = p.queue
        if not q or len(p.run) >= p.max_num_seqs or not self.enabled or self.stalled:
            return False
        i = q[0]
        if self.chunk:
            new = self._new_prompt(i) + self._gen0[i]
            return self._chunk_steps(new or 1, new, p.kv, len(p.run)) > 0
        return p.kv + self._new_prompt(i) + self._gen0[i] + len(p.run) + 2 <= self.K_admit

    # -- prefix caching ------------------------------------------------------------------------

    def _new_prompt(self, sample: int) -> int:
        """Prompt tokens ``sample`` must prefill and add to the KV cache (0: its group's prompt
        is already held here)."""
        if self._group and self._members.get((sample // self._group, self._p[sample])):
            return 0
        return self._p[sample]

    def _join(self, sample: int) -> None:
        if self._group:
            g = (sample // self._group, self._p[sample])
            self._members[g] = self._members.get(g, 0) + 1

    def _leave(self, sample: int) -> int:
        """A running sample leaves: the prompt KV tokens freed with it."""
        if not self._group:
            return self._p[sample]
        g = (sample // self._group, self._p[sample])
        left = self._members[g] - 1
        if left:
            self._members[g] = left
            return 0
        del self._members[g]
        return self._p[sample]

    def _horizon(self) -> float:
        """Decode steps until the next running sample finishes (INF when none runs)."""
        heap, live = self._heap, self._live
        if not self.pub.run:
            return INF
        while live.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] - self.pub.step

    def _chunk_steps(self, work: int, new: int, kv: int, running: int) -> int:
        """Mixed steps needed to prefill ``work`` tokens beside the running batch, or 0 when
        the next sample (adding ``new`` KV tokens) cannot join: the chunks must end by the next
        finish of a running sample, and the KV after them must leave room for one more step."""
        b0 = len(self.pub.run)
        steps = -(-work // (self.chunk - b0))
        if steps > self._horizon() or kv + new + 1 + b0 * steps + running + 1 > self.K_admit:
            return 0
        return steps

    def plan(self) -> None:
        """Compute the time of the next membership change (hot path: kept flat)."""
        p = self.pub
        b = len(p.run)
        if p.queue and self._admissible():
            self.next_t, self._next_k = p.t, 0
        elif b == 0 or self.stalled:
            self.next_t, self._next_k = INF, 0
        else:
            heap, live = self._heap, self._live
            while live.get(heap[0][2]) != heap[0][1]:
                heapq.heappop(heap)  # stale entry of an aborted or preempted sample
            kv = p.kv
            k = heap[0][0] - p.step
            kk = (self.K - kv) // b
            if kk < k:
                k = kk
            self._next_k = k
            c = self.cost
            alpha = c.weight_read(b) + c.a1 * kv
            if alpha >= c.c1 * b:  # memory-bound throughout: the common case, inlined
                fx = c.t_fix + c.s1 * b if c.step_table is None else c.fixed(b)
                self.next_t = p.t + k * (fx + alpha) + c.a1 * b * (k * (k - 1) // 2)
            else:
                self.next_t = p.t + c.decode_time(k, b, kv)
        self._slots[p.index] = self.next_t

    # -- the next change -----------------------------------------------------------------------

    def advance(self) -> list[int]:
        """Apply the planned change at ``next_t``; return the samples that finished."""
        p = self.pub
        k = self._next_k
        run = p.run
        t = p.t = self.next_t
        step = p.step = p.step + k
        kv = p.kv + k * len(run)
        p.inflight = 0
        p.prefilling = ()
        finished = []
        heap, live, lengths, attempt = self._heap, self._live, self._L, self._attempt
        spans, idx = self._spans, p.index
        while heap:
            fs, seq, i = heap[0]
            if live.get(i) != seq:
                heapq.heappop(heap)  # stale
                continue
            if fs != step:
                break
            heapq.heappop(heap)
            del live[i]
            _, t0, tok0, ver = run.pop(i)
            n = lengths[i]
            kv -= self._leave(i) + n
            spans.append((t0, t, idx, i, attempt[i], ver, n - tok0, "finish"))
            finished.append(i)
        p.kv = kv
        if finished:
            self._ctl.samples_finished(finished, lengths)
        while run and p.kv + len(run) > self.K:
            self._preempt()
        if p.queue and self._admissible():
            self._admit_from_queue()
        self.plan()
        return finished

    def _preempt(self) -> None:
        p = self.pub
        i, (off, t0, tok0, ver) = p.run.popitem()  # the most recently admitted
        del self._live[i]
        tok = p.step + off
        p.kv -= self._leave(i) + tok
        self._spans.append((t0, p.t, p.index, i, self._attempt[i], ver, tok - tok0, "preempt"))
        p.queue.appendleft(i)
        self._gen0[i] = tok
        self.preemptions += 1
        self._ctl.sample_preempted(i, tok)

    def _admit_from_queue(self) -> None:
        """Admit FCFS from the queue while the head fits, then stall for one prefill."""
        if self.chunk:
            self._admit_chunked()
            return
        p = self.pub
        admitted: list[int] = []
        tokens = pairs = recomputed = 0
        queue, run, lengths, plen, gen0 = p.queue, p.run, self._L, self._p, self._gen0
        heap, live, oldest = self._heap, self._live, self._oldest
        kv, step, t, ver, cap, budget = p.kv, p.step, p.t, p.version, p.max_num_seqs, self.K_admit
        seq = self._seq
        first = 0 if self.cost.prefill_in_step else 1  # the token the prefill pass itself yields
        resume = self.resume
        while queue and len(run) < cap:
            i = queue[0]
            g0 = gen0[i]
            prompt = self._new_prompt(i)
            new = prompt + g0  # tokens to prefill (a cached prompt is attended to, not computed)
            if kv + new + len(run) + 2 > budget:
                break
            queue.popleft()
            del gen0[i]
            self._join(i)
            off = g0 + first - step
            run[i] = (off, t, g0, ver)
            if oldest[i] < 0:
                oldest[i] = ver
            kv += new + first
            seq += 1
            live[i] = seq
            heapq.heappush(heap, (lengths[i] - off, seq, i))
            admitted.append(i)
            work = new or 1  # a full prefix hit still computes the last prompt token (vLLM)
            redone = g0
            if resume and i in resume:  # back from a tool call (sim/turns.py)
                work, redone = self._resumed(i, g0, work)
            tokens += work
            pairs += work * (plen[i] + g0 - work) + work * (work + 1) // 2
            recomputed += redone
        self._seq = seq
        p.kv = kv
        dt = self.cost.prefill(tokens, pairs, len(admitted))
        self._prefills.append((t, t + dt, p.index, admitted, tokens, recomputed))
        p.t = t + dt
        p.prefilling = tuple(admitted)

    def _admit_chunked(self) -> None:
        """Admit FCFS while the head fits, prefilling in chunks beside the running batch.

        vLLM V1's chunked prefill: each step carries one token per running sample plus up to
        ``chunk - B`` prefill tokens, so the running samples keep decoding. The admitted
        samples' prompts take ``steps`` mixed steps, each costing a decode step of the running
        batch plus its chunk's prefill compute; the last chunk yields their first token.
        """
        p = self.pub
        admitted: list[int] = []
        tokens = pairs = recomputed = 0
        queue, run, lengths, plen, gen0 = p.queue, p.run, self._L, self._p, self._gen0
        b0, kv, t, ver, steps = len(run), p.kv, p.t, p.version, 0
        while queue and b0 + len(admitted) < p.max_num_seqs:
            i = queue[0]
            prompt = self._new_prompt(i)
            new = prompt + gen0[i]
            work = new or 1  # a full prefix hit still computes the last prompt token (vLLM)
            redone = gen0[i]
            if self.resume and i in self.resume:  # back from a tool call (sim/turns.py)
                work, redone = self._resumed(i, gen0[i], work, take=False)
            need = self._chunk_steps(tokens + work, new, kv, b0 + len(admitted))
            if not need:
                break
            steps = need
            queue.popleft()
            if self.resume and i in self.resume:
                self._resumed(i, gen0[i], work)
            self._join(i)
            admitted.append(i)
            kv += new + 1
            tokens += work
            pairs += work * (plen[i] + gen0[i] - work) + work * (work + 1) // 2
            recomputed += redone
        c = self.cost
        dt = (c.decode_time(steps, b0, p.kv) + c.pn + c.p0 * len(admitted) + c.p1 * tokens
              + c.p2 * pairs)
        step = p.step = p.step + steps
        p.kv = kv + steps * b0
        for i in admitted:
            g0 = gen0.pop(i)
            off = g0 + 1 - step
            run[i] = (off, t, g0, ver)
            if self._oldest[i] < 0:
                self._oldest[i] = ver
            self._seq += 1
            self._live[i] = self._seq
            heapq.heappush(self._heap, (lengths[i] - off, self._seq, i))
        self._prefills.append((t, t + dt, p.index, admitted, tokens, recomputed))
        p.t = t + dt
        p.inflight = steps if b0 else 0
        p.prefilling = tuple(admitted)

    def _resumed(self, sample: int, g0: int, work: int, take: bool = True) -> tuple[int, int]:
        """A sample back from a tool call: ``(tokens to prefill, tokens recomputed)``; all of
        its context but the new tool output is recomputation (``take``: it is admitted now).
        :class:`~sortedrl.sim.turns.TurnEngine` computes less when the context is cached."""
        fresh = self.resume.pop(sample) if take else self.resume[sample]
        return work, g0 - fresh

    # -- actions from the controller ------------------------------------------------------------

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
        assert k < self._next_k or self._next_k == 0, "materialize past a pending change"
        if self.cost.decode_time(k, b, p.kv) == elapsed:
            p.t, done, p.inflight = now, k, 0
        else:
            p.t, done, p.inflight = p.t + self.cost.decode_time(k + 1, b, p.kv), k + 1, 1
        p.step += done
        p.kv += done * b

    def admit(self, samples: list[int], generated: list[int], now: float) -> None:
        self.materialize(now)
        p = self.pub
        for i, g in zip(samples, generated, strict=True):
            p.queue.append(i)
            self._gen0[i] = g
        self.idle_reported = False
        self.plan()

    def abort(self, sample: int, now: float) -> int:
        """Remove a queued or running sample; return the tokens it keeps."""
        p = self.pub
        if sample in self._gen0:
            p.queue.remove(sample)
            return self._gen0.pop(sample)
        self.materialize(now)
        off, t0, tok0, ver = p.run.pop(sample)
        del self._live[sample]
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

    def audit(self) -> None:
        """Check the engine's bookkeeping against first principles (tests call this)."""
        p = self.pub
        kv = 0
        low = 0 if self.cost.prefill_in_step else 1
        prompts: dict[tuple[int, int], int] = {}  # shared prompt (or sample) -> tokens held once
        members: dict[tuple[int, int], int] = {}
        for i, (off, _, _, _) in p.run.items():
            key = (i // self._group, self._p[i]) if self._group else (-1 - i, 0)
            prompts[key] = self._p[i]
            members[key] = members.get(key, 0) + 1
            kv += p.step + off
            assert low <= p.step + off <= self._L[i], "a running sample's tokens are out of range"
        kv += sum(prompts.values())
        assert kv == p.kv, f"engine {p.index}: kv bookkeeping {p.kv} != {kv}"
        if self._group:
            assert members == self._members, f"engine {p.index}: group members {self._members}"
        assert len(p.run) <= p.max_num_seqs, f"engine {p.index}: over max_num_seqs"
        assert p.kv <= self.K, f"engine {p.index}: KV {p.kv} over budget {self.K}"
        assert len(p.queue) == len(self._gen0)

    @property
    def idle(self) -> bool:
        return not self.pub.run and not self.pub.queue
