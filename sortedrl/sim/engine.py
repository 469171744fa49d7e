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
  ``B`` plus its chunk's prefill compute (and an MoE model's reads of the experts its chunk
  routes to beyond the ``B``'s); the last chunk yields the new samples' first token.
  Samples join FCFS while the chunks end by the next finish of a running sample (else the
  admission waits for that finish: the closed form needs a constant batch) and ``kv + T + new +
  n·B`` leaves room for one more step. An action mid-phase lets the phase finish, as mid-step;
- with prefix caching, the samples of one GRPO group (same prompt) that run on the engine hold
  their prompt's KV once, counted from the first member's admission to the last one's leaving;
  a member joining while the prompt is held prefills only ``g`` (or 1: the last prompt token);
- an action that arrives mid-step lets the step finish for everyone else (the engine's base moves
  to the end of that step); an aborted sample keeps only its completed tokens.

The engine is split in two: :class:`EngineState` is what a policy may see; :class:`Engine` adds
the private finish heap, which encodes true lengths and is never exposed. This module holds the
state machine (planning the next change, applying it, admitting from the queue); the actions a
controller takes mid-interval (abort, sync, hold), preemption, the bookkeeping audit and the
prefix-cache helpers are in :mod:`sortedrl.sim.engine_actions`. The hot path runs once or twice
per sample, so it is written flat: the prefix-cache bookkeeping and the common closed forms are
inlined there, with the cost model's terms read as locals (:attr:`Engine.cost` keeps them).
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from sortedrl.sim.cost import CostModel
from sortedrl.sim.engine_actions import EngineActions
from sortedrl.sim.engine_state import EngineState
from sortedrl.timeline import Timeline

INF = math.inf


