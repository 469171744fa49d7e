"""``sortedrl``: SortedRL's online length-aware scheduling (arXiv 2603.23414; paper.md §1).

The engines are oversubscribed from the current prompt group, and short responses, which finish
first, are harvested into early updates sorted by length. Cache-aware loading: a new group of
``group_prompts`` prompts is loaded only once the current one is consumed.

What the paper leaves open, and what we chose:
- **Trigger**: a count, ``update_batch`` samples' worth of complete GRPO groups
  (``harvest=groups``, the default: GRPO advantages need the whole group) or that many finished
  samples (``harvest=samples``: groups may be spread over updates). A harvest stops rollout (the
  baseline is verl's colocated hybrid engine), trains once, syncs, and resumes.
- **Defaults from the cluster and the trace**, so the policy keeps its own behaviour on every
  preset and trace size. With S decode slots: the loading group is ``4 x`` the trace's prompts
  per step, and at least twice the oversubscribed window (at most the trace); the window is
  ``2 x S`` samples, at most half the loading group; ``update_batch`` is a quarter of the loading
  group, one step's worth of samples with the derived group (the paper: 512-prompt rollout
  batches, 128 per update). So the window never covers the whole loading group: samples wait to
  be admitted while early harvests train the short ones, instead of SortedRL degenerating into
  ``sync`` with a larger batch (as it did on 8 x H100's 2,048 slots with a 4,096-sample group).
  The trigger is not tied to the slots: capped at ``S / 2`` (as it was), a 1,024-prompt x 16 step
  on 2,048 slots harvested 55 times a loading group, each harvest dropping the window's unfinished
  responses, and wasted 86% of the generated tokens (docs/policies.md).
- **Modes**: ``on_policy`` drops unfinished responses at each harvest and regenerates them under
  the new weights (wasted tokens). With ``harvest=groups`` the finished members of incomplete
  groups are regenerated too, so every trained token has staleness 0. ``partial`` pauses them
  with their tokens and version segments; they resume first, re-prefilling prompt + prefix.
  ``max_span`` bounds staleness: a sample whose oldest kept token is more than ``max_span``
  versions behind is regenerated instead of resumed or trained. ``on_policy`` keeps nothing to
  age, so it ignores ``max_span``; it does not refuse one, since the default (2) is not 0 and a
  knob set is often shared by both modes (the README's paper reproduction, a tune over both).
- **Dynamic sampling** (``filter_groups``, with ``harvest=groups``): a group that completes with
  all rewards equal is filtered at once and does not count towards the trigger, so the policy
  keeps admitting from the loading group (and then from the next one) until ``update_batch``
  samples' worth of groups with a reward spread are complete.
- **Starvation guard** (the paper's "scavenging"): once the group has nothing left to admit,
  the policy stops harvesting early and lets the stragglers run to completion, so a prompt whose
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
    Filter,
    Keep,
    Policy,
    RunContext,
    Train,
    WakeOn,
)
from sortedrl.policies.common import (
    complete_groups,
    flat_groups,
    in_flight,
    refuse_beyond_trace,
    refuse_negative,
    shortest_first,
    stale_among,
)
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class SortedRLParams:
    group_prompts: int = field(default=0, metadata={
        "help": "prompts per loading group (0: 4 x the trace's prompts per step, and at least "
                "twice the oversubscribed window, at most the trace's prompts)"})
    oversubscribe: float = field(default=0.0, metadata={
        "help": "samples kept admitted, as a multiple of the engines' total max_num_seqs; below "
                "1 leaves slots empty (0: 2, at most half the loading group, so below 1 on a "
                "small trace)"})
    update_batch: int = field(default=0, metadata={
        "help": "finished samples that trigger a harvest (0: a quarter of the loading group, "
                "one step's worth with the derived group)"})
    harvest: Literal["samples", "groups"] = field(default="groups", metadata={
        "help": "groups: train complete GRPO groups only; samples: any finished samples "
                "(spreads groups over updates)"})
    mode: Literal["on_policy", "partial"] = field(default="on_policy", metadata={
        "help": "on_policy: drop unfinished at a harvest; partial: keep and resume them"})
    max_span: int = field(default=2, metadata={
        "help": "partial mode: most policy versions a trained token may lag (0: none, every "
                "paused response is regenerated, unlike partial's max_span=0, which is "
                "unbounded); a complete group "
                "with a too-stale member counts towards the trigger, then waits while that member "
                "is regenerated, so such a harvest trains fewer than update_batch (on_policy "
                "ignores it: nothing is kept to age)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling (harvest=groups): drop groups with all-equal rewards"})

    def __post_init__(self) -> None:
        refuse_negative(self, "group_prompts", "update_batch")
        if not self.oversubscribe >= 0:  # (NaN too) below 1 as the derived window can be
            raise ValueError(f"oversubscribe must be >= 0, got {self.oversubscribe} (0: derived)")
        refuse_negative(self, "max_span")
        if self.filter_groups and self.harvest != "groups":
            raise ValueError("filter_groups needs harvest=groups")


class SortedRLPolicy(Policy):
    """SortedRL: oversubscribe, harvest the short responses first into sorted early updates."""

    name = "sortedrl"
    Params = SortedRLParams

    def __init__(self, params: SortedRLParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        refuse_beyond_trace(self.ctx, "update_batch", self.params.update_batch, "samples")
        self.group_prompts = self.window = self.update_batch = 0  # sized at the first event
        self.partial = self.params.mode == "partial"
        self.ready: deque[int] = deque()  # group samples neither admitted nor done, resume first
        self.unsettled = 0  # samples of the current group not yet trained
        self.filtered: set[int] = set()  # groups filtered in the current reaction

    def staleness_bound(self) -> int:
        return self.params.max_span if self.partial else 0

    # -- hooks: top-ups are a standing order; the policy hears a finish only at a harvest ------

    def on_start(self, view: ClusterView) -> list[Action]:
        self.filtered = set()
        return self._react(view, [])

    on_sync_done = on_start

    def on_finished(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                    ) -> list[Action]:
        out = self._filter(view, samples) if self.params.filter_groups else []
        return self._react(view, out)

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        return self.on_finished(view, (), engine)

    def _react(self, view: ClusterView, out: list[Action]) -> list[Action]:
        if not self.update_batch:
            self._size(view)
        if view.busy:
            return out
        if self.unsettled == 0 and not self._load(view):
            return out
        if self._harvest_due(view):
            return out + self._harvest(view)
        return out + self._orders()

    def _orders(self) -> list[Action]:
        """Keep the window admitted from the group; hear a finish only when a harvest may be due
        (or a group completes, to filter it)."""
        if not self.ready:  # draining the group: only the finish that empties the engines can
            # make a harvest due (the starvation guard), so hear no other (a count would hold)
            wake = WakeOn(drained=True, any_group=self.params.filter_groups)
        elif self.params.harvest == "samples":
            wake = WakeOn(finished=self.update_batch, drained=True)
        else:
            n = self.ctx.group_size
            wake = WakeOn(groups=-(-self.update_batch // n), drained=True,
                          any_group=self.params.filter_groups)
        return [Keep(self.ready, self.window, max_span=self.params.max_span), wake]

    def _filter(self, view: ClusterView, samples) -> list[Action]:
        """Dynamic sampling: filter groups that just completed with all rewards equal."""
        self.filtered = set()
        flat = flat_groups(view, samples)
        if not flat:
            return []
        self.filtered = set(flat)
        self.unsettled -= len(flat) * view.group_size
        return [Filter(tuple(flat))]

    def _size(self, view: ClusterView) -> None:
        """Loading group, oversubscribed window and trigger from the knobs, or derived from the
        cluster's slots and the trace (module docstring)."""
        p, n, slots = self.params, view.group_size, view.total_capacity
        window = max(1, math.floor((p.oversubscribe or 2.0) * slots))  # (a sample at least)
        self.group_prompts = p.group_prompts or min(max(4 * max(1, self.ctx.prompts_per_step),
                                                        -(-2 * window // n)), view.num_groups)
        loading = min(self.group_prompts, view.num_groups) * n  # (auto: as loaded; no more exist)
        self.window = window if p.oversubscribe else max(1, min(window, loading // 2))
        size = p.update_batch or loading // 4
        if not p.update_batch and p.harvest == "groups":  # whole groups: a multiple of n
            size -= size % n
        self.update_batch = max(n if p.harvest == "groups" else 1, size)

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
        complete = view.complete_groups - len(self.filtered)
        return complete * view.group_size >= self.update_batch

    def _harvest(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        if running:
            out.append(Abort(tuple(running), keep_tokens=self.partial))
        finished = view.finished()
        if self.filtered:
            finished = tuple(i for i in finished if view.group_of(i) not in self.filtered)
        stale = stale_among(view, finished, self.params.max_span)
        if self.params.harvest == "groups":  # a group with a too-stale member waits for it
            held = {view.group_of(i) for i in stale}
            members = {i for g in complete_groups(view, finished) if g not in held
                       for i in view.group_samples(g)}
            batch = [i for i in finished if i in members]
        else:
            batch = [i for i in finished if i not in set(stale)]
        if not self.partial:  # on-policy: a finished sample may not wait for a later version
            taken = set(batch) | set(stale)
            stale += [i for i in finished if i not in taken]
        if stale:
            out.append(Abort(tuple(stale), keep_tokens=False))
        self.ready.extendleft(reversed(running + stale))
        if not batch:  # everything was too stale: nothing to train, rollout goes on
            return out + self._orders()
        self.unsettled -= len(batch)
        out.append(Train(shortest_first(view, batch)))
        return out + [Keep()]  # no top-ups until the update and its sync are done
