"""A real run's observed trace, ``RUNDIR/trace.jsonl``: what the run generated, for replays.

The trace holds one row per sample of the run's dataloader (``steps x prompts x group_size``),
in dataloader order, so that ``simulate --trace`` and ``validate`` hand out the same groups in
the same order as the run did. A row describes the sample's last attempt that generated tokens:
the attempt :func:`sortedrl.validate.dropped_attempts` replays with the trace's length (earlier,
dropped attempts get the cap there). So the trace keeps every group the run generated, not only
those it trained: a group dynamic sampling filtered (``filter_groups``) keeps its lengths and its
equal rewards, so a replay under the same policy filters it too; the responses ``tail_batch``
generated beyond the ``responses`` it kept per prompt are there too (the trace's group size is
the run's ``--group-size``).

A row's columns are those of a trained sample (prompt and response tokens, ``truncated``,
``step``, ``reward``, ``finish_reason``, and the turns of a multi-turn run). A sample whose last
attempt never finished (aborted unfinished and then discarded, or never generated at all) has
``finish_reason`` ``abort`` (vLLM's name for a request stopped before it ended): its length was
never observed, only that it was longer than what it had reached, so ``response_len`` is the cap,
``truncated`` is false and ``reward`` 0 (the grader's reward for a response cut at the cap). A
replay runs it until the policy stops it, as the run did. In a multi-turn run its turns are those
it had, the last one running on to the cap.

``trace.partial.jsonl`` (written as samples are trained, cut back with the other logs on
``--resume``) holds the trained samples' rows; this module adds the others from the backend's
state and the timeline's spans when the run ends.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sortedrl.timeline import Timeline
from sortedrl.traces.io import write_trace
from sortedrl.traces.schema import Trace, TraceMeta

ABORT = "abort"  # the finish reason of a row whose attempt never finished


def sample_row(i: int, n: int, prompts_per_step: int, prompts, backend) -> dict:
    """The trace row of sample ``i``, whose response the backend holds (it has finished)."""
    resp, reason = backend.kept[i], backend.reason[i]
    return {"prompt_id": f"p{i // n:06d}", "sample": i % n, "prompt_len": len(prompts[i]),
            "response_len": len(resp), "truncated": reason == "length",
            "step": (i // n) // prompts_per_step, "reward": backend.reward[i],
            "finish_reason": reason,
            **(backend.turn_row(i) if hasattr(backend, "turn_row") else {})}


def last_attempts(tl: Timeline, samples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: its last attempt with a span (-1: none), the tokens that attempt generated,
    and whether it finished."""
    sp = tl.columns("span")
    sample, attempt = sp["sample"].astype(np.int64), sp["attempt"].astype(np.int64)
    last = np.full(samples, -1, dtype=np.int64)
    np.maximum.at(last, sample, attempt)
    mine = attempt == last[sample]
    tokens = np.bincount(sample[mine], weights=sp["tokens"][mine], minlength=samples)
    tokens = tokens.astype(np.int64)
    finished = np.zeros(samples, dtype=bool)
    finished[sample[mine & (sp["end"] == "finish")]] = True
    return last, tokens, finished


def _span_turns(tl: Timeline, i: int, attempt: int) -> list[list]:
    """The turns of sample ``i``'s ``attempt`` as the timeline has them, for a response the
    backend no longer holds (a later attempt was admitted and dropped before it generated):
    generated tokens per turn from its spans, tool seconds (from getting a sandbox to the answer)
    and tool-output tokens from its tool records (0 from a timeline written before tool records
    carried their tokens)."""
    turns, calls = [[0, 0.0, 0]], {}
    for _t, t_start, t_end, _e, s, a, turn, tool_tokens in tl.rows("tool"):
        if (s, a) == (i, attempt):
            calls[turn] = [t_end - t_start, tool_tokens]
    for _t0, _t1, _e, s, a, _v, tokens, end in tl.rows("span"):
        if (s, a) == (i, attempt):
            turns[-1][0] += tokens
            if end == "tool":
                turns[-1][1:] = calls.get(len(turns) - 1, [0.0, 0])
                turns.append([0, 0.0, 0])
    return turns


def _turn_fields(turns: list[list]) -> dict:
    return {"response_len": sum(t[0] for t in turns), "turn_gen": [t[0] for t in turns],
            "turn_tool_s": [t[1] for t in turns], "turn_tool_tokens": [t[2] for t in turns]}


def other_row(i: int, n: int, prompts_per_step: int, prompts, backend, tl: Timeline, cap: int,
              facts: tuple) -> dict:
    """The row of sample ``i``, which was not trained (see the module docstring)."""
    last, tokens, finished = (f[i] for f in facts)
    multi_turn = hasattr(backend, "turn_row")
    held = last >= 0 and backend.generated_tokens(i) == tokens  # the backend still holds that attempt
    if finished and held:
        return sample_row(i, n, prompts_per_step, prompts, backend)
    row = {"prompt_id": f"p{i // n:06d}", "sample": i % n, "prompt_len": len(prompts[i]),
           "step": (i // n) // prompts_per_step}
    if finished:  # its finish is the backend's latest for this sample: reason and reward hold
        reason = backend.reason[i]
        row.update(response_len=int(tokens), truncated=reason == "length", reward=backend.reward[i],
                   finish_reason=reason)
        return {**row, **(_turn_fields(_span_turns(tl, i, int(last))) if multi_turn else {})}
    row.update(response_len=cap, truncated=False, reward=0.0, finish_reason=ABORT)
    if multi_turn:
        turns = [list(t) for t in backend.turns[i]] if held else [[0, 0.0, 0]]
        turns[-1] = [cap - sum(t[0] for t in turns[:-1]), 0.0, 0]  # the last runs on to the cap
        row.update(_turn_fields(turns))
    return row


def write_run_trace(out: Path, cfg, task: str, prompts, backend, tl: Timeline) -> Trace:
    """Write ``out/trace.jsonl``: the trained samples' rows from ``trace.partial.jsonl``, every
    other sample's from the backend and the timeline ``tl`` (read back from the run's file).
    Returns the trace written."""
    n, total = cfg.group_size, len(prompts)
    trained = {}
    for line in (out / "trace.partial.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        trained[int(r["prompt_id"][1:]) * n + r["sample"]] = r
    facts = last_attempts(tl, total)
    rows = [trained[i] if i in trained else
            other_row(i, n, cfg.prompts, prompts, backend, tl, cfg.max_tokens, facts)
            for i in range(total)]  # dataloader order, as simulate hands the groups out
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    meta = TraceMeta(cfg.max_tokens, n, f"sortedrl run: task {task}, policy {cfg.policy}")
    path = out / "trace.jsonl"
    trace = Trace.from_columns(cols, meta, where=str(path))
    write_trace(trace, path)
    return trace
