"""The interpreter's floor: samples per CPU second of the least per-sample work a simulator does.

Every simulated sample, under any policy, costs at least one finish and one admission: pop its
finish from a heap, advance the engine's clock by the closed-form decode time, record its decode
span, and admit the next queued sample (push its finish, record its prefill). This script does
only that, for one engine of 256 running sequences, in plain CPython, with none of the rest of
the simulator (KV accounting, chunked prefill, prefix caching, eight engines, the policy, the
controller's bookkeeping, the timeline's columns). ``bench/sim_speed.py`` measures the real
simulator on the same machine; the ratio says how much of a sample's cost is the floor.

It prints figures and asserts nothing (speed is not a test).

Run: python bench/python_floor.py [--samples 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from heapq import heappop, heappush

RUNNING = 256  # sequences an engine runs at once (the bench cluster's max_num_seqs)
STEP_FIXED_S, PER_SEQ_S, KV_READ_S = 1e-3, 2e-6, 1e-9  # a memory-bound decode step's terms


def finish_and_admit(lengths: list[int]) -> int:
    """Run the samples through one engine, a finish and an admission each; return the spans."""
    heap: list[tuple[int, int, int]] = []  # (finish step, sequence number, sample)
    running: dict[int, tuple[int, float, int]] = {}  # sample -> (step offset, start time, version)
    spans: list[tuple] = []
    prefills: list[tuple] = []
    for i in range(RUNNING):
        heappush(heap, (lengths[i], i, i))
        running[i] = (0, 0.0, 0)
    t, step, kv, seq, queued = 0.0, 0, 0, RUNNING, RUNNING
    while heap:
        finish_step, _, i = heappop(heap)
        k = finish_step - step
        t += k * (STEP_FIXED_S + PER_SEQ_S * RUNNING + KV_READ_S * kv) + KV_READ_S * RUNNING * (k * (k - 1) // 2)
        step = finish_step
        _, t0, version = running.pop(i)
        spans.append((t0, t, 0, i, 0, version, lengths[i], "finish"))
        if queued < len(lengths):
            j = queued
            queued += 1
            seq += 1
            running[j] = (1 - step, t, 0)
            heappush(heap, (lengths[j] + step, seq, j))
            prefills.append((t, t + 1e-4, 0, [j], 300, 0))
    return len(spans)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(0)
    lengths = [rng.randint(100, 5000) for _ in range(args.samples)]
    best = float("inf")
    for _ in range(args.repeat):  # the fastest: load only slows a run
        gc.collect()
        gc.disable()  # as the simulator runs (sim/run.py)
        c0 = time.process_time()
        finish_and_admit(lengths)
        best = min(best, time.process_time() - c0)
        gc.enable()
    n = args.samples
    print(f"floor: {n:,} samples, one finish and one admission each: {best:.2f} CPU s, "
          f"{n / best:,.0f} samples per CPU second, {1e6 * best / n:.2f} us a sample")


if __name__ == "__main__":
    main()
