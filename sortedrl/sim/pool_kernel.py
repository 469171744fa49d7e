"""The rollout pool's common case, compiled: engine changes applied back to back in machine code.

Between two events that Python must see, the pool (:meth:`SimBackend._pool`) applies the
earliest engine change again and again: pop the samples that finish, preempt, admit from the
queue in chunks, plan the next change. For a policy that never hears a finish (``sync``,
``one_step_off``, ``oracle_sorted``), or hears them only when its ``WakeOn`` order holds
(``partial``, ``tail_batch``), nothing else happens in between, so that loop is all the
simulator does for most of a run. :func:`run_pool` is the same loop, written over typed arrays
and compiled by numba: :meth:`Engine.advance`, ``_admit_chunked``, ``_preempt`` and
:meth:`Engine.plan` for a dense model's chunked-prefill engine with prefix caching or without,
line for line, with the same floating-point operations in the same order, so its timeline is
byte-identical to Python's (``tests/test_sim_pool_kernel.py`` compares the two).
:mod:`sortedrl.sim.pool_fast` moves the engines' state in and out.

It stops, leaving the rest to Python, where another process may act first (``t > now and t >=
peek``: code ``WAIT``), where the next change is on an engine it does not run (stalled,
disabled: ``PYTHON``, which Python makes), after a change that leaves an engine idle, whose
event Python queues (``IDLE``), after a step whose finishes the policy must hear (``HEARD``:
StandingOrders.hears on the kernel's own counts, or another engine due at the same instant;
Python queues the ``FINISHED`` event), and when its output rows are full or it has made
``limit`` changes (``FULL``: called again). A preemption it makes itself; the controller hears
of it after the call, in order.
The codes are defined here, not imported: numba's cache checks this file only.
"""
from __future__ import annotations

import numpy as np
from numba import njit

WAIT, PYTHON, IDLE, FULL, HEARD = 0, 1, 2, 3, 4  # why the kernel stopped (the module doc)
NEVER = np.iinfo(np.int64).max  # a horizon with nothing running

# the cost terms, by position in the ``terms`` rows (Engine._decode + Engine._chunk_prefill)
WEIGHT, KV_READ, COMPUTE, FIXED, PER_SEQ, ADMIT_STEP, PER_REQUEST, PER_TOKEN, PER_PAIR = range(9)


@njit(cache=True)
def _push(fs, sq, sm, n, f, s, i):
    """heapq.heappush of (f, s, i) onto the heap of ``n`` entries in the rows; returns n + 1."""
    pos = n
    while pos > 0:  # sift the new entry up (keys (f, s) are unique: s is a sequence number)
        parent = (pos - 1) >> 1
        if fs[parent] < f or (fs[parent] == f and sq[parent] < s):
            break
        fs[pos], sq[pos], sm[pos] = fs[parent], sq[parent], sm[parent]
        pos = parent
    fs[pos], sq[pos], sm[pos] = f, s, i
    return n + 1


@njit(cache=True)
def _sift_down(fs, sq, sm, n, pos, f, s, i):
    """Put (f, s, i) at ``pos`` of the heap of ``n`` entries and sift it down (heapq's order)."""
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        right = child + 1
        if right < n and (fs[right] < fs[child] or (fs[right] == fs[child] and sq[right] < sq[child])):
            child = right
        if fs[child] > f or (fs[child] == f and sq[child] > s):
            break
        fs[pos], sq[pos], sm[pos] = fs[child], sq[child], sm[child]
        pos = child
    fs[pos], sq[pos], sm[pos] = f, s, i


@njit(cache=True)
def _pop(fs, sq, sm, n):
    """Remove the heap's smallest entry (read it at [0] first); returns n - 1."""
    n -= 1
    if n:
        _sift_down(fs, sq, sm, n, 0, fs[n], sq[n], sm[n])
    return n


