"""Simulator speed: samples per second under ``sync`` for 10k, 100k and 1M samples.

Prints figures; asserts nothing (speed is not a test). The trace is synthetic (math-16k lengths,
625 prompts x 8 per step) on an 8-GPU H100 / Llama-3.1-8B cluster. ``simulate`` includes the
controller, the policy and the summary; writing ``timeline.jsonl`` is timed separately.

Run: python bench/sim_speed.py [--sizes 10000,100000,1000000] [--policy sync]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sortedrl.metrics import summarize
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import run_context, simulate
from sortedrl.traces.synth import synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--policy", default="sync")
    ap.add_argument("--write", action="store_true", help="also time writing timeline.jsonl")
    args = ap.parse_args()
    cluster = preset("h100-llama3.1-8b")
    print(f"policy={args.policy} cluster={cluster.name}")
    print(f"{'samples':>9} {'simpy_ev':>9} {'sim_s':>8} {'samples/s':>11} {'us/sample':>10} {'summary_s':>9}"
          + (f" {'write_s':>8}" if args.write else ""))
    for n in (int(x) for x in args.sizes.split(",")):
        per_step = min(5000, n)
        trace = synthesize("math-16k", prompts=per_step // 8, group_size=8,
                           steps=max(1, n // per_step), seed=0)
        policy = make_policy(args.policy, [], run_context(trace))
        t0 = time.perf_counter()
        result = simulate(trace, policy, cluster)
        dt = time.perf_counter() - t0
        t1 = time.perf_counter()
        summarize(result.timeline)
        ds = time.perf_counter() - t1
        m = len(trace)
        events = result.sim_events
        line = f"{m:>9} {events:>9} {dt:>8.2f} {m / dt:>11,.0f} {1e6 * dt / m:>10.2f} {ds:>9.2f}"
        if args.write:
            with tempfile.TemporaryDirectory() as d:
                t1 = time.perf_counter()
                result.timeline.write_jsonl(Path(d) / "timeline.jsonl")
                line += f" {time.perf_counter() - t1:>8.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
