"""Replay a vLLM benchmark on a cost model: the closed loop of ``vllm bench serve``, step by step.

The client keeps at most ``concurrency`` requests in flight and sends the next one (in the
dataset's order, once it has arrived) as soon as a response completes. The engine follows the
simulator's conventions (:mod:`sortedrl.sim.engine`, with ``prefill_in_step``): each step admits
the requests that have reached it, up to ``max_num_seqs``, runs their prefill inside the step,
and gives every running request one token; a request with ``g`` tokens holds ``prompt + g`` KV
tokens. A step's engine time is :meth:`CostModel.decode_step` plus :meth:`CostModel.prefill`
when it admits any request.

**Host work** (``host_s`` per request): between its send and the engine, a request costs CPU
time outside the engine (the client's send, the API server's HTTP handling and tokenisation, the
hand-over to the engine process, and the previous response's wrap-up). When the server, the
engine and the client share the CPU, that work does not overlap the engine's steps: it runs
first (a process that wakes up preempts the busy engine loop) and stretches the step in progress
by its length. The requests' host work runs one at a time, in send order. A request reaches the
engine when its host work is done and joins the first step that starts after that; a request
sent when a step ends misses the step that starts then (the engine loop schedules it before the
response's last token has reached the client), so it waits one stretched step. Checked on the
recorded files (docs/calibration.md): the replayed step counts match those read off the tokens'
arrival times within 0.2-2.1% per file, while the stretched steps are what the per-request timings show.

Each step's span (from the previous step's end to its own) sums, for the fits, the step's
features (steps, running sequences, KV tokens, prefilled tokens, admitted requests), the host
work done within it (in requests' worth, ``host units``), and the time nothing ran (``idle``).
With a linear cost model every measured time is their dot product with the terms and
``host_s``, plus the idle time.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from sortedrl.calibration.bench_file import BenchRun
from sortedrl.errors import ConfigError
from sortedrl.sim.cost import CostModel, prefill_pairs

# The cost terms the benchmark fits solve for, in the order of the replay's feature vector,
# then the host work per request.
ENGINE_TERMS = ("step_fixed_s", "step_s_per_seq", "kv_read_s_per_token", "prefill_s_per_token", "admit_s_per_request")
COLUMNS = (*ENGINE_TERMS, "host_s")


@dataclass(frozen=True)
class Replay:
    duration_s: float
    features: np.ndarray  # sums over spans of (1, running, KV tokens, prefilled tokens, admitted, host units)
    step_features: np.ndarray  # the same per step span (steps x columns)
    step_idle_s: np.ndarray  # per span, time neither the engine nor the host worked (overlapped: the engine idle)
    step_start_s: np.ndarray  # when each step's span began (the previous step's end)
    step_end_s: np.ndarray  # when each step ended (its tokens streamed)
    admit_step: np.ndarray  # per request, the step that prefilled it (and gave its first token)
    end_step: np.ndarray  # per request, the step that gave its last token
    first_span: np.ndarray  # per request, the first span that starts at or after its send
    lead_s: np.ndarray  # per request, the part of the span holding its send after it (0: sent at a span's start)
    idle_s: float  # time neither the engine nor the host worked
    steps: int
    sent_s: np.ndarray  # per request, when the client sent it, from the start
    first_token_s: np.ndarray  # per request, from the start
    end_s: np.ndarray  # per request, from the start


@dataclass
class _Host:
    """The host's queue of per-request work, one request at a time in send order."""

    host_s: float
    free_at: float = 0.0  # when the queued work is done
    jobs: list = None  # (start, end, request), in order
    next_job: int = 0  # first job not yet handed to the engine
    first_open: int = 0  # first job that may overlap a later span

    def __post_init__(self) -> None:
        self.jobs = []

    def add(self, now: float, i: int) -> None:
        start = max(now, self.free_at)
        self.free_at = start + self.host_s
        self.jobs.append((start, self.free_at, i))

    def busy_units(self, a: float, b: float) -> float:
        """Host work done within the span (a, b], in requests' worth (zero-length work counts
        once, in the span where it was sent)."""
        jobs = self.jobs
        if self.host_s == 0:
            while self.first_open < len(jobs) and jobs[self.first_open][0] < a:
                self.first_open += 1
            k = self.first_open
            while k < len(jobs) and jobs[k][0] < b:
                k += 1
            return float(k - self.first_open)
        while self.first_open < len(jobs) and jobs[self.first_open][1] <= a:
            self.first_open += 1
        busy = 0.0
        for s, e, _ in jobs[self.first_open:]:
            if s >= b:
                break
            busy += min(b, e) - max(a, s)
        return busy / self.host_s


SCHEDULES = ("serial", "overlapped")


