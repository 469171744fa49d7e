"""Run one policy on one trace on one simulated cluster: the library entry point of ``simulate``.

The trace is split here: the controller (and so the policy) gets only prompt ids and prompt
lengths, the simulator's backend gets the true response lengths.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.metrics import summarize
from sortedrl.policies.auto import auto_params
from sortedrl.policies.base import Policy, params_dict
from sortedrl.policies.controller import Controller
from sortedrl.policies.registry import run_context  # noqa: F401  (re-exported)
from sortedrl.sim.attempts import check_regen
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.turns import decode_steps, has_turns, tool_chains
from sortedrl.timeline import Timeline
from sortedrl.traces.digest import trace_digest
from sortedrl.traces.schema import Trace


@dataclass
class SimResult:
    summary: dict
    timeline: Timeline
    sim_events: int = 0  # SimPy events scheduled (the event-jump claim: O(samples + actions))


def lower_bound(trace: Trace, cluster: Cluster) -> float:
    """Seconds no policy can beat when every sample is generated and trained once.

    Rollout: the decode work at the engines' peak rate (full batch, KV reads ignored) plus the
    prompt prefill compute, or the longest response's chain of decode steps, each at least the
    fastest step (batch 1's where steps grow with the batch), whichever
    is longer (a response needs a decode step for every token but the first of each turn, which
    a prefill yields: :func:`~sortedrl.sim.turns.decode_steps`); with prefix caching a GRPO group's prompt is prefilled once and each other member
    computes one token (:func:`prefill_tokens_floor`). Training: every token once plus one
    update's fixed cost. Colocated placement adds the two, since rollout and training share the
    GPUs; disaggregated takes the longer. With turns, tool calls run off the GPUs, through
    updates too, so on a colocated cluster they are not added to training
    (:func:`_colocated_turns`); on a disaggregated one they lie on the rollout chain.
    """
    c = cluster.cost()
    q = cluster.max_num_seqs
    peak = max(b / (c.fixed(b) + max(c.weight_read(b), c.compute_s_per_seq * b)) for b in range(1, q + 1))  # tok/s, one engine
    steps = decode_steps(trace)
    decode = int(steps.sum())
    prefill = c.prefill_s_per_token * prefill_tokens_floor(trace, cluster.prefix_caching)
    work = (decode / peak + prefill) / cluster.engines
    step = c.fastest_step(q)  # (a batch of 1 but for a hand-written step table that dips)
    chain = int(steps.max()) * step
    tokens = int(trace.prompt_len.sum() + trace.response_len.sum())
    lengths = trace.prompt_len.astype(np.int64) + trace.response_len
    if int(lengths.max()) ** 2 * len(lengths) < 2**62:  # the sum fits in int64: exact
        pairs = int(np.sum(lengths * (lengths + 1) // 2))
    else:
        pairs = sum(n * (n + 1) // 2 for n in lengths.tolist())
    train = c.train(tokens, pairs)  # unpadded: a true floor
    if cluster.placement == "colocated":
        bound = max(work, chain) + train
        return max(bound, _colocated_turns(trace, cluster, c, lengths, step)) if has_turns(trace) else bound
    if has_turns(trace):  # a tool call lies on its trajectory's chain, and in the sandbox pool
        rows, tool = tool_chains(trace, step)
        chain = max(chain, float(np.max(rows)), float(tool.sum()) / cluster.tool_pool)
    return max(work, chain, train)


def _colocated_turns(trace: Trace, cluster: Cluster, c, lengths: np.ndarray, step: float) -> float:
    """The floors tool calls set on a colocated cluster. A tool call holds no GPU, so it may run
    through an update (docs/metrics.md); what it cannot overlap is its own trajectory's later
    turns and the update that trains the trajectory, which starts after its last token. So:
    each trajectory's chain (batch-1 decode steps plus tool seconds) plus one update of that
    sample alone; and the sandbox pool's busy time (the calls of the attempts that are trained
    fill ``tool_pool`` sandboxes until at least Σ tool seconds / pool) plus the smallest such
    update of a sample with tool time (the last call to return is one's)."""
    rows, tool = tool_chains(trace, step)
    own = c.train(lengths, lengths * (lengths + 1) // 2)  # one update on just that sample
    bound = float(np.max(rows + own))
    if float(tool.sum()) > 0:
        bound = max(bound, float(tool.sum()) / cluster.tool_pool + float(np.min(own[tool > 0])))
    return bound


def prefill_tokens_floor(trace: Trace, prefix_caching: bool) -> int:
    """The fewest prompt tokens the engines must prefill: every prompt token, or with prefix
    caching each group's shared prompt once plus one token for each other member (vLLM computes
    a full prefix hit's last prompt token; the engines key a group by sample index // group size
    and prompt length, as here)."""
    prompts = trace.prompt_len.astype(np.int64)
    g = trace.meta.group_size
    if not prefix_caching or g <= 1 or not len(prompts):
        return int(prompts.sum())
    keys = np.stack([np.arange(len(prompts), dtype=np.int64) // g, prompts])
    _, first = np.unique(keys, axis=1, return_index=True)
    return int(prompts[first].sum()) + len(prompts) - len(first)


def placement_error(policy: str, placements: tuple[str, ...], cluster: Cluster) -> str:
    """Why ``cluster`` cannot run a policy that runs only on ``placements``, and what can."""
    how = {"disaggregated": "a preset ending in -disagg, or placement: disaggregated in a cluster file",
           "colocated": "a preset without -disagg, or placement: colocated in a cluster file"}
    known = [p for p in placements if p in how]  # (the class check refuses unknown ones)
    ways = "; ".join(how[p] for p in known)
    return (f"policy {policy} needs a {' or '.join(known)} cluster ({ways}); {cluster.where} is "
            f"{cluster.placement}")


def simulate(trace: Trace, policy: Policy, cluster: Cluster, seed: int = 0,
             progress: Callable[[int], None] | None = None, audit: bool = False,
             attempt_lengths: dict | None = None, regen: str = "resample",
             spill_dir: Path | None = None) -> SimResult:
    """Simulate ``policy`` on ``trace``; raises ConfigError for a cluster that cannot run it.

    ``regen`` says where a regenerated attempt's length comes from (:mod:`sortedrl.sim.attempts`:
    ``resample`` draws a fresh one for its prompt, seeded by ``seed``; ``same`` repeats the
    recorded one). ``attempt_lengths`` maps (sample, attempt) to the length of an attempt that
    was dropped and regenerated (``validate`` passes what a real run showed); it replaces the
    draw, and the last attempt is the trace's. ``spill_dir`` (an empty directory the caller
    removes once done with the result's timeline) keeps a long run's timeline on disk
    (:mod:`sortedrl.timeline_spill`); without it, in memory."""
    check_regen(regen)
    cluster.validate(cluster.where)
    if policy.placements and cluster.placement not in policy.placements:
        raise ConfigError(placement_error(policy.name, policy.placements, cluster))
    cluster.check_trace_fits(trace)
    meta = {
        "backend": "sim",
        "policy": policy.name,
        "oracle": bool(policy.oracle),  # (a policy may hold its oracle object there)
        "params": params_dict(policy.params),
        "trace": trace.name,
        "trace_digest": trace_digest(trace),  # (the contents, which a name does not pin)
        "cluster": cluster.name,
        "seed": seed,
        "regen": "replay" if attempt_lengths is not None else regen,
        "placement": cluster.placement,
        "engines": cluster.engines,
        "max_num_seqs": cluster.max_num_seqs,
        "kv_budget": cluster.kv_budget,
        "tp": cluster.tp,
        "gpus": cluster.gpus,
        "trainer_gpus": cluster.trainer_gpus,
        "group_size": trace.meta.group_size,
        "samples_total": len(trace),
        "lower_bound_s": lower_bound(trace, cluster),
    }
    with _run_heap():
        timeline = Timeline(meta, spill_dir)
        sim_events = _run(trace, policy, cluster, timeline, progress, seed=seed, audit=audit,
                          attempt_lengths=attempt_lengths, regen=regen)
    if progress is not None:
        progress(0, "summarising the timeline")
    summary = summarize(timeline)
    assert math.isfinite(summary["makespan_s"])
    return SimResult(summary, timeline, sim_events)


def _run(trace: Trace, policy: Policy, cluster: Cluster, timeline: Timeline, progress, **kw) -> int:
    """Run the controller over ``trace`` into ``timeline``; returns the SimPy events it took.
    Its state (in reference cycles) is garbage once this returns."""
    if hasattr(progress, "watch"):  # a progress bar polls the timeline (no calls in the hot path)
        progress.watch(timeline, len(trace))
    backend = SimBackend(trace, cluster, timeline, progress, **kw)
    timeline.meta["regen_sigma"] = round(backend._attempts.sigma_within, 6)
    rewards = trace.reward  # an array: read per finish; a list would hold 32 bytes per sample
    controller = Controller(policy, trace.prompt_id, trace.prompt_len,
                            trace.meta.group_size, backend, timeline, rewards=rewards)
    controller.run()
    timeline.meta["auto_params"] = auto_params(policy, cluster.engines * cluster.max_num_seqs)
    return next(backend.env._eid)


@contextmanager
def _run_heap():
    """Pause the cyclic GC for a run, then collect the run's own garbage, and only it.

    The hot loop allocates millions of small tuples and makes no reference cycles worth
    collecting: pausing the GC makes it ~40% faster. The run's state is garbage in reference
    cycles once it ends, and collecting it before the summary keeps the peak down (10M samples:
    about 0.5 GB). Every object of the run is born while the GC is paused, so all of them are
    in the youngest generation, and collecting that one frees them. A full collection would
    walk the whole heap: in a process that imported torch (190k objects) it took 54 ms a run,
    which made the test suite's thousands of small runs 7x slower.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect(0)
