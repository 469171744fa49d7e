"""Multi-turn (agentic) rollouts on the real runner: generation, a tool call, the next turn.

A trajectory alternates turns of generation with calls to the tool server
(:mod:`sortedrl.realrun.tools`), as verl's ToolAgentLoop does:

* a turn ends at EOS (the trajectory is done), at the per-turn token cap ``turn_tokens`` (a tool
  call follows, unless it was the last allowed turn), or at the trajectory's total cap
  (``max_tokens`` generated tokens: truncated);
* at a turn boundary the request leaves vLLM (its slot is free while the tool runs; its KV stays
  only as prefix cache), the turn's text goes to the tool, and when the answer comes back its
  tokens are appended to the context and the next turn is a new request on the whole context;
* tool tokens are context: the trainer masks them out (never trained), they are not in
  ``response_len``, and their behaviour log-prob is never used;
* the trace records each row's turns: generated tokens, the tool call's wall-clock seconds
  (queueing in the sandbox pool included) and the tool-output tokens.

The backend is :class:`~sortedrl.realrun.backend.RealBackend` with the turn logic added; the
controller and policies are unchanged and see a trajectory as one sample that finishes when its
last turn does. A checkpoint also keeps each trajectory's turns and its generated-token mask
(:meth:`AgentBackend.turn_state`); a trajectory whose tool call was in flight when the run was
killed calls its tool again on ``--resume`` (the call's answer died with the run). Deliberately
left out: Ray engines, and stop strings as turn ends (the per-turn cap is the boundary).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Event, EventKind, hears_turns
from sortedrl.realrun.backend import RealBackend, RealEngineState
from sortedrl.realrun.task import SortTask
from sortedrl.realrun.tools import ToolClient, ToolServer
from sortedrl.realrun.trainer import Rollout

TOOL_TOKENS_MAX = 64  # tool output is cut to this many tokens (verl: max_tool_response_length)


@dataclass(frozen=True)
class TurnConfig:
    """How a multi-turn trajectory is cut into turns, and how slow its tool is."""

    max_turns: int = 2  # turns per trajectory (the last one ends at EOS or the total cap)
    turn_tokens: int = 8  # per-turn token cap: reaching it ends the turn with a tool call
    tool_latency_s: float = 0.05  # the tool server's latency per call
    tool_pool: int = 8  # calls the tool server runs at once (sandboxes)

    def check(self) -> None:
        if self.max_turns < 1 or self.turn_tokens < 1:
            raise ConfigError(f"--max-turns ({self.max_turns}) and --turn-tokens "
                              f"({self.turn_tokens}) must be >= 1")
        if self.tool_latency_s < 0:
            raise ConfigError(f"--tool-latency must be >= 0 s, got {self.tool_latency_s}")
        if self.tool_pool < 1:
            raise ConfigError(f"--tool-pool must be >= 1, got {self.tool_pool}")


def turn_config(cfg) -> TurnConfig:
    """The run's turn settings, checked (a bad one is an error before anything is written)."""
    turns = TurnConfig(cfg.max_turns, cfg.turn_tokens, cfg.tool_latency, cfg.tool_pool)
    turns.check()
    return turns


def check_multi_turn(task, cfg) -> bool:
    """Whether the task is multi-turn; refuses the setups this runner does not support."""
    if not hasattr(task, "tool_op"):
        return False
    if cfg.on_ray:
        raise ConfigError(f"--task {task.name}: multi-turn runs use the in-process engine (no "
                          "--engines > 1, --placement disaggregated or --ray)")
    return True


def start(engine, trainer, task, turns: TurnConfig, tok, seed: int, common: dict,
          decode: Callable[[list[int]], str]) -> AgentBackend:
    """Start the tool server and return the multi-turn backend talking to it."""
    server = ToolServer(turns.tool_latency_s, pool=turns.tool_pool, seed=seed).start()
    backend = AgentBackend(
        engine, trainer, turns=turns, tools=ToolClient(server.url), tool_op=task.tool_op,
        decode=decode, tokenize=lambda text: tok(text, add_special_tokens=False)["input_ids"],
        **common)
    backend.server = server
    return backend


