"""Moving the engines' state into the compiled pool loop and back (:mod:`sortedrl.sim.pool_kernel`).

:class:`FastPool` serves :meth:`SimBackend._pool` when the run is the kernel's case: engines
without turns, a dense model's memory-bound decode step (``compute_s_per_seq · max_num_seqs <=
weight_read_s``, so every step is), chunked prefill and no shared host (sim/contention.py); and
a policy that never hears a finish (its finishes are booked in batches: policies/deferred.py),
or one that hears them through a ``WakeOn`` order (policies/orders.py; not ``any_group``, which
would stop the kernel at every group completed), its ``Keep`` order's top-ups included where
sim/pool_keep.py allows them, with no host time per event (``policy_event_s`` 0). Each call
copies the engines' state into typed arrays, runs the kernel until Python must act, and
writes the state back into the same Python objects (dicts, deque, heap) the engines use, so
everything else (policies' views, aborts, syncs, the audit in tests) sees exactly what the
Python loop would have left. The
timeline rows, preemptions and finishes it made are appended or booked in the order they
happened, and a finish the policy must hear is queued as the same ``FINISHED`` event.

``SimBackend._catch_up`` (the changes due before a policy call, every finish booked and deferred
as an event) hands it an engine with a long queue too (``CATCH_UP_QUEUE``: a big admission,
such as ``async``'s after an update, is a Python loop over each sample), one engine at a time
(:meth:`FastPool.catch_up`).

Whether it is used changes nothing in a run's results (the tests compare both ways);
``SimBackend.compiled`` chooses: ``"auto"`` uses it from ``AUTO_SAMPLES`` samples up (below
that, numba's start-up costs more than it saves) and leaves a run to Python once the kernel
stops too often for its copies to pay (``GUARD_*``); ``True`` always where the case allows;
``False`` never.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from sortedrl.policies.base import Event, EventKind, SampleState
from sortedrl.policies.common import SampleQueue
from sortedrl.sim import pool_keep
from sortedrl.sim.engine import Engine
from sortedrl.timeline_columns import Labels, Ragged

# from this many samples up, ``auto`` compiles: below, the numba start-up a process pays once
# (its import and cached machine code, about 0.5 CPU s) costs more than the kernel saves
AUTO_SAMPLES = 100_000
# a run whose first GUARD_CALLS calls made fewer than GUARD_CHANGES engine changes a call goes
# on in Python: each call copies every engine's samples in and out
GUARD_CALLS, GUARD_CHANGES = 64, 16
# changes in one call at most (about 0.1 s): Ctrl-C and the progress bar wait for a call's end
MAX_CHANGES = 200_000
# SimBackend._catch_up applies an engine's changes here from this many queued samples up (a big
# admission: a Python loop over each; below, a call's copies cost more than they save)
CATCH_UP_QUEUE = 128


def usable(backend, controller) -> bool:
    """Whether a run is the kernel's case (the module doc), engine by engine and the orders in
    force at each call aside."""
    engines = backend.engines
    if backend.tools is not None or backend._host is not None:
        return False
    if controller.policy.listens_to_finishes and backend.cost.policy_event_s > 0:
        return False  # (a finish served without an event holds the engine's host: Python)
    if any(type(e) is not Engine or e._decode is None or e.chunk <= e.seq_cap for e in engines):
        return False
    if any(e._decode[2] * e.seq_cap > e._decode[0] for e in engines):  # compute-bound steps
        return False
    group = engines[0]._group
    if group:  # a group's members share one prompt length, so a group is a prefix-cache key
        plen = np.frombuffer(backend._plen, dtype=np.int32)
        if not np.array_equal(plen, plen[(np.arange(plen.size) // group) * group]):
            return False
    return True


def _eligible(eng: Engine) -> bool:
    """Whether the kernel may apply this engine's changes now."""
    return eng.enabled and not eng.stalled and not eng.pub.frozen and not eng.resume


