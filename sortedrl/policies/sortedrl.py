"""``sortedrl``: SortedRL's online length-aware scheduling (arXiv 2603.23414; paper.md §1).

The engines are oversubscribed from the current prompt group, and short responses, which finish
first, are harvested into early updates sorted by length. Cache-aware loading: a new group of
``group_prompts`` prompts is loaded only once the current one is consumed.

What the paper leaves open, and what we chose:
- **Trigger**: a count, ``update_batch`` finished samples (``harvest=samples``) or that many
  samples' worth of complete GRPO groups (``harvest=groups``). A harvest stops rollout (the
  baseline is verl's colocated hybrid engine), trains once, syncs, and resumes.
- **Modes**: ``on_policy`` drops unfinished responses at each harvest and regenerates them under
  the new weights (wasted tokens). With ``harvest=groups`` the finished members of incomplete
  groups are regenerated too, so every trained token has staleness 0. ``partial`` pauses them
  with their tokens and version segments; they resume first, re-prefilling prompt + prefix.
  ``max_span`` bounds staleness: a sample whose oldest kept token is more than ``max_span``
  versions behind is regenerated instead of resumed or trained.
- **Starvation guard** (the paper's "scavenging"): once the group has nothing left to admit, the
  policy stops harvesting early and lets the stragglers run to completion, so a prompt whose
  responses are always long still finishes; the group's last harvest waits for all of them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from sortedrl.policies.base import (
    Abort,
    Action,
    Admit,
    Event,
    EventKind,
    Policy,
    RunContext,
    SampleState,
    Sync,
    Train,
)
from sortedrl.policies.common import complete_groups, in_flight, shortest_first
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class SortedRLParams:
    group_prompts: int = field(default=0, metadata={
        "help": "prompts per loading group (0: 4 x the trace's prompts per step)"})
    oversubscribe: float = field(default=2.0, metadata={
        "help": "samples kept admitted, as a multiple of the engines' total max_num_seqs"})
    update_batch: int = field(default=0, metadata={
        "help": "finished samples that trigger a harvest (0: half the engines' total max_num_seqs)"})
    harvest: Literal["samples", "groups"] = field(default="samples", metadata={
        "help": "count finished samples, or samples of complete GRPO groups"})
    mode: Literal["on_policy", "partial"] = field(default="on_policy", metadata={
        "help": "on_policy: drop unfinished at a harvest; partial: keep and resume them"})
    max_span: int = field(default=2, metadata={
        "help": "partial mode: most policy versions a trained token may lag"})

    def __post_init__(self) -> None:
        if self.group_prompts < 0 or self.update_batch < 0:
            raise ValueError("group_prompts and update_batch must be >= 0")
        if not self.oversubscribe >= 1.0:
            raise ValueError(f"oversubscribe must be >= 1, got {self.oversubscribe}")
        if self.max_span < 0:
            raise ValueError(f"max_span must be >= 0, got {self.max_span}")


class SortedRLPolicy(Policy):
    """SortedRL: oversubscribe, harvest the short responses first into sorted early updates."""

    name = "sortedrl"
    Params = SortedRLParams

    def __init__(self, params: SortedRLParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        p, c = self.params, self.ctx
        self.group_prompts = p.group_prompts or 4 * max(1, c.prompts_per_step)
        self.update_batch = p.update_batch  # 0 until the first event shows the cluster
        self.partial = p.mode == "partial"
        self.ready: deque[int] = deque()  # group samples neither admitted nor done, resume first
        self.unsettled = 0  # samples of the current group not yet trained
        self.done_in_group: dict[int, int] = {}  # finished samples per GRPO group (from events)
        self.ncomplete = 0  # GRPO groups whose n samples are finished (from events)

    def staleness_bound(self) -> int:
        return self.params.max_span if self.partial else 0

    # -- events ------------------------------------------------------------------------------

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        if not self.update_batch:
            self.update_batch = max(1, view.total_capacity // 2)
        if event.kind == EventKind.FINISHED and self.params.harvest == "groups":
            for i in event.samples:  # a cheap trigger; the harvest re-checks the buffer
                if view.state(i) == SampleState.FINISHED:
                    g = view.group_of(i)
                    self.done_in_group[g] = self.done_in_group.get(g, 0) + 1
                    if self.done_in_group[g] == view.group_size:
                        self.ncomplete += 1
        if event.kind == EventKind.UPDATE_DONE:
            return [Sync()]
        if view.trainer_busy or view.syncing:
            return []
        if self.unsettled == 0 and not self._load(view):
            return []
        if self._harvest_due(view):
            return self._harvest(view)
        return self._top_up(view)

    def _load(self, view: ClusterView) -> bool:
        groups = view.next_groups(self.group_prompts)
        for g in groups:
            self.ready.extend(view.group_samples(g))
        self.unsettled = len(groups) * view.group_size
        return bool(groups)

    def _harvest_due(self, view: ClusterView) -> bool:
        if view.finished_count == 0:
            return False
        if not self.ready:  # starvation guard: drain the group's stragglers
            return view.admitted == 0
        if self.params.harvest == "samples":
            return view.finished_count >= self.update_batch
        return self.ncomplete * view.group_size >= self.update_batch

    def _top_up(self, view: ClusterView, admitted: int | None = None) -> list[Action]:
        admitted = view.admitted if admitted is None else admitted
        room = math.floor(self.params.oversubscribe * view.total_capacity) - admitted
        take, drop = [], []
        while room > 0 and self.ready:
            i = self.ready.popleft()
            if self._too_stale(view, i):
                drop.append(i)  # paused too long: regenerate from scratch
            take.append(i)
            room -= 1
        out: list[Action] = [Abort(tuple(drop), keep_tokens=False)] if drop else []
        return out + ([Admit(tuple(take))] if take else [])

    def _too_stale(self, view: ClusterView, i: int) -> bool:
        v = view.oldest_version(i)
        return v is not None and view.version - v > self.params.max_span

    def _harvest(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        if running:
            out.append(Abort(tuple(running), keep_tokens=self.partial))
        finished = view.finished()
        if self.params.harvest == "groups" and self.ready:
            members = {i for g in complete_groups(view, finished) for i in view.group_samples(g)}
            batch = [i for i in finished if i in members]
            left = [i for i in finished if i not in members]
        else:
            batch, left = list(finished), []
        stale = [i for i in batch if self._too_stale(view, i)]
        if not self.partial:
            stale += left  # on-policy: a finished sample may not wait for a later version
        if stale:
            out.append(Abort(tuple(stale), keep_tokens=False))
            dropped = set(stale)
            batch = [i for i in batch if i not in dropped]
        in_batch, dropped_set = set(batch), set(stale)
        self.done_in_group, self.ncomplete = {}, 0
        for i in finished:
            if i not in in_batch and i not in dropped_set:
                g = view.group_of(i)
                self.done_in_group[g] = self.done_in_group.get(g, 0) + 1
        self.ready.extendleft(reversed(running + stale))
        if not batch:  # everything was too stale: nothing to train, rollout goes on
            return out + self._top_up(view, admitted=0)
        self.unsettled -= len(batch)
        out.append(Train(shortest_first(view, batch)))
        return out
