"""``sortedrl forecast``: the whole training run, before the GPUs are spent.

The question users ask (peers.md §3: "how long will GRPO training take?") is about a whole run:
its wall-clock, its GPU-hours and cost, how long a step takes and where the time goes. This
module answers it by simulating the run: for each policy and cluster, a trace model (a fitted
length model, :mod:`sortedrl.traces.model`) is drawn for ``steps`` steps under several seeds, or
a fixed trace is replayed once, and each draw is simulated. The forecast is the mean over the
seeds; the interval is the lowest and highest of them (the spread the length model's randomness
gives; it does not include the cost model's own error, see docs/calibration.md).

A *step* here is one optimizer update: step times are the gaps between consecutive update ends
(the first from the start of the run), pooled over the seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sortedrl.compare import PolicySpec, cluster_for
from sortedrl.metrics import union_length
from sortedrl.parallel import run_jobs
from sortedrl.parallel_progress import SampleCounts
from sortedrl.policies.registry import make_policy
from sortedrl.scratch import temp_scratch
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.run import SimResult, simulate
from sortedrl.timeline import Timeline
from sortedrl.traces.model import TraceModel, generate
from sortedrl.traces.schema import Trace

PARTS = ("rollout_s", "train_s", "sync_s", "offload_s", "idle_s")


@dataclass(frozen=True)
class RunSource:
    """Where the runs' lengths come from: a trace model drawn per seed, or one fixed trace."""

    model: TraceModel | None = None
    trace: Trace | None = None
    steps: int = 1
    prompts: int | None = None

    def draw(self, seed: int) -> Trace:
        if self.model is None:
            assert self.trace is not None
            return self.trace
        return generate(self.model, self.steps, seed=seed, prompts=self.prompts)

    def samples_per_run(self) -> int:
        if self.model is None:
            assert self.trace is not None
            return len(self.trace)
        per_step = self.model.prompts_per_step if self.prompts is None else self.prompts
        return self.steps * per_step * self.model.group_size

    def seeds(self, seeds: int, base: int) -> list[int]:
        """A fixed trace has no randomness to sample: one run."""
        return [base + k for k in range(seeds if self.model is not None else 1)]


def step_times(timeline: Timeline) -> np.ndarray:
    """Seconds between consecutive update ends (the first from 0)."""
    ends = np.sort(timeline.ends("train").astype(np.float64))
    return np.diff(ends, prepend=0.0)


def time_parts(result: SimResult) -> dict[str, float]:
    """Where the wall-clock went: busy seconds per activity, and idle seconds (nothing ran)."""
    tl, s = result.timeline, result.summary
    kinds = ("span", "prefill", "tool", "train", "sync", "offload", "onload")  # (a tool call: rollout)
    busy = union_length(np.concatenate([tl.columns(k)["t"] for k in kinds]),
                        np.concatenate([tl.ends(k) for k in kinds]))
    return {"rollout_s": float(s["rollout_s"]), "train_s": float(s["train_s"]),
            "sync_s": float(s["sync_s"]), "offload_s": float(s.get("offload_s", 0.0)),
            "idle_s": max(0.0, float(s["makespan_s"]) - busy)}


# a multi-turn trace's summary keys a forecast keeps (means over the seeds): what a planner
# sizes the tool servers' pool by
TOOL_KEYS = ("tool_calls", "tool_s", "sandbox_wait_s", "bubble_tool_ratio")


class Draw(NamedTuple):
    """What the forecast keeps of one simulated draw of the run (not its timeline)."""

    ran_on: Cluster
    wall_s: float
    step_s: np.ndarray  # seconds between update ends (:func:`step_times`)
    parts: dict[str, float]  # :func:`time_parts`
    summary: dict
    seed: int = 0  # the draw's seed


