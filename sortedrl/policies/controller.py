"""The controller: the one place where a policy's actions are checked and carried out.

It sits between a policy and a :class:`Backend`. The simulator (``sim.backend.SimBackend``) and
the real runner implement the same backend interface, so everything both need — legality checks,
sample bookkeeping, colocated placement rules, the decision records of the timeline, and the
end-of-run check — lives here once.

Rules it enforces (an illegal action raises :class:`~sortedrl.errors.PolicyError`):
- admit only waiting or paused samples; abort only admitted ones; discard only unadmitted ones;
- train only finished, untrained samples, one update at a time;
- filter only whole finished groups whose rewards are all equal (dynamic sampling);
- sync only when the trainer is idle and no sync is running;
- colocated placement: rollout and training share the GPUs, so a ``Train`` needs every engine
  to have nothing running, and rollout stays stopped until the update and any sync are done;
- a hook returns a list of actions (a tuple or None too), and an action's ids are a tuple, list
  or range (a 1-D integer NumPy array is converted): checked once per action, not per sample;
- a sample is regenerated fewer than ``MAX_ATTEMPTS`` times (:mod:`.removal`), and the run does not loop
  (regenerating or syncing with no progress: :mod:`sortedrl.policies.loops`).
An illegal action's error names the hook that returned it (``illegal action from on_idle:``),
or, at a top-up, the ``Keep`` order whose queue gave the sample and the hook that gave it.

It also serves the policy's standing orders (:mod:`sortedrl.policies.orders`): a finish that
wakes no ``WakeOn`` condition is handled here without calling the policy. Per-engine loads,
the admitted count and finished members per group are kept incrementally, so that placement and
the wake checks cost O(engines) and O(1), not a sum over every engine's queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sortedrl.errors import PolicyError
from sortedrl.policies.admission import Admission
from sortedrl.policies.backends import Backend
from sortedrl.policies.base import (
    Abort,
    Admit,
    Discard,
    Event,
    EventKind,
    Filter,
    Keep,
    Policy,
    SampleState,
    Sync,
    Train,
    WakeOn,
)
from sortedrl.policies.deferred import (
    DeferredFinishes,
    batched,
    book_finishes,
    group_counts,
    into_buffer,
    typed_view,
)
from sortedrl.policies.loops import RegenWatch, SyncWatch, stall_reason
from sortedrl.policies.orders import StandingOrders
from sortedrl.policies.removal import Removal
from sortedrl.policies.returns import (
    ID_FIELD,
    ID_SEQUENCES,
    hook_at,
    hook_name,
    not_a_list,
    not_an_action,
    users_bug,
    with_id_tuple,
)
from sortedrl.policies.view import ClusterView, PublicState
from sortedrl.timeline import Timeline

FINISHED, TRAINED, DISCARDED = SampleState.FINISHED, SampleState.TRAINED, SampleState.DISCARDED


class Controller(Admission, Removal):
    """Checks and applies a policy's actions on a backend, and keeps the public bookkeeping."""

    def __init__(self, policy: Policy, prompt_id: np.ndarray, prompt_len: Sequence[int],
                 group_size: int, backend: Backend, timeline: Timeline,
                 rewards: Sequence[float] | Mapping[int, float] | None = None) -> None:
        """``rewards[i]``: sample i's reward, read only when it finishes (the grader's verdict;
        the real backend fills it as responses finish). ``None``: the trace has no rewards."""
        self.policy = policy
        if isinstance(rewards, np.ndarray) and rewards.dtype == np.float64 and rewards.ndim == 1:
            rewards = memoryview(np.ascontiguousarray(rewards))  # reads Python floats, no copy
        self._rewards = rewards
        self.backend = backend
        self.timeline = timeline
        self.s = PublicState(prompt_id, prompt_len, group_size, backend.engine_infos(),
                             backend.placement)
        self.s.rewarded = rewards is not None
        self.view = ClusterView(self.s)
        self.settled = 0  # trained + discarded
        self.rollout_on = True
        self._dispatching = False
        self.orders = StandingOrders()
        self.deferred: DeferredFinishes | None = None  # finishes booked in batches (its doc)
        self.event: Event | None = None  # the event whose hook's actions are being applied
        self.regens = RegenWatch(len(prompt_len))
        self.syncs = SyncWatch()

    def defer_finishes(self, lengths) -> DeferredFinishes:
        """A sink for the finishes of a policy that never hears one, booked before the next
        event (:mod:`sortedrl.policies.deferred`); ``lengths``: the backend's ``array('i')``."""
        if self.policy.listens_to_finishes:
            raise RuntimeError(f"policy {self.policy.name} hears finishes: they cannot wait")
        self.deferred = DeferredFinishes(self, lengths)
        return self.deferred

    # -- run ---------------------------------------------------------------------------------

    def run(self) -> None:
        self.backend.run(self)
        if self.deferred is not None and self.deferred.pending:
            self.deferred.book()
        if not self.done:
            raise PolicyError(f"policy {self.policy.name} stalled at t={self.backend.now():.3f}s: "
                              + stall_reason(self.s.state) + self.orders.stalled(self.s, self.policy))

    @property
    def done(self) -> bool:
        return self.settled == len(self.s.state)

    def start(self) -> None:
        self.dispatch(Event(EventKind.STARTED))

    # -- callbacks from the backend ------------------------------------------------------------

    def dispatch(self, event: Event) -> None:
        """Hand one event to the policy and apply what it returns."""
        if self._dispatching:
            raise RuntimeError("re-entrant dispatch: a backend reported an event while acting")
        self._dispatching = True
        try:
            if self.deferred is not None and self.deferred.pending:
                self.deferred.book()
            self.s.now = self.backend.now()
            if event.kind is EventKind.FINISHED:
                event = self.orders.deliver(event, self.hears(event.samples))
            if event is not None:
                if event.kind is EventKind.TURN_DONE:
                    self.syncs.turns += 1  # progress, as a finish is
                self.event = event
                try:
                    actions = self.policy.on_event(event, self.view)
                except Exception as e:  # a user's policy's bug: one line naming where it is
                    bug = users_bug(self.policy, e, hook_name(self.policy, event))
                    if bug is e:
                        raise
                    raise bug from None
                if type(actions) is not list:  # (a tuple or None do too)
                    if actions is None:
                        actions = ()
                    elif type(actions) is not tuple:
                        raise not_a_list(self.policy, actions, event)
                for action in actions:
                    self._apply(action)
            self.event = None  # (a Keep's top-up is the controller's own)
            self.serve_keep()
            if (self.s.placement == "colocated" and not self.rollout_on
                    and not self.s.trainer_busy and not self.s.syncing):
                self.rollout_on = True
                self.backend.set_rollout(True)
        finally:
            self._dispatching = False

    def hears(self, samples) -> bool:
        """Whether the policy must hear the finish of ``samples`` (booked already), or the
        controller serves it alone (standing orders)."""
        return self.orders.hears(self.s, self.policy.listens_to_finishes, samples)

    def serve_keep(self) -> None:
        """Top up from the policy's ``Keep`` order (nothing when none is in force)."""
        take, drop = self.orders.take(self.s)
        if drop:
            self._abort(Abort(tuple(drop), keep_tokens=False))
        if len(take) == 1:  # the common top-up: one finish, one admission
            self._admit_one(take[0])
        elif take:
            self._admit(Admit(tuple(take)))

    def samples_finished(self, samples: list[int], lengths: list[int]) -> None:
        """Bookkeeping for finished samples; ``lengths[i]`` is sample i's final length."""
        if batched(samples, lengths, self._rewards):  # (the same stores, on NumPy views)
            book_finishes(self, samples, lengths)
        else:
            self._book_finishes(samples, lengths)
        if self.orders.wake is not None:
            self.orders.unheard += samples

    def _book_finishes(self, samples: list[int], lengths: list[int]) -> None:
        """:func:`~sortedrl.policies.deferred.book_finishes`, a sample at a time (a few finishes,
        or lengths and rewards that are no arrays: the real runner's)."""
        s = self.s
        state, gen, resp, eng, buf = s.state, s.generated, s.response_len, s.engine_of, s.buffer
        load, fin, n_group, need = s.load, s.finished_in, s.group_size, s.complete_at
        rewards, reward = self._rewards, s.reward
        if rewards is not None:
            for i in samples:
                reward[i] = float(rewards[i])
        for i in samples:
            n = lengths[i]
            state[i] = FINISHED
            gen[i] = n
            resp[i] = n
            load[eng[i]] -= 1
            eng[i] = -1
            buf[i] = None
            g = i // n_group
            c = fin[g] + 1
            fin[g] = c
            if c == need:
                s.complete += 1
        s.admitted -= len(samples)

    def samples_finished_in_arrays(self, samples: list[int]) -> None:
        """The rest of :meth:`samples_finished` for finishes whose per-sample arrays (state,
        tokens, engine, reward, loads) the simulator's compiled loop booked (sim/pool_keep.py):
        the buffer, the finished members per group, the counts and the unheard."""
        into_buffer(self.s, samples)
        if self.orders.wake is not None:
            self.orders.unheard += samples

    def sample_preempted(self, sample: int, tokens: int) -> None:
        self.s.generated[sample] = tokens  # still admitted: back in its engine's queue

    def samples_preempted(self, rows: np.ndarray) -> None:
        """:meth:`sample_preempted` of each ``(sample, tokens)`` row, in order (a sample
        preempted twice keeps its last row's tokens)."""
        last = rows[::-1]  # (a sample's last row first: np.unique keeps each one's first)
        _, first = np.unique(last[:, 0], return_index=True)
        typed_view(self.s.generated, np.int32)[last[first, 0]] = last[first, 1]

    def update_done(self) -> None:
        self.s.version += 1
        self.s.trainer_busy = False
        self.dispatch(Event(EventKind.UPDATE_DONE))

    def sync_done(self) -> None:
        self.s.syncing = False
        self.dispatch(Event(EventKind.SYNC_DONE))

    # -- actions ---------------------------------------------------------------------------------

    def _apply(self, action: object) -> None:
        field = ID_FIELD.get(type(action))
        if field is not None and type(getattr(action, field)) not in ID_SEQUENCES:
            action = with_id_tuple(self.policy, action, field, self.hook)
        if isinstance(action, Admit):
            self._admit(action)
        elif isinstance(action, Train):
            self._train(action)
        elif isinstance(action, Sync):
            self._sync()
        elif isinstance(action, Abort):
            self._abort(action)
        elif isinstance(action, Discard):
            self._discard(action)
        elif isinstance(action, Filter):
            self._filter(action)
        elif isinstance(action, (Keep, WakeOn)):
            self.orders.set(action, self.s, self.policy, self.hook)
        else:
            raise not_an_action(self.policy, action, self.event)

    @property
    def hook(self) -> str | None:
        """The hook whose actions are being applied (None: the controller's own, a ``Keep``'s)."""
        return None if self.event is None else hook_name(self.policy, self.event)

    def _bad(self, what: str) -> PolicyError:
        by = (f" from {self.hook}{hook_at(self.policy, self.hook)}" if self.event is not None
              else self.orders.keep_source(self.policy))
        return PolicyError(f"policy {self.policy.name}: illegal action{by}: {what}")

    def _check_ids(self, samples: tuple[int, ...], verb: str) -> None:
        n = len(self.s.state)
        if len(samples) > 1 and len(set(samples)) != len(samples):
            raise self._bad(f"{verb} lists a sample twice")
        if samples and set(map(type, samples)) == {int} and min(samples) >= 0 and max(samples) < n:
            return  # the common case, checked in C (a batch of a whole step runs through here)
        for i in samples:
            if not isinstance(i, (int, np.integer)) or not 0 <= i < n:
                raise self._bad(f"{verb} of unknown sample {i!r}")

    def _train(self, act: Train) -> None:
        s = self.s
        if not act.samples:
            raise self._bad("train on an empty batch")
        self._check_ids(act.samples, "train")
        if s.trainer_busy:
            raise self._bad("train while the trainer is busy (wait for update_done)")
        if s.syncing:
            raise self._bad("train while a weight sync is running")
        if set(map(s.state.__getitem__, act.samples)) != {FINISHED}:  # (checked in C; which one:)
            for i in act.samples:
                if s.state[i] != FINISHED:
                    raise self._bad(f"train on sample {i}, which is {SampleState(s.state[i]).name.lower()} "
                                    "(Train takes finished samples: view.finished())")
        if s.placement == "colocated":
            busy = [e.index for e in s.engines if e.running()]
            if busy:
                raise self._bad(f"train while engines {busy} are generating on the shared GPUs "
                                "(colocated: abort or wait first)")
            if self.rollout_on:
                self.rollout_on = False
                self.backend.set_rollout(False)
        fin, full, buffer = s.finished_in, s.complete_at, s.buffer
        for g, c in group_counts(act.samples, s.group_size):  # self._unfinish of each, by group
            before = fin[g]
            fin[g] = before - c
            if before - c < full <= before:  # one at a time, the count passes `full` once
                s.complete -= 1
        typed_view(s.state, np.uint8)[np.asarray(act.samples, dtype=np.int64)] = TRAINED
        for i in act.samples:
            del buffer[i]
        self.settled += len(act.samples)
        self.regens.count = 0
        s.trainer_busy = True
        self.backend.train(list(act.samples), s.version)

    def _sync(self) -> None:
        s = self.s
        if s.trainer_busy:
            raise self._bad("sync while the trainer is busy")
        if s.syncing:
            raise self._bad("sync while a sync is running")
        if self.done:  # every sample is trained: no engine will run these weights
            return
        if self.syncs.synced((s.version, self.settled, s.admitted, len(s.buffer), len(s.paused),
                              s.started_count, self.syncs.turns)):
            raise self.syncs.error(self.policy.name, self.hook)
        if s.placement == "colocated" and self.rollout_on:
            self.rollout_on = False
            self.backend.set_rollout(False)
        s.syncing = True
        self.backend.sync(s.version)
