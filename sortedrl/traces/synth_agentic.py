"""Synthetic multi-turn (agentic) traces shaped like published tool-use RL setups.

Public sources give turn caps, token caps, tool pools and timeouts, and a few turn-count means
(``docs/traces.md`` lists them), but no per-call tool-latency distribution and no turn-count
distribution. So this model takes the caps and means from the sources and *assumes* the shapes
(each assumption is marked in :data:`AGENTIC_PRESETS`):

* per prompt a difficulty ``d_p ~ N(0, 1)``; harder prompts make more tool calls and longer turns;
* tool calls per trajectory ``C ~ Geometric`` (on 0, 1, ...) with mean
  ``(calls_mean + calls_drift * step) * exp(calls_spread * d_p)``, clipped to ``max_turns - 1``;
  the trajectory has ``C + 1`` turns;
* generated tokens per turn ``~ lognormal(log turn_median + turn_between * d_p, turn_sigma)``,
  clipped to ``[1, turn_cap]``; turns accumulate until ``max_response_len``, where the trajectory
  is cut (``truncated``, finish reason ``length``) and has no further turns;
* each turn but the last is followed by a tool call of ``~ lognormal(log tool_median_s,
  tool_sigma)`` seconds, clipped to the timeout ``tool_timeout_s`` (a call that times out costs
  the whole timeout), and appends ``~ lognormal(log obs_median, obs_sigma)`` tool-output tokens,
  clipped to ``[1, obs_cap]``;
* reward 1 with probability ``pass_rate`` for trajectories that ended by themselves, else 0.

The sandbox pool (how many tool calls run at once) is a property of the cluster, not the trace;
each preset names its source's pool in ``sandbox_pool`` for the simulator's cluster field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sortedrl.traces.schema import Trace, TraceMeta


@dataclass(frozen=True)
class AgenticParams:
    """Parameters of the multi-turn model (see the module docstring)."""

    max_response_len: int  # generated tokens per trajectory, all turns together
    max_turns: int  # assistant turns per trajectory
    turn_cap: int  # generated tokens per turn
    calls_mean: float  # mean tool calls per trajectory at step 0, for d_p = 0
    calls_drift: float  # growth of that mean per training step
    calls_spread: float  # log-scale effect of difficulty on the number of calls
    turn_median: float  # median generated tokens of a turn
    turn_sigma: float  # std of log turn length within a prompt
    turn_between: float  # std of the prompt's log turn length (difficulty)
    tool_median_s: float  # median seconds of one tool call
    tool_sigma: float  # std of log tool seconds
    tool_timeout_s: float  # tool-call timeout; longer calls cost exactly this
    obs_median: float  # median tool-output tokens of one call
    obs_sigma: float
    obs_cap: int  # tool-output tokens per call
    prompt_median: float
    prompt_sigma: float
    prompt_max: int
    pass_rate: float
    sandbox_pool: int  # the source's concurrent tool calls (for the cluster, not the trace)
    prompts: int = 64
    group_size: int = 16
    steps: int = 1


AGENTIC_PRESETS: dict[str, AgenticParams] = {
    # verl fully-async ReTool: Qwen2.5-7B-Instruct, DAPO-Math-17k, SandboxFusion code execution.
    "agentic-retool": AgenticParams(
        max_response_len=16384,  # dapo_7b_async_retool.sh: response 16384 per trajectory
        max_turns=16,  # dapo_7b_async_retool.sh: max_assistant_turns 16
        turn_cap=16384,  # no per-turn cap in the script: only the trajectory's
        calls_mean=2.6,  # recipe/retool README: num_turns mean 7.2 after SFT = 2 * 2.6 + 2 [inf]
        calls_drift=0.0093,  # ... and 10 after 150 GRPO steps (4 calls): (4 - 2.6) / 150
        calls_spread=0.3,  # assumed
        turn_median=300.0,  # assumed: a reasoning step plus a short code cell
        turn_sigma=0.8,  # assumed
        turn_between=0.4,  # assumed
        tool_median_s=1.0,  # assumed: no published per-call latency (SandboxFusion python run)
        tool_sigma=1.0,  # assumed: p99 about 10x the median
        tool_timeout_s=30.0,  # verl SandboxFusion config for ReTool: 30 s timeout
        obs_median=40.0,  # assumed
        obs_sigma=0.7,  # assumed
        obs_cap=100,  # verl max_tool_response_length 256 characters, ~2.5 characters a token
        prompt_median=300.0,  # assumed: a DAPO-Math problem plus the tool-use template
        prompt_sigma=0.4,
        prompt_max=2048,  # dapo_7b_async_retool.sh: prompt 2048
        pass_rate=0.2,  # verl fully-async README: accuracy 0.20 (AIME) [as a training pass rate]
        sandbox_pool=128,  # SandboxFusion: 128 workers, rate limit 128
        prompts=64,  # the README's colocated run: batch 64
        group_size=16,  # dapo_7b_async_retool.sh: n 16
    ),
    # Search-R1: retrieval as the tool, a few short turns.
    "agentic-search": AgenticParams(
        max_response_len=1500,  # 3 turns x 500 generated tokens
        max_turns=3,  # Search-R1 train_ppo.sh max_turns 2 (search rounds) + the final answer
        turn_cap=500,  # Search-R1: 500 generated tokens per turn
        calls_mean=1.3,  # assumed
        calls_drift=0.0,
        calls_spread=0.3,  # assumed
        turn_median=120.0,  # assumed
        turn_sigma=0.6,  # assumed
        turn_between=0.3,  # assumed
        tool_median_s=0.2,  # assumed: a local dense-retrieval server
        tool_sigma=0.5,  # assumed
        tool_timeout_s=30.0,  # assumed
        obs_median=400.0,  # assumed: three retrieved passages
        obs_sigma=0.2,  # assumed
        obs_cap=500,  # Search-R1: 500 observation tokens per turn
        prompt_median=200.0,  # assumed
        prompt_sigma=0.3,
        prompt_max=4096,
        pass_rate=0.4,  # assumed
        sandbox_pool=120,  # verl search tool: 120 workers
        prompts=128,  # assumed
        group_size=8,  # assumed
    ),
    # SkyRL mini-SWE-agent, 8B: a software-engineering agent in a sandbox, many turns.
    "agentic-swe": AgenticParams(
        max_response_len=32768,  # DeepSWE / SkyRL-Agent SWE: response 32768
        max_turns=20,  # SkyRL mini-SWE-8B: 20 turns
        turn_cap=4096,  # SkyRL mini-SWE-8B: 4096 tokens per turn
        calls_mean=10.0,  # assumed: half the turn cap
        calls_drift=0.0,
        calls_spread=0.3,  # assumed
        turn_median=250.0,  # assumed: a thought plus one shell command
        turn_sigma=0.9,  # assumed
        turn_between=0.3,  # assumed
        tool_median_s=2.0,  # assumed (NeMo-Gym's example shows 0.31 s per action [illus])
        tool_sigma=1.2,  # assumed: builds and test runs make a long tail
        tool_timeout_s=180.0,  # SkyRL mini-SWE: 180 s per step
        obs_median=300.0,  # assumed: command output
        obs_sigma=1.0,  # assumed
        obs_cap=4096,  # assumed: output truncated like a turn
        prompt_median=2000.0,  # assumed: an issue plus repository context
        prompt_sigma=0.4,
        prompt_max=8192,
        pass_rate=0.3,  # assumed
        sandbox_pool=512,  # NeMo-Gym SWE: 512 concurrent tasks
        prompts=32,  # assumed
        group_size=8,  # assumed
    ),
}


def generate_agentic(p: AgenticParams, prompts: int, group_size: int, steps: int, seed: int,
                     dataset_size: int, source: str) -> Trace:
    """Draw a multi-turn trace (arguments checked by the caller, :func:`synth.synthesize`)."""
    rng = np.random.default_rng(seed)
    D, P, n, S = dataset_size, prompts, group_size, steps
    difficulty = rng.standard_normal(D)
    plen = np.exp(math.log(p.prompt_median) + p.prompt_sigma * rng.standard_normal(D))
    plen = np.clip(np.rint(plen), 16, p.prompt_max).astype(np.int64)
    per_epoch = D // P
    order = np.argsort(rng.random((-(-S // per_epoch), D)), axis=1)[:, : per_epoch * P]
    idx = np.repeat(order.reshape(-1)[: S * P], n)
    step = np.repeat(np.repeat(np.arange(S, dtype=np.int64), P), n)
    rows = idx.size

    d = difficulty[idx]
    mean_calls = (p.calls_mean + p.calls_drift * step) * np.exp(p.calls_spread * d)
    calls = rng.geometric(1.0 / (1.0 + mean_calls)) - 1  # on 0, 1, ...: mean = mean_calls
    want = np.minimum(calls, p.max_turns - 1) + 1
    width = int(want.max())
    log_turn = (math.log(p.turn_median) + p.turn_between * d)[:, None]
    gen = np.exp(log_turn + p.turn_sigma * rng.standard_normal((rows, width)))
    gen = np.clip(np.rint(gen), 1, p.turn_cap).astype(np.int64)
    gen[np.arange(width)[None, :] >= want[:, None]] = 0
    before = np.cumsum(gen, axis=1) - gen  # tokens generated before each turn
    gen = np.clip(np.minimum(gen, p.max_response_len - before), 0, None)
    turns = np.count_nonzero(gen, axis=1)  # turns that start before the cap
    response_len = gen.sum(axis=1)
    truncated = response_len >= p.max_response_len

    tool_s = np.exp(math.log(p.tool_median_s) + p.tool_sigma * rng.standard_normal((rows, width)))
    tool_s = np.minimum(tool_s, p.tool_timeout_s)
    obs = np.exp(math.log(p.obs_median) + p.obs_sigma * rng.standard_normal((rows, width)))
    obs = np.clip(np.rint(obs), 1, p.obs_cap).astype(np.int64)
    called = np.arange(width)[None, :] < (turns - 1)[:, None]  # no call after the last turn
    live = gen > 0
    reward = ((rng.random(rows) < p.pass_rate) & ~truncated).astype(np.float64)

    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(turns, out=offsets[1:])
    return synthetic_trace(
        p.max_response_len, n, source, D, idx, plen, response_len, truncated, step, reward,
        turn_offsets=offsets,
        turn_gen=gen[live],
        turn_tool_s=np.where(called, tool_s, 0.0)[live],
        turn_tool_tokens=np.where(called, obs, 0)[live],
    )


def synthetic_trace(cap: int, n: int, source: str, prompts: int, idx: np.ndarray,
                    plen: np.ndarray, response_len: np.ndarray, truncated: np.ndarray,
                    step: np.ndarray, reward: np.ndarray, **turns) -> Trace:
    """A synthetic trace from its drawn columns: ``idx`` picks each row's prompt among
    ``prompts`` named ``p000000``...; rows come in groups of ``n`` samples (shared by every preset)."""
    names = np.array([f"p{i:0{max(6, len(str(prompts - 1)))}d}" for i in range(prompts)])
    return Trace(
        meta=TraceMeta(max_response_len=cap, group_size=n, source=source),
        prompt_id=names[idx],
        sample=np.tile(np.arange(n, dtype=np.int64), len(idx) // n),
        prompt_len=plen[idx],
        response_len=response_len,
        truncated=truncated,
        step=step,
        reward=reward,
        finish_reason=np.where(truncated, "length", "stop"),
        name=source,
        **turns,
    )
