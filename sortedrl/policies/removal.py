"""Removal: the controller's ``Abort``, ``Discard`` and ``Filter``, and a sample leaving the
finished state.

Part of the :class:`~sortedrl.policies.controller.Controller` (a mixin, split out to keep each
module readable, as :mod:`.admission` is): the legality checks of each action and the
bookkeeping that takes samples out of the running, waiting or finished sets (an aborted sample
is paused with its tokens or regenerated from scratch; a discarded or filtered one is settled
and never trained).
"""

from __future__ import annotations

import numpy as np

from sortedrl.errors import PolicyError
from sortedrl.policies.admission import ADMITTED, PAUSED, WAITING
from sortedrl.policies.base import Abort, Discard, Filter, SampleState
from sortedrl.policies.deferred import BATCH, typed_view

FINISHED, DISCARDED = SampleState.FINISHED, SampleState.DISCARDED
MAX_ATTEMPTS = 10_000  # a sample regenerated this often: the policy drops and re-admits forever


class Removal:
    """The controller's removal methods (they use its ``s``, ``timeline``, ``backend``,
    ``regens``, ``settled``, ``hook``, ``policy``, ``_bad`` and ``_check_ids``)."""

    def _abort(self, act: Abort) -> None:
        s, samples = self.s, list(act.samples)
        if not samples:
            return
        self._check_ids(act.samples, "abort")
        allowed = (ADMITTED,) if act.keep_tokens else (ADMITTED, PAUSED, FINISHED)
        states = typed_view(s.state, np.uint8)[np.asarray(samples, dtype=np.intp)]
        bad = ~np.isin(states, allowed)
        if bad.any():
            i = samples[int(np.argmax(bad))]
            raise self._bad(f"abort (keep_tokens={act.keep_tokens}) of sample {i}, which is "
                            f"{SampleState(s.state[i]).name.lower()}")
        live = [samples[k] for k in np.flatnonzero(states == ADMITTED).tolist()]
        if not act.keep_tokens and self.regens.dropped(len(samples)):
            raise self.regens.error(self.policy.name, self.hook)
        kept = self.backend.abort(live) if live else []
        self.timeline.abort(self.backend.now(), samples, act.keep_tokens)
        if len(samples) >= BATCH:  # (the same stores on NumPy views: a harvest aborts thousands)
            self._abort_batch(samples, live, kept, act.keep_tokens)
            return
        tokens = dict(zip(live, kept, strict=True))
        for i in live:
            s.load[s.engine_of[i]] -= 1
        s.admitted -= len(live)
        for i in samples:
            if s.state[i] == FINISHED:
                self._unfinish(i)
            s.engine_of[i] = -1
            if act.keep_tokens:
                s.generated[i] = tokens[i]
                s.state[i] = PAUSED
                s.paused[i] = None
            else:  # the (partial or finished) response is wasted; regenerate from scratch
                s.generated[i] = 0
                s.oldest[i] = -1
                s.attempt[i] += 1
                if s.attempt[i] >= MAX_ATTEMPTS:
                    raise PolicyError(f"policy {self.policy.name} regenerated sample {i} "
                                      f"{MAX_ATTEMPTS:,} times: it drops and re-admits responses "
                                      "forever (Abort with keep_tokens=False, then Admit)")
                s.state[i] = WAITING
                s.paused.pop(i, None)
                s.buffer.pop(i, None)
                s.response_len[i] = -1  # its reward goes with it (read only beside a length)

    def _abort_batch(self, samples: list[int], live: list[int], kept: list[int], keep_tokens: bool) -> None:
        """The rest of :meth:`_abort` of ``samples`` (checked; ``live``: the admitted ones, in
        order, which kept ``kept`` tokens each), as its loops would leave the state."""
        s = self.s
        idx = np.asarray(samples, dtype=np.intp)
        state, engine_of = typed_view(s.state, np.uint8), typed_view(s.engine_of, np.int32)
        if live:
            engines, counts = np.unique(engine_of[np.asarray(live, dtype=np.intp)], return_counts=True)
            for e, c in zip(engines.tolist(), counts.tolist(), strict=True):
                s.load[e] -= c
        s.admitted -= len(live)
        finished = idx[state[idx] == FINISHED].tolist()
        for i in finished:
            self._unfinish(i)
        engine_of[idx] = -1
        if keep_tokens:  # (every one was admitted: live is samples)
            typed_view(s.generated, np.int32)[idx] = kept
            state[idx] = PAUSED
            s.paused.update(dict.fromkeys(samples))
            return
        attempt = typed_view(s.attempt, np.int32)
        typed_view(s.generated, np.int32)[idx] = 0
        typed_view(s.oldest, np.int32)[idx] = -1
        attempt[idx] += 1
        if int(attempt[idx].max()) >= MAX_ATTEMPTS:
            i = samples[int(np.argmax(attempt[idx] >= MAX_ATTEMPTS))]
            raise PolicyError(f"policy {self.policy.name} regenerated sample {i} "
                              f"{MAX_ATTEMPTS:,} times: it drops and re-admits responses "
                              "forever (Abort with keep_tokens=False, then Admit)")
        state[idx] = WAITING
        if s.paused:
            for i in samples:
                s.paused.pop(i, None)
        for i in finished:
            s.buffer.pop(i, None)
        typed_view(s.response_len, np.int32)[idx] = -1

    def _discard(self, act: Discard) -> None:
        s = self.s
        self._check_ids(act.samples, "discard")
        for i in act.samples:
            if s.state[i] not in (WAITING, PAUSED, FINISHED):
                raise self._bad(f"discard of sample {i}, which is {SampleState(s.state[i]).name.lower()}")
        for i in act.samples:
            if not s.started[i // s.group_size]:
                s.started[i // s.group_size] = 1
                s.started_count += 1
            if s.state[i] == FINISHED:
                self._unfinish(i)
            s.state[i] = DISCARDED
            s.paused.pop(i, None)
            s.buffer.pop(i, None)
        while s.next_group < s.num_groups and s.started[s.next_group]:
            s.next_group += 1
        self.settled += len(act.samples)
        if act.samples:
            self.regens.count = 0
            self.timeline.discard(self.backend.now(), list(act.samples))

    def _filter(self, act: Filter) -> None:
        s, n = self.s, self.s.group_size
        if len(set(act.groups)) != len(act.groups):
            raise self._bad("filter lists a group twice")
        dropped: list[int] = []
        for g in act.groups:
            if not isinstance(g, (int, np.integer)) or not 0 <= g < s.num_groups:
                raise self._bad(f"filter of unknown group {g!r}")
            members = range(g * n, (g + 1) * n)
            done = [i for i in members if s.state[i] == FINISHED]
            if not done or any(s.state[i] not in (FINISHED, DISCARDED) for i in members):
                raise self._bad(f"filter of group {g}, which is not finished")
            rewards = {s.reward[i] for i in done} if s.rewarded else set()
            if len(rewards) != 1:
                raise self._bad(f"filter of group {g}, whose rewards are not all equal")
            dropped += done
        for i in dropped:
            self._unfinish(i)
            s.state[i] = DISCARDED
            del s.buffer[i]
        self.settled += len(dropped)
        if dropped:
            self.regens.count = 0
            self.timeline.filter(self.backend.now(), dropped)

    def _unfinish(self, i: int) -> None:
        """Sample i leaves the finished state: one finished member fewer in its group."""
        s = self.s
        g = i // s.group_size
        if s.finished_in[g] == s.complete_at:
            s.complete -= 1
        s.finished_in[g] -= 1