class SortToolTask(SortTask):
    """Sorting with a tool: the model's first turn writes digits, the tool sorts them, and the
    last turn writes the answer (graded by exact match, as ``sort``)."""

    name = "sort-tool"
    tool_op = "sort"


class _ToolAwareEngine:
    """The vLLM engine as the run loop sees it: unfinished while a tool call is pending."""

    def __init__(self, engine, backend: AgentBackend) -> None:
        self._engine, self._backend = engine, backend

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def has_unfinished(self) -> bool:
        return self._engine.has_unfinished() or bool(self._backend.in_tool)


class _AgentEngineState(RealEngineState):
    """What policies see: tokens generated so far count the model's tokens, not tool output."""

    def __init__(self, engine, max_num_seqs: int, backend: AgentBackend) -> None:
        super().__init__(engine, max_num_seqs, backend.kept)
        self._backend = backend

    def in_tool(self) -> tuple[int, ...]:
        """Trajectories away on a tool call: admitted, holding no slot."""
        return tuple(self._backend.in_tool)

    def load(self) -> int:
        return len(self._engine.requests) + len(self._backend.in_tool)

    def tokens(self, sample: int, now: float) -> int | None:
        rid = self._engine.by_sample.get(sample)
        live = self._engine.requests[rid].count if rid is not None else 0
        return self._backend.generated_tokens(sample) + live


