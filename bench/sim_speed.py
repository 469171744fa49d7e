"""Simulator speed: samples per second for 10k, 100k and 1M samples, per policy.

Prints figures; asserts nothing (speed is not a test). The trace is synthetic (math-16k lengths,
625 prompts x 8 per step) on an 8-GPU H100 / Llama-3.1-8B cluster; policies that need a
disaggregated cluster get the disaggregated split of the same GPUs. The timed ``simulate`` call
includes the controller, the policy and the summary; ``summary_s`` is the summary's share.
``simpy_ev`` counts SimPy events: it grows with decisions, not with tokens.

Run: python bench/sim_speed.py [--sizes 10000,100000,1000000] [--policy sync|all|NAME,...]
"""

from __future__ import annotations

import argparse
import gc
import time

from sortedrl.compare import cluster_for
from sortedrl.metrics import summarize
from sortedrl.policies.registry import BUILTIN, make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--policy", default="sync", help="a name, a comma list, or all")
    args = ap.parse_args()
    names = list(BUILTIN) if args.policy == "all" else args.policy.split(",")
    base = preset("h100-llama3.1-8b")
    print(f"cluster={base.name} (8 GPUs); times in seconds on this machine")
    print(f"{'policy':>13} {'samples':>9} {'simpy_ev':>9} {'sim_s':>8} {'samples/s':>11} "
          f"{'us/sample':>10} {'summary_s':>9}")
    sizes = [int(x) for x in args.sizes.split(",")]
    traces = {}
    for n in sizes:
        per_step = min(5000, n)
        traces[n] = synthesize("math-16k", prompts=per_step // 8, group_size=8,
                               steps=max(1, n // per_step), seed=0)
    for name in names:
        for n in sizes:
            trace = traces[n]
            policy = make_policy(name, [], trace)
            cluster = cluster_for(policy.placements, base)
            result = None
            gc.collect()  # the previous run's garbage is not this run's time
            t0 = time.perf_counter()
            result = simulate(trace, policy, cluster)
            dt = time.perf_counter() - t0
            t1 = time.perf_counter()
            summarize(result.timeline)
            ds = time.perf_counter() - t1
            m = len(trace)
            print(f"{name:>13} {m:>9} {result.sim_events:>9} {dt:>8.2f} {m / dt:>11,.0f} "
                  f"{1e6 * dt / m:>10.2f} {ds:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
