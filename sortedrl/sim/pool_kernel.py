"""The rollout pool's common case, compiled: engine changes applied back to back in machine code.

Between two events that Python must see, the pool (:meth:`SimBackend._pool`) applies the
earliest engine change again and again: pop the samples that finish, preempt, admit from the
queue in chunks, plan the next change. For a policy that never hears a finish (``sync``,
``one_step_off``, ``oracle_sorted``), or hears them only when its ``WakeOn`` order holds
(``partial``, ``tail_batch``), nothing else happens in between but the top-ups of a ``Keep``
order (``async``, ``sortedrl``), which the kernel makes too (:func:`_serve_keep`: the
controller's admission, placement and records, and ``Engine.admit``), so that loop is all the
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
``limit`` changes (``FULL``: called again), and before a change whose top-ups might reach past
the ``Keep`` queue's front that sim/pool_keep.py checked (``PYTHON``). A preemption it makes
itself; the controller hears of it after the call, in order.
The codes are defined here, not imported, and every compiled function of the loop lives in this
one file, over 400 lines: numba's cache checks only the file of the function it compiles, so a
callee in another file could change and leave stale machine code in the cache.

Every function is compiled without numba's reference counting (``_nrt=False``): with it, each
array taken from a tuple (``smp[RUNNING]``) or passed to a callee was counted up and down with
an atomic instruction, and those took half of the time (``perf``, six seconds of a 10M-sample
``sync`` run's simulation: 52% of the samples in ``NRT_incref``/``NRT_decref``). Without it
the kernel may allocate nothing (numba frees nothing it made): the spreading of a Keep
order's top-ups works in ``kp[SCRATCH]``, and the rest writes only into the arrays it was given.
"""
from __future__ import annotations

import numpy as np
from numba import njit

WAIT, PYTHON, IDLE, FULL, HEARD = 0, 1, 2, 3, 4  # why the kernel stopped (the module doc)
NEVER = np.iinfo(np.int64).max  # a horizon with nothing running

# the cost terms, by position in the ``terms`` rows (Engine._decode + Engine._chunk_prefill)
WEIGHT, KV_READ, COMPUTE, FIXED, PER_SEQ, ADMIT_STEP, PER_REQUEST, PER_TOKEN, PER_PAIR = range(9)


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _pop(fs, sq, sm, n):
    """Remove the heap's smallest entry (read it at [0] first); returns n - 1."""
    n -= 1
    if n:
        _sift_down(fs, sq, sm, n, 0, fs[n], sq[n], sm[n])
    return n


# columns of the per-engine integer state ``ist``
STEP, KV, B, SEQ, VER, INFLIGHT, QHEAD, QTAIL, NORDER, HEAPN, LASTPF, PREEMPTED, TOPHEAD = range(13)
# (TOPHEAD: the queue's highest head; a preemption puts its sample back below it, so the queue
# from there on holds the samples loaded there: pool_fast stores only the queue's changed ends)
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
# (WakeOn(any_group) stays in Python: pool_fast._wake). KEEP 1: a Keep order may admit (its
# window, budget (-1: none), and the queue's front that pool_keep checked: KQ_OK samples, the
# whole queue if KQ_ALL), served at each finish the policy does not hear; the kernel then books
# the controller's per-sample arrays itself (``kp``), and counts its admission rows
LISTEN, GROUP_SIZE, NEED, WAKE_FINISHED, WAKE_GROUPS, WAKE_DRAINED, BUSY, COMPLETE, BUFFERED, ADMITTED, \
    KEEP, WINDOW, BUDGET, KQ_HEAD, KQ_OK, KQ_ALL, REWARDED, ADMITS, ADM_SAMPLES = range(19)