# columns of the per-engine integer state ``ist``
STEP, KV, B, SEQ, VER, INFLIGHT, QHEAD, QTAIL, NORDER, HEAPN, LASTPF, PREEMPTED = range(12)
# columns of the per-engine constants ``cf``
CAP, CHUNK, KV_BUDGET, KV_ADMIT = range(4)
# the per-sample arrays, in the tuple ``smp``: tokens a queued sample resumes from, a running
# sample's (off, t0, tok0, version), whether it runs, its live heap entry's sequence number and
# its place in the engine's admission order
GEN0, OFF, T0, TOK0, SVER, RUNNING, LIVE_SEQ, ORDER_POS = range(8)
# the trace's per-sample arrays, in the tuple ``trc``
PLEN, LENGTH, ATTEMPT, OLDEST = range(4)
# columns of the output counters ``out_n``
SPANS, FINISHED, PREFILLS, PREFILLED, PREEMPTS, CHANGES, STEP_FINISHES = range(7)
# the standing WakeOn order and the counts it reads (``wake``; policies/orders.py), for a policy
# that hears finishes; LISTEN 0: it hears none (its finishes are booked in batches)
# (WakeOn(any_group) stays in Python: pool_fast._wake)
LISTEN, GROUP_SIZE, NEED, WAKE_FINISHED, WAKE_GROUPS, WAKE_DRAINED, BUSY, COMPLETE, BUFFERED, ADMITTED = range(10)


@njit(cache=True)
def _live(smp, i, seq):
    return smp[RUNNING][i] == 1 and smp[LIVE_SEQ][i] == seq


@njit(cache=True)
def _top(e, ist, heap, smp):
    """The finish step at the top of engine ``e``'s heap, after popping stale entries (of
    preempted samples): Engine._drop_stale. NEVER when nothing runs."""
    fs, sq, sm = heap[0][e], heap[1][e], heap[2][e]
    n = ist[e, HEAPN]
    while n and not _live(smp, sm[0], sq[0]):
        n = _pop(fs, sq, sm, n)
    ist[e, HEAPN] = n
    return fs[0] if n else NEVER


