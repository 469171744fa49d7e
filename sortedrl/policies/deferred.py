"""Finishes booked in batches: the controller's per-finish bookkeeping, deferred and vectorised.

A policy that never hears a finish (``Policy.listens_to_finishes`` false: ``sync``,
``one_step_off``, ``oracle_sorted``) reads the controller's state only when it is called, at an
event. So the simulator need not book each finish as it happens: its engines append the finished
samples here, and the controller books them all, in finish order, before it next dispatches an
event (or ends the run). The updates are exactly :meth:`Controller.samples_finished`'s, done on
NumPy views of the typed arrays, so one batch costs a few array operations instead of a Python
loop of a dozen stores per sample (about a tenth of the simulator's time under ``sync``).
"""

from __future__ import annotations

import numpy as np

from sortedrl.policies.base import SampleState

FINISHED = SampleState.FINISHED


BATCH = 64  # samples from which an update of per-sample arrays is done with NumPy (else a loop)


def typed_view(typed, dtype) -> np.ndarray:
    """A writable NumPy view of a typed array (``array.array`` or ``bytearray``): no copy."""
    return np.frombuffer(typed, dtype=dtype)


def group_counts(samples, group_size: int) -> list[tuple[int, int]]:
    """``(group, members of samples in it)`` for each group that ``samples`` touch, in order."""
    groups, counts = np.unique(np.asarray(samples, dtype=np.int64) // group_size, return_counts=True)
    return list(zip(groups.tolist(), counts.tolist(), strict=True))


class DeferredFinishes:
    """The engines' report sink for a policy that never hears a finish (see the module doc)."""

    __slots__ = ("ctl", "pending", "lengths")

    def __init__(self, controller, lengths) -> None:
        """``lengths``: the backend's typed array (``array('i')``) of each sample's length."""
        self.ctl = controller
        self.pending: list[int] = []  # finished, not yet booked, in finish order
        self.lengths = lengths

    def samples_finished(self, samples: list[int], lengths) -> None:
        self.pending += samples

    def sample_preempted(self, sample: int, tokens: int) -> None:
        self.ctl.sample_preempted(sample, tokens)  # a running sample: independent of the finishes

    def book(self) -> None:
        """Book the pending finishes, as ``Controller.samples_finished(pending, lengths)``."""
        samples = self.pending[:]
        self.pending.clear()  # (the engines append to this very list)
        book_finishes(self.ctl, samples, self.lengths)


def batched(samples: list[int], lengths, rewards) -> bool:
    """Whether :func:`book_finishes` books these: a batch of at least BATCH, lengths a typed
    ``array('i')``, rewards none or an array (not a mapping)."""
    return (len(samples) >= BATCH and getattr(lengths, "typecode", None) == "i"
            and (rewards is None or isinstance(rewards, (memoryview, np.ndarray))))


def book_finishes(ctl, samples: list[int], lengths) -> None:
    """:meth:`Controller.samples_finished`'s bookkeeping of ``samples`` (but the unheard) on
    NumPy views; ``lengths``: a typed array (``array('i')``) of each sample's length."""
    s = ctl.s
    idx = np.array(samples, dtype=np.intp)
    n = typed_view(lengths, np.int32)[idx]
    rewards = ctl._rewards
    if rewards is not None:
        typed_view(s.reward, np.float64)[idx] = np.asarray(rewards)[idx]
    typed_view(s.state, np.uint8)[idx] = FINISHED
    typed_view(s.generated, np.int32)[idx] = n
    typed_view(s.response_len, np.int32)[idx] = n
    engine_of = typed_view(s.engine_of, np.int32)
    engines, counts = np.unique(engine_of[idx], return_counts=True)
    load = s.load
    for e, c in zip(engines.tolist(), counts.tolist(), strict=True):
        load[e] -= c
    engine_of[idx] = -1
    into_buffer(s, samples)


def into_buffer(s, samples: list[int]) -> None:
    """Finished ``samples`` join the buffer (in order) and their groups' counts; they leave the
    admitted count."""
    s.buffer.update(dict.fromkeys(samples))
    fin, need = s.finished_in, s.complete_at
    for g, c in group_counts(samples, s.group_size):
        before = fin[g]
        fin[g] = before + c
        if before < need <= before + c:  # one at a time, the count passes `need` once
            s.complete += 1
    s.admitted -= len(samples)
