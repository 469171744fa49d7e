"""Small helpers shared by the policies: what is in flight, which groups are complete, which
samples are too stale, the queue a ``Keep`` order admits from, and the checks of count knobs."""

from __future__ import annotations

from collections import deque
from itertools import chain

import numpy as np

from sortedrl.policies.base import RunContext, SampleState
from sortedrl.policies.view import ClusterView

DONE = (SampleState.FINISHED, SampleState.TRAINED)


def refuse_negative(params: object, *knobs: str) -> None:
    """Refuse the first of ``knobs`` (count knobs of ``params``) below 0, naming that one knob
    and the value given: ``rollout_batch must be >= 0, got -1``."""
    for knob in knobs:
        value = getattr(params, knob)
        if value < 0:
            raise ValueError(f"{knob} must be >= 0, got {value}")


def refuse_beyond_trace(ctx: RunContext, knob: str, value: int, unit: str) -> None:
    """Refuse a batch knob (``unit``: ``prompts`` or ``samples``) set above all the trace
    holds: its first update would take every sample, and the run would not have the updates
    the value names (``rollout_batch=1000`` on 256 prompts ran one update, without a word).
    Nothing is checked without a trace (``num_groups`` 0) or for 0, the knob's default."""
    total = ctx.num_groups * (ctx.group_size if unit == "samples" else 1)
    if ctx.num_groups and value > total:
        raise ValueError(f"{knob} {value:,} is more {unit} than the trace holds ({total:,}), "
                         "so one update would train all of them")


def in_flight(view: ClusterView) -> list[int]:
    """Every admitted sample (running, queued, or away on a tool call), engine by engine."""
    out: list[int] = []
    for e in range(view.engines):
        out += view.running(e)
        out += view.queued(e)
        out += view.in_tool(e)
    return out


def samples_of(view: ClusterView, groups) -> list[int]:
    """Every sample of ``groups``, group after group (``[i for g in groups for i in
    view.group_samples(g)]``, chained in C: a step's batch is thousands)."""
    return list(chain.from_iterable(map(view.group_samples, groups)))


def finished_in(view: ClusterView, group: int) -> list[int]:
    return [i for i in view.group_samples(group) if view.state(i) == SampleState.FINISHED]


def waiting_in(view: ClusterView, group: int) -> list[int]:
    """Samples of a group that are not admitted and not done: paused ones first."""
    paused = [i for i in view.group_samples(group) if view.state(i) == SampleState.PAUSED]
    fresh = [i for i in view.group_samples(group) if view.state(i) == SampleState.WAITING]
    return paused + fresh


def waiting_in_groups(view: ClusterView, groups) -> list[int]:
    """``waiting_in`` of each of ``groups``, one after the other, read in one pass."""
    found = np.asarray(groups, dtype=np.int64).reshape(-1)
    if not found.size:
        return []
    bad = np.flatnonzero((found < 0) | (found >= view.num_groups))
    if bad.size:
        view.group_samples(int(found[bad[0]]))  # (raises its error)
    n = view.group_size
    members = found[:, None] * n + np.arange(n)
    state = view.states(members).reshape(members.shape)
    rank = np.where(state == SampleState.PAUSED, 0, np.where(state == SampleState.WAITING, 1, 2))
    first = np.argsort(rank, axis=1, kind="stable")  # paused, then fresh, each in id order
    members, rank = np.take_along_axis(members, first, axis=1), np.take_along_axis(rank, first, axis=1)
    return members[rank < 2].tolist()


def shortest_first(view: ClusterView, samples) -> tuple[int, ...]:
    """Finished samples sorted by observed length (ties by index): SortedRL's update order."""
    idx = np.asarray(samples, dtype=np.int64).reshape(-1)
    return tuple(idx[np.lexsort((idx, view.response_lens(idx)))].tolist())


def complete_groups(view: ClusterView, samples) -> list[int]:
    """Groups all of whose samples are among ``samples`` (finished ones), in first-seen order."""
    groups = _groups_of(view, samples)
    found, first, count = np.unique(groups, return_index=True, return_counts=True)
    whole = count == view.group_size
    return found[whole][np.argsort(first[whole], kind="stable")].tolist()