class Engine(EngineActions):
    """A rollout engine with private knowledge of true lengths (the simulator's side only)."""

    def __init__(self, index: int, cost: CostModel, max_num_seqs: int, kv_budget: int,
                 kv_admit_budget: int, lengths: list[int], prompt_len: list[int],
                 timeline: Timeline, chunk_budget: int = 0, group_size: int = 1,
                 prefix_caching: bool = False) -> None:
        self.pub = EngineState(index, max_num_seqs, cost)
        # sequences that may run: max_num_seqs, less the slots trajectories hold through a tool
        # call when the cluster says so (sim/turns.py; the public max_num_seqs stays whole)
        self.seq_cap = max_num_seqs
        # chunked prefill: tokens per step (vLLM max_num_batched_tokens); 0 = a prefill stalls
        self.chunk = 0 if cost.prefill_in_step else chunk_budget
        # prefix caching: a group's prompt is prefilled and held once while a member runs here
        self._group = group_size if prefix_caching and group_size > 1 else 0
        # shared prompt key (:meth:`_key`: group and prompt length) -> its running samples here;
        # members of a group normally share one prompt length, and samples whose lengths differ
        # are not taken to share a prompt
        self._members: dict[int, int] = {}
        self.cost = cost
        self.kv_budget = kv_budget  # a decode step needs kv + B <= this
        self.kv_admit_budget = kv_admit_budget  # an admission leaves room for one more step
        self._lengths = lengths  # true length of each sample's current attempt (private)
        self._prompt_len = prompt_len
        self._attempt: list[int] = []
        self._oldest: list[int] = []
        self._ctl = None
        self._pending: list[int] | None = None  # see bind()
        self._spans = timeline.spans
        self._prefills = timeline.prefills
        self._heap: list[tuple[int, int, int]] = []  # (finish step, seq, sample)
        self._live: dict[int, int] = {}  # sample -> seq of its valid heap entry
        self._stale = 0  # heap entries of aborted or preempted samples not yet popped
        self._seq = 0
        self._gen0: dict[int, int] = self.pub.kept  # queued sample -> tokens it resumes from
        # multi-turn (sim/turns.py): queued sample back from a tool call -> its tool-output
        # tokens, never prefilled before (the rest of its context is recomputed, or cached)
        self.resume: dict[int, int] = {}
        self.enabled = True  # rollout allowed (colocated placement turns it off to train)
        self.stalled = False  # a weight sync is loading new weights
        # the backend's next times by engine, once bound (a list of index + 1: n^2 / 2 floats)
        self._slots: list[float] | dict[int, float] = {}
        self.next_t = INF
        self._next_k = 0
        self.idle_reported = True
        self.preemptions = 0
        self._reporting = False  # inside advance(), reporting finishes to the controller

    def bind(self, controller: object, attempt: list[int], oldest: list[int],
             pending: list[int] | None = None) -> None:
        """Report finishes and preemptions to ``controller``; read attempts from its list and
        record in ``oldest`` the version of each sample's first kept token when it starts.
        ``pending``: a list to append finishes to instead (booked later: policies/deferred.py)."""
        self._ctl = controller
        self._attempt = attempt
        self._oldest = oldest
        self._pending = pending

    @property
    def cost(self) -> CostModel:
        return self._cost

    @cost.setter
    def cost(self, cost: CostModel) -> None:  # (sim/contention.py swaps it as the host's load changes)
        self._cost = cost
        # the terms the hot path's closed forms read, as locals: a decode step's (weight_read_s,
        # kv_read_s_per_token, compute_s_per_seq, step_fixed_s, step_s_per_seq) for a dense model
        # without a step table (else None), and a chunk's prefill (admit_step_s,
        # admit_s_per_request, prefill_s_per_token, prefill_s_per_pair)
        self._decode = None if cost.experts or cost.step_table is not None else (
            cost.weight_read_s, cost.kv_read_s_per_token, cost.compute_s_per_seq, cost.step_fixed_s,
            cost.step_s_per_seq)
        self._chunk_prefill = (cost.admit_step_s, cost.admit_s_per_request, cost.prefill_s_per_token,
                               cost.prefill_s_per_pair)

    # -- planning ------------------------------------------------------------------------------

    def _horizon(self) -> float:
        """Decode steps until the next running sample finishes (INF when none runs)."""
        if not self.pub.run:
            return INF
        heap = self._heap
        if self._stale and self._live.get(heap[0][2]) != heap[0][1]:
            self._drop_stale()
        return heap[0][0] - self.pub.step

    def _drop_stale(self) -> None:
        """Pop the stale entries (of aborted or preempted samples) off the top of the heap. The
        hot path calls it only when the top one is stale, and checks that only when
        ``self._stale`` counts some, so a run without aborts or preemptions never looks."""
        heap, live = self._heap, self._live
        while live.get(heap[0][2]) != heap[0][1]:
            heappop(heap)
            self._stale -= 1

    def _admissible(self) -> bool:
        """Whether the head of the queue can be admitted now (with chunked prefill: its chunks
        end by the next finish and the KV after them leaves room for one more step)."""
        p = self.pub
        queue, b0 = p.queue, len(p.run)
        if not queue or b0 >= self.seq_cap or not self.enabled or self.stalled:
            return False
        i = queue[0]
        prompt = self._prompt_len[i]
        if self._group and self._members.get((i // self._group) << 32 | prompt):
            prompt = 0
        new = prompt + self._gen0[i]
        if not self.chunk:
            return p.kv + new + b0 + 2 <= self.kv_admit_budget
        steps = -(-(new or 1) // (self.chunk - b0))
        if p.kv + new + 1 + b0 * steps + b0 + 1 > self.kv_admit_budget:
            return False
        if not b0:
            return True
        heap = self._heap  # steps <= self._horizon(), inlined
        if self._stale and self._live.get(heap[0][2]) != heap[0][1]:
            self._drop_stale()
        return steps <= heap[0][0] - p.step

    def plan(self) -> None:
        """Compute the time of the next membership change (hot path: kept flat)."""
        p = self.pub
        b = len(p.run)
        if p.queue and b < self.seq_cap and self._admissible():
            self.next_t, self._next_k = p.t, 0
        elif b == 0 or self.stalled:
            self.next_t, self._next_k = INF, 0
        else:
            heap = self._heap
            if self._stale and self._live.get(heap[0][2]) != heap[0][1]:
                self._drop_stale()
            kv = p.kv
            k = heap[0][0] - p.step
            kk = (self.kv_budget - kv) // b
            if kk < k:
                k = kk
            self._next_k = k
            terms = self._decode
            if terms is not None:  # a dense model: the cost's terms as locals
                weight, kv_read, compute, fixed, per_seq = terms
                alpha = weight + kv_read * kv
                if alpha >= compute * b:  # memory-bound throughout: the common case, inlined
                    self.next_t = p.t + k * (fixed + per_seq * b + alpha) + kv_read * b * (k * (k - 1) // 2)
                else:
                    self.next_t = p.t + self._cost.decode_time(k, b, kv)
            else:
                c = self._cost
                alpha = (c.weight_read(b) if c.experts else c.weight_read_s) + c.kv_read_s_per_token * kv
                if alpha >= c.compute_s_per_seq * b:  # memory-bound throughout
                    fx = c.step_fixed_s + c.step_s_per_seq * b if c.step_table is None else c.fixed(b)
                    self.next_t = p.t + k * (fx + alpha) + c.kv_read_s_per_token * b * (k * (k - 1) // 2)
                else:
                    self.next_t = p.t + c.decode_time(k, b, kv)
        self._slots[p.index] = self.next_t

    # -- the next change -----------------------------------------------------------------------

    def advance(self) -> list[int]:
        """Apply the planned change at ``next_t``; return the samples that finished."""
        p = self.pub
        run = p.run
        t = p.t = self.next_t
        step = p.step = p.step + self._next_k
        kv = p.kv + self._next_k * len(run)
        p.inflight = 0
        p.prefilling = ()
        finished = []
        heap, live, lengths, plen = self._heap, self._live, self._lengths, self._prompt_len
        group, members, attempt = self._group, self._members, self._attempt
        spans, idx, stale = self._spans, p.index, self._stale
        while heap and heap[0][0] <= step:  # a live entry never lies before the base's step
            fs, seq, i = heappop(heap)
            if stale and (fs != step or live.get(i) != seq):
                stale -= 1
                continue  # stale entry of an aborted or preempted sample
            del live[i]
            _, t0, tok0, ver = run.pop(i)
            n = lengths[i]
            freed = plen[i]
            if group:  # _leave, inlined
                key = (i // group) << 32 | freed
                left = members[key] - 1
                if left:
                    members[key] = left
                    freed = 0
                else:
                    del members[key]
            kv -= freed + n
            spans.append((t0, t, idx, i, attempt[i], ver, n - tok0, "finish"))
            finished.append(i)
        p.kv = kv
        self._stale = stale
        if finished:
            pending = self._pending
            if pending is not None:  # a policy that never hears a finish: booked before its next event
                pending += finished
            else:
                self._reporting = True  # admissions served in the report wait for the plan below
                self._ctl.samples_finished(finished, lengths)
                self._reporting = False
        while run and p.kv + len(run) > self.kv_budget:
            self._preempt()
        if p.queue and len(run) < self.seq_cap:  # (a full batch: no call)
            if self.chunk:
                self._admit_chunked()  # (checks the head itself: _admissible, fused)
            elif self._admissible():
                self._admit_stalling()
        self.plan()
        return finished

    def _admit_stalling(self) -> None:
        """Admit FCFS from the queue while the head fits, then stall for one prefill."""
        p = self.pub
        admitted: list[int] = []
        tokens = pairs = recomputed = 0
        queue, run, lengths, plen, gen0 = p.queue, p.run, self._lengths, self._prompt_len, self._gen0
        heap, live, oldest = self._heap, self._live, self._oldest
        kv, step, t, ver, cap, budget = p.kv, p.step, p.t, p.version, self.seq_cap, self.kv_admit_budget
        group, members, resume = self._group, self._members, self.resume
        seq = self._seq
        first = 0 if self.cost.prefill_in_step else 1  # the token the prefill pass itself yields
        while queue and len(run) < cap:
            i = queue[0]
            g0 = gen0[i]
            prompt = plen[i]
            key = (i // group) << 32 | prompt if group else 0
            shared = members.get(key, 0) if group else 0
            new = (0 if shared else prompt) + g0  # a cached prompt is attended to, not computed
            if kv + new + len(run) + 2 > budget:
                break
            queue.popleft()
            del gen0[i]
            if group:
                members[key] = shared + 1
            off = g0 + first - step
            run[i] = (off, t, g0, ver)
            if oldest[i] < 0:
                oldest[i] = ver
            kv += new + first
            seq += 1
            live[i] = seq
            heappush(heap, (lengths[i] - off, seq, i))
            admitted.append(i)
            work = new or 1  # a full prefix hit still computes the last prompt token (vLLM)
            redone = g0
            if resume and i in resume:  # back from a tool call (sim/turns.py)
                work, redone = self._resumed(i, g0, work)
            tokens += work
            pairs += work * (prompt + g0 - work) + work * (work + 1) // 2
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
        batch plus its chunk's prefill compute; the last chunk yields their first token. A
        sample joins while the chunks end by the next finish (``horizon``) and the KV after
        them leaves room for one more step. Nothing changes when the head does not fit (the
        first pass of the loop is :meth:`_admissible`'s check, so advance() need not call it).
        """
        if not self.enabled or self.stalled:
            return
        p = self.pub
        admitted: list[int] = []
        tokens = pairs = recomputed = steps = n = 0
        queue, plen, gen0, group, resume = p.queue, self._prompt_len, self._gen0, self._group, self.resume
        b0, kv = len(p.run), p.kv
        room, cap = self.chunk - b0, self.seq_cap - b0
        # kv + new + 1 + b0·need + b0 + n + 1 <= kv_admit_budget, with the constants moved over
        limit = self.kv_admit_budget - b0 - 2
        horizon = INF
        if b0:  # self._horizon(), inlined
            heap = self._heap
            if self._stale and self._live.get(heap[0][2]) != heap[0][1]:
                self._drop_stale()
            horizon = heap[0][0] - p.step
        while queue and n < cap:
            i = queue[0]
            g0 = gen0[i]
            prompt = plen[i]
            if group:  # a member of the group runs here: its prompt is cached
                key = (i // group) << 32 | prompt
                shared = self._members.get(key, 0)
                new = (0 if shared else prompt) + g0
            else:
                new = prompt + g0
            work = new or 1  # a full prefix hit still computes the last prompt token (vLLM)
            redone = g0
            back = resume and i in resume  # back from a tool call (sim/turns.py)
            if back:
                work, redone = self._resumed(i, g0, work, take=False)
                if not admitted and not self._admissible():  # the head is judged on `new`
                    break
            need = -(-(tokens + work) // room)
            if need > horizon or kv + new + b0 * need + n > limit:
                break
            steps = need
            queue.popleft()
            if back:
                self._resumed(i, g0, work)
            if group:
                self._members[key] = shared + 1
            admitted.append(i)
            n += 1
            kv += new + 1
            tokens += work
            pairs += work * (prompt + g0 - work) + work * (work + 1) // 2
            recomputed += redone
        if not admitted:
            return
        kv0, terms, decode = p.kv, self._decode, None
        if terms is not None:  # self.cost.decode_time(steps, b0, kv0) of a dense model, inlined
            weight, kv_read, compute, fixed, per_seq = terms
            alpha = weight + kv_read * kv0
            if alpha >= compute * b0:  # memory-bound throughout: the same sum
                decode = steps * (fixed + per_seq * b0 + alpha) + kv_read * b0 * ((steps * (steps - 1)) // 2)
        if decode is None:  # (an MoE step also reads the experts its chunk's tokens route to)
            decode = self._cost.decode_time(steps, b0, kv0) + self._cost.chunk_expert_read(b0, tokens, room, steps)
        admit_step, per_request, per_token, per_pair = self._chunk_prefill
        dt = decode + admit_step + per_request * n + per_token * tokens + per_pair * pairs
        step = p.step = p.step + steps
        p.kv = kv + steps * b0
        run, lengths, oldest, live, heap = p.run, self._lengths, self._oldest, self._live, self._heap
        seq, t, ver = self._seq, p.t, p.version
        for i in admitted:
            g0 = gen0.pop(i)
            off = g0 + 1 - step
            run[i] = (off, t, g0, ver)
            if oldest[i] < 0:
                oldest[i] = ver
            seq += 1
            live[i] = seq
            heappush(heap, (lengths[i] - off, seq, i))
        self._seq = seq
        self._prefills.append((t, t + dt, p.index, admitted, tokens, recomputed))
        p.t = t + dt
        p.inflight = steps if b0 else 0
        p.prefilling = tuple(admitted)
