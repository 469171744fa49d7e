"""``async``: AReaL's fully asynchronous RL with bounded staleness (arXiv 2505.24298).

Rollout never stops. On a disaggregated cluster the engines keep generating while the trainer
takes the oldest ``batch`` samples' worth of complete GRPO groups per update (``whole_groups``,
the default; ``whole_groups=false`` takes the oldest ``batch`` finished samples, as AReaL's
buffer does, and so spreads groups over updates); after each update the new weights are
pushed mid-sequence (interruptible generation), so one response can span several versions.

Admission is AReaL's staleness rule: the N-th sample may be submitted only while
floor((N - 1) / B) <= v + eta, i.e. ``capacity = min(max_concurrent - running,
(eta + v + 1) * B - (accepted + running))``, where ``accepted`` counts samples finished so far.
That rule bounds staleness at submission; with interruptible generation a long response can still
outlive it, so we also enforce the bound on tokens: after each sync, responses whose oldest token
is more than eta versions behind are dropped and regenerated, and none is ever trained. Set
``recompute_on_sync`` to discard the KV cache at every weight switch and re-prefill, as AReaL does
(vLLM keeps the old prefix's KV, the default).

``filter_groups`` is DAPO's dynamic sampling: a group whose members have all finished with equal
rewards is filtered at once and no longer counts as accepted, so the admission rule lets fresh
prompts from the dataloader take its place.
"""

from __future__ import annotations

from collections import deque
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
    Sync,
    Train,
)
from sortedrl.policies.common import complete_groups, flat_groups, in_flight
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class AsyncParams:
    eta: int = field(default=2, metadata={"help": "staleness bound in policy versions (AReaL's eta)"})
    batch: int = field(default=0, metadata={
        "help": "B: samples per update, whole groups when whole_groups (0: the trace's prompts per step x n)"})
    max_concurrent: int = field(default=0, metadata={
        "help": "samples admitted at most (0: the engines' total max_num_seqs)"})
    whole_groups: bool = field(default=True, metadata={
        "help": "train complete GRPO groups only (false: the oldest finished samples)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, generate fresh ones"})
    recompute_on_sync: bool = field(default=False, metadata={
        "help": "drop the KV cache at each weight switch and re-prefill (AReaL) instead of keeping it"})

    def __post_init__(self) -> None:
        if self.eta < 0 or self.batch < 0 or self.max_concurrent < 0:
            raise ValueError("eta, batch and max_concurrent must be >= 0")
        if self.filter_groups and not self.whole_groups:
            raise ValueError("filter_groups needs whole_groups=true")


class AsyncPolicy(Policy):
    """AReaL: decoupled rollout and training, admission bounded by staleness eta."""

    name = "async"
    Params = AsyncParams
    placements = ("disaggregated",)

    def __init__(self, params: AsyncParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        c = self.ctx
        self.B = self.params.batch or max(1, c.prompts_per_step * c.group_size)
        if self.params.whole_groups:  # admission must let whole groups in, or none completes
            self.B = -(-self.B // c.group_size) * c.group_size
        self.total = c.num_groups * c.group_size
        self.fresh = 0  # next never-admitted sample, in dataloader order
        self.redo: deque[int] = deque()  # dropped samples to regenerate first
        self.accepted = 0  # finished (trained or waiting to be)

    def staleness_bound(self) -> int:
        return self.params.eta

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        filtered: set[int] = set()
        if event.kind == EventKind.FINISHED:
            self.accepted += len(event.samples)
            if self.params.filter_groups:
                flat = flat_groups(view, event)
                if flat:
                    out.append(Filter(tuple(flat)))
                    self.accepted -= len(flat) * view.group_size
                    filtered = set(flat)
        if event.kind == EventKind.UPDATE_DONE:
            out.append(Sync())
        if event.kind == EventKind.SYNC_DONE:
            out += self._after_sync(view)
        elif not view.trainer_busy and not view.syncing and event.kind != EventKind.UPDATE_DONE:
            out += self._maybe_train(view, filtered)
        return out + self._admit(view, out)

    def _stale(self, view: ClusterView, i: int) -> bool:
        v = view.oldest_version(i)
        return v is not None and view.version - v > self.params.eta

    def _after_sync(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        stale = [i for i in running if self._stale(view, i)]
        if stale:
            out.append(Abort(tuple(stale), keep_tokens=False))
            self.redo.extend(stale)
        if self.params.recompute_on_sync:
            rest = [i for i in running if i not in set(stale)]
            if rest:
                out += [Abort(tuple(rest), keep_tokens=True), Admit(tuple(rest))]
        return out + self._maybe_train(view)

    def _maybe_train(self, view: ClusterView, filtered: set[int] = frozenset()) -> list[Action]:
        """``filtered``: groups filtered in this same reaction (the view still shows them)."""
        last = self.fresh >= self.total and not self.redo and view.admitted == 0
        if view.finished_count < self.B and not (last and view.finished_count):
            return []
        finished = tuple(i for i in view.finished() if view.group_of(i) not in filtered)
        stale = [i for i in finished if self._stale(view, i)]
        out: list[Action] = []
        if stale:
            out.append(Abort(tuple(stale), keep_tokens=False))
            self.redo.extend(stale)
            self.accepted -= len(stale)
            finished = tuple(i for i in finished if i not in set(stale))
        if not self.params.whole_groups:
            if len(finished) >= self.B or (last and finished):
                out.append(Train(finished[: self.B]))
            return out
        n = view.group_size
        groups = complete_groups(view, finished)
        per_update = max(1, self.B // n)
        if len(groups) >= per_update or (last and groups):
            out.append(Train(tuple(i for g in groups[:per_update] for i in view.group_samples(g))))
        return out

    def _admit(self, view: ClusterView, pending: list[Action]) -> list[Action]:
        running = view.admitted + sum(len(a.samples) for a in pending if isinstance(a, Admit))
        running -= sum(len(a.samples) for a in pending if isinstance(a, Abort))
        v = view.version
        cap = min((self.params.max_concurrent or view.total_capacity) - running,
                  (self.params.eta + v + 1) * self.B - (self.accepted + running))
        take = []
        while cap > 0 and self.redo:
            take.append(self.redo.popleft())
            cap -= 1
        if cap > 0 and self.fresh < self.total:
            k = min(cap, self.total - self.fresh)
            take += range(self.fresh, self.fresh + k)
            self.fresh += k
        return [Admit(tuple(take))] if take else []