def completion_order(view: ClusterView, samples) -> list[int]:
    """Groups all of whose samples are among ``samples`` (finished ones, in finish order), in
    the order they completed (their last member's finish)."""
    groups = _groups_of(view, samples)
    n = view.group_size
    by_group = np.argsort(groups, kind="stable")  # each group's positions, in order
    found, start, count = np.unique(groups[by_group], return_index=True, return_counts=True)
    whole = count >= n
    completed_at = by_group[start[whole] + n - 1]  # the position of each group's n-th member
    return found[whole][np.argsort(completed_at, kind="stable")].tolist()


def _groups_of(view: ClusterView, samples) -> np.ndarray:
    """``view.group_of`` of each sample (the first negative id raises its error)."""
    idx = np.asarray(samples, dtype=np.int64).reshape(-1)
    if idx.size and idx.min() < 0:
        view.group_of(int(idx[np.flatnonzero(idx < 0)[0]]))
    return idx // view.group_size


# -- dynamic sampling (DAPO's filter_groups) ------------------------------------------------------


def is_flat(view: ClusterView, group: int) -> bool:
    """A finished group whose rewards are all equal: every GRPO advantage would be 0."""
    return len({view.reward(i) for i in view.group_samples(group)}) == 1


def flat_groups(view: ClusterView, samples) -> list[int]:
    """Dynamic sampling: the groups that ``samples`` (just finished; or a ``FINISHED`` event, as
    policies written for the old interface pass) completed whose rewards are all equal."""
    samples = getattr(samples, "samples", samples)
    return [g for g in newly_complete(view, samples) if is_flat(view, g)]


def newly_complete(view: ClusterView, samples) -> list[int]:
    """Groups of ``samples`` (just finished) all of whose members are now finished, in order."""
    out: list[int] = []
    for i in samples:
        g = view.group_of(i)
        if g not in out and all(view.state(j) == SampleState.FINISHED for j in view.group_samples(g)):
            out.append(g)
    return out


def split_flat(view: ClusterView, groups) -> tuple[list[int], list[int]]:
    """``(kept, flat)``: complete groups with some reward spread, and those without."""
    kept, flat = [], []
    for g in groups:
        (flat if is_flat(view, g) else kept).append(g)
    return kept, flat


# -- staleness -------------------------------------------------------------------------------------


def too_stale(view: ClusterView, sample: int, bound: int) -> bool:
    """Whether ``sample``'s oldest kept token is more than ``bound`` versions behind the trainer."""
    v = view.oldest_version(sample)
    return v is not None and view.version - v > bound


def stale_among(view: ClusterView, samples, bound: int) -> list[int]:
    """Those of ``samples`` that are :func:`too_stale`, in their order (one batched read)."""
    oldest = view.oldest_versions(samples)
    at = np.flatnonzero((oldest >= 0) & (view.version - oldest > bound))
    return np.asarray(samples, dtype=np.int64)[at].tolist()


# -- the queue of a Keep order -----------------------------------------------------------------------


class SampleQueue:
    """Samples to admit, front first: explicit ids (``ids``), then the fresh samples
    ``next_fresh .. fresh_end - 1`` in dataloader order, held as two numbers rather than a list
    of a whole run's ids. A ``Keep`` order pops from the front; the policy adds to it."""

    def __init__(self) -> None:
        self.ids: deque[int] = deque()
        self.next_fresh = 0
        self.fresh_end = 0

    def __len__(self) -> int:
        return len(self.ids) + self.fresh_end - self.next_fresh

    def popleft(self) -> int:
        if self.ids:
            return self.ids.popleft()
        if self.next_fresh >= self.fresh_end:
            raise IndexError("pop from an empty SampleQueue")
        self.next_fresh += 1
        return self.next_fresh - 1

    def drop_front(self, n: int) -> None:
        """Pop ``n`` samples from the front at once (the queue holds as many)."""
        ids = self.ids
        k = min(n, len(ids))
        if k == len(ids):
            ids.clear()
        else:
            for _ in range(k):
                ids.popleft()
        self.next_fresh += n - k

    def extend(self, samples) -> None:
        """Queue ``samples`` after the other explicit ids (still before the fresh ones)."""
        self.ids.extend(samples)

    def add_fresh(self, end: int) -> None:
        """Queue the fresh samples up to ``end`` (exclusive)."""
        self.fresh_end = max(self.fresh_end, end)
