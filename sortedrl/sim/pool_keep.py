"""A ``Keep`` order's top-ups in the compiled pool loop: what goes in, and the books after.

``sortedrl`` and ``async`` keep a window of samples admitted from their own queue (a standing
``Keep`` order, policies/orders.py): at each finish the policy does not hear, the controller
admits the next ones at once, on the engine its placement picks. The kernel
(:func:`sortedrl.sim.pool_kernel.run_pool`) serves those top-ups itself, for the front of the
queue checked here: samples whose admission the controller would make without a question
(ids of samples waiting or paused, each once, none too stale for ``max_span``, so none is
dropped), with the lengths of the regenerated ones drawn beforehand (each the draw
``SimBackend.admit`` would make). Past that front it hands the change to Python.

During the call the kernel books the controller's per-sample arrays (state, tokens, engine,
reward, loads) as the controller would; :func:`book` then does the rest in the same order:
the buffer, the finished members per group, the orders' own counts, the queue's pops, the
groups started, and the admission rows of the timeline, between the spans and prefills made
before each (so the timeline's lists grow, and are packed, exactly as in Python).
"""

from __future__ import annotations

from collections import deque
from itertools import islice

import numpy as np

from sortedrl.policies.base import SampleState
from sortedrl.timeline_columns import Ragged

# samples at most checked at the queue's front for one call (each call checks them again)
FRONT = 8192
BIG = 2**62  # a window or budget above this never binds: it is passed as this
_I64, _I32, _U8, _F64 = np.int64, np.int32, np.uint8, np.float64


def off() -> tuple:
    """The arrays the kernel reads when no Keep order admits (its types, empty)."""
    no_rewards = np.zeros(0, _F64)
    no_rewards.flags.writeable = False  # (the rewards are read only: one compiled variant)
    return (np.zeros(0, _I64), np.zeros(0, _I64), np.zeros(0, _U8), np.zeros(0, _I32), np.zeros(0, _I32),
            np.zeros(0, _I32), np.zeros(0, _F64), no_rewards, np.zeros(0, _I64), np.zeros(0, _I64),
            np.zeros((0, 5), _I64), np.zeros(0, _I64), np.zeros(0, _F64), np.zeros((7, 0), _I64))


def servable(backend, eligible) -> bool:
    """Whether the kernel may serve a Keep order's top-ups in this call: every engine runs in
    it (a top-up may go to any), lengths come from the trace's draws (not a replay), rewards
    are an array, and each decode step has a KV term (the closed form Engine.materialize takes)."""
    ctl = backend.ctl
    rewards = ctl._rewards
    return (bool(eligible.all()) and backend._replay is None
            and (rewards is None or isinstance(rewards, memoryview) and rewards.format == "d")
            and all(e._decode[1] > 0 for e in backend.engines))


def front(queue, n: int) -> list:
    """The first ``n`` samples of a Keep order's queue (a deque or a SampleQueue), unpopped."""
    if type(queue) is deque:
        return list(islice(queue, n))
    ids = list(islice(queue.ids, n))
    fresh = queue.next_fresh
    return ids + list(range(fresh, fresh + n - len(ids)))


