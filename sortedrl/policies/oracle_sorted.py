"""``oracle_sorted``: length-sorted packing with known lengths — an upper reference.

**With the default ``predictor=oracle`` this policy reads the true lengths of the trace** through
an explicit :class:`~sortedrl.policies.predictors.OracleLengths`; every output labels the run
``"oracle": true``. It shows what SortedRL's idea could reach with perfect length knowledge: each
round admits the next ``update_batch`` samples of the current group shortest-first, so a round's
samples have similar lengths and short tails; nothing is aborted or wasted and every token is
on-policy. With ``predictor=history`` the same packing runs on
:class:`~sortedrl.policies.predictors.HistoryLengths` (the last length seen for the prompt) and
is an ordinary, deployable policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from sortedrl.policies.base import (
    Action,
    Admit,
    Filter,
    Policy,
    RunContext,
    Train,
)
from sortedrl.policies.common import (
    refuse_beyond_trace,
    refuse_negative,
    samples_of,
    shortest_first,
    split_flat,
)
from sortedrl.policies.predictors import HistoryLengths, LengthPredictor
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class OracleSortedParams:
    predictor: Literal["oracle", "history"] = field(default="oracle", metadata={
        "help": "oracle: true lengths (an upper reference); history: last length seen per prompt"})
    rollout_batch: int = field(default=0, metadata={
        "help": "prompts sorted together (0: 4 x the trace's prompts per step)"})
    update_batch: int = field(default=0, metadata={
        "help": "samples per round and update (0: the engines' total max_num_seqs, and at "
                "least one step's samples); with whole_groups rounded down to whole groups, one "
                "at least (100 trains 96 at n=8)"})
    whole_groups: bool = field(default=True, metadata={
        "help": "rounds of whole GRPO groups (false: single samples, groups spread over rounds)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, refill the round"})

    def __post_init__(self) -> None:
        refuse_negative(self, "rollout_batch", "update_batch")
        if self.filter_groups and not self.whole_groups:
            raise ValueError("filter_groups needs whole_groups=true")


class OracleSortedPolicy(Policy):
    """Shortest-first packing by predicted length (ORACLE by default: reads true lengths)."""

    name = "oracle_sorted"
    Params = OracleSortedParams

    def __init__(self, params: OracleSortedParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        refuse_beyond_trace(self.ctx, "update_batch", self.params.update_batch, "samples")
        self.batch = self.params.rollout_batch or 4 * max(1, self.ctx.prompts_per_step)
        self.predictor: LengthPredictor | None = (
            None if self.params.predictor == "oracle" else HistoryLengths(self.ctx.max_response_len / 2))
        self.order: list[int] = []  # the current group's samples, shortest predicted first
        self.round: list[int] = []
        self.kept: list[int] = []  # filter_groups: samples of the round's groups kept so far

    @property
    def wants_oracle(self) -> bool:
        return self.params.predictor == "oracle"

    def attach_oracle(self, oracle: LengthPredictor) -> None:
        self.predictor = oracle
        self.oracle = True

    def staleness_bound(self) -> int:
        return 0

    def on_start(self, view: ClusterView) -> list[Action]:
        return self._next_round(view)

    on_sync_done = on_start

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        if not self.round or view.admitted:
            return []
        batch, self.round = self.round, []
        self.predictor.observe(view, tuple(batch))
        out: list[Action] = []
        if self.params.filter_groups:
            kept, flat = split_flat(view, sorted({view.group_of(i) for i in batch}))
            out = [Filter(tuple(flat))] if flat else []
            self.kept += samples_of(view, kept)
            missing = self._size(view) - len(self.kept)
            if missing > 0 and (self.order or view.groups_left):
                return out + self._next_round(view, missing)
            batch, self.kept = self.kept, []
        return out + ([Train(shortest_first(view, batch))] if batch else [])

    def _size(self, view: ClusterView) -> int:
        return self._size_for(view.total_capacity)

    def _size_for(self, capacity: int) -> int:
        """Samples per round: ``update_batch``, or the slots and at least one step's samples
        (never more updates than ``sync``: at 1,024 prompts x 16 on 2,048 slots, rounds of the
        slots made 8 updates a step, 6,981 s against `sync`'s 6,710 s; a step's rounds 6,782 s),
        in whole groups by default."""
        size = self.params.update_batch or max(
            capacity, max(1, self.ctx.prompts_per_step) * self.ctx.group_size)
        if self.params.whole_groups:
            n = self.ctx.group_size
            size = max(n, size - size % n)
        return size

    def _next_round(self, view: ClusterView, size: int | None = None) -> list[Action]:
        predict = self.predictor.predict_many
        if not self.order:
            groups = view.next_groups(self.batch)
            samples = samples_of(view, groups)
            guess = np.asarray(predict(view, samples), dtype=np.float64)
            if self.params.whole_groups and groups:  # by their longest predicted member, kept together
                by_group = np.asarray(groups, dtype=np.int64)
                longest = guess.reshape(len(groups), view.group_size).max(axis=1)
                samples = samples_of(view, by_group[np.lexsort((by_group, longest))].tolist())
            elif samples:  # shortest predicted first (ties by index)
                idx = np.asarray(samples, dtype=np.int64)
                samples = idx[np.lexsort((idx, guess))].tolist()
            self.order = samples
        size = self._size(view) if size is None else size
        if self.params.whole_groups:
            size = -(-size // view.group_size) * view.group_size
        self.round, self.order = self.order[:size], self.order[size:]
        # longest predicted first onto the least loaded engine (LPT), so engines end together
        load = [0.0] * view.engines
        per_engine: list[list[int]] = [[] for _ in range(view.engines)]
        idx = np.asarray(self.round, dtype=np.int64)
        guess = np.asarray(predict(view, self.round), dtype=np.float64)  # (a predictor is pure)
        first = np.lexsort((idx, -guess))
        for i, g in zip(idx[first].tolist(), guess[first].tolist(), strict=True):
            e = load.index(min(load))  # the least loaded, the lowest index on ties
            per_engine[e].append(i)
            load[e] += g
        return [Admit(tuple(s), e) for e, s in enumerate(per_engine) if s]
