"""``async``: AReaL's fully asynchronous RL with bounded staleness (arXiv 2505.24298).

Rollout never stops. On a disaggregated cluster the engines keep generating while the trainer
takes the oldest ``batch`` samples' worth of complete GRPO groups per update (``whole_groups``,
the default, as AReaL's buffer of whole-group episodes does; ``whole_groups=false`` takes the
oldest ``batch`` finished samples, and so spreads groups over updates); after each update the
new weights are pushed mid-sequence (interruptible generation), so one response can span
several versions.

Admission is AReaL's staleness rule: the N-th sample may be submitted only while
floor((N - 1) / B) <= v + eta, i.e. ``capacity = min(max_concurrent - running,
(eta + v + 1) * B - (accepted + running))``, where ``accepted`` counts samples finished so far.
That rule bounds staleness at submission only; with interruptible generation a long response
outlives it and is trained anyway, as AReaL and verl's fully-async trainer do, so a trained token
may be more than eta versions old. (AReaL trains such tokens with its decoupled PPO objective;
the real runner does so under ``--objective decoupled``, and by default clips against vLLM's
behaviour log-probs and masks stale tokens beyond ``is_cap``: docs/policies.md, "What the real
runner's update is, and is not".) Set
``drop_stale`` to also bound it on tokens: after each sync, responses whose oldest token is more
than eta versions behind are dropped and regenerated, and none is ever trained. Set
``recompute_on_sync`` to discard the KV cache at every weight switch and re-prefill, as AReaL and
verl's fully-async trainer do (vLLM keeps the old prefix's KV, the default).

``filter_groups`` is DAPO's dynamic sampling: a group whose members have all finished with equal
rewards is filtered at once and no longer counts as accepted, so the admission rule lets fresh
prompts from the dataloader take its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sortedrl.policies.base import (
    Abort,
    Action,
    Admit,
    Filter,
    Keep,
    Policy,
    RunContext,
    Sync,
    Train,
    WakeOn,
)
from sortedrl.policies.common import (
    SampleQueue,
    complete_groups,
    flat_groups,
    in_flight,
    refuse_beyond_trace,
    refuse_negative,
    samples_of,
    stale_among,
)
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class AsyncParams:
    eta: int = field(default=2, metadata={"help": "staleness bound in policy versions (AReaL's eta)"})
    batch: int = field(default=0, metadata={
        "help": "B: samples per update (0: the trace's prompts per step x n); with whole_groups "
                "rounded up to whole groups (100 trains 104 at n=8)"})
    max_concurrent: int = field(default=0, metadata={
        "help": "samples admitted at most (0: the engines' total max_num_seqs)"})
    whole_groups: bool = field(default=True, metadata={
        "help": "train complete GRPO groups only (false: the oldest finished samples)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, generate fresh ones"})
    recompute_on_sync: bool = field(default=False, metadata={
        "help": "drop the KV cache at each weight switch and re-prefill (AReaL) instead of keeping it"})
    drop_stale: bool = field(default=False, metadata={
        "help": "also bound staleness on tokens: drop and regenerate responses whose oldest token is "
                "more than eta versions old (false: eta bounds admission only, as AReaL and verl do)"})

    def __post_init__(self) -> None:
        refuse_negative(self, "eta", "batch", "max_concurrent")
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
        refuse_beyond_trace(c, "batch", self.params.batch, "samples")
        self.B = self.params.batch or max(1, c.prompts_per_step * c.group_size)
        if self.params.whole_groups:  # admission must let whole groups in, or none completes
            self.B = -(-self.B // c.group_size) * c.group_size
        self.queue = SampleQueue()  # dropped samples to regenerate first, then fresh ones
        self.queue.add_fresh(c.num_groups * c.group_size)
        self.trained = 0  # samples trained so far
        self.accepted = 0  # finished (trained or waiting to be), as of the current reaction
        self.dropped = 0  # admitted samples the current reaction drops
        self.checked = -1  # the version whose finished responses were checked for staleness

    def staleness_bound(self) -> int | None:
        return self.params.eta if self.params.drop_stale else None

    # -- hooks: admission is a standing order, and training waits for a full batch ------------

    def on_start(self, view: ClusterView) -> list[Action]:
        return self._react(view, [])

    def on_finished(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                    ) -> list[Action]:
        self._begin(view)
        out: list[Action] = []
        filtered: set[int] = set()
        if self.params.filter_groups:
            flat = flat_groups(view, samples)
            if flat:
                out.append(Filter(tuple(flat)))
                self.accepted -= len(flat) * view.group_size
                filtered = set(flat)
        if not view.busy:
            out += self._maybe_train(view, filtered)
        return self._orders(view, out)

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        return self.on_finished(view, (), engine)

    def on_update_done(self, view: ClusterView) -> list[Action]:
        self._begin(view)
        return self._orders(view, [Sync()])

    def on_sync_done(self, view: ClusterView) -> list[Action]:
        self._begin(view)
        return self._orders(view, self._after_sync(view))

    def _react(self, view: ClusterView, out: list[Action]) -> list[Action]:
        self._begin(view)
        if not view.busy:
            out += self._maybe_train(view)
        return self._orders(view, out)

    def _begin(self, view: ClusterView) -> None:
        self.accepted = view.finished_count + self.trained
        self.dropped = 0

    def _after_sync(self, view: ClusterView) -> list[Action]:
        out: list[Action] = []
        running = in_flight(view)
        stale = stale_among(view, running, self.params.eta) if self.params.drop_stale else []
        if stale:
            out.append(Abort(tuple(stale), keep_tokens=False))
            self.queue.extend(stale)
            self.dropped += len(stale)
        if self.params.recompute_on_sync:
            rest = [i for i in running if i not in set(stale)]
            if rest:
                out += [Abort(tuple(rest), keep_tokens=True), Admit(tuple(rest))]
        return out + self._maybe_train(view)

    def _maybe_train(self, view: ClusterView, filtered: set[int] = frozenset()) -> list[Action]:
        """``filtered``: groups filtered in this same reaction (the view still shows them).

        Finished responses are checked for staleness once per version, the first time a batch
        could be full: a response can only turn too stale when the version changes, and the
        running ones are checked at each sync."""
        last = not self.queue and view.admitted == 0
        if view.finished_count < self.B and not (last and view.finished_count):
            return []
        per_update = max(1, self.B // view.group_size)
        if self.checked == view.version and self.params.whole_groups and not last \
                and view.complete_groups - len(filtered) < per_update:
            return []  # not enough complete groups yet (the count is an upper bound here)
        finished = view.finished()
        if filtered:
            finished = tuple(i for i in finished if view.group_of(i) not in filtered)
        out: list[Action] = []
        if self.checked != view.version:
            self.checked = view.version
            stale = stale_among(view, finished, self.params.eta) if self.params.drop_stale else []
            if stale:
                out.append(Abort(tuple(stale), keep_tokens=False))
                self.queue.extend(stale)
                self.accepted -= len(stale)
                finished = tuple(i for i in finished if i not in set(stale))
        batch: tuple[int, ...] = ()
        if not self.params.whole_groups:
            if len(finished) >= self.B or (last and finished):
                batch = finished[: self.B]
        else:
            groups = complete_groups(view, finished)
            if len(groups) >= per_update or (last and groups):
                batch = tuple(samples_of(view, groups[:per_update]))
        if batch:
            out.append(Train(batch))
            self.trained += len(batch)
        return out

    def _orders(self, view: ClusterView, out: list[Action]) -> list[Action]:
        """AReaL's admission rule as a standing order, and when to hear a finish.

        The N-th sample may start while floor((N - 1) / B) <= v + eta: at most
        ``(eta + v + 1) * B - (accepted + running)`` more, a number a finish does not change
        (it moves one sample from running to accepted), so the controller can serve it."""
        running = view.admitted - self.dropped
        budget = (self.params.eta + view.version + 1) * self.B - (self.accepted + running)
        window = self.params.max_concurrent or view.total_capacity
        if self.params.whole_groups and self.checked == view.version:
            per_update = max(1, self.B // view.group_size)
            wake = WakeOn(groups=per_update, drained=True, any_group=self.params.filter_groups)
        else:  # a full batch (or, whole groups, the version's staleness check) is due
            wake = WakeOn(finished=self.B, drained=True, any_group=self.params.filter_groups)
        return out + [Keep(self.queue, window, budget=max(0, budget)), wake]
