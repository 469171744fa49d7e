"""Trajectories with turns on an engine: what each turn generates, and the KV a tool call leaves.

An agentic trajectory alternates generated turns with tool calls (traces with turns: the ragged
columns ``turn_offsets``, ``turn_gen``, ``turn_tool_s``, ``turn_tool_tokens`` of a
:class:`~sortedrl.traces.schema.Trace`). The engine (:mod:`sortedrl.sim.engine`) knows only "a
running sample finishes at ``L`` tokens"; this module makes a turn look like that to it:

- the engine's length of a sample is the end of its *current turn*, and its tokens include the
  tool output appended so far, so ``prompt + tokens`` is exactly the KV the context holds. A
  turn that ends is a "finish" to the engine: the sequence leaves the running batch and frees
  its slot (verl's agent loop sends each turn as a new request);
- what it held stays in the engine's prefix cache (:class:`PrefixCache`), evictable: vLLM frees
  a finished request's blocks but keeps them cached until a new allocation needs them, least
  recently used first. The cache lives in the KV budget the running batch leaves free, so it is
  trimmed whenever the running batch's KV grows (each decode step, each admission);
- when the tool returns, the sample rejoins its engine's queue (sticky routing, as verl's
  session-affine LRU does). If its context is still cached only the tool output is prefilled;
  otherwise the whole context is, all but the tool output being recomputation;
- with the cluster's ``tool_holds_slot`` (a synchronous agent loop that blocks its batch slot
  through the call) the sequence still leaves the running batch, but its slot and its KV stay
  reserved: the engine runs at most ``max_num_seqs`` less the held slots, in the KV budget less
  the held contexts; on return it takes the head of the queue and prefills only the tool output.
  With prefix caching, a GRPO group's shared prompt is held once while any member runs or holds
  a slot (a held slot reserves only its own tokens). A policy that pauses it at the turn
  boundary gives the slot up (its KV then joins the prefix cache), and one re-admitted while its
  tool call still runs waits without a slot.

Deliberate simplifications: a hit is decided when the returning sample is admitted (its
cached blocks stay evictable while it waits in the queue, as vLLM's do); a cached context
counts whole, even the part of a group's shared prompt that running members still hold (vLLM
evicts block by block and shares the prompt's blocks); a weight sync and, in colocated
placement, a vLLM sleep clear the cache (vLLM resets the prefix cache after new weights); a held
context is kept through a sync like a running sequence, and is dropped by a sleep (the slot
stays held; its KV reservation is given back); a held context that a policy pauses after a sync
joins the prefix cache with its old KV, so ``async recompute_on_sync=true`` with
``tool_holds_slot`` does not re-prefill it (a known gap). A policy sees the tool output in neither
``generated`` nor the trained-token counts: it is context, never decoded
(:class:`TurnEngineState` subtracts it).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.sim.engine import Engine
from sortedrl.sim.engine_state import EngineState
from sortedrl.traces.schema import Trace


def has_turns(trace: Trace) -> bool:
    return getattr(trace, "turn_offsets", None) is not None


def split_like(gens: list[int], total: int) -> list[int]:
    """``gens`` rescaled to sum to ``total`` (each turn >= 1; fewer turns if ``total`` is short):
    the turns of a regenerated attempt whose drawn length no recorded response of its prompt has."""
    k = min(len(gens), total)
    head = gens[:k]
    s = sum(head)
    out = [max(1, g * total // s) for g in head]
    diff = total - sum(out)
    out[-1] += max(diff, 0)
    j = 0
    while diff < 0:  # take back from the longest turns, one token at a time
        j = max(range(k), key=lambda m: (out[m], m))
        out[j] -= 1
        diff += 1
    return out


class TurnPlan:
    """The turns of every sample's current attempt, and how far along them it is (private)."""

    def __init__(self, trace: Trace, lengths: list[int], max_context: int = 0) -> None:
        off = np.asarray(trace.turn_offsets, dtype=np.int64)
        gen = np.asarray(trace.turn_gen, dtype=np.int64)
        self._off = off.tolist()
        self._gen = gen.tolist()
        self._tool_s = np.asarray(trace.turn_tool_s, dtype=float).tolist()
        self._tool_tok = np.asarray(trace.turn_tool_tokens, dtype=np.int64).tolist()
        self._check(trace)
        self._lengths = lengths
        self._prompt = trace.prompt_id
        self._prompt_len = trace.prompt_len
        self.max_context = max_context  # the longest context one engine holds (0: unchecked)
        self._members: dict[str, list[int]] | None = None
        n = len(trace)
        self._alt: dict[int, tuple[list[int], list[float], list[int]]] = {}  # regenerated attempts
        self.attempt = [0] * n
        self.turn = [0] * n  # the current turn
        self.done = [0] * n  # tokens generated in the turns before it
        self.ctx = [0] * n  # tool-output tokens appended to the context so far
        self.end = [self._turns(i)[0][0] for i in range(n)]  # the engine's target: done + ctx + turn

    def _check(self, trace: Trace) -> None:
        off, gen = self._off, self._gen
        for i in range(len(trace)):
            if off[i + 1] <= off[i]:
                raise ConfigError(f"{trace.name}: row {i + 1}: field 'turn_offsets': a trajectory "
                                  "needs at least one turn")
            if min(gen[off[i]:off[i + 1]]) < 1:
                raise ConfigError(f"{trace.name}: row {i + 1}: field 'turn_gen': the simulator needs "
                                  ">= 1 generated token per turn")

    def _turns(self, i: int) -> tuple[list[int], list[float], list[int]]:
        alt = self._alt.get(i)
        if alt is not None:
            return alt
        a, b = self._off[i], self._off[i + 1]
        return self._gen[a:b], self._tool_s[a:b], self._tool_tok[a:b]

    # -- progress -----------------------------------------------------------------------------

    def is_last(self, i: int) -> bool:
        return self.turn[i] == len(self._turns(i)[0]) - 1

    def tool_call(self, i: int) -> tuple[float, int]:
        """Seconds and output tokens of the tool call after sample i's current turn."""
        _, tool_s, tool_tok = self._turns(i)
        t = self.turn[i]
        return tool_s[t], tool_tok[t]

    def next_turn(self, i: int) -> None:
        """The tool returned: its output joins the context and the next turn begins."""
        gens, _, tool_tok = self._turns(i)
        t = self.turn[i]
        self.done[i] += gens[t]
        self.ctx[i] += tool_tok[t]
        self.turn[i] = t + 1
        self.end[i] = self.done[i] + self.ctx[i] + gens[t + 1]

    def context(self, i: int) -> int:
        """Tokens beyond the prompt that the context holds at a turn boundary."""
        return self.done[i] + self.ctx[i]

    def start_attempt(self, i: int, attempt: int) -> None:
        """A regenerated attempt: the turns of a recorded response of the same prompt with the
        drawn length (the backend's draw), or sample i's own turns rescaled to it."""
        self.attempt[i] = attempt
        self._alt.pop(i, None)
        total = self._lengths[i]
        if attempt and sum(self._turns(i)[0]) != total:
            self._alt[i] = self._donor(i, total)
            self._check_fits(i, attempt)
        self.turn[i] = self.done[i] = self.ctx[i] = 0
        self.end[i] = self._turns(i)[0][0]

    def _check_fits(self, i: int, attempt: int) -> None:
        """A regenerated attempt may pair a drawn length with tool outputs no recorded trajectory
        had together; if no engine can hold its context, it would wait in a queue for good."""
        gens, _, tool_tok = self._alt[i]
        generated, tools = sum(gens), sum(tool_tok)
        context = int(self._prompt_len[i]) + generated + tools
        if self.max_context and context > self.max_context:
            raise ConfigError(
                f"sample {i}: its regenerated attempt {attempt} reaches {context} tokens of "
                f"context (prompt, {generated} generated tokens drawn, {tools} of tool outputs), "
                f"more than one engine's KV budget holds ({self.max_context}): raise the KV "
                "budget, or pass --regen same")

    def _donor(self, i: int, total: int) -> tuple[list[int], list[float], list[int]]:
        if self._members is None:
            self._members = {}
            for j, p in enumerate(self._prompt.tolist()):
                self._members.setdefault(p, []).append(j)
        for j in self._members[str(self._prompt[i])]:
            gens, tool_s, tool_tok = self._turns(j) if j not in self._alt else (None, None, None)
            if gens is not None and sum(gens) == total:
                return gens, tool_s, tool_tok
        gens, tool_s, tool_tok = self._turns(i)
        new = split_like(gens, total)
        k = len(new)
        return new, tool_s[:k - 1] + [0.0], tool_tok[:k - 1] + [0]


