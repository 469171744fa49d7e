"""ReTool reproduction (docs/reproductions.md row 6): how the speed-up moves with tool latency.

verl's issue #2873 measured ReTool's tool time per trajectory at about ten times its generation
time; the `agentic-retool` preset assumes per-call latencies (median 1 s). This scales every
tool call's seconds by each factor given (capped at the recipe's 30 s timeout), runs the row's
two setups (colocated `sync minibatches=4` on 32 H20 against `async eta=1` on a 16 + 16 split)
and prints seconds per step, the speed-up and the per-trajectory tool/generation ratio. A
sensitivity check, not a fit: the row keeps the preset's assumed latencies.

Run: PYTHONPATH=. python bench/retool_tool_scale.py [--hold] 1 5 10 28
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from sortedrl.compare import cluster_for
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize

STEPS = 8
TIMEOUT_S = 30.0  # verl's SandboxFusion timeout for ReTool


def per_trajectory(result) -> tuple[float, float]:
    """Mean seconds a trajectory spent generating (its spans) and in sandboxes (its calls)."""
    spans, calls = result.timeline.columns("span"), result.timeline.columns("tool")
    gen = np.bincount(spans["sample"], weights=spans["t_end"] - spans["t"])
    tool = np.bincount(calls["sample"], weights=calls["t_end"] - calls["t_start"], minlength=gen.size)
    ran = np.unique(spans["sample"])  # the trajectories that generated
    return float(gen[ran].mean()), float(tool[ran].mean())


def measure(scale: float, hold: bool) -> str:
    trace = synthesize("agentic-retool", prompts=64, group_size=16, steps=STEPS, seed=0)
    trace.turn_tool_s = np.where(trace.turn_tool_s > 0,
                                 np.minimum(trace.turn_tool_s * scale, TIMEOUT_S), 0.0)
    colocated = dataclasses.replace(preset("h20-qwen2.5-7b-32gpu"), tool_holds_slot=hold)
    policy = make_policy("sync", ["minibatches=4"], trace)
    sync = simulate(trace, policy, cluster_for(policy.placements, colocated))
    split = dataclasses.replace(preset("h20-qwen2.5-7b-32gpu-disagg"), train_gpus=16,
                                tool_holds_slot=hold)
    fully = simulate(trace, make_policy("async", ["eta=1", "batch=1024", "recompute_on_sync=true"],
                                        trace), split)
    s, f = sync.summary, fully.summary
    gen_s, tool_s = per_trajectory(sync)
    return (f"tool x{scale:g}{' held' if hold else ''}: sync {s['makespan_s'] / STEPS:.1f} s/step "
            f"(rollout {s['rollout_s'] / STEPS:.1f}), async {f['makespan_s'] / STEPS:.1f} s/step "
            f"(waiting {(f['makespan_s'] - f['train_s']) / STEPS:.1f}): "
            f"{s['makespan_s'] / f['makespan_s']:.2f}x; per trajectory {gen_s:.1f} s generating, "
            f"{tool_s:.1f} s in tools ({tool_s / gen_s:.2f}x)")


if __name__ == "__main__":
    args = sys.argv[1:]
    hold = "--hold" in args
    for factor in [float(a) for a in args if a != "--hold"] or [1.0]:
        print(measure(factor, hold), flush=True)