def _draw(shared: tuple, job: tuple) -> Draw:
    """Simulate one draw of the run (in a worker process of :mod:`sortedrl.parallel`,
    ``progress`` is the jobs' :class:`~sortedrl.parallel_progress.SampleCounts`)."""
    source, progress = shared
    spec, cluster, seed = job
    trace = source.draw(seed)
    policy = make_policy(spec.name, list(spec.sets), trace, spec.label)
    ran_on = cluster_for(policy.placements, cluster)
    with temp_scratch("forecast") as spill:  # a whole run's timeline waits on disk, not in memory
        result = simulate(trace, policy, ran_on, seed=seed, progress=progress, spill_dir=spill)
        return Draw(ran_on, float(result.summary["makespan_s"]), step_times(result.timeline),
                    time_parts(result), result.summary, seed)


def forecast_one(spec: PolicySpec, draws: list[Draw], gpu_hour_price: float) -> dict:
    """One policy on one cluster: the forecast from its draws (one per seed)."""
    ran_on = draws[-1].ran_on
    walls = [d.wall_s for d in draws]
    steps = [d.step_s for d in draws]
    parts = [d.parts for d in draws]
    summaries = [d.summary for d in draws]
    wall = math.fsum(walls) / len(walls)
    pooled = np.concatenate(steps) if steps else np.zeros(1)
    gpu_hours = ran_on.gpus * wall / 3600.0
    out = {
        "policy": spec.label, "name": spec.name, "cluster": ran_on.name,
        "placement": ran_on.placement, "gpus": ran_on.gpus, "seeds": len(draws),
        "seed": draws[0].seed,  # the first: the seeds are seed .. seed + seeds - 1 (--seed, --seeds)
        "wall_s": wall, "wall_s_low": min(walls), "wall_s_high": max(walls),
        "wall_h": wall / 3600.0, "gpu_hours": gpu_hours,
        "cost": gpu_hours * gpu_hour_price if gpu_hour_price > 0 else None,  # (no price: null, as the table's -)
        "updates": pooled.size / len(draws),  # (a mean: draws may differ)
        "step_s_p50": float(np.percentile(pooled, 50)),
        "step_s_p90": float(np.percentile(pooled, 90)),
        "step_s_max": float(pooled.max()),
    }
    for key in PARTS:
        out[key] = math.fsum(p[key] for p in parts) / len(parts)
    for key in ("samples_trained", "samples_total", "tokens_per_s", "learnable_tokens_per_s", "staleness_mean",
                "bubble_ratio", *TOOL_KEYS):  # (the tool keys: a multi-turn trace's runs only)
        if key in summaries[0]:
            out[key] = math.fsum(float(s[key]) for s in summaries) / len(summaries)
    out["walls_s"] = walls
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def run_forecast(source: RunSource, specs: list[PolicySpec], clusters: list[Cluster],
                 seeds: int = 3, base_seed: int = 0, gpu_hour_price: float = 0.0,
                 progress: Callable[[int], None] | None = None, workers: int = 1,
                 skip: Collection[tuple[str, int]] = ()) -> list[dict]:
    """One forecast per (cluster, policy), clusters in the order given, but the (label, index
    of the cluster) pairs in ``skip``; ``workers`` > 1 simulates that many draws at once, in
    processes (the same forecasts)."""
    chosen = source.seeds(seeds, base_seed)
    jobs = [(spec, cluster, seed) for k, cluster in enumerate(clusters) for spec in specs
            if (spec.label, k) not in skip for seed in chosen]
    if workers > 1 and len(jobs) > 1:
        # each draw's samples generated, written by its worker (no bar: no counters, no polls)
        counts = SampleCounts(len(jobs)) if hasattr(progress, "watch") else None
        if counts is not None:
            progress.watch(counts, len(jobs) * source.samples_per_run())
        draws = run_jobs(_draw, (source, counts), jobs, workers, counts=counts)
    else:
        draws = run_jobs(_draw, (source, progress), jobs)
    n = len(chosen)
    return [forecast_one(jobs[k][0], draws[k:k + n], gpu_hour_price)
            for k in range(0, len(jobs), n)]