class _Client:
    """The benchmark's closed loop up to the engine: requests sent in order as they arrive, at
    most ``concurrency`` in flight, each through the host's work (:class:`_Host`)."""

    def __init__(self, run: BenchRun, host_s: float) -> None:
        n = len(run.input_lens)
        self.concurrency = run.concurrency
        self.arrive = [0.0] * n if run.arrivals is None else run.arrivals.tolist()
        self.pending = deque(range(n))
        self.inflight = 0
        self.sent = np.zeros(n)
        self.host = _Host(host_s)

    def next_arrival(self) -> float:
        return self.arrive[self.pending[0]] if self.pending and self.inflight < self.concurrency else math.inf

    def send(self, now: float) -> None:
        pending, arrive = self.pending, self.arrive
        while pending and self.inflight < self.concurrency and arrive[pending[0]] <= now:
            i = pending.popleft()
            self.inflight += 1
            self.sent[i] = now
            self.host.add(now, i)

    def release(self, ready: list, now: float, sent_before: float, most: float = math.inf) -> None:
        """Hand at most ``most`` requests whose host work is done by ``now`` to the engine's
        ``ready`` heap (only those sent before ``sent_before``: the engine loop has already
        scheduled the step that starts then)."""
        host = self.host
        while host.next_job < len(host.jobs) and most > 0:
            s, e, i = host.jobs[host.next_job]
            if e > now or self.sent[i] >= sent_before:
                break
            heapq.heappush(ready, (e, i))
            host.next_job += 1
            most -= 1

    def busy(self) -> bool:
        """Whether requests remain to send or to pass through the host."""
        return bool(self.pending) or self.host.next_job < len(self.host.jobs)

    def advance(self, t: float, work: float, overlap: bool) -> float:
        """When a step needing ``work`` s of engine time from ``t`` ends: the host runs first
        (overlapped: beside it; the arrivals within the step are sent as they come)."""
        if overlap:
            end = t + work
            while self.next_arrival() <= end:
                self.send(self.next_arrival())
            return end
        host = self.host
        while True:
            self.send(t)
            if host.free_at > t:
                t = min(host.free_at, self.next_arrival())
                continue
            nxt = self.next_arrival()
            if t + work <= nxt:
                return t + work
            work -= nxt - t
            t = nxt

    def start_idle(self, t: float, ready: list, overlap: bool) -> tuple[float, bool]:
        """The idle engine starts a step as soon as one request is through the host (the others'
        host work then runs during that step, also when it takes no time): (the time it starts,
        True), or (a request's arrival, False) when that comes first (sent here; the loop looks
        again)."""
        host = self.host
        through = host.jobs[host.next_job][1] if host.next_job < len(host.jobs) else math.inf
        arrival = self.next_arrival()
        if arrival < max(t, through):
            self.send(arrival)
            return arrival, False
        t = max(t, through)
        self.release(ready, t, math.inf, most=math.inf if overlap else 1)
        return t, True


def replay(run: BenchRun, costs: CostModel, host_s: float, max_num_seqs: int,
           schedule: str = "serial") -> Replay:
    """Predict the benchmark's duration on ``costs`` with ``host_s`` of host work per request.
    ``schedule``: ``serial`` (the module's doc: the host work runs first and stretches the step
    in progress) or ``overlapped`` (a GPU server: the host work runs beside the engine's steps,
    which it does not stretch; a request reaches the engine ``host_s`` after its send, host work
    still one request at a time, and joins the first step that starts after that, also one that
    starts at its send when ``host_s`` is 0)."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown host schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    overlap = schedule == "overlapped"
    if not (math.isfinite(host_s) and host_s >= 0):
        raise ConfigError(f"{run.path}: host work per request of {host_s!r} s: expected a finite number >= 0")
    n = len(run.input_lens)
    ins, outs = run.input_lens.tolist(), run.output_lens.tolist()
    client = _Client(run, host_s)
    host = client.host
    ready, done = [], []  # ready: (host work done at, request); done: (last step, request)
    first, end = np.zeros(n), np.zeros(n)
    rows, idles, starts, ends = [], [], [], []
    admit_step, end_step = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t = span_start = 0.0
    step = running = kv = 0
    client.send(t)
    while client.busy() or ready or running:
        client.release(ready, t, math.inf if overlap else t)
        if not running and not ready:
            t, started = client.start_idle(t, ready, overlap)
            if not started:
                continue
        admitted, tokens, pairs = [], 0, 0
        while ready and running < max_num_seqs:
            _, i = heapq.heappop(ready)
            heapq.heappush(done, (step + outs[i] - 1, i))  # finishes at the end of that step
            admitted.append(i)
            admit_step[i] = step
            running, kv, tokens = running + 1, kv + ins[i], tokens + ins[i]
            pairs += prefill_pairs(0, ins[i])
        work = costs.decode_step(running, kv) + (costs.prefill(tokens, pairs, len(admitted)) if admitted else 0.0)
        if not math.isfinite(t + work):  # (a NaN or infinite step never ended: advance looped for ever)
            raise ConfigError(f"{run.path}: the replay's step {step} ends at {t + work:g} s, past any "
                              "real time: the cost terms or the host work are not usable")
        t = client.advance(t, work, overlap)
        units = 0.0 if overlap else host.busy_units(span_start, t)  # (overlapped: no engine time)
        rows.append((1.0, running, kv, tokens, len(admitted), units))
        idles.append(max(0.0, t - span_start - work - units * host_s))
        starts.append(span_start)
        ends.append(t)
        first[admitted] = t
        kv += running
        while done and done[0][0] == step:
            _, i = heapq.heappop(done)
            end[i], end_step[i] = t, step
            running -= 1
            kv -= ins[i] + outs[i]
            client.inflight -= 1
        step += 1
        span_start = t
        client.send(t)
    return _result(t, rows, idles, starts, ends, admit_step, end_step, client.sent, first, end)


def _result(t, rows, idles, starts, ends, admit_step, end_step, sent, first, end) -> Replay:
    per_step = np.asarray(rows, dtype=float).reshape(-1, len(COLUMNS))
    starts, ends = np.asarray(starts), np.asarray(ends)
    span = np.minimum(np.searchsorted(ends, sent, side="right"), len(ends) - 1)  # the span holding each send
    at_start = np.isclose(starts[span], sent, rtol=0.0, atol=1e-12)
    lead = np.where(at_start, 0.0, ends[span] - sent)
    idle = np.asarray(idles)
    return Replay(t, per_step.sum(axis=0), per_step, idle, starts, ends, admit_step, end_step,
                  np.where(at_start, span, span + 1), lead, float(idle.sum()), len(ends), sent, first, end)