def load(fast, wake) -> tuple | None:
    """Fill the Keep fields of the ``wake`` row; the kernel's ``kp`` arrays, or None where the
    front holds no sample the kernel may admit (Python serves the order)."""
    k, b = fast.k, fast.backend
    ctl = b.ctl
    s, orders = ctl.s, ctl.orders
    keep = orders.keep
    queue = keep.queue
    if type(front(queue, 1)[0]) is not int:  # (a NumPy id, say: the controller's own checks,
        return None  # and its records hold the policy's own objects)
    ids = front(queue, min(len(queue), FRONT))
    if set(map(type, ids)) - {int}:
        ids = ids[:next(p for p, i in enumerate(ids) if type(i) is not int)]
    try:
        kq = np.array(ids, dtype=_I64)
    except OverflowError:  # (an id past int64: no sample; the controller says so)
        kq = np.array(ids[:next(p for p, i in enumerate(ids) if not -2**63 <= i < 2**63)], dtype=_I64)
    bad = (kq < 0) | (kq >= len(s.state))
    at = np.where(bad, 0, kq)
    state = np.frombuffer(s.state, _U8)[at]
    bad |= (state != SampleState.WAITING) & (state != SampleState.PAUSED)
    if kq.size > 1:  # a sample listed twice: its second admission is an error
        order = np.argsort(kq, kind="stable")
        twice = order[1:][kq[order][1:] == kq[order][:-1]]
        bad[twice] = True
    if keep.max_span is not None:  # (StandingOrders.take drops these: an abort, in Python)
        oldest = np.frombuffer(s.oldest, _I32)[at]
        bad |= (oldest >= 0) & (s.version - oldest > keep.max_span)
    ok = int(np.argmax(bad)) if bad.any() else kq.size
    if ok == 0:
        return None
    kq = kq[:ok]
    attempt = np.frombuffer(s.attempt, _I32)[kq]
    kq_len = np.full(ok, -1, dtype=_I64)
    if attempt.any():  # (drawn once while at the front: the last call's draws, kept for these)
        before, memo, new = fast.regen_lengths, {}, []
        for p in np.flatnonzero(attempt).tolist():
            key = (int(kq[p]), int(attempt[p]))
            drawn = before.get(key)
            if drawn is None:
                new.append((p, key))
            else:
                memo[key] = kq_len[p] = drawn
        drawn = b._attempts.lengths([i for _, (i, _) in new], [a for _, (_, a) in new])
        for (p, key), n in zip(new, drawn, strict=True):
            memo[key] = kq_len[p] = n
        fast.regen_lengths = memo
    wake[k.KEEP], wake[k.WINDOW] = 1, min(keep.window, BIG)
    wake[k.BUDGET] = -1 if orders.budget is None else min(orders.budget, BIG)
    wake[k.KQ_HEAD], wake[k.KQ_OK], wake[k.KQ_ALL] = 0, ok, ok == len(queue)
    wake[k.REWARDED] = ctl._rewards is not None
    if ctl._rewards is not None:
        rewards = np.frombuffer(ctl._rewards, _F64)
        if rewards.flags.writeable:
            rewards = rewards.view()
            rewards.flags.writeable = False
    else:
        rewards = fast.keep_off[7]
    return (kq, kq_len, np.frombuffer(s.state, _U8), np.frombuffer(s.generated, _I32),
            np.frombuffer(s.response_len, _I32), np.frombuffer(s.engine_of, _I32),
            np.frombuffer(s.reward, _F64), rewards, np.array(s.load, dtype=_I64), fast.max_seqs,
            np.empty((ok, 5), _I64), np.empty(ok, _I64), np.empty(ok, _F64), fast.scratch)


def book(fast, wake, kp, fin: list, spans: dict, prefills: dict) -> None:
    """After a call that served the Keep order: the loads the kernel kept, the controller's books
    it left (Controller.samples_finished_in_arrays, Admission.admitted_in_arrays: the module
    doc), and the timeline's rows, in the order Python would have made them."""
    k, b = fast.k, fast.backend
    ctl = b.ctl
    ctl.s.load[:] = kp[k.LOADS].tolist()
    if fin:
        ctl.samples_finished_in_arrays(fin)
    taken = kp[k.KQ][:wake[k.KQ_HEAD]].tolist()
    if taken:
        ctl.admitted_in_arrays(taken)
    _timeline(b.timeline, kp, wake, k, spans, prefills)


def _timeline(tl, kp, wake, k, spans: dict, prefills: dict) -> None:
    """The spans, prefills and admissions the call made, as columns (each kind's records in the
    order they were made; where a timeline packs them into chunks changes nothing)."""
    rows = kp[k.ADM_I][:wake[k.ADMITS]]
    tl.add_columns("span", spans)
    tl.add_columns("prefill", prefills)
    tl.add_columns("admit", {"t": kp[k.ADM_T][:len(rows)].copy(), "engine": rows[:, 0].astype(np.int32),
                             "samples": Ragged.from_runs(kp[k.ADM_S], rows[:, 1], rows[:, 2])})
