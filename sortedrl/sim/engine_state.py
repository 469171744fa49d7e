"""The public half of a simulated engine: what a policy may see of it, through the view.

Kept apart from :mod:`sortedrl.sim.engine`, whose private half holds the finish heap that
encodes true lengths. :meth:`EngineState.tokens` turns the engine's base point into the tokens a
running sample holds at any instant, without stepping.
"""

from __future__ import annotations

from collections import deque

from sortedrl.sim.cost import CostModel


class EngineState:
    """The public half of an engine: who is running or queued, and the clock of its base point."""

    __slots__ = ("index", "max_num_seqs", "version", "run", "queue", "kept", "t", "step", "kv",
                 "inflight", "prefilling", "frozen", "cost")

    def __init__(self, index: int, max_num_seqs: int, cost: CostModel) -> None:
        self.index = index
        self.max_num_seqs = max_num_seqs
        self.version = 0
        self.run: dict[int, tuple[int, float, int, int]] = {}  # sample -> (off, t0, tok0, version)
        self.queue: deque[int] = deque()
        self.kept: dict[int, int] = {}  # queued sample -> the tokens it resumes from (the engine's)
        self.t = 0.0  # base time
        self.step = 0  # decode steps completed at the base
        self.kv = 0  # KV tokens held at the base
        self.inflight = 0  # the base is the end of this many decode steps still running
        self.prefilling: tuple[int, ...] = ()  # samples whose prefill ends at the base
        self.frozen = False  # stalled by a weight sync: nothing decodes
        self.cost = cost

    def running(self) -> tuple[int, ...]:
        return tuple(self.run)

    def queued(self) -> tuple[int, ...]:
        return tuple(self.queue)

    def load(self) -> int:
        return len(self.run) + len(self.queue)

    def tokens(self, sample: int, now: float) -> int | None:
        """Tokens a sample admitted here holds at ``now``: a running one's, live; a queued one's,
        those it resumes from (0 for a fresh one, a paused or preempted one's kept tokens);
        ``None`` if it is not here."""
        entry = self.run.get(sample)
        if entry is None:
            return self.kept.get(sample)
        off, _, tok0, _ = entry
        if self.frozen:
            return self.step + off
        if now >= self.t:
            b = len(self.run)
            return self.step + self.cost.decode_steps_within(now - self.t, b, self.kv) + off
        if sample in self.prefilling:
            return tok0
        return self.step - self.inflight + off
