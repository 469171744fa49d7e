"""``sync``: the synchronous baseline, verl's default GRPO loop.

Each step admits the whole rollout batch (``rollout_batch`` prompts x n responses), waits until
every response has finished, then runs ``minibatches`` updates on slices of the batch and
syncs the weights once. Minibatches are cut at group boundaries, so every GRPO group is trained
whole in one update: each slice holds ceil(groups / minibatches) groups, the last fewer, so a
count that does not divide the groups gives fewer updates (9 on 64 groups: 8 slices of 8). With ``minibatches > 1`` every update after the first trains on data one
more version behind, as in the SortedRL paper's PPO baseline (512 prompts, 128 per update).

It reacts only to idle engines and finished updates (no ``on_finished``), so it does not listen
to finishes and the simulator serves them with no policy call.

``filter_groups`` is DAPO's dynamic sampling: when the step's responses are all in, groups whose
rewards are all equal are filtered, and if fewer than ``rollout_batch`` groups are left the
policy admits as many fresh prompts as are missing and waits again, until the batch is full or
the dataloader is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sortedrl.policies.base import (
    Action,
    Admit,
    Filter,
    Policy,
    RunContext,
    Sync,
    Train,
)
from sortedrl.policies.common import refuse_beyond_trace, samples_of, split_flat
from sortedrl.policies.view import ClusterView


@dataclass(frozen=True)
class SyncParams:
    rollout_batch: int = field(default=0, metadata={
        "help": "prompts per step; 0 takes the trace's prompts per step"})
    minibatches: int = field(default=1, metadata={
        "help": "updates per step, at most: the batch is cut into slices of ceil(groups / "
                "minibatches) whole groups, so 9 on 64 groups makes 8 (slices of 8) and more than "
                "the groups makes one per group; later ones train on stale data (staleness <= "
                "minibatches - 1)"})
    filter_groups: bool = field(default=False, metadata={
        "help": "dynamic sampling: drop groups with all-equal rewards, refill the batch"})

    def __post_init__(self) -> None:
        if self.rollout_batch < 0:
            raise ValueError(f"rollout_batch must be >= 0, got {self.rollout_batch}")
        if self.minibatches < 1:
            raise ValueError(f"minibatches must be >= 1, got {self.minibatches}")


class SyncPolicy(Policy):
    """verl's synchronous baseline: admit a whole step, wait for all of it, train, sync."""

    name = "sync"
    Params = SyncParams

    def __init__(self, params: SyncParams | None = None, ctx: RunContext | None = None) -> None:
        super().__init__(params, ctx)
        refuse_beyond_trace(self.ctx, "rollout_batch", self.params.rollout_batch, "prompts")
        self.batch = self.params.rollout_batch or self.ctx.prompts_per_step
        self.step_samples: list[int] = []
        self.kept: list[int] = []  # filter_groups: groups kept so far for this step's batch
        self.pending: list[list[int]] = []

    def staleness_bound(self) -> int:
        return self.params.minibatches - 1

    def on_start(self, view: ClusterView) -> list[Action]:
        return self._next_step(view)

    on_sync_done = on_start

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        if view.admitted or not self.step_samples or view.trainer_busy or self.pending:
            return []
        out: list[Action] = []
        if self.params.filter_groups:
            out, refill = self._filter(view)
            if refill or not self.step_samples:
                return out + refill
        batch, k, n = self.step_samples, self.params.minibatches, view.group_size
        size = -(-len(batch) // n // k) * n  # whole groups in every minibatch
        self.pending = [batch[j:j + size] for j in range(0, len(batch), size)]
        return out + [Train(tuple(self.pending.pop(0)))]

    def on_update_done(self, view: ClusterView) -> list[Action]:
        if self.pending:
            return [Train(tuple(self.pending.pop(0)))]
        self.step_samples = []
        return [Sync()]

    def _filter(self, view: ClusterView) -> tuple[list[Action], list[Action]]:
        """Filter the finished step's flat groups; refill from the dataloader if short."""
        groups = sorted({view.group_of(i) for i in self.step_samples})
        kept, flat = split_flat(view, groups)
        self.kept += kept
        out: list[Action] = [Filter(tuple(flat))] if flat else []
        missing = (self.batch or view.num_groups) - len(self.kept)
        fresh = view.next_groups(missing) if missing > 0 else ()
        if fresh:
            self.step_samples = samples_of(view, fresh)
            return out, [Admit(tuple(self.step_samples))]
        self.step_samples = samples_of(view, self.kept)
        self.kept = []
        return out, []

    def _next_step(self, view: ClusterView) -> list[Action]:
        groups = view.next_groups(self.batch or view.num_groups)
        if not groups:
            return []
        samples = samples_of(view, groups)
        self.step_samples = samples
        return [Admit(tuple(samples))]