class PrefixCache:
    """One engine's cached contexts of samples away on a tool call, least recently used first."""

    def __init__(self) -> None:
        self._entries: OrderedDict[int, tuple[int, int]] = OrderedDict()  # sample -> (KV, own)
        self.tokens = 0
        self.evictions = 0

    def put(self, sample: int, tokens: int, own: int) -> None:
        self.take(sample)
        self._entries[sample] = (tokens, own)
        self.tokens += tokens

    def own(self, sample: int) -> int:
        """The sample's own tokens (beyond its prompt) cached here (0: evicted or never cached)."""
        entry = self._entries.get(sample)
        return 0 if entry is None else entry[1]

    def take(self, sample: int) -> int:
        """:meth:`own`, removing the entry (its blocks join a running sequence, or are void)."""
        entry = self._entries.pop(sample, None)
        if entry is None:
            return 0
        self.tokens -= entry[0]
        return entry[1]

    def fit(self, room: int) -> None:
        """Evict the least recently cached contexts until the cache fits in ``room`` tokens."""
        while self.tokens > room and self._entries:
            _, (tokens, _) = self._entries.popitem(last=False)
            self.tokens -= tokens
            self.evictions += 1

    def clear(self) -> None:
        self.evictions += len(self._entries)
        self._entries.clear()
        self.tokens = 0


