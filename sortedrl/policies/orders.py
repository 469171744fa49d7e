"""Standing orders: the per-finish work a policy leaves to the controller.

A policy that reacts to every finish only to top the engines up, or to count finishes until a
trigger, need not be called per finish. It returns ``Keep`` ("keep N admitted from this queue")
and ``WakeOn`` ("call me when k samples have finished, a group is complete, nothing is left")
once; the controller keeps them and serves every finish itself, as vLLM's waiting queue serves
its scheduler. Both backends get this for free, because both report finishes to the controller.

The rules, in the order the controller applies them at a finish:
1. the bookkeeping (sample states, per-engine loads, finished members per group) is updated;
2. the policy hears the finish (``on_finished``) when a ``WakeOn`` condition holds, or, with no
   ``WakeOn`` in force, when it listens to finishes at all (``Policy.listens_to_finishes``).
   Under ``WakeOn`` it hears every sample finished since it last heard one (a finish booked
   when engines were caught up to the same instant included), so none goes unseen;
3. ``Keep`` is served after the policy's actions, if it was called: admit from the queue's front
   until the window is full, regenerating paused samples past ``max_span``.

The state here is not checkpointed: a policy reissues its orders from the hooks that follow an
update (``on_update_done``, ``on_sync_done``), where a resumed run restarts.
"""

from __future__ import annotations

import difflib

import numpy as np

from sortedrl.errors import PolicyError
from sortedrl.policies.base import Event, EventKind, Keep, Policy, WakeOn
from sortedrl.policies.returns import given_by, hook_at
from sortedrl.policies.view import PublicState

COUNTS = {Keep: ("window", "budget", "max_span"), WakeOn: ("finished", "groups", "members")}
OPTIONAL = ("budget", "max_span")  # None: no limit