@njit(cache=True)
def _compact_heap(e, ist, heap, smp):
    """Drop every stale entry and re-heapify (the heap's row is full)."""
    fs, sq, sm = heap[0][e], heap[1][e], heap[2][e]
    n = 0
    for j in range(ist[e, HEAPN]):
        if _live(smp, sm[j], sq[j]):
            fs[n], sq[n], sm[n] = fs[j], sq[j], sm[j]
            n += 1
    for pos in range(n // 2 - 1, -1, -1):
        _sift_down(fs, sq, sm, n, pos, fs[pos], sq[pos], sm[pos])
    ist[e, HEAPN] = n


@njit(cache=True)
def _compact_order(e, ist, order, smp):
    """Drop the admission order's entries of samples no longer running (the row is full: a
    guard; a preemption truncates the order past its sample, so it holds at most the engine's
    samples, which the row is twice as long as)."""
    running, pos = smp[RUNNING], smp[ORDER_POS]
    n = 0
    for j in range(ist[e, NORDER]):
        i = order[e, j]
        if running[i] == 1 and pos[i] == j:
            order[e, n] = i
            pos[i] = n
            n += 1
    ist[e, NORDER] = n


@njit(cache=True)
def _admissible(e, ist, cf, heap, queue, smp, trc, group, mem):
    """Engine._admissible for a chunked engine whose queue is not empty and batch not full."""
    b0 = ist[e, B]
    i = queue[e, ist[e, QHEAD]]
    prompt = trc[PLEN][i]
    if group and mem[e, i // group]:
        prompt = 0
    new = prompt + smp[GEN0][i]
    steps = -(-(new if new else 1) // (cf[e, CHUNK] - b0))
    if ist[e, KV] + new + 1 + b0 * steps + b0 + 1 > cf[e, KV_ADMIT]:
        return False
    if not b0:
        return True
    return steps <= _top(e, ist, heap, smp) - ist[e, STEP]


@njit(cache=True)
def _plan(e, t, ist, cf, tm, heap, queue, smp, trc, group, mem, next_t, next_k):
    """Engine.plan: the time and the decode steps of the next change."""
    b = ist[e, B]
    if ist[e, QHEAD] < ist[e, QTAIL] and b < cf[e, CAP] and _admissible(e, ist, cf, heap, queue, smp, trc,
                                                                        group, mem):
        next_t[e], next_k[e] = t[e], 0
    elif b == 0:
        next_t[e], next_k[e] = np.inf, 0
    else:
        kv = ist[e, KV]
        k = _top(e, ist, heap, smp) - ist[e, STEP]
        kk = (cf[e, KV_BUDGET] - kv) // b
        if kk < k:
            k = kk
        next_k[e] = k
        alpha = tm[e, WEIGHT] + tm[e, KV_READ] * kv  # memory-bound: the caller checked it always is
        next_t[e] = t[e] + k * (tm[e, FIXED] + tm[e, PER_SEQ] * b + alpha) + tm[e, KV_READ] * b * (k * (k - 1) // 2)


@njit(cache=True)
def _leave(e, i, trc, group, mem):
    """Engine._leave: the prompt KV tokens freed when sample ``i`` stops running here."""
    if group:
        g = i // group
        mem[e, g] -= 1
        if mem[e, g]:
            return 0
    return trc[PLEN][i]


@njit(cache=True)
def _span(out, e, i, t1, tokens, end, smp, trc):
    """One span row: (t0, t1, engine, sample, attempt, version, tokens, end code)."""
    sp_f, sp_i, out_n = out[0], out[1], out[6]
    r = out_n[SPANS]
    sp_f[r, 0], sp_f[r, 1] = smp[T0][i], t1
    sp_i[r, 0], sp_i[r, 1], sp_i[r, 2] = e, i, trc[ATTEMPT][i]
    sp_i[r, 3], sp_i[r, 4], sp_i[r, 5] = smp[SVER][i], tokens, end
    out_n[SPANS] = r + 1


@njit(cache=True)
def _finish(e, t, ist, heap, smp, trc, group, mem, out):
    """The finishing half of Engine.advance: pop every sample whose last step is done."""
    step, kv, n = ist[e, STEP], ist[e, KV], ist[e, HEAPN]
    fs, sq, sm = heap[0][e], heap[1][e], heap[2][e]
    fin, out_n = out[5], out[6]
    while n and fs[0] <= step:
        i, seq = sm[0], sq[0]
        n = _pop(fs, sq, sm, n)
        if not _live(smp, i, seq):
            continue  # the stale entry of a preempted sample
        smp[RUNNING][i] = 0
        ist[e, B] -= 1
        length = trc[LENGTH][i]
        kv -= _leave(e, i, trc, group, mem) + length
        _span(out, e, i, t[e], length - smp[TOK0][i], 0, smp, trc)
        fin[out_n[FINISHED]] = i
        out_n[FINISHED] += 1
    ist[e, KV], ist[e, HEAPN] = kv, n


@njit(cache=True)
def _preempt(e, t, ist, queue, order, smp, trc, group, mem, out):
    """Engine._preempt: the most recently admitted sample goes back to the head of the queue,
    keeping its tokens (the controller hears of it after the kernel: ``out``'s preemptions)."""
    running, pos = smp[RUNNING], smp[ORDER_POS]
    j = ist[e, NORDER] - 1
    while not (running[order[e, j]] == 1 and pos[order[e, j]] == j):
        j -= 1  # (entries of samples that left)
    i = order[e, j]
    ist[e, NORDER] = j
    running[i] = 0
    ist[e, B] -= 1
    tok = ist[e, STEP] + smp[OFF][i]
    ist[e, KV] -= _leave(e, i, trc, group, mem) + tok
    _span(out, e, i, t[e], tok - smp[TOK0][i], 1, smp, trc)
    ist[e, QHEAD] -= 1
    queue[e, ist[e, QHEAD]] = i
    smp[GEN0][i] = tok
    ist[e, PREEMPTED] += 1
    pre, out_n = out[7], out[6]
    pre[out_n[PREEMPTS], 0], pre[out_n[PREEMPTS], 1] = i, tok
    out_n[PREEMPTS] += 1


@njit(cache=True)
def _admit(e, t, ist, cf, tm, heap, queue, order, smp, trc, group, mem, out):
    """Engine._admit_chunked without turns: admit FCFS while the head fits, in chunks."""
    b0, kv, step = ist[e, B], ist[e, KV], ist[e, STEP]
    room, cap = cf[e, CHUNK] - b0, cf[e, CAP] - b0
    limit = cf[e, KV_ADMIT] - b0 - 2
    horizon = _top(e, ist, heap, smp) - step if b0 else NEVER
    pf_f, pf_i, pf_s, out_n = out[2], out[3], out[4], out[6]
    gen0, plen = smp[GEN0], trc[PLEN]
    tokens = pairs = recomputed = steps = n = 0
    head, tail, first = ist[e, QHEAD], ist[e, QTAIL], out_n[PREFILLED]
    while head < tail and n < cap:
        i = queue[e, head]
        g0 = gen0[i]
        prompt = plen[i]
        new = (0 if group and mem[e, i // group] else prompt) + g0
        work = new if new else 1
        need = -(-(tokens + work) // room)
        if need > horizon or kv + new + b0 * need + n > limit:
            break
        steps = need
        head += 1
        if group:
            mem[e, i // group] += 1
        pf_s[first + n] = i
        n += 1
        kv += new + 1
        tokens += work
        pairs += work * (prompt + g0 - work) + work * (work + 1) // 2
        recomputed += g0
    if not n:
        return
    ist[e, QHEAD] = head
    kv0 = ist[e, KV]
    alpha = tm[e, WEIGHT] + tm[e, KV_READ] * kv0
    decode = steps * (tm[e, FIXED] + tm[e, PER_SEQ] * b0 + alpha) + tm[e, KV_READ] * b0 * ((steps * (steps - 1)) // 2)
    dt = decode + tm[e, ADMIT_STEP] + tm[e, PER_REQUEST] * n + tm[e, PER_TOKEN] * tokens + tm[e, PER_PAIR] * pairs
    step += steps
    ist[e, STEP], ist[e, KV] = step, kv + steps * b0
    seq, ver, t0 = ist[e, SEQ], ist[e, VER], t[e]
    fs, sq, sm = heap[0][e], heap[1][e], heap[2][e]
    oldest, lengths = trc[OLDEST], trc[LENGTH]
    for j in range(first, first + n):
        i = pf_s[j]
        g0 = gen0[i]
        off = g0 + 1 - step
        smp[OFF][i], smp[T0][i], smp[TOK0][i], smp[SVER][i], smp[RUNNING][i] = off, t0, g0, ver, 1
        if ist[e, NORDER] == order.shape[1]:
            _compact_order(e, ist, order, smp)
        order[e, ist[e, NORDER]] = i
        smp[ORDER_POS][i] = ist[e, NORDER]
        ist[e, NORDER] += 1
        if oldest[i] < 0:
            oldest[i] = ver
        seq += 1
        smp[LIVE_SEQ][i] = seq
        if ist[e, HEAPN] == fs.shape[0]:
            _compact_heap(e, ist, heap, smp)
        ist[e, HEAPN] = _push(fs, sq, sm, ist[e, HEAPN], lengths[i] - off, seq, i)
    ist[e, SEQ], ist[e, B] = seq, b0 + n
    r = out_n[PREFILLS]
    pf_f[r, 0], pf_f[r, 1] = t0, t0 + dt
    pf_i[r, 0], pf_i[r, 1], pf_i[r, 2], pf_i[r, 3], pf_i[r, 4] = e, tokens, recomputed, first, n
    out_n[PREFILLS], out_n[PREFILLED] = r + 1, first + n
    ist[e, LASTPF] = r
    t[e] = t0 + dt
    ist[e, INFLIGHT] = steps if b0 else 0


@njit(cache=True)
def _heard(e, when, next_t, fin, first, last, wake, group_finished):
    """Book the finishes ``fin[first:last]`` of one engine step in the counts the WakeOn order
    reads, and say whether the policy must hear them as an event: StandingOrders.hears, or
    another engine's change due at the same instant (SimBackend.samples_finished's tie)."""
    n, need = wake[GROUP_SIZE], wake[NEED]
    for j in range(first, last):
        g = fin[j] // n
        group_finished[g] += 1
        if group_finished[g] == need:
            wake[COMPLETE] += 1
    wake[BUFFERED] += last - first
    wake[ADMITTED] -= last - first
    for j in range(next_t.shape[0]):
        if j != e and next_t[j] == when:
            return True
    if wake[BUSY]:
        return False
    if wake[WAKE_FINISHED] and wake[BUFFERED] >= wake[WAKE_FINISHED]:
        return True
    if wake[WAKE_GROUPS] and wake[COMPLETE] >= wake[WAKE_GROUPS]:
        return True
    return wake[WAKE_DRAINED] != 0 and wake[ADMITTED] == 0  # (the Keep order admits nothing here)


@njit(cache=True)
def run_pool(now, peek, eligible, idle_reported, t, next_t, next_k, ist, cf, tm, heap, queue, order, smp,
             trc, group, mem, out, advanced, wake, group_finished, limit):
    """Apply engine changes in time order until Python must act; returns (code, engine, its
    change's time). ``out``: the rows made (spans, prefills, finishes, preemptions) and their
    counts (``out_n``)."""
    engines = next_t.shape[0]
    while True:
        e, when = 0, next_t[0]
        for j in range(1, engines):  # min(nexts), then nexts.index: the first engine on a tie
            if next_t[j] < when:
                e, when = j, next_t[j]
        if when == np.inf or (when > now and when >= peek):
            return WAIT, e, when
        if not eligible[e]:
            return PYTHON, e, when
        room = 2 * cf[e, CAP] + 2  # the most rows one change can make of each kind
        if (out[6][SPANS] + room > out[0].shape[0] or out[6][PREFILLED] + room > out[4].shape[0]
                or out[6][PREFILLS] + 1 > out[2].shape[0] or out[6][PREEMPTS] + room > out[7].shape[0]
                or out[6][CHANGES] >= limit):
            return FULL, e, when
        k = next_k[e]
        advanced[e] = 1
        out[6][CHANGES] += 1
        t[e] = when
        ist[e, STEP] += k
        ist[e, KV] += k * ist[e, B]
        ist[e, INFLIGHT] = 0
        ist[e, LASTPF] = -1
        first = out[6][FINISHED]
        _finish(e, t, ist, heap, smp, trc, group, mem, out)
        heard = False
        if wake[LISTEN] and out[6][FINISHED] > first:
            heard = _heard(e, when, next_t, out[5], first, out[6][FINISHED], wake, group_finished)
            out[6][STEP_FINISHES] = first
        while ist[e, B] and ist[e, KV] + ist[e, B] > cf[e, KV_BUDGET]:
            _preempt(e, t, ist, queue, order, smp, trc, group, mem, out)
        if ist[e, QHEAD] < ist[e, QTAIL] and ist[e, B] < cf[e, CAP]:
            _admit(e, t, ist, cf, tm, heap, queue, order, smp, trc, group, mem, out)
        _plan(e, t, ist, cf, tm, heap, queue, smp, trc, group, mem, next_t, next_k)
        if heard:  # (Python queues the event, then the engine's idle one if it is idle)
            return HEARD, e, when
        if not idle_reported[e] and not ist[e, B] and ist[e, QHEAD] == ist[e, QTAIL]:
            return IDLE, e, when