# the Keep order's arrays, in the tuple ``kp``: its queue's front and the lengths of the
# regenerated ones (attempt > 0), the controller's per-sample arrays (PublicState: state,
# generated, response_len, engine_of, reward; the trace's rewards), its loads and each engine's
# max_num_seqs, and the admission rows made (engine, first sample in ADM_S, count, the spans and
# prefills made before it; ADM_T: its time)
KQ, KQ_LEN, ST, GEN, RESP, ENGINE_OF, REWARD, REWARDS, LOADS, MAX_SEQS, ADM_I, ADM_S, ADM_T, SCRATCH = range(14)
# rows of ``kp[SCRATCH]`` (engines wide): the spreading's workspace (the kernel allocates nothing)
BY_LOAD, BELOW, SHARE, CHOSEN, BLOCK_ENGINE, BLOCK_FIRST, BLOCK_END = range(7)
ADMITTED_STATE, FINISHED_STATE = 1, 3  # SampleState.ADMITTED, .FINISHED (pool_fast checks them)


@njit(cache=True, _nrt=False)
def _live(smp, i, seq):
    return smp[RUNNING][i] == 1 and smp[LIVE_SEQ][i] == seq


@njit(cache=True, _nrt=False)
def _top(e, ist, heap, smp):
    """The finish step at the top of engine ``e``'s heap, after popping stale entries (of
    preempted samples): Engine._drop_stale. NEVER when nothing runs."""
    fs, sq, sm = heap[0][e], heap[1][e], heap[2][e]
    n = ist[e, HEAPN]
    while n and not _live(smp, sm[0], sq[0]):
        n = _pop(fs, sq, sm, n)
    ist[e, HEAPN] = n
    return fs[0] if n else NEVER


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _leave(e, i, trc, group, mem):
    """Engine._leave: the prompt KV tokens freed when sample ``i`` stops running here."""
    if group:
        g = i // group
        mem[e, g] -= 1
        if mem[e, g]:
            return 0
    return trc[PLEN][i]


@njit(cache=True, _nrt=False)
def _span(out, e, i, t1, tokens, end, smp, trc):
    """One span row: (t0, t1, engine, sample, attempt, version, tokens, end code)."""
    sp_f, sp_i, out_n = out[0], out[1], out[6]
    r = out_n[SPANS]
    sp_f[r, 0], sp_f[r, 1] = smp[T0][i], t1
    sp_i[r, 0], sp_i[r, 1], sp_i[r, 2] = e, i, trc[ATTEMPT][i]
    sp_i[r, 3], sp_i[r, 4], sp_i[r, 5] = smp[SVER][i], tokens, end
    out_n[SPANS] = r + 1


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _preempt(e, t, ist, queue, order, smp, trc, group, mem, out, wake, kp):
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
    if wake[KEEP]:  # (Controller.sample_preempted, in order: a later finish books over it)
        kp[GEN][i] = tok
    ist[e, PREEMPTED] += 1
    pre, out_n = out[7], out[6]
    pre[out_n[PREEMPTS], 0], pre[out_n[PREEMPTS], 1] = i, tok
    out_n[PREEMPTS] += 1


@njit(cache=True, _nrt=False)
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
    if head > ist[e, TOPHEAD]:
        ist[e, TOPHEAD] = head
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


@njit(cache=True, _nrt=False)
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
    return wake[WAKE_DRAINED] != 0 and wake[ADMITTED] == 0 and not _can_admit(wake)


@njit(cache=True, _nrt=False)
def _can_admit(wake):
    """StandingOrders.can_admit: a sample is queued and the budget is not spent."""
    return wake[KEEP] != 0 and (wake[KQ_HEAD] < wake[KQ_OK] or wake[KQ_ALL] == 0) and wake[BUDGET] != 0


@njit(cache=True, _nrt=False)
def _book(fin, first, last, trc, kp, wake):
    """Controller.samples_finished's per-sample arrays for the finishes ``fin[first:last]`` (a
    Keep order's top-ups read them; pool_keep books the rest after the call, in order)."""
    state, gen, resp, engine_of, loads = kp[ST], kp[GEN], kp[RESP], kp[ENGINE_OF], kp[LOADS]
    for j in range(first, last):
        i = fin[j]
        if wake[REWARDED]:
            kp[REWARD][i] = kp[REWARDS][i]
        n = trc[LENGTH][i]
        state[i] = FINISHED_STATE
        gen[i] = n
        resp[i] = n
        loads[engine_of[i]] -= 1
        engine_of[i] = -1