class StandingOrders:
    """The ``Keep`` and ``WakeOn`` orders in force, and the checks that serve them."""

    __slots__ = ("keep", "budget", "wake", "unheard", "keep_hook")

    def __init__(self) -> None:
        self.keep: Keep | None = None
        self.budget: int | None = None  # admissions left under ``keep.budget``
        self.wake: WakeOn | None = None
        self.unheard: list[int] = []  # finished since the policy last heard a finish (WakeOn)
        self.keep_hook: str | None = None  # the hook that gave ``keep`` (named in its errors)

    def deliver(self, event: Event, heard: bool) -> Event | None:
        """The ``FINISHED`` event the policy hears (None: it hears none): under ``WakeOn``, every
        sample finished since it last heard one."""
        if not heard:
            return None
        if self.wake is None:
            return event
        samples, self.unheard = tuple(self.unheard), []
        return Event(EventKind.FINISHED, event.engine, samples or event.samples)

    def set(self, order: Keep | WakeOn, s: PublicState, policy, hook: str | None = None) -> None:
        """Put ``order`` (returned by ``hook``) in force in place of the previous one of its kind."""
        if not policy.listens_to_finishes:
            raise PolicyError(_unheard(order, policy, hook))
        check_fields(order, policy, hook)
        wakes = isinstance(order, WakeOn) and (order.finished or order.groups or order.drained or order.any_group)
        if wakes and _no_finish_hook(type(policy)):  # (it listens by its flag: nothing would hear the wake-up)
            raise PolicyError(_unheard(order, policy, hook))
        if isinstance(order, WakeOn):
            self.wake = order
            need = order.members or s.group_size
            if not 1 <= need <= s.group_size:
                raise PolicyError(f"policy {policy.name}: WakeOn(members={order.members}) is not "
                                  f"between 1 and the group size {s.group_size}{given_by(policy, hook)}")
            if need != s.complete_at:
                s.complete_at = need
                s.complete = sum(1 for c in s.finished_in if c >= need)
            return
        q = order.queue
        if q is not None and not (hasattr(q, "popleft") and hasattr(q, "__len__")):
            raise PolicyError(f"policy {policy.name}: Keep's queue must be a SampleQueue or a "
                              f"deque, not {type(q).__name__}{given_by(policy, hook)}")
        self.keep = order if q is not None else None
        self.keep_hook = hook
        self.budget = order.budget

    def keep_source(self, policy) -> str:
        """`` from the Keep order's queue, given by on_start (at FILE:LINE)``: who made the
        controller's own admission at a top-up, for its error line (no hook returned it)."""
        hook = self.keep_hook
        given = f", given by {hook}{hook_at(policy, hook)}" if hook else ""
        return f" from the Keep order's queue{given}"

    def stalled(self, s: PublicState, policy: Policy) -> str:
        """Why a stalled run's policy was not called where it waited to act (nothing is in
        flight, so no finish or idle engine is coming): a ``WakeOn`` in force that it did not
        hear every finish under (``; the policy's WakeOn(finished=1000000) waits for more
        finishes than can come: ...``), or an ``on_idle`` that was to admit the first samples."""
        w = self.wake
        if not s.started_count and type(policy).on_idle is not Policy.on_idle:
            return ("; on_idle is not called at the start (no engine has run out of work yet): "
                    "admit the first samples in on_start")
        if w is None or not self.unheard:
            return ""
        shown = ", ".join(f"{f}={getattr(w, f)!r}" for f in ("finished", "groups", "members",
                                                               "drained", "any_group") if getattr(w, f))
        unheard = (f"on_finished has not heard the last {len(self.unheard)} finished samples"
                   if len(self.unheard) > 1 else "on_finished has not heard the last finished sample")
        why, fix = "waits for more finishes than can come", ""
        if not shown:
            why = "never calls on_finished"
        elif self.hears(s, True, ()):  # it holds, but the last finish came while it waited
            why = ("holds now, but is checked only at a finish (not while the trainer or a sync "
                   "is busy), and none is coming")
            fix = " (call it from on_sync_done too)"
        return f"; the policy's WakeOn({shown}) {why}: {unheard}{fix}"

    def hears(self, s: PublicState, listens: bool, samples) -> bool:
        """Whether the policy must hear the finish of ``samples`` (already booked in ``s``)."""
        if not listens:
            return False
        w = self.wake
        if w is None:
            return True
        if w.any_group:
            need, n, fin = s.complete_at, s.group_size, s.finished_in
            for i in samples:
                if fin[i // n] >= need:
                    return True
        if s.trainer_busy or s.syncing:
            return False
        if w.finished and len(s.buffer) >= w.finished:
            return True
        if w.groups and s.complete >= w.groups:
            return True
        return w.drained and not s.admitted and not self.can_admit()

    def can_admit(self) -> bool:
        """Whether ``Keep`` may still admit: a sample is queued and its budget is not spent."""
        k = self.keep
        return k is not None and bool(k.queue) and (self.budget is None or self.budget > 0)

    def take(self, s: PublicState) -> tuple[list[int], list[int]]:
        """``(admit, regenerate)``: the samples ``Keep`` admits now, and those of them too stale
        to resume (to be dropped first). Pops them from the queue."""
        k = self.keep
        if k is None:
            return [], []
        room = k.window - s.admitted
        if self.budget is not None:
            room = min(room, self.budget)
        queue, span = k.queue, k.max_span
        if room <= 0 or not queue:
            return [], []
        take, drop = [], []
        oldest, version, i = s.oldest, s.version, None
        try:
            while room > 0 and queue:
                i = queue.popleft()
                if span is not None and oldest[i] >= 0 and version - oldest[i] > span:
                    drop.append(i)
                take.append(i)
                room -= 1
        except (IndexError, TypeError):  # an id naming no sample: its admission says so
            return [i], []
        if self.budget is not None:
            self.budget -= len(take)
        return take, drop


def check_fields(order: Keep | WakeOn, policy, hook: str | None = None) -> None:
    """One error line for a field of the wrong type: counts are ints >= 0 (``budget`` and
    ``max_span`` may be None), ``drained`` and ``any_group`` booleans; it names ``hook``, which
    returned the order."""
    for name in COUNTS[type(order)]:
        value = getattr(order, name)
        if type(value) is int and value >= 0 or value is None and name in OPTIONAL:
            continue
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            none = " or None" if name in OPTIONAL else ""
            raise PolicyError(f"policy {policy.name}: {type(order).__name__}.{name} must be an int"
                              f"{none}, got {type(value).__name__} {value!r}{given_by(policy, hook)}")
        if value < 0:
            raise PolicyError(f"policy {policy.name}: {type(order).__name__}.{name} must be >= 0, "
                              f"got {value}{given_by(policy, hook)}")
    if isinstance(order, WakeOn):
        for name in ("drained", "any_group"):
            if not isinstance(getattr(order, name), (bool, np.bool_)):
                raise PolicyError(f"policy {policy.name}: WakeOn.{name} must be True or False, got "
                                  f"{type(getattr(order, name)).__name__}{given_by(policy, hook)}")


def _no_finish_hook(cls: type) -> bool:
    """Whether a policy class has no hook that a wake-up calls (``on_finished``, or an old
    ``on_event`` that routes finishes itself)."""
    return cls.on_finished is Policy.on_finished and cls.on_event is Policy.on_event


def _unheard(order: Keep | WakeOn, policy: Policy, hook: str | None = None) -> str:
    """Why a standing order from a policy that does not listen to finishes cannot be served;
    ``hook``: the hook that returned it (named, with its line in a user's file)."""
    cls, by = type(policy), given_by(policy, hook)
    if isinstance(order, WakeOn) and _no_finish_hook(cls):
        names = [n for n in dir(cls) if n.startswith("on_") and not hasattr(Policy, n)]
        close = difflib.get_close_matches("on_finished", names, n=1)
        typo = f" ({close[0]} is not a hook: a misspelling?)" if close else ""
        return (f"policy {policy.name} gave WakeOn{by}, which calls on_finished, but its class defines "
                f"no on_finished hook{typo}: define on_finished(self, view, samples, engine)")
    return (f"policy {policy.name} gave a standing order{by} but does not listen to finishes: set "
            "listens_to_finishes = True on the class (a Keep order tops up at finishes, and only "
            "a policy that listens has its finishes served as they happen)")
