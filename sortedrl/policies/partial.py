"""``partial``: APRIL / Kimi-style partial rollout (arXiv 2509.18521; paper.md §4.1).

Each step over-samples ``over_sample`` x N prompt groups, stops as soon as N groups are complete,
aborts the rest keeping their tokens, trains on the complete groups and syncs. The aborted
partial responses resume first in the next step (re-prefilling prompt + prefix), so one response
can span several policy versions. APRIL leaves staleness unbounded (about 40% of tokens per round
are off-policy at 2x); ``max_span`` optionally bounds it as MindSpeed-RL's
``partial_rollout_max_split`` does: a partial response whose oldest token is more than
``max_span`` versions behind is regenerated instead. ``keep_partial=false`` drops the partials
instead, which is verl's "reorder rollout" (strictly on-policy, the aborted work wasted); it
refuses a ``max_span`` above 0, which would have nothing to age and so no effect.
Complete groups are what is trained, so GRPO advantages always see a whole group, and exactly N
of them a step (slime asserts its batch is ``rollout_batch_size``): the first N to complete.
Groups that complete in the same engine step beyond N wait, finished, for the next step (slime
drops them; its code notes they are not put back), or are regenerated with ``keep_partial=false``.
``filter_groups`` is DAPO's dynamic sampling: a group that completes with all rewards equal is
filtered at once, does not count towards the N, and a fresh prompt group from the dataloader
takes its place in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sortedrl.policies.base import (
    Abort,
    Action,
    Admit,
    Filter,
    Policy,
    RunContext,
    Train,
    WakeOn,
)
from sortedrl.policies.common import (
    complete_groups,
    completion_order,
    flat_groups,
    in_flight,
    refuse_beyond_trace,
    refuse_negative,
    samples_of,
    too_stale,
    waiting_in_groups,
)
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class PartialParams:
    rollout_batch: int = field(default=0, metadata={
        "help": "N: complete prompt groups per step (0: the trace's prompts per step)"})
    over_sample: float = field(default=2.0, metadata={
        "help": "groups in flight per step, as a multiple of N (APRIL's over-sampling)"})
    keep_partial: bool = field(default=True, metadata={
        "help": "resume aborted responses next step (false: drop and regenerate them, so every "
                "trained token is on-policy; max_span must then be 0)"})
    max_span: int = field(default=0, metadata={
        "help": "most versions a trained token may lag (0: unbounded, as in APRIL; sortedrl's "
                "max_span=0 is the opposite, no lag); a complete "
                "group with a too-stale member still counts towards N, then waits while that "
                "member is regenerated, so such a step trains fewer than N groups; above 0 it "
                "needs keep_partial=true"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, start fresh ones"})

    def __post_init__(self) -> None:
        refuse_negative(self, "rollout_batch", "max_span")
        if not self.over_sample >= 1.0:
            raise ValueError(f"over_sample must be >= 1, got {self.over_sample}")
        if self.max_span and not self.keep_partial:  # it would be ignored: say so
            raise ValueError(f"max_span={self.max_span} has no effect with keep_partial=false (no "
                             "partial response is kept to age); drop one")


class PartialRolloutPolicy(Policy):
    """APRIL: over-sample, stop at N complete groups, resume the partial ones first."""

    name = "partial"
    Params = PartialParams

    def __init__(self, params: PartialParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        refuse_beyond_trace(self.ctx, "rollout_batch", self.params.rollout_batch, "prompts")
        self.n_groups = self.params.rollout_batch or max(1, self.ctx.prompts_per_step)
        self.active: list[int] = []  # groups started and not trained, in start order
        self.filtered: set[int] = set()  # groups filtered in the current reaction

    def staleness_bound(self) -> int | None:
        if not self.params.keep_partial:
            return 0
        return self.params.max_span or None

    # -- hooks: every finish is left to the controller until a step's groups are complete ------

    def on_start(self, view: ClusterView) -> list[Action]:
        self.filtered = set()
        if view.busy:
            return []
        if self.active and self._due(view, view.complete_groups):
            return self._harvest(view) + self._wake()
        return self._start_step(view) + self._wake()

    on_sync_done = on_start

    def on_finished(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                    ) -> list[Action]:
        out = self._filter(view, samples) if self.params.filter_groups else []
        if view.busy:
            return out + self._wake()
        if self.active and self._due(view, view.complete_groups - len(self.filtered)):
            return out + self._harvest(view) + self._wake()  # the next step tops the groups up
        fresh = view.next_groups(len(self.filtered))  # in place of the filtered groups
        self.active += fresh
        out += [Admit(tuple(samples_of(view, fresh)))] if fresh else []
        return out + self._wake()

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        return self.on_finished(view, (), engine)

    def _wake(self) -> list[Action]:
        """Hear a finish only once the step's groups are complete (or a group completes, to
        filter it)."""
        need = min(self.n_groups, len(self.active))
        return [WakeOn(groups=need, any_group=self.params.filter_groups)]

    def _filter(self, view: ClusterView, samples) -> list[Action]:
        """Dynamic sampling: filter groups that just completed flat; start fresh ones instead."""
        self.filtered = set()
        flat = flat_groups(view, samples)
        if not flat:
            return []
        self.filtered = set(flat)
        for g in flat:
            self.active.remove(g)
        return [Filter(tuple(flat))]

    def _due(self, view: ClusterView, complete: int) -> bool:
        return complete > 0 and complete >= min(self.n_groups, len(self.active))

    def _start_step(self, view: ClusterView) -> list[Action]:
        want = math.ceil(self.params.over_sample * self.n_groups)
        self.active += view.next_groups(max(0, want - len(self.active)))
        resume = waiting_in_groups(view, self.active)
        drop = [i for i in resume if self._stale(view, i)] if self.params.max_span else []
        out: list[Action] = [Abort(tuple(drop), keep_tokens=False)] if drop else []
        return out + ([Admit(tuple(resume))] if resume else [])

    def _stale(self, view: ClusterView, i: int) -> bool:
        return bool(self.params.max_span) and too_stale(view, i, self.params.max_span)

    def _harvest(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        if running:
            out.append(Abort(tuple(running), keep_tokens=self.params.keep_partial))
        finished = view.finished()
        if self.filtered:
            finished = tuple(i for i in finished if view.group_of(i) not in self.filtered)
        batch, regen, trained = [], [], set()
        first_n = set(completion_order(view, finished)[: self.n_groups])  # the rest wait
        for g in complete_groups(view, finished):
            if g not in first_n:
                continue
            members = list(view.group_samples(g))
            old = [i for i in members if self._stale(view, i)]
            if old:  # a member is too stale: regenerate it, the group waits
                regen += old
                continue
            batch += members
            trained.add(g)
        if trained:  # (one pass: a list.remove per group was quadratic in the groups started)
            self.active = [g for g in self.active if g not in trained]
        settled = set(batch) | set(regen)
        if not self.params.keep_partial:  # on-policy: finished samples may not wait either
            regen += [i for i in finished if i not in settled]
            settled.update(regen)
        if regen:
            out.append(Abort(tuple(regen), keep_tokens=False))
        if batch:
            out.append(Train(tuple(batch)))
        else:  # every complete group had a stale member: keep generating
            out.append(Admit(tuple(running + regen)))
        return out
