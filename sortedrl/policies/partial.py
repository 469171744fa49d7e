"""``partial``: APRIL / Kimi-style partial rollout (arXiv 2509.18521; paper.md §4.1).

Each step over-samples ``over_sample`` x N prompt groups, stops as soon as N groups are complete,
aborts the rest keeping their tokens, trains on the complete groups and syncs. The aborted
partial responses resume first in the next step (re-prefilling prompt + prefix), so one response
can span several policy versions. APRIL leaves staleness unbounded (about 40% of tokens per round
are off-policy at 2x); ``max_span`` optionally bounds it as MindSpeed-RL's
``partial_rollout_max_split`` does: a partial response whose oldest token is more than
``max_span`` versions behind is regenerated instead. ``keep_partial=false`` drops the partials
instead, which is verl's "reorder rollout" (strictly on-policy, the aborted work wasted).
Complete groups are what is trained, so GRPO advantages always see a whole group.
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
    Event,
    EventKind,
    Filter,
    Policy,
    RunContext,
    SampleState,
    Sync,
    Train,
)
from sortedrl.policies.common import complete_groups, flat_groups, in_flight, waiting_in
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class PartialParams:
    rollout_batch: int = field(default=0, metadata={
        "help": "N: complete prompt groups per step (0: the trace's prompts per step)"})
    over_sample: float = field(default=2.0, metadata={
        "help": "groups in flight per step, as a multiple of N (APRIL's over-sampling)"})
    keep_partial: bool = field(default=True, metadata={
        "help": "resume aborted responses next step (false: drop and regenerate them)"})
    max_span: int = field(default=0, metadata={
        "help": "most versions a trained token may lag (0: unbounded, as in APRIL)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, start fresh ones"})

    def __post_init__(self) -> None:
        if self.rollout_batch < 0 or self.max_span < 0:
            raise ValueError("rollout_batch and max_span must be >= 0")
        if not self.over_sample >= 1.0:
            raise ValueError(f"over_sample must be >= 1, got {self.over_sample}")


class PartialRolloutPolicy(Policy):
    """APRIL: over-sample, stop at N complete groups, resume the partial ones first."""

    name = "partial"
    Params = PartialParams

    def __init__(self, params: PartialParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        self.n_groups = self.params.rollout_batch or max(1, self.ctx.prompts_per_step)
        self.active: list[int] = []  # groups started and not trained, in start order
        self.done: dict[int, int] = {}  # finished samples per active group (from events)
        self.ncomplete = 0  # groups whose every sample finished (from events)
        self.filtered: set[int] = set()  # groups filtered in the current reaction

    def staleness_bound(self) -> int | None:
        if not self.params.keep_partial:
            return 0
        return self.params.max_span or None

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        kind = event.kind
        if kind == EventKind.FINISHED:  # a cheap trigger; the harvest re-checks the buffer
            for i in event.samples:
                if view.state(i) == SampleState.FINISHED:
                    g = view.group_of(i)
                    self.done[g] = self.done.get(g, 0) + 1
                    if self.done[g] == view.group_size:
                        self.ncomplete += 1
        out = self._filter(view, event) if self.params.filter_groups else []
        if kind == EventKind.UPDATE_DONE:
            return [Sync()]
        if view.trainer_busy or view.syncing:
            return out
        if kind in (EventKind.STARTED, EventKind.SYNC_DONE):
            if self.active and self._due(view, len(complete_groups(view, view.finished()))):
                return out + self._harvest(view)
            return out + self._start_step(view)
        if self.active and self._due(view, self.ncomplete):
            return out + self._harvest(view)  # the next step tops the groups in flight up
        if not self.filtered:
            return out
        fresh = view.next_groups(len(self.filtered))  # in place of the filtered groups
        self.active += fresh
        return out + ([Admit(tuple(i for g in fresh for i in view.group_samples(g)))] if fresh else [])

    def _filter(self, view: ClusterView, event: Event) -> list[Action]:
        """Dynamic sampling: filter groups that just completed flat; start fresh ones instead."""
        self.filtered = set()
        flat = flat_groups(view, event)
        if not flat:
            return []
        self.filtered = set(flat)
        self.ncomplete = max(0, self.ncomplete - len(flat))
        for g in flat:
            self.active.remove(g)
        return [Filter(tuple(flat))]

    def _due(self, view: ClusterView, complete: int) -> bool:
        return complete > 0 and complete >= min(self.n_groups, len(self.active))

    def _start_step(self, view: ClusterView) -> list[Action]:
        want = math.ceil(self.params.over_sample * self.n_groups)
        self.active += view.next_groups(max(0, want - len(self.active)))
        resume, drop = [], []
        for g in self.active:
            for i in waiting_in(view, g):
                if self._stale(view, i):
                    drop.append(i)
                resume.append(i)
        out: list[Action] = [Abort(tuple(drop), keep_tokens=False)] if drop else []
        return out + ([Admit(tuple(resume))] if resume else [])

    def _stale(self, view: ClusterView, i: int) -> bool:
        v = view.oldest_version(i)
        return bool(self.params.max_span) and v is not None and view.version - v > self.params.max_span

    def _harvest(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        if running:
            out.append(Abort(tuple(running), keep_tokens=self.params.keep_partial))
        finished = tuple(i for i in view.finished() if view.group_of(i) not in self.filtered)
        batch, regen = [], []
        for g in complete_groups(view, finished):
            members = list(view.group_samples(g))
            old = [i for i in members if self._stale(view, i)]
            if old:  # a member is too stale: regenerate it, the group waits
                regen += old
                continue
            batch += members
            self.active.remove(g)
        settled = set(batch) | set(regen)
        if not self.params.keep_partial:  # on-policy: finished samples may not wait either
            regen += [i for i in finished if i not in settled]
            settled.update(regen)
        if regen:
            out.append(Abort(tuple(regen), keep_tokens=False))
        self.done, self.ncomplete = {}, 0
        for i in finished:
            if i not in settled:
                g = view.group_of(i)
                self.done[g] = self.done.get(g, 0) + 1
        if batch:
            out.append(Train(tuple(batch)))
        else:  # every complete group had a stale member: keep generating
            out.append(Admit(tuple(running + regen)))
        return out