class TurnEngineState(EngineState):
    """An engine's public half when trajectories have turns: samples away on a tool call count
    in its load (they return here), and ``tokens`` leaves out the tool output."""

    __slots__ = ("away", "_ctx")

    def __init__(self, index: int, max_num_seqs: int, cost, ctx: list[int]) -> None:
        super().__init__(index, max_num_seqs, cost)
        # admitted here, in a tool call or waiting for a sandbox -> the tokens it generated
        # through the turn that ended (what a pause keeps: ToolEnv.pause)
        self.away: dict[int, int] = {}
        self._ctx = ctx

    def load(self) -> int:
        return len(self.run) + len(self.queue) + len(self.away)

    def in_tool(self) -> tuple[int, ...]:
        return tuple(self.away)

    def tokens(self, sample: int, now: float) -> int | None:
        if sample in self.away:
            return self.away[sample]
        n = super().tokens(sample, now)
        return None if n is None else n - self._ctx[sample]


class TurnEngine(Engine):
    """An engine whose samples leave between turns; the KV they leave is an evictable cache,
    or, when the cluster says a tool call holds its slot, a slot and KV reserved for them."""

    def __init__(self, *args, ctx: list[int], sleeps: bool, router, caching: bool,
                 holds_slot: bool = False, **kw) -> None:
        super().__init__(*args, **kw)
        self.caching = caching  # vLLM prefix caching: a context left for a tool call stays cached
        self.holds_slot = holds_slot  # a tool call keeps its slot and KV (cluster tool_holds_slot)
        # away holding a slot -> (KV reserved, own tokens, the shared prompt's key or None)
        self.held: dict[int, tuple[int, int, int | None]] = {}
        self._kv_whole = self.kv_budget  # the budget with nothing held
        self._kept: dict[int, int] = {}  # back from a held slot, queued first -> own tokens in KV
        p = self.pub
        self.pub = TurnEngineState(p.index, p.max_num_seqs, p.cost, ctx)
        self.pub.kept = self._gen0  # (the engine's, as the base class shares it)
        self.cache = PrefixCache()
        self._sleeps = sleeps  # colocated with vLLM sleep: the KV cache is dropped for an update
        self._router = router

    def bind(self, controller: object, attempt: list[int], oldest: list[int]) -> None:
        self._router.inner = controller  # finishes reach it through the tool environment
        super().bind(self._router, attempt, oldest)

    # -- slots held through tool calls (cluster tool_holds_slot) --------------------------------

    def hold_slot(self, sample: int, own: int) -> None:
        """Sample left for a tool call at a turn end: its slot and its context's KV (prompt +
        ``own`` tokens) stay reserved, out of what the running batch may use. With prefix
        caching a group's shared prompt is held once: the sample stays one of its holders (the
        prompt stays in the engine's KV while a member runs or holds a slot), and only its own
        tokens are reserved."""
        kv, key = self._prompt_len[sample] + own, None
        if self._group:
            key, members = self._key(sample), self._members
            if key not in members:  # the last running member just freed the prompt: it stays
                self.pub.kv += self._prompt_len[sample]
            members[key] = members.get(key, 0) + 1
            kv = own
        self.held[sample] = (kv, own, key)
        self._reserve(1, kv)

    def release_slot(self, sample: int, now: float) -> int:
        """Sample's held slot is given up (its tool returned, or a policy paused it): the
        context tokens its KV still holds (0 if the engine slept meanwhile)."""
        self.materialize(now)
        kv, own, key = self.held.pop(sample)
        self._reserve(-1, -kv)
        if key is not None:
            self._unhold_prompt(sample, key)
        return own

    def _unhold_prompt(self, sample: int, key: int) -> None:
        """A held slot stops holding its group's shared prompt (freed with its last holder)."""
        left = self._members[key] - 1
        if left:
            self._members[key] = left
        else:
            del self._members[key]
            self.pub.kv -= self._prompt_len[sample]

    def rejoin(self, sample: int, context: int, fresh: int, now: float) -> None:
        """Back from a tool call that held its slot: it takes the head of the queue (the slot is
        its own) and prefills only the ``fresh`` tool-output tokens."""
        self._kept[sample] = self.release_slot(sample, now)
        self.resume[sample] = fresh
        queue, first = self.pub.queue, 0
        while first < len(queue) and queue[first] in self._kept:
            first += 1  # after those back before it
        queue.insert(first, sample)
        self._gen0[sample] = context
        self.idle_reported = False
        self.plan()

    def _reserve(self, slots: int, kv: int) -> None:
        self.seq_cap -= slots
        self.kv_budget -= kv
        self.kv_admit_budget -= kv

    def _resumed(self, sample: int, g0: int, work: int, take: bool = True) -> tuple[int, int]:
        """Back from a tool call with its context still cached (or kept by its held slot): only
        the tool output (the ``g0 - own`` tokens beyond the cached ones) is computed, nothing
        recomputed."""
        if sample in self._kept:
            own = self._kept.pop(sample) if take else self._kept[sample]
        else:
            own = self.cache.take(sample) if take else self.cache.own(sample)
        if own:
            if take:
                del self.resume[sample]
            return (g0 - own) or 1, 0
        return super()._resumed(sample, g0, work, take)

    def advance(self) -> list[int]:
        p, cache = self.pub, self.cache
        if cache.tokens:  # the KV the steps about to be applied reach
            cache.fit(self.kv_budget - p.kv - self._next_k * len(p.run))
        self._router.done = None
        finished = super().advance()
        if cache.tokens:
            cache.fit(self.kv_budget - p.kv)
        return finished if self._router.done is None else self._router.done  # not turn ends

    def materialize(self, now: float) -> None:
        super().materialize(now)
        if self.cache.tokens:
            self.cache.fit(self.kv_budget - self.pub.kv)

    def begin_sync(self, now: float) -> None:
        super().begin_sync(now)
        self.cache.clear()  # KV computed under the old weights is not reused

    def set_enabled(self, enabled: bool, now: float) -> None:
        super().set_enabled(enabled, now)
        if not enabled and self._sleeps:
            self.cache.clear()
            # the KV cache is dropped: a held slot stays held, its KV reservation is given back
            # (nothing is left to keep), and its context is prefilled again on return
            self._reserve(0, -sum(kv for kv, _, _ in self.held.values()))
            for i, (_, _, key) in self.held.items():
                if key is not None:
                    self._unhold_prompt(i, key)
            self.held = dict.fromkeys(self.held, (0, 0, None))
            self._kept = dict.fromkeys(self._kept, 0)

    def _audit_held(self) -> list[tuple[int, int]]:
        held = self.held.items()
        return [(key, self._prompt_len[i]) for i, (_, _, key) in held if key is not None]

    def audit(self) -> None:
        super().audit()
        p, held = self.pub, len(self.held)
        assert self.seq_cap == p.max_num_seqs - held, f"engine {p.index}: held slots {held}"
        reserved = sum(kv for kv, _, _ in self.held.values())
        assert self.kv_budget == self._kv_whole - reserved, f"engine {p.index}: held KV {reserved}"
        assert len(p.run) + held <= p.max_num_seqs, f"engine {p.index}: over max_num_seqs with held slots"


def decode_steps(trace: Trace) -> np.ndarray:
    """The decode steps each response needs at least: one per token but the first of each turn,
    which the prefill of its prompt (or of the tool output it follows) yields."""
    if not has_turns(trace):
        return trace.response_len.astype(np.int64) - 1
    return trace.response_len.astype(np.int64) - np.diff(np.asarray(trace.turn_offsets, dtype=np.int64))


def tool_chains(trace: Trace, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Per trajectory of a trace with turns (:func:`sortedrl.sim.run.lower_bound`'s parts): the
    fewest seconds its turns take one after another (each decode step at least ``step_s``, the
    fastest step, each tool call its own latency), and its tool calls' seconds alone."""
    off = np.asarray(trace.turn_offsets, dtype=np.int64)
    tool_s = np.asarray(trace.turn_tool_s, dtype=float)
    per_row = np.add.reduceat(tool_s, off[:-1]) if tool_s.size else np.zeros(len(trace))
    return decode_steps(trace) * step_s + per_row, per_row
