"""``tail_batch``: RollPacker's tail batching (NSDI'26; paper.md §4.1, §4.3).

Short rounds launch ceil(eta x P) prompts and keep the first P to complete; the prompts that did
not make it are aborted (their work wasted: strictly on-policy) and go to a long-prompt queue.
Once that queue holds P prompts, a long round runs them with no speculation. With eta = 1.25 one
long round follows about every four short ones, as in RollPacker's Fig. 4.

Response over-provisioning (RollPacker launches eta x n responses per prompt and keeps the first
n): a trace only holds the responses it recorded, so this needs a trace with more samples per
prompt than the n to keep. Set ``responses`` to n; the first n finished per prompt are trained,
the others are discarded. By default ``responses`` is the trace's group size (no response
over-provisioning).

``filter_groups`` is DAPO's dynamic sampling (with ``responses`` = the group size): a group that
completes with all rewards equal is filtered at once and does not count towards P; in a short
round a fresh prompt from the dataloader is launched in its place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sortedrl.policies.base import (
    Abort,
    Action,
    Admit,
    Discard,
    Filter,
    Policy,
    RunContext,
    SampleState,
    Train,
    WakeOn,
)
from sortedrl.policies.common import (
    is_flat,
    newly_complete,
    refuse_beyond_trace,
    refuse_negative,
    samples_of,
)
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class TailBatchParams:
    rollout_batch: int = field(default=0, metadata={
        "help": "P: prompts trained per round (0: the trace's prompts per step)"})
    eta: float = field(default=1.25, metadata={"help": "prompt over-provisioning of short rounds"})
    responses: int = field(default=0, metadata={
        "help": "responses kept per prompt (0: the trace's group size)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, launch fresh ones"})

    def __post_init__(self) -> None:
        refuse_negative(self, "rollout_batch", "responses")
        if not self.eta >= 1.0:
            raise ValueError(f"eta must be >= 1, got {self.eta}")


class TailBatchPolicy(Policy):
    """RollPacker: speculative short rounds, deferred long prompts in long rounds."""

    name = "tail_batch"
    Params = TailBatchParams

    def __init__(self, params: TailBatchParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        refuse_beyond_trace(self.ctx, "rollout_batch", self.params.rollout_batch, "prompts")
        self.P = self.params.rollout_batch or max(1, self.ctx.prompts_per_step)
        self.keep = self.params.responses or self.ctx.group_size
        if self.keep > self.ctx.group_size:
            raise ValueError(f"responses ({self.keep}) is above the trace's group size "
                             f"({self.ctx.group_size})")
        if self.params.filter_groups and self.keep != self.ctx.group_size:
            raise ValueError("filter_groups needs responses = the trace's group size")
        self.long_queue: list[int] = []
        self.launched: list[int] = []
        self.short = True

    def staleness_bound(self) -> int:
        return 0

    # -- hooks: the controller counts finishes until a round's prompts are complete ----------

    def on_start(self, view: ClusterView) -> list[Action]:
        if view.busy:
            return []
        return self._next_round(view) + self._wake()

    on_sync_done = on_start

    def on_finished(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                    ) -> list[Action]:
        flat: list[int] = []
        if self.params.filter_groups:  # responses = the group size: complete = all finished
            flat = [g for g in newly_complete(view, samples) if is_flat(view, g)]
            for g in flat:  # filtered: it does not count towards P
                self.launched.remove(g)
        out: list[Action] = [Filter(tuple(flat))] if flat else []
        if view.busy:
            return out + self._wake()
        complete = view.complete_groups - len(flat)  # groups with `keep` responses finished
        if self.launched and complete >= min(self.P, len(self.launched)):
            if not self.short and complete < len(self.launched):
                return out + self._wake()  # a long round waits for every prompt
            return out + self._end_round(view, set(flat)) + self._wake()
        if flat and self.short:  # fresh prompts in place of the filtered ones
            fresh = view.next_groups(len(flat))
            self.launched += fresh
            if fresh:
                out.append(Admit(tuple(samples_of(view, fresh))))
        if flat and not self.launched:  # the whole round was filtered
            return out + self._next_round(view) + self._wake()
        return out + self._wake()

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        return self.on_finished(view, (), engine)

    def _wake(self) -> list[Action]:
        """Hear a finish once enough prompts have ``keep`` responses (or one completes, to
        filter it)."""
        need = min(self.P, len(self.launched)) if self.short else len(self.launched)
        return [WakeOn(groups=need, members=self.keep, any_group=self.params.filter_groups)]

    def _next_round(self, view: ClusterView) -> list[Action]:
        fresh_left = view.groups_left > 0
        if self.long_queue and (len(self.long_queue) >= self.P or not fresh_left):
            self.short = False
            self.launched, self.long_queue = self.long_queue[: self.P], self.long_queue[self.P:]
            admit, extra = [], []
            for g in self.launched:
                members = list(view.group_samples(g))
                admit += members[: self.keep]
                extra += [i for i in members[self.keep:] if view.state(i) == SampleState.WAITING]
            out: list[Action] = [Discard(tuple(extra))] if extra else []
            return out + [Admit(tuple(admit))]
        self.short = True
        self.launched = list(view.next_groups(math.ceil(self.params.eta * self.P)))
        if not self.launched:
            return []
        return [Admit(tuple(samples_of(view, self.launched)))]

    def _end_round(self, view: ClusterView, filtered: set[int]) -> list[Action]:
        """Train the first P prompts to complete; defer the others to a long round."""
        n, keep = view.group_size, self.keep
        done = np.asarray(view.finished(), dtype=np.int64)  # finished responses, in finish order
        if filtered:
            done = done[~np.isin(done // n, list(filtered))]
        by_group = np.argsort(done // n, kind="stable")  # each prompt's responses, in finish order
        found, start, count = np.unique(done[by_group] // n, return_index=True, return_counts=True)
        whole = count >= keep  # prompts in the order their `keep`-th response finished:
        first_p = np.argsort(by_group[start[whole] + keep - 1], kind="stable")[: self.P]
        kept = dict(zip(found[whole][first_p].tolist(), start[whole][first_p].tolist(), strict=True))
        launched = np.asarray(self.launched, dtype=np.int64)
        members = launched[:, None] * n + np.arange(n)
        state = view.states(members).reshape(members.shape)
        first = np.zeros(members.shape, dtype=bool)  # a kept prompt's first `keep` responses
        batch = []
        for row, g in enumerate(self.launched):
            if g in kept:
                took = done[by_group[kept[g]:kept[g] + keep]]
                batch += took.tolist()
                first[row, took - g * n] = True
            else:  # deferred to a long round, regenerated from scratch
                self.long_queue.append(g)
        is_kept = np.isin(launched, list(kept))[:, None]
        live = (state == SampleState.ADMITTED) | (state == SampleState.FINISHED)
        drop = members[live & ~first].tolist()
        discard = members[is_kept & ~first & (state != SampleState.DISCARDED)].tolist()
        out: list[Action] = []
        if drop:
            out.append(Abort(tuple(drop), keep_tokens=False))
        if discard:
            out.append(Discard(tuple(discard)))
        self.launched = []
        return out + [Train(tuple(batch))]
