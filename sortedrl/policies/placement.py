"""Default placement of admitted samples onto rollout engines.

The controller uses it when an ``Admit`` names no engine: water-fill by load so engines end
equally loaded, in contiguous blocks, and (with the ``keep_groups`` hint, the default) cut
blocks only between GRPO groups, so a group's shared prompt is prefilled and held once per
engine under prefix caching.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

import numpy as np


def spread(samples: list[int], loads: list[int], group_size: int = 1
            ) -> list[tuple[int, list[int]]]:
    """Water-fill ``samples`` onto engines so loads end as equal as possible.

    Lower engine indices take the remainder; each engine gets one contiguous block. With
    ``group_size`` > 1 a block ends only where a group does, so each group's members share an
    engine (an engine's block may differ from its share by up to a group). Deterministic.
    """
    if len(samples) == 1:  # the common case: the least loaded engine, lowest index on ties
        return [(loads.index(min(loads)), samples)]
    order = sorted(range(len(loads)), key=lambda e: (loads[e], e))
    total = sum(loads) + len(samples)
    # find the level: engines below it are filled up to it
    share = [0] * len(loads)
    left = len(samples)
    below = list(accumulate(loads[e] for e in order))  # below[k - 1]: the k least loaded's sum
    for k in range(len(order), 0, -1):
        level = (below[k - 1] + left) // k
        if level >= loads[order[k - 1]]:
            extra = below[k - 1] + left - level * k
            for e in sorted(order[:k]):
                share[e] = level - loads[e] + (1 if extra > 0 else 0)
                extra -= 1 if extra > 0 else 0
            break
    assert sum(share) == left and total >= 0
    if group_size > 1:
        return blocks_by_group(samples, share, group_size)
    out, pos = [], 0
    for e in range(len(loads)):
        if share[e]:
            out.append((e, samples[pos:pos + share[e]]))
            pos += share[e]
    return out


def blocks_by_group(samples: list[int], share: list[int], group_size: int
                     ) -> list[tuple[int, list[int]]]:
    """Contiguous blocks of ``samples`` by ``share``, cut only between groups: each engine's
    block ends at the group start nearest its running total of shares (a tie cuts later, so
    lower engines take the remainder), so a block differs from its share by at most a group
    (the rule that moved on once a block held its share piled a group's overshoot onto each
    engine in turn and left the last ones empty)."""
    if not samples:
        return []
    targets = [e for e in range(len(share)) if share[e]]
    groups = np.asarray(samples, dtype=np.int64) // group_size
    bounds = [0, *(np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist(), len(samples)]
    blocks: list[tuple[int, list[int]]] = []
    begin = total = 0
    for e in targets[:-1]:
        total += share[e]
        k = bisect_left(bounds, total)  # bounds[k - 1] < total <= bounds[k]
        cut = bounds[k] if bounds[k] - total <= total - bounds[k - 1] else bounds[k - 1]
        if cut > begin:
            blocks.append((e, samples[begin:cut]))
            begin = cut
    if begin < len(samples):
        blocks.append((targets[-1], samples[begin:]))
    return blocks