class AgentBackend(RealBackend):
    """RealBackend with turns: tool calls between turns, tool tokens masked from training."""

    def __init__(self, engine, trainer, *, turns: TurnConfig, tools: ToolClient, tool_op: str,
                 decode: Callable[[list[int]], str], tokenize: Callable[[str], list[int]],
                 **common) -> None:
        super().__init__(engine, trainer, **common)
        n = len(self.prompts)
        self.turns_cfg, self.tools, self.tool_op = turns, tools, tool_op
        self.decode, self.tokenize = decode, tokenize
        self.gen_mask: list[list[bool]] = [[] for _ in range(n)]  # per context token: generated?
        self.turns: list[list[list]] = [[[0, 0.0, 0]] for _ in range(n)]  # [gen, tool_s, tool_tokens]
        self.turn_limited = [False] * n  # the current request ends at the per-turn cap
        self.in_tool: dict[int, float] = {}  # sample -> when its tool call started (run clock)
        self.tool_pending: list[int] = []  # resumed: away on a tool call at the checkpoint
        self.engine = _ToolAwareEngine(engine, self)
        self.state = _AgentEngineState(engine, self.state.max_num_seqs, self)
        base_grade = self.grade
        self.grade = lambda i, tokens, reason: base_grade(i, self._last_turn(i), reason)

    # -- hooks of RealBackend ------------------------------------------------------------------

    def _budget(self, i: int) -> int:
        left = self.max_tokens - self.generated_tokens(i)
        if len(self.turns[i]) < self.turns_cfg.max_turns:
            cap = self.turns_cfg.turn_tokens - self.turns[i][-1][0]
            if cap < left:
                self.turn_limited[i] = True
                return cap
        self.turn_limited[i] = False
        return left

    def generated_tokens(self, i: int) -> int:
        """Tokens the model generated in sample ``i``'s kept response (tool output excluded)."""
        return sum(t[0] for t in self.turns[i])

    def _keep(self, i: int, tokens: list[int], logprobs: list[float]) -> None:
        super()._keep(i, tokens, logprobs)
        self.gen_mask[i] += [True] * len(tokens)
        self.turns[i][-1][0] += len(tokens)

    def _rollout(self, i: int) -> Rollout:
        r = super()._rollout(i)
        r.mask = list(self.gen_mask[i])
        return r

    def admit(self, engine: int, samples: list[int], generated: list[int]) -> None:
        for i, g in zip(samples, generated, strict=True):
            if g == 0 and self.kept[i]:  # the policy dropped the partial trajectory
                self.gen_mask[i], self.turns[i] = [], [[0, 0.0, 0]]
        super().admit(engine, samples, generated)

    def abort(self, samples: list[int]) -> list[int]:
        """A trajectory in a tool call is interrupted at the turn boundary: its call is waited
        for and its output kept, and it is not readmitted until the policy admits it again."""
        held = set()
        for i in samples:
            while i in self.in_tool:
                self._collect(wait_s=1.0, hold=i)
            if i not in self.engine.by_sample:
                held.add(i)
        aborted = iter(super().abort([i for i in samples if i not in held]))
        return [len(self.kept[i]) if i in held else next(aborted) for i in samples]

    def turn_state(self) -> dict:
        """What a checkpoint keeps beyond the single-turn backend's: each trajectory's turns,
        which context tokens it generated, and which were away on a tool call."""
        return {"gen_mask": self.gen_mask, "turns": self.turns, "tool_pending": sorted(self.in_tool)}

    def readmit(self, samples: list[int]) -> None:
        """Resume: a trajectory that was away on a tool call calls it again (its answer was lost
        with the killed run); the others go back to the engine from what they kept."""
        pending, self.tool_pending = set(self.tool_pending), []
        for i in samples:
            if i in pending:
                self.in_tool[i] = self.now()
                self.tools.call(i, self.tool_op, self.decode(self._last_turn(i)))
        super().readmit([i for i in samples if i not in pending])

    def close_tools(self) -> None:
        self.tools.close()
        self.server.stop()

    def turn_row(self, i: int) -> dict:
        """The trace fields of a finished trajectory: its turns, and generated tokens only."""
        turns = self.turns[i]
        return {"response_len": self.generated_tokens(i), "turn_gen": [t[0] for t in turns],
                "turn_tool_s": [t[1] for t in turns], "turn_tool_tokens": [t[2] for t in turns]}

    # -- turns -----------------------------------------------------------------------------------

    def _step(self) -> None:
        self._collect(wait_s=0.0 if self.engine._engine.has_unfinished() else 1.0)
        if self.engine._engine.has_unfinished():
            super()._step()

    def _after_step(self, started, finished, t_before: float, t_after: float) -> None:
        final, turned = [], []
        for f in finished:
            i = f.sample
            if f.reason == "length" and self.turn_limited[i]:
                self._keep(i, f.tokens, f.logprobs)
                self.timeline.add("span", f.t0, t_after, 0, i, self.ctl.s.attempt[i],
                                  self.state.version, len(f.tokens), "tool")
                self.in_tool[i] = t_after
                self.tools.call(i, self.tool_op, self.decode(self._last_turn(i)))
                turned.append(i)
            else:
                final.append(f)
        super()._after_step(started, final, t_before, t_after)
        if turned and hears_turns(self.ctl.policy):  # the simulator's rule, the same function
            self._event(Event(EventKind.TURN_DONE, 0, tuple(turned)))

    def _collect(self, wait_s: float, hold: int | None = None) -> None:
        """Append the output of every returned tool call; readmit those trajectories."""
        for i, output, seconds, queued, held in self.tools.done(wait_s):
            asked = self.in_tool.pop(i, None)
            if asked is None:
                continue
            tool = self.tokenize(output)[:TOOL_TOKENS_MAX] if output else []
            self.timeline.add("tool", asked, asked + queued, asked + seconds, 0, i,
                              self.ctl.s.attempt[i], len(self.turns[i]) - 1, len(tool))
            self.kept[i] += tool
            self.kept_lp[i] += [0.0] * len(tool)
            self.kept_ver[i] += [self.state.version] * len(tool)
            self.gen_mask[i] += [False] * len(tool)
            # the trace holds the time the call held its sandbox: the simulator adds the wait for
            # a free one from its own pool (the HTTP round trip is in the timeline, not the trace)
            self.turns[i][-1][1:] = [held, len(tool)]
            self.turns[i].append([0, 0.0, 0])
            if i != hold:
                self._next_turn(i)

    def _next_turn(self, i: int) -> None:
        self.segment[i] += 1
        rid = f"{i}.{self.ctl.s.attempt[i]}.{self.segment[i]}"
        seed = zlib.crc32(f"{self.seed}:{rid}".encode())
        self.engine.add(i, rid, self.prompts[i] + self.kept[i], len(self.kept[i]), self._budget(i),
                        self.temperature, seed)
        self.idle_reported = False

    def _last_turn(self, i: int) -> list[int]:
        """The tokens generated in the trajectory's latest turn (after the last tool output)."""
        mask, kept = self.gen_mask[i], self.kept[i]
        k = len(mask)
        while k > 0 and mask[k - 1]:
            k -= 1
        return kept[k:]
