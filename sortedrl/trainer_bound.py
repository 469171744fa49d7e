"""The note that a disaggregated run's default trainer pool was too small for its trace.

Split out of :mod:`sortedrl.compare`: when ``async`` or ``one_step_off`` run on the default
split of the GPUs (a quarter train), a trainer busier than the rollout engines makes the policy
look slow for the split, not for its schedule; the note names the ``tune`` search over
``cluster.train_gpus`` that finds a better split.
"""

from __future__ import annotations

import dataclasses
import math

from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster


def trainer_bound_note(runs: list[tuple[str, dict]], ran_on: Cluster, named: bool = False
                       ) -> str | None:
    """Say so when runs (label, summary) on a disaggregated split whose trainer pool was sized
    by default (a quarter of the GPUs, AReaL's 75/25) kept the trainer busier than the rollout
    engines, by enough that their busy GPU-seconds balance at least half a trainer GPU above
    the split, and the GPUs allow a larger pool. A policy then looks slow for the split, not for
    its schedule: on logic-8k at 1,024 prompts x 16 on 8 x H100, `async` on 6+2 took 18,833 s
    against `sync`'s 6,710 s colocated, and 8,494 s on 3+5. The range to search runs from one
    more trainer GPU to one past the split that balances the run's busy GPU-seconds (each
    side's busy time x its GPUs, taken to scale with the GPUs, which rollout's tail does not:
    the best split measured on either side of the balance, within the range), over the splits
    the GPUs allow."""
    if ran_on.placement != "disaggregated" or ran_on.train_gpus:
        return None
    t, r = ran_on.trainer_gpus, ran_on.rollout_gpus
    balances = {label: ran_on.gpus * s["train_s"] * t / (s["train_s"] * t + s["rollout_s"] * r)
                for label, s in runs if s["train_s"] > 0}  # (above t: the trainer was busier)
    busier = [(label, s) for label, s in runs if balances.get(label, 0) >= t + 0.5]
    if not busier:  # (nearly balanced: one GPU more would not round to a better split)
        return None
    balance = max(balances[label] for label, _ in busier)
    sizes = [n for n in range(t + 1, min(ran_on.gpus, math.ceil(balance) + 2))
             if _splits(ran_on, n)]
    if not sizes:  # (on 2 GPUs, 1+1 is the only split)
        return None
    train = _share_range([s["train_s"] / s["makespan_s"] for _, s in busier])
    rollout = _share_range([s["rollout_s"] / s["makespan_s"] for _, s in busier])
    where = f"{ran_on.name}, the " if named else "the "
    return (f"note: on {where}{r}+{t} split, {', '.join(label for label, _ in busier)} kept the "
            f"trainer busier than the rollout engines ({train} of the run against {rollout}): a "
            "larger trainer pool may suit this trace; `tune --param "
            f"cluster.train_gpus={_values(sizes)} --objective makespan_s` searches it "
            "(train_gpus is a cluster file's field)")


def _values(sizes: list[int]) -> str:
    """``3:7`` for a run of sizes, else the sizes themselves (``4,6``: tp 2's whole engines)."""
    if len(sizes) > 1 and sizes == list(range(sizes[0], sizes[-1] + 1)):
        return f"{sizes[0]}:{sizes[-1]}"
    return ",".join(map(str, sizes))


def _splits(cluster: Cluster, train_gpus: int) -> bool:
    """Whether ``cluster``'s GPUs split into ``train_gpus`` trainer GPUs and whole engines."""
    try:
        dataclasses.replace(cluster, train_gpus=train_gpus).validate(cluster.name)
    except ConfigError:  # the rollout GPUs do not split into engines, or the trainer won't fit
        return False
    return True


def _share_range(shares: list[float]) -> str:
    lo, hi = round(100 * min(shares)), round(100 * max(shares))
    return f"{lo}%" if lo == hi else f"{lo}-{hi}%"
