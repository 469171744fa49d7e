"""Admission: which engine gets an admitted sample, and the bookkeeping of admitting it.

Part of the :class:`~sortedrl.policies.controller.Controller` (a mixin, split out to keep each
module readable): the legality checks of an ``Admit``, the placement rule (a lone sample joins
an engine where a member of its group runs, for the shared prompt; a batch is spread by
:func:`~sortedrl.policies.placement.spread`), and the records. ``_admit_one`` is the same path,
flat, for the one-sample top-up of a ``Keep`` order, which runs once per finish.
"""

from __future__ import annotations

import numpy as np

from sortedrl.policies.base import Admit, SampleState
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.deferred import BATCH, group_counts, typed_view
from sortedrl.policies.placement import spread

WAITING, ADMITTED, PAUSED = SampleState.WAITING, SampleState.ADMITTED, SampleState.PAUSED  # hot paths
ADMISSIBLE = {int(WAITING), int(PAUSED)}


class Admission:
    """The controller's admission methods (they use its ``s``, ``timeline``, ``backend``,
    ``_bad`` and ``_check_ids``)."""

    def _admit(self, act: Admit) -> None:
        s, samples = self.s, act.samples
        if not samples:
            return
        self._check_ids(samples, "admit")
        state, started, n = s.state, s.started, s.group_size
        if not set(map(state.__getitem__, samples)) <= ADMISSIBLE:  # (checked in C; which one:)
            for i in samples:
                if state[i] != WAITING and state[i] != PAUSED:
                    raise self._bad(f"admit of sample {i}, which is {SampleState(state[i]).name.lower()}")
        e = act.engine
        if e is not None and (type(e) is bool or not isinstance(e, (int, np.integer))):
            raise self._bad(f"Admit.engine must be an int (an engine's index, 0 to {len(s.engines) - 1}) "
                            f"or None, got {type(e).__name__} {e!r}")  # (0.0 read as no engine 0)
        if e is not None and not 0 <= e < len(s.engines):
            raise self._bad(f"admit to unknown engine {e!r}")
        big = len(samples) >= BATCH  # a whole step's batch: NumPy; a few samples: loops
        for g in (g for g, _ in group_counts(samples, n)) if big else (i // n for i in samples):
            if not started[g]:
                started[g] = 1
                s.started_count += 1
        while s.next_group < s.num_groups and started[s.next_group]:
            s.next_group += 1
        plan = self._placement(act)
        now = self.backend.now()
        engine_of, paused, generated = s.engine_of, s.paused, s.generated
        for e, chunk in plan:
            if big:
                at = np.asarray(chunk, dtype=np.int64)
                gen = typed_view(generated, np.int32)[at].tolist()
                typed_view(state, np.uint8)[at] = ADMITTED
                typed_view(engine_of, np.int32)[at] = e
            else:
                gen = [generated[i] for i in chunk]
                for i in chunk:
                    state[i] = ADMITTED
                    engine_of[i] = e
            if paused:
                for i in chunk:
                    paused.pop(i, None)
            s.load[e] += len(chunk)
            s.admitted += len(chunk)
            self.timeline.admit(now, e, chunk)
            self.backend.admit(e, chunk, gen)

    def _admit_one(self, i: int) -> None:
        """``_admit(Admit((i,)))`` for a ``Keep`` top-up, flat: the same checks, placement and
        records, without building the action and its lists (it runs once per finish)."""
        s = self.s
        state = s.state
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(state):
            raise self._bad(f"admit of unknown sample {i!r}")
        if state[i] != WAITING and state[i] != PAUSED:
            raise self._bad(f"admit of sample {i}, which is {SampleState(state[i]).name.lower()}")
        n, started = s.group_size, s.started
        if not started[i // n]:
            started[i // n] = 1
            s.started_count += 1
            while s.next_group < s.num_groups and started[s.next_group]:
                s.next_group += 1
        loads, engine_of = s.load, s.engine_of
        least = min(loads)
        e = -1
        if n > 1:  # _placement's lone sample: join a member's engine (shared prompt)
            limit = least + n
            for j in range(i - i % n, i - i % n + n):
                f = engine_of[j]
                if f >= 0 and j != i and loads[f] < max(s.engines[f].max_num_seqs, limit):
                    e = f
                    break
        if e < 0:
            e = loads.index(least)
        state[i] = ADMITTED
        engine_of[i] = e
        if s.paused:
            s.paused.pop(i, None)
        loads[e] += 1
        s.admitted += 1
        chunk = [i]
        self.timeline.add("admit", self.backend.now(), e, chunk)  # chunk is ours: no copy
        self.backend.admit(e, chunk, [s.generated[i]])

    def admitted_in_arrays(self, samples: list[int]) -> None:
        """The rest of an admission of ``samples`` (in order) whose state, engine, loads and
        records the simulator's compiled loop made, from the Keep order's queue
        (sim/pool_keep.py): their pop from that queue and its budget, paused samples resumed,
        groups started."""
        s, orders, queue = self.s, self.orders, self.orders.keep.queue
        if type(queue) is SampleQueue:
            queue.drop_front(len(samples))
        else:
            for _ in samples:
                queue.popleft()
        if orders.budget is not None:
            orders.budget -= len(samples)
        s.admitted += len(samples)
        if s.paused:
            for i in samples:
                s.paused.pop(i, None)
        started = np.frombuffer(s.started, dtype=np.uint8)
        groups = np.unique(np.asarray(samples, dtype=np.int64) // s.group_size)
        fresh = groups[started[groups] == 0]
        started[fresh] = 1
        s.started_count += fresh.size
        del started  # (a bytearray cannot resize while a view holds it)
        started = s.started
        while s.next_group < s.num_groups and started[s.next_group]:
            s.next_group += 1

    def _placement(self, act: Admit) -> list[tuple[int, list[int]]]:
        """Which engine gets which admitted samples (see :func:`~sortedrl.policies.placement.spread`).
        A lone sample whose group has a member admitted on an engine joins it there (shared prompt), unless that
        engine is over both its ``max_num_seqs`` and the least load plus one group."""
        s, samples = self.s, list(act.samples)
        if act.engine is not None:
            return [(act.engine, samples)]
        loads = s.load
        n = s.group_size if act.keep_groups else 1
        if len(samples) == 1:  # the common case (a top-up), kept flat
            least = min(loads)
            if n > 1:
                i, engine_of, limit = samples[0], s.engine_of, least + n
                for j in range(i - i % n, i - i % n + n):
                    e = engine_of[j]
                    if e >= 0 and j != i and loads[e] < max(s.engines[e].max_num_seqs, limit):
                        return [(e, samples)]
            return [(loads.index(least), samples)]
        return spread(samples, loads, n)