class FastPool:
    """The kernel's arrays for one run, and the copies in and out of them."""

    def __init__(self, backend, n_samples: int, guard: bool = False) -> None:
        from sortedrl.sim import pool_kernel  # numba: imported only where the kernel runs

        assert (pool_kernel.ADMITTED_STATE, pool_kernel.FINISHED_STATE) == (SampleState.ADMITTED, SampleState.FINISHED)

        self.k = pool_kernel
        self.backend = backend
        engines = backend.engines
        self.group = engines[0]._group
        groups = -(-n_samples // self.group) if self.group else 1
        self.mem = np.zeros((len(engines), groups), dtype=np.int32)
        # per sample (pool_kernel's GEN0 .. ORDER_POS): valid for the samples loaded in a call
        i64, i32 = np.int64, np.int32
        self.smp = (np.zeros(n_samples, i64), np.zeros(n_samples, i64), np.zeros(n_samples, np.float64),
                    np.zeros(n_samples, i64), np.zeros(n_samples, i32), np.zeros(n_samples, np.int8),
                    np.zeros(n_samples, i64), np.zeros(n_samples, i32))
        self.cf = np.array([[e.seq_cap, e.chunk, e.kv_budget, e.kv_admit_budget] for e in engines], dtype=i64)
        self.heap_width = 2 * int(self.cf[:, 0].max()) + 2
        self.changes = 0  # engine changes the kernel applied, catch-ups' aside (the tests check it ran)
        self.calls = 0
        self.caught_up = 0  # calls made by catch_up (the tests check that it ran)
        self.max_changes = MAX_CHANGES
        self.guard = guard  # (``auto``: GUARD_* may hand the run back to Python)
        s = backend.ctl.s
        # a listening policy's WakeOn reads finished members per group: the kernel's copy
        self.group_finished = np.zeros(s.num_groups if backend.ctl.policy.listens_to_finishes else 0,
                                       dtype=np.int64)
        self.quiet = np.zeros(pool_kernel.ADM_SAMPLES + 1, dtype=np.int64)  # (one that hears no finish: LISTEN 0)
        self.keep_off = pool_keep.off()  # (no Keep order admits: the kernel's arrays, empty)
        self.max_seqs = np.array([e.pub.max_num_seqs for e in engines], dtype=np.int64)
        self.scratch = np.zeros((7, len(engines)), dtype=np.int64)  # (the kernel allocates nothing)
        # (sample, attempt) -> its drawn length, for the Keep queue's front at the last call
        self.regen_lengths: dict[tuple[int, int], int] = {}

    def catches_up(self, j: int) -> bool:
        """Whether :meth:`catch_up` makes engine ``j``'s changes (a big queue, an engine the
        kernel runs)."""
        eng = self.backend.engines[j]
        return len(eng.pub.queue) >= CATCH_UP_QUEUE and _eligible(eng)

    def catch_up(self, j: int, now: float) -> None:
        """Engine ``j``'s changes due by ``now`` as SimBackend._catch_up makes them: every finish
        booked and, for a policy that hears finishes, queued as an event (no Keep top-up)."""
        while self.backend.engines[j].next_t <= now:
            self.run(now, now, only=j)
            self.caught_up += 1

    def run(self, now: float, peek: float, only: int = -1) -> int:
        """Apply engine changes until Python must act; returns the engine whose next change
        Python must make now, or -1 (the pool goes on: it waits, dispatches, or calls again).
        ``only``: that engine's changes alone (:meth:`catch_up`)."""
        k, b = self.k, self.backend
        engines = b.engines
        E = len(engines)
        eligible = np.array([_eligible(e) for e in engines], dtype=np.int8)
        if only >= 0:
            eligible[:] = 0
            eligible[only] = 1
            wake = self._catch_up_wake()
        else:
            slow = self.guard and self.calls >= GUARD_CALLS and self.changes < GUARD_CHANGES * self.calls
            wake = None if slow else self._wake(eligible)
        if wake is None:  # the policy's orders need Python at every finish now (or the kernel
            return b._next.index(min(b._next))  # stops too often for its copies to pay)
        kp = self.keep_off
        if wake[k.KEEP]:
            kp = pool_keep.load(self, wake)
            if kp is None:  # (the queue's front needs the controller's own checks: a call
                self.calls += 1  # that made no change, for the guard)
                return b._next.index(min(b._next))
        self.calls += only < 0  # (catch-ups are not the guard's: a change or two each)
        extra = int(wake[k.KQ_OK])  # (samples a Keep order may add to the engines in this call)
        margin = max([len(e.pub.run) + len(e.pub.queue) for e in engines] + [1])
        ist = np.zeros((E, 13), dtype=np.int64)
        heap = np.empty((3, E, self.heap_width), dtype=np.int64)  # (only the rows' used parts are read)
        queue = np.empty((E, 2 * margin + 1 + extra), dtype=np.int64)
        order = np.empty((E, 2 * margin + 1 + extra), dtype=np.int64)
        loaded = [self._load(j, eng, ist, heap, queue, order, margin) if eligible[j] else None
                  for j, eng in enumerate(engines)]
        if wake[k.LISTEN]:
            self._load_group_finished(ist, queue, order, margin, kp[k.KQ])
        rows = int(ist[:, k.B].sum() + (ist[:, k.QTAIL] - ist[:, k.QHEAD]).sum()) + 4 * self.heap_width + extra
        out = (np.empty((rows, 2)), np.empty((rows, 6), dtype=np.int64), np.empty((rows, 2)),
               np.empty((rows, 5), dtype=np.int64), np.empty(rows, dtype=np.int64),
               np.empty(rows, dtype=np.int64), np.zeros(7, dtype=np.int64), np.empty((rows, 2), dtype=np.int64))
        advanced = np.zeros(E, dtype=np.int8)
        ctl = b.ctl.s
        trc = (np.frombuffer(b._plen, dtype=np.int32), np.frombuffer(b._lengths, dtype=np.int32),
               np.frombuffer(ctl.attempt, dtype=np.int32), np.frombuffer(ctl.oldest, dtype=np.int32))
        t = np.array([e.pub.t for e in engines], dtype=np.float64)
        next_t = np.array([e.next_t if only < 0 or j == only else np.inf for j, e in enumerate(engines)],
                          dtype=np.float64)
        next_k = np.array([e._next_k for e in engines], dtype=np.int64)
        idle = np.array([e.idle_reported for e in engines], dtype=np.int8)
        tm = np.array([e._decode + e._chunk_prefill for e in engines], dtype=np.float64)
        code, e, when = k.run_pool(float(now), float(peek), eligible, idle, t, next_t, next_k, ist, self.cf, tm,
                                   (heap[0], heap[1], heap[2]), queue, order, self.smp, trc, self.group,
                                   self.mem, out, advanced, wake, self.group_finished, kp, self.max_changes)
        del trc  # (a typed array cannot grow while a view holds it)
        for j, eng in enumerate(engines):
            if advanced[j]:
                self._store(j, eng, t, next_t, next_k, ist, heap, queue, order, out, margin)
                eng.idle_reported = bool(idle[j])  # (a top-up queued samples there)
            elif loaded[j] is not None:
                self.mem[j, loaded[j]] = 0
        self._rows(out, wake, kp)
        if only < 0:  # (a catch-up's changes are not the guard's either)
            self.changes += int(out[6][k.CHANGES])
        if b.audit:  # (the tests' check of every engine's bookkeeping, after each call here)
            for j in np.flatnonzero(advanced).tolist():
                engines[j].audit()
        e, when = int(e), max(float(when), b.env.now)
        if code == k.HEARD:  # SimBackend.samples_finished's event, then _advance's idle one
            fin, out_n = out[5], out[6]
            step = tuple(fin[out_n[k.STEP_FINISHES]:out_n[k.FINISHED]].tolist())
            b._deferred.append((when, Event(EventKind.FINISHED, e, step)))
            eng = engines[e]
            code = k.IDLE if not eng.idle_reported and not eng.pub.run and not eng.pub.queue else code
        if code == k.IDLE:
            engines[e].idle_reported = True
            b._deferred.append((when, Event(EventKind.ENGINE_IDLE, e)))
        return e if code == k.PYTHON else -1

    def _wake(self, eligible: np.ndarray) -> np.ndarray | None:
        """The WakeOn order and the counts it reads (pool_kernel's LISTEN .. ADMITTED), KEEP 1
        where a Keep order may top up (pool_keep fills its fields); the quiet row for a policy
        that hears no finish; None where the kernel cannot serve the finishes now (no WakeOn:
        the policy hears each; a Keep order whose top-ups it cannot make: pool_keep.servable)."""
        b = self.backend
        ctl = b.ctl
        if not ctl.policy.listens_to_finishes:
            return self.quiet
        orders, s = ctl.orders, ctl.s
        w = orders.wake
        if w is None or w.any_group:  # (any_group: a stop at every group completed, each
            return None  # copying the state both ways: slower than Python)
        if orders.keep is not None and type(orders.keep.queue) not in (deque, SampleQueue):
            return None  # (a queue of the policy's own: its length might follow the controller)
        keep = orders.can_admit()
        if keep and not pool_keep.servable(b, eligible):
            return None
        row = np.zeros(self.k.ADM_SAMPLES + 1, dtype=np.int64)
        big = pool_keep.BIG  # (a count past it is never reached: passed as it, within int64)
        row[:self.k.KEEP + 1] = (1, s.group_size, s.complete_at, min(w.finished, big), min(w.groups, big),
                                 w.drained, s.trainer_busy or s.syncing, s.complete, len(s.buffer), s.admitted,
                                 keep)
        return row

    def _catch_up_wake(self) -> np.ndarray:
        """The wake row of :meth:`catch_up`: a policy that hears finishes hears each one (as
        SimBackend.samples_finished defers them while catching up); else the quiet row."""
        s = self.backend.ctl.s
        if not self.backend.ctl.policy.listens_to_finishes:
            return self.quiet
        row = np.zeros(self.k.ADM_SAMPLES + 1, dtype=np.int64)
        row[:self.k.ADMITTED + 1] = (1, s.group_size, s.complete_at, 1, 0, 0, 0, s.complete, len(s.buffer),
                                     s.admitted)
        return row

    def _load_group_finished(self, ist, queue, order, margin: int, kq: np.ndarray) -> None:
        """Finished members of every group that a sample loaded this call belongs to (the
        Keep order's front ``kq`` included)."""
        k, n = self.k, self.backend.ctl.s.group_size
        parts = [order[j, :ist[j, k.NORDER]] for j in range(len(ist))]
        parts += [queue[j, margin:ist[j, k.QTAIL]] for j in range(len(ist))] + [kq]
        groups = np.unique(np.concatenate(parts) // n)
        finished_in = self.backend.ctl.s.finished_in
        self.group_finished[groups] = np.fromiter(map(finished_in.__getitem__, groups.tolist()), np.int64,
                                                  groups.size)

    def _load(self, j: int, eng: Engine, ist, heap, queue, order, margin: int) -> np.ndarray:
        """Copy engine ``j``'s state into the arrays; returns the groups its prefix cache holds
        (their counts are cleared after the call)."""
        k, p, smp = self.k, eng.pub, self.smp
        run, entries = p.run, eng._heap
        stale = eng._stale
        if stale:  # (the kernel's heap holds live entries only)
            live = eng._live
            entries = [x for x in entries if live.get(x[2]) == x[1]]
        b, h, q = len(run), len(entries), len(p.queue)
        if h:  # Python's heap as it is, or sorted once stale entries are out: a valid heap either
            rows = np.array(entries, dtype=np.int64)  # way, whose pops come in Python's order
            if stale:
                rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
            heap[:, j, :h] = rows.T
            smp[k.LIVE_SEQ][rows[:, 2]] = rows[:, 1]
        if b:
            keys = np.fromiter(run, np.int64, b)
            vals = np.array(list(run.values()), dtype=np.float64)  # (off, t0, tok0, version)
            order[j, :b] = keys
            smp[k.ORDER_POS][keys] = np.arange(b)
            smp[k.OFF][keys] = vals[:, 0]
            smp[k.T0][keys] = vals[:, 1]
            smp[k.TOK0][keys] = vals[:, 2]
            smp[k.SVER][keys] = vals[:, 3]
            smp[k.RUNNING][keys] = 1
        if q:
            queued = np.fromiter(p.queue, np.int64, q)
            queue[j, margin:margin + q] = queued
            smp[k.GEN0][queued] = np.fromiter(map(eng._gen0.__getitem__, p.queue), np.int64, q)
            smp[k.RUNNING][queued] = 0
        groups = np.zeros(0, dtype=np.int64)
        if self.group and eng._members:
            members = eng._members
            groups = np.fromiter(members, np.int64, len(members)) >> 32
            self.mem[j, groups] = np.fromiter(members.values(), np.int32, len(members))
        ist[j, :] = (p.step, p.kv, b, eng._seq, p.version, p.inflight, margin, margin + q, b, h, -2, 0, margin)
        return groups

    def _store(self, j: int, eng: Engine, t, next_t, next_k, ist, heap, queue, order, out, margin: int) -> None:
        """Write engine ``j``'s state back into its Python objects."""
        k, p, smp, row = self.k, eng.pub, self.smp, ist[j].tolist()
        pf_i, pf_s = out[3], out[4]
        p.t, p.step, p.kv, p.inflight = float(t[j]), row[k.STEP], row[k.KV], row[k.INFLIGHT]
        last = row[k.LASTPF]  # (-2: no change made here, only a top-up queued; -1: none prefills)
        if last >= 0:
            p.prefilling = tuple(pf_s[int(pf_i[last, 3]):int(pf_i[last, 3]) + int(pf_i[last, 4])].tolist())
        elif last == -1:
            p.prefilling = ()
        eng._seq, eng.preemptions = row[k.SEQ], eng.preemptions + row[k.PREEMPTED]
        eng.next_t, eng._next_k = float(next_t[j]), int(next_k[j])
        self.backend._next[j] = eng.next_t
        self._store_queue(eng, queue[j], row[k.QHEAD], row[k.QTAIL], row[k.TOPHEAD], margin)
        keys = order[j, :row[k.NORDER]]
        keys = keys[(smp[k.RUNNING][keys] == 1) & (smp[k.ORDER_POS][keys] == np.arange(keys.size))]
        p.run.clear()
        values = zip(smp[k.OFF][keys].tolist(), smp[k.T0][keys].tolist(), smp[k.TOK0][keys].tolist(),
                     smp[k.SVER][keys].tolist(), strict=True)
        p.run.update(zip(keys.tolist(), values, strict=True))
        fs, sq, sm = heap[:, j, :row[k.HEAPN]]
        live = (smp[k.RUNNING][sm] == 1) & (smp[k.LIVE_SEQ][sm] == sq)
        if not live.all():  # stale entries (preempted samples'): dropped, then a valid heap again
            fs, sq, sm = fs[live], sq[live], sm[live]
            o = np.lexsort((sq, fs))
            fs, sq, sm = fs[o], sq[o], sm[o]
        eng._heap[:] = zip(fs.tolist(), sq.tolist(), sm.tolist(), strict=True)
        eng._live.clear()
        eng._live.update(zip(sm.tolist(), sq.tolist(), strict=True))
        eng._stale = 0
        if self.group:
            self._store_members(j, eng, keys)

    def _store_queue(self, eng: Engine, queue: np.ndarray, head: int, tail: int, top: int, margin: int) -> None:
        """An engine's queue back into its deque and its tokens kept into ``_gen0``: the samples
        loaded at ``margin`` that are still there from the queue's highest head on stay as they
        are (a long queue is mostly those), the ends are changed; where more left the front
        than the queue now holds, the whole queue is written anew (a pop and a deletion each
        cost about what a sample written anew does)."""
        q, gen0 = eng.pub.queue, eng._gen0
        end = margin + len(q)  # (where the loaded samples ended; top-ups come after)
        if top >= end or top - margin > tail - head:
            queued = queue[head:tail].tolist()
            q.clear()
            q.extend(queued)
            gen0.clear()
            gen0.update(zip(queued, self.smp[self.k.GEN0][queue[head:tail]].tolist(), strict=True))
            return
        for _ in range(top - margin):  # (the loaded front that left)
            del gen0[q.popleft()]
        for part in (queue[head:top], queue[end:tail]):  # put back (preempted), then topped up
            gen0.update(zip(part.tolist(), self.smp[self.k.GEN0][part].tolist(), strict=True))
        q.extendleft(queue[head:top][::-1].tolist())
        q.extend(queue[end:tail].tolist())

    def _store_members(self, j: int, eng: Engine, running: np.ndarray) -> None:
        """Engine ``j``'s prefix-cache counts back into its dict (keyed as Engine._key). A count
        is the group's members running there, so the groups of the ``running`` samples are all
        it holds; their counts are cleared for the next call (every other count is 0 already)."""
        groups = running // self.group
        counts = self.mem[j, groups]
        plen = np.frombuffer(self.backend._plen, dtype=np.int32)
        keys = groups << 32 | plen[groups * self.group]
        eng._members.clear()
        eng._members.update(zip(keys.tolist(), counts.tolist(), strict=True))  # (a group once per member)
        self.mem[j, groups] = 0

    def _rows(self, out, wake, kp) -> None:
        """Append the kernel's timeline rows (as columns), finishes and preemptions, in the
        order they happened."""
        fin, out_n, pre = out[5], out[6], out[7]
        _, finished, _, _, preempts = out_n.tolist()[:5]
        b = self.backend
        spans, prefills = self._columns(out)
        if wake[self.k.KEEP]:  # (the kernel booked the preemptions and the finishes' arrays)
            pool_keep.book(self, wake, kp, fin[:finished].tolist(), spans, prefills)
            return
        b.timeline.add_columns("span", spans)
        eng = b.engines[0]
        if preempts:  # (as Engine._preempt reports each to the controller, SimBackend or not)
            b.ctl.samples_preempted(pre[:preempts])
        if finished:  # booked in batches, or now (as the engines report them): the same state
            if eng._pending is not None:
                eng._pending.extend(fin[:finished].tolist())
            else:  # (a listening policy's WakeOn was checked in the kernel, on its own counts)
                b.ctl.samples_finished(fin[:finished].tolist(), b._lengths)
        b.timeline.add_columns("prefill", prefills)

    def _columns(self, out) -> tuple[dict, dict]:
        """The spans and the prefills the kernel made, as the timeline's columns."""
        sp_f, sp_i, pf_f, pf_i, pf_s, _, out_n, _ = out
        spans, _, prefills, _, preempts = out_n.tolist()[:5]
        ends = self.backend.timeline.labels("span", "end")
        ended = sp_i[:spans, 5] if preempts else np.zeros(spans, dtype=np.int64)
        codes = np.where(ended != 0, ends.index("preempt"), ends.index("finish")).astype(np.uint8)
        i4 = np.int32
        span = {"t": sp_f[:spans, 0].copy(), "t_end": sp_f[:spans, 1].copy(),
                **{name: sp_i[:spans, c].astype(i4)
                   for c, name in enumerate(("engine", "sample", "attempt", "version", "tokens"))},
                "end": Labels(codes, ends)}
        rows = pf_i[:prefills]
        prefill = {"t": pf_f[:prefills, 0].copy(), "t_end": pf_f[:prefills, 1].copy(),
                   "engine": rows[:, 0].astype(i4), "samples": Ragged.from_runs(pf_s, rows[:, 3], rows[:, 4]),
                   "tokens": rows[:, 1].copy(), "recomputed": rows[:, 2].copy()}
        return span, prefill