@njit(cache=True, _nrt=False)
def _decode_time(e, steps, b, kv0, tm):
    """CostModel.decode_time of memory-bound steps (the hot path's sums)."""
    if steps <= 0:
        return 0.0
    kv_read = tm[e, KV_READ]
    alpha = tm[e, WEIGHT] + kv_read * kv0
    return steps * (tm[e, FIXED] + tm[e, PER_SEQ] * b + alpha) + kv_read * b * ((steps * (steps - 1)) // 2)


@njit(cache=True, _nrt=False)
def _steps_within(e, elapsed, b, kv0, tm):
    """CostModel.decode_steps_within where every step is memory-bound (``_split``'s j* = 0) and
    the KV term is above 0 (pool_fast checks both): the same root, then the same corrections."""
    if elapsed <= 0.0:
        return 0
    alpha = tm[e, WEIGHT] + tm[e, KV_READ] * kv0
    beta = tm[e, KV_READ] * b
    lin = tm[e, FIXED] + tm[e, PER_SEQ] * b + alpha  # (the cost of step j* = 0; rest = elapsed)
    half = lin - beta / 2.0
    k = max(0, int((-half + np.sqrt(half * half + 2.0 * beta * elapsed)) / beta))
    while k > 0 and _decode_time(e, k, b, kv0, tm) > elapsed:
        k -= 1
    while _decode_time(e, k + 1, b, kv0, tm) <= elapsed:
        k += 1
    return k


@njit(cache=True, _nrt=False)
def _materialize(e, now, t, ist, tm, next_k):
    """Engine.materialize: move engine ``e``'s base to the first step boundary at or after ``now``."""
    if now <= t[e]:
        return
    ist[e, LASTPF] = -1  # (prefilling: none)
    b = ist[e, B]
    if b == 0:
        t[e] = now
        return
    elapsed = now - t[e]
    kv = ist[e, KV]
    k = _steps_within(e, elapsed, b, kv, tm)
    if next_k[e]:
        k = min(k, next_k[e] - 1)
    if _decode_time(e, k, b, kv, tm) == elapsed:
        t[e], done, ist[e, INFLIGHT] = now, k, 0
    else:
        end = t[e] + _decode_time(e, k + 1, b, kv, tm)
        t[e], done, ist[e, INFLIGHT] = end if end > now else np.nextafter(now, np.inf), k + 1, 1
    ist[e, STEP] += done
    ist[e, KV] += done * b


@njit(cache=True, _nrt=False)
def _place_one(i, n, kp):
    """Admission._admit_one's placement: an engine where a member of the group runs (shared
    prompt) unless it is over both its max_num_seqs and the least load plus a group; else the
    least loaded, the lowest index on a tie."""
    loads, engine_of, max_seqs = kp[LOADS], kp[ENGINE_OF], kp[MAX_SEQS]
    least = loads[0]
    for j in range(1, loads.shape[0]):  # (loads.min())
        least = min(least, loads[j])
    if n > 1:
        limit = least + n
        for j in range(i - i % n, i - i % n + n):
            f = engine_of[j]
            if f >= 0 and j != i and loads[f] < max(max_seqs[f], limit):
                return f
    for j in range(loads.shape[0]):
        if loads[j] == least:
            return j
    return 0


@njit(cache=True, _nrt=False)
def _shares(loads, left, scratch):
    """placement.spread's water-filling: each engine's share of ``left`` samples (the row
    ``scratch[SHARE]``; the rows before it are its workspace)."""
    engines = loads.shape[0]
    order, below, share, chosen = scratch[BY_LOAD], scratch[BELOW], scratch[SHARE], scratch[CHOSEN]
    for a in range(engines):  # by (load, index): an insertion sort of a few engines
        pos = a
        while pos > 0 and loads[order[pos - 1]] > loads[a]:
            order[pos] = order[pos - 1]
            pos -= 1
        order[pos] = a
    total = 0
    for a in range(engines):  # (np.cumsum(loads[order]))
        total += loads[order[a]]
        below[a], share[a], chosen[a] = total, 0, 0
    for k in range(engines, 0, -1):
        level = (below[k - 1] + left) // k
        if level >= loads[order[k - 1]]:
            extra = below[k - 1] + left - level * k
            for a in range(k):
                chosen[order[a]] = 1
            for e in range(engines):  # (sorted(order[:k]))
                if chosen[e]:
                    share[e] = level - loads[e] + (1 if extra > 0 else 0)
                    extra -= 1 if extra > 0 else 0
            break


@njit(cache=True, _nrt=False)
def _group_starts(samples, p, n):
    """Whether a group (of ``n``) starts at ``samples[p]``, 0 < p < len(samples)."""
    return samples[p] // n != samples[p - 1] // n


@njit(cache=True, _nrt=False)
def _blocks(samples, share, n, scratch):
    """placement.spread's blocks, as rows (engine, first, end) into ``samples``: contiguous by
    engine, and with ``n`` > 1 cut only between groups (placement.blocks_by_group). Returns
    their count; the rows are ``scratch``'s BLOCK_ENGINE, BLOCK_FIRST and BLOCK_END."""
    engines = share.shape[0]
    engine, first, end = scratch[BLOCK_ENGINE], scratch[BLOCK_FIRST], scratch[BLOCK_END]
    nb = begin = 0
    if n <= 1:
        for e in range(engines):
            if share[e]:
                engine[nb], first[nb], end[nb] = e, begin, begin + share[e]
                begin += share[e]
                nb += 1
        return nb
    size = samples.shape[0]
    last = -1
    for e in range(engines):
        if share[e]:
            last = e
    total = 0
    for e in range(last):
        if not share[e]:
            continue
        total += share[e]  # (0 < total < size: the last engine's share follows)
        after = total  # the group boundaries around it (bisect_left on 0, the starts, size)
        while after < size and not _group_starts(samples, after, n):
            after += 1
        before = total - 1
        while before > 0 and not _group_starts(samples, before, n):
            before -= 1
        cut = after if after - total <= total - before else before
        if cut > begin:
            engine[nb], first[nb], end[nb] = e, begin, cut
            begin = cut
            nb += 1
    if begin < size:
        engine[nb], first[nb], end[nb] = last, begin, size
        nb += 1
    return nb


@njit(cache=True, _nrt=False)
def _admit_block(e, e2, first, end, now, t, next_t, next_k, ist, cf, tm, heap, queue, smp, trc, group, mem,
                 idle, advanced, wake, kp, out):
    """Admission._admit's records for the Keep queue's samples ``kq[first:end]`` placed on
    engine ``e2`` (the row pool_fast adds to the timeline), SimBackend.admit's lengths of
    regenerated samples, and Engine.admit: the base moved to ``now``, the samples queued, a plan
    (not for ``e``, the engine reporting the finish: its change goes on)."""
    kq, state, engine_of, adm_i, adm_s = kp[KQ], kp[ST], kp[ENGINE_OF], kp[ADM_I], kp[ADM_S]
    count = end - first
    for p in range(first, end):
        state[kq[p]] = ADMITTED_STATE
        engine_of[kq[p]] = e2
    kp[LOADS][e2] += count
    wake[ADMITTED] += count
    r, s0 = wake[ADMITS], wake[ADM_SAMPLES]
    adm_i[r, 0], adm_i[r, 1], adm_i[r, 2], adm_i[r, 3], adm_i[r, 4] = e2, s0, count, out[6][SPANS], out[6][PREFILLS]
    kp[ADM_T][r] = now
    for p in range(first, end):
        adm_s[s0 + p - first] = kq[p]
    wake[ADMITS], wake[ADM_SAMPLES] = r + 1, s0 + count
    for p in range(first, end):
        i = kq[p]
        if trc[ATTEMPT][i]:
            trc[LENGTH][i] = kp[KQ_LEN][p]
    _materialize(e2, now, t, ist, tm, next_k)
    for p in range(first, end):
        i = kq[p]
        queue[e2, ist[e2, QTAIL]] = i
        ist[e2, QTAIL] += 1
        smp[GEN0][i] = kp[GEN][i]
        smp[RUNNING][i] = 0
    idle[e2] = 0
    advanced[e2] = 1
    if e2 != e:
        _plan(e2, t, ist, cf, tm, heap, queue, smp, trc, group, mem, next_t, next_k)


@njit(cache=True, _nrt=False)
def _serve_keep(e, now, t, next_t, next_k, ist, cf, tm, heap, queue, smp, trc, group, mem, idle, advanced,
                wake, kp, out):
    """Controller.serve_keep at a finish the policy does not hear: StandingOrders.take, then one
    sample placed as ``_admit_one`` does, or several spread as an ``Admit`` of them is."""
    room = wake[WINDOW] - wake[ADMITTED]
    if wake[BUDGET] >= 0 and wake[BUDGET] < room:
        room = wake[BUDGET]
    head = wake[KQ_HEAD]
    take = min(room, wake[KQ_OK] - head)
    if take <= 0:
        return
    wake[KQ_HEAD] = head + take
    if wake[BUDGET] >= 0:
        wake[BUDGET] -= take
    if take == 1:
        e2 = _place_one(kp[KQ][head], wake[GROUP_SIZE], kp)
        _admit_block(e, e2, head, head + 1, now, t, next_t, next_k, ist, cf, tm, heap, queue, smp, trc, group,
                     mem, idle, advanced, wake, kp, out)
        return
    scratch = kp[SCRATCH]
    _shares(kp[LOADS], take, scratch)
    blocks = _blocks(kp[KQ][head:head + take], scratch[SHARE], wake[GROUP_SIZE], scratch)
    for r in range(blocks):
        _admit_block(e, scratch[BLOCK_ENGINE, r], head + scratch[BLOCK_FIRST, r], head + scratch[BLOCK_END, r],
                     now, t, next_t, next_k, ist, cf, tm, heap, queue, smp, trc, group, mem, idle, advanced, wake,
                     kp, out)


@njit(cache=True, _nrt=False)
def run_pool(now, peek, eligible, idle_reported, t, next_t, next_k, ist, cf, tm, heap, queue, order, smp,
             trc, group, mem, out, advanced, wake, group_finished, kp, limit):
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
        if wake[KEEP] and not wake[KQ_ALL]:  # top-ups past the queue's checked front: Python's
            room = wake[WINDOW] - wake[ADMITTED] + ist[e, B]
            if wake[BUDGET] >= 0 and wake[BUDGET] < room:
                room = wake[BUDGET]
            if room > wake[KQ_OK] - wake[KQ_HEAD]:
                return PYTHON, e, when
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
            if wake[KEEP]:
                _book(out[5], first, out[6][FINISHED], trc, kp, wake)
            heard = _heard(e, when, next_t, out[5], first, out[6][FINISHED], wake, group_finished)
            out[6][STEP_FINISHES] = first
            if wake[KEEP] and not heard:  # (SimBackend.samples_finished serves the Keep order)
                _serve_keep(e, when, t, next_t, next_k, ist, cf, tm, heap, queue, smp, trc, group, mem,
                            idle_reported, advanced, wake, kp, out)
        while ist[e, B] and ist[e, KV] + ist[e, B] > cf[e, KV_BUDGET]:
            _preempt(e, t, ist, queue, order, smp, trc, group, mem, out, wake, kp)
        if ist[e, QHEAD] < ist[e, QTAIL] and ist[e, B] < cf[e, CAP]:
            _admit(e, t, ist, cf, tm, heap, queue, order, smp, trc, group, mem, out)
        _plan(e, t, ist, cf, tm, heap, queue, smp, trc, group, mem, next_t, next_k)
        if heard:  # (Python queues the event, then the engine's idle one if it is idle)
            return HEARD, e, when
        if not idle_reported[e] and not ist[e, B] and ist[e, QHEAD] == ist[e, QTAIL]:
            return IDLE, e, when
