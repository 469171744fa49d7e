"""Replay a vLLM benchmark on a cost model: the closed loop of ``vllm bench serve``, step by step.

The client keeps at most ``concurrency`` requests in flight and sends the next one (in the
dataset's order, once it has arrived) as soon as a response completes. A request sent at ``t``
reaches the engine at ``t + latency_s`` (HTTP, tokenisation, the hop to the engine process: time
that overlaps other requests' decoding and so is not engine time). The engine follows the
simulator's conventions (:mod:`sortedrl.sim.engine`, with ``prefill_in_step``): each step admits
the requests that have reached it, up to ``max_num_seqs``, runs their prefill inside the step,
and gives every running request one token; a request with ``g`` tokens holds ``prompt + g`` KV
tokens. A step's time is :meth:`CostModel.decode_step` plus :meth:`CostModel.prefill` when it
admits any request.

Besides the predicted duration, the replay sums each step's features (steps, running sequences,
KV tokens, prefilled tokens, admitted requests): with a linear cost model the duration is their
dot product with the cost terms plus the engine's idle time, which is what the fits solve.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sortedrl.calibration.bench_file import BenchRun
from sortedrl.sim.cost import CostModel, prefill_pairs

# The cost terms the benchmark fits solve for, in the order of the replay's feature vector.
ENGINE_TERMS = ("t_fix", "s1", "a1", "p1", "p0")


@dataclass(frozen=True)
class Replay:
    duration_s: float
    features: np.ndarray  # sums over steps of (1, running, KV tokens, prefilled tokens, admitted)
    step_features: np.ndarray  # the same per step (steps x terms)
    step_start_s: np.ndarray  # when each step started
    step_end_s: np.ndarray  # when each step ended (its tokens streamed)
    admit_step: np.ndarray  # per request, the step that prefilled it (and gave its first token)
    end_step: np.ndarray  # per request, the step that gave its last token
    idle_s: float  # time the engine had nothing to run
    steps: int
    sent_s: np.ndarray  # per request, when the client sent it, from the start
    first_token_s: np.ndarray  # per request, from the start
    end_s: np.ndarray  # per request, from the start


def replay(run: BenchRun, costs: CostModel, latency_s: float, max_num_seqs: int) -> Replay:
    """Predict the benchmark's duration on ``costs``."""
    n = len(run.input_lens)
    ins, outs = run.input_lens.tolist(), run.output_lens.tolist()
    arrive = [0.0] * n if run.arrivals is None else run.arrivals.tolist()
    pending, ready, done = deque(range(n)), [], []  # ready: (time at the engine, request)
    sent, first, end = np.zeros(n), np.zeros(n), np.zeros(n)
    rows: list[tuple[float, int, int, int, int]] = []
    starts: list[float] = []
    ends: list[float] = []
    admit_step, end_step = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t = idle = 0.0
    inflight = step = running = kv = 0

    def send(now: float) -> None:
        nonlocal inflight
        while pending and inflight < run.concurrency and arrive[pending[0]] <= now:
            i = pending.popleft()
            inflight += 1
            sent[i] = now
            heapq.heappush(ready, (now + latency_s, i))

    send(t)
    while pending or ready or running:
        if not running:
            nxt = min(ready[0][0] if ready else math.inf,
                      arrive[pending[0]] if pending and inflight < run.concurrency else math.inf)
            if nxt > t:
                idle += nxt - t
                t = nxt
            send(t)
            if not ready or ready[0][0] > t:
                continue
        admitted = []
        tokens = pairs = 0
        while ready and ready[0][0] <= t and running < max_num_seqs:
            _, i = heapq.heappop(ready)
            heapq.heappush(done, (step + outs[i] - 1, i))  # finishes at the end of that step
            admitted.append(i)
            admit_step[i] = step
            running, kv, tokens = running + 1, kv + ins[i], tokens + ins[i]
            pairs += prefill_pairs(0, ins[i])
        new = len(admitted)
        dt = costs.decode_step(running, kv)
        if new:
            dt += costs.prefill(tokens, pairs, new)
        rows.append((1.0, running, kv, tokens, new))
        starts.append(t)
        t += dt
        ends.append(t)
        first[admitted] = t
        kv += running
        while done and done[0][0] == step:
            _, i = heapq.heappop(done)
            end[i], end_step[i] = t, step
            running -= 1
            kv -= ins[i] + outs[i]
            inflight -= 1
        step += 1
        send(t)
    per_step = np.asarray(rows, dtype=float).reshape(-1, len(ENGINE_TERMS))
    return Replay(t, per_step.sum(axis=0), per_step, np.asarray(starts), np.asarray(ends), admit_step, end_step,
                  idle, step,
                  sent, first, end)
