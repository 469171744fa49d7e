"""AReaL's session tracer: ``session_tracer/{role}/sessions-r{rank}.jsonl``, a line a session.

AReaL's ``perf_tracer`` (docs/en/best_practices/perf_profiling.md) writes one record per session
(one sample of a task, its dataset item): ``task_id``, ``session_id``, ``rank``, ``status``,
``submit_ts``, ``finalized_ts``, the derived ``total_s``, ``generate_s``, ``reward_s``,
``toolcall_s``, and ``phases`` = ``{generate, reward, toolcall: [{start_ts, end_ts}, ...]}``.

What it gives, read as is: the turns and the tool seconds. The ``generate`` phases, in start
order, are the turns; the ``toolcall`` phases that start after a turn's generate phase ended and
before the next one began are that turn's tool call, and its seconds are the time they cover
(their union: parallel calls count once). Tool calls before the first turn or after the last
are left out (no turn waits for them; a note counts them). A group is the sessions of one
``(rank, task_id)`` that ran together: AReaL runs a task's samples at once (``asyncio.gather`` in
``GroupedRolloutWorkflow``), but its eval executor numbers its tasks from 0 as the training one
does and logs to the same tracer file (areal/infra/workflow_executor.py: one
``TaskIdGenerator`` per executor; the trainer's eval rollout shares the process's tracer), so a
``(rank, task_id)`` whose sessions ran at separate times (a session starting at ``submit_ts``
after all before it ended) is one group per run of them (a note counts them).

What it does not give: token counts (prompt, per turn, tool output), the training step and the
reward value. So:

- per-turn generated tokens come from a field ``turn_tokens`` (one count per ``generate`` phase)
  when the record has it (a ``FieldSpec`` a user adds to AReaL's session record, as its docs
  show for custom metrics); otherwise, with ``--decode-tps R``, each turn's tokens are estimated
  as ``max(1, round(R x its generate seconds))`` and a note names that assumption (a generate
  phase also holds the request's wait in the engine's queue, so a queued turn is overestimated);
  with neither, the import is refused with one line saying so;
- the prompt's tokens come from ``prompt_tokens`` when the record has it, else ``--prompt-len``
  (default 1, with a note); tool-output tokens from ``turn_tool_tokens`` when present, else 0
  (a note);
- every session is step 0 (AReaL's rollout is asynchronous: a session has no step; a note);
  there is no reward.

Only sessions with status ``accepted`` or ``rejected`` (both generated whole; ``rejected``: the
trainer's ``should_accept_fn`` returned false, or the workflow returned None, as ``reason``
says) are read; ``pending``, ``failed`` (the workflow raised) and ``dropped`` ones are counted in
a note. Nothing in a session record marks an evaluation session (no ``is_eval``; ``role`` is the
process's, shared by both): the eval sessions in the file are read as training ones.
"""

from __future__ import annotations

from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.jsonio import finite
from sortedrl.limits import INT32_MAX, short_repr
from sortedrl.traces.importers._common import (
    Rows,
    check_layout,
    check_text,
    covered_seconds,
    dump_files,
    read_jsonl,
    whole_number,
)

REQUIRED = ("task_id", "session_id", "status")  # and "phases", on a kept session
KEPT = ("accepted", "rejected")


def read_areal(path: Path, decode_tps: float | None, prompt_len: int | None) -> tuple[Rows, int]:
    if decode_tps is not None and not decode_tps > 0:
        raise TraceError(f"--decode-tps must be > 0, got {decode_tps}")
    if prompt_len is not None and prompt_len < 1:
        raise TraceError(f"--prompt-len must be >= 1, got {prompt_len}")
    files = dump_files(path, "sessions-r*.jsonl", "AReaL session tracer sessions-r{rank}.jsonl")
    rows, skipped, estimated, default_prompt, no_tool_tokens, outside = Rows(), 0, 0, 0, 0, 0
    sessions: dict[str, list] = {}
    for f in files:
        for lineno, obj in read_jsonl(f):
            where = f"{f}: line {lineno}"
            check_layout(where, "AReaL session tracer", obj, REQUIRED)
            if not isinstance(obj["status"], str):
                raise TraceError(f"{where}: field 'status': expected a string such as "
                                 f"'accepted', got {short_repr(obj['status'])}")
            if obj["status"] not in KEPT:
                skipped += 1
                continue
            if "phases" not in obj:  # (SessionRecord.to_dict leaves out an empty one)
                raise TraceError(f"{where}: field 'phases': missing: the session recorded no "
                                 "phase (AReaL's OpenAI-proxy agent workflow traces none), so it "
                                 "has no turn to import")
            gen_s, tool_s, left_out, span = _turn_times(where, obj["phases"])
            outside += left_out
            gen = _turn_tokens(where, obj, gen_s, decode_tps)
            estimated += "turn_tokens" not in obj
            tool_tok = _tool_tokens(where, obj, len(gen))
            no_tool_tokens += "turn_tool_tokens" not in obj and len(gen) > 1
            if "prompt_tokens" in obj:
                p_len = whole_number(where, "prompt_tokens", obj["prompt_tokens"], 1, INT32_MAX)
            else:
                p_len, default_prompt = prompt_len or 1, default_prompt + 1
            start, end = _session_span(where, obj, span)
            turns = (gen, tool_s, tool_tok) if len(gen) > 1 else None
            rank = check_text(where, "rank", obj.get("rank", 0))
            key = f"areal:{rank}:{check_text(where, 'task_id', obj['task_id'])}"
            sessions.setdefault(key, []).append((start, end, p_len, gen, turns, where))
    reused = 0
    for key, members in sessions.items():
        members.sort(key=lambda m: m[0])  # stable: a tie keeps the file order
        run, reach = 0, float("-inf")
        for start, end, p_len, gen, turns, where in members:
            if start > reach and reach > float("-inf"):  # all before it had ended: a new run
                run += 1
            reach = max(reach, end)
            rows.add(key if run == 0 else f"{key}#{run + 1}", 0, p_len, sum(gen), None,
                     turns=turns, where=where)
        reused += run > 0
    _notes(rows, skipped, estimated, decode_tps, default_prompt, prompt_len, no_tool_tokens)
    if outside:
        rows.notes.append(f"left out {outside} AReaL tool calls that did not start between two "
                          "turns (before the first, after the last, or during a generate phase)")
    if reused:
        rows.notes.append(f"{reused} AReaL (rank, task_id) pairs name sessions that ran at "
                          "separate times (an eval executor numbers its tasks from 0 too, into "
                          "the same file; or a restarted run): one group per run of them")
    return rows, len(files)


def _session_span(where: str, obj: dict, span: tuple[float, float]) -> tuple[float, float]:
    """When the session ran: from ``submit_ts`` (else its first phase) to the last of
    ``finalized_ts`` and its phases' ends."""
    times = {}
    for name in ("submit_ts", "finalized_ts"):
        value = obj.get(name)
        if value is not None and not finite(value):
            raise TraceError(f"{where}: field '{name}': expected a time in seconds, got "
                             f"{short_repr(value)}")
        times[name] = value
    start = span[0] if times["submit_ts"] is None else float(times["submit_ts"])
    return start, max(start, span[1], times["finalized_ts"] or span[1])


def _interval(where: str, name: str, k: int, entry: object) -> tuple[float, float]:
    field = f"phases.{name}[{k}]"
    if not isinstance(entry, dict):
        raise TraceError(f"{where}: field '{field}': expected an object with start_ts and end_ts")
    start, end = entry.get("start_ts"), entry.get("end_ts")
    for label, v in (("start_ts", start), ("end_ts", end)):
        if not finite(v):  # (NaN passed the ordering check below; inf made an inf tool call)
            raise TraceError(f"{where}: field '{field}.{label}': expected a time in seconds, "
                             f"got {short_repr(v)}")
    if end < start:
        raise TraceError(f"{where}: field '{field}': ends at {end} before it starts at {start} "
                         "(a negative duration)")
    return float(start), float(end)


def _turn_times(where: str, phases: object):
    """Each turn's generate seconds, the seconds of the tool call after it (0 after the last),
    how many tool calls started outside the gaps between turns (left out), and the first start
    and last end of the generate and tool phases."""
    if not isinstance(phases, dict):
        raise TraceError(f"{where}: field 'phases': expected an object of phase lists")
    lists = {name: phases.get(name) or [] for name in ("generate", "toolcall")}
    for name, entries in lists.items():
        if not isinstance(entries, list):
            raise TraceError(f"{where}: field 'phases.{name}': expected a list")
    gens = sorted(_interval(where, "generate", k, e) for k, e in enumerate(lists["generate"]))
    if not gens:
        raise TraceError(f"{where}: field 'phases.generate': no generate phase (a session "
                         "that generated nothing has no turn)")
    calls = sorted(_interval(where, "toolcall", k, e) for k, e in enumerate(lists["toolcall"]))
    tool_s, used = [], 0
    for (_, end), (nxt, _) in zip(gens, gens[1:], strict=False):
        mine = [c for c in calls if end <= c[0] < nxt]
        used += len(mine)
        tool_s.append(covered_seconds(mine))
    span = (min([gens[0][0]] + [c[0] for c in calls]), max(e for _, e in gens + calls))
    return [e - s for s, e in gens], tool_s + [0.0], len(calls) - used, span




def _turn_tokens(where: str, obj: dict, gen_s: list[float], decode_tps: float | None) -> list[int]:
    if "turn_tokens" in obj:
        given = obj["turn_tokens"]
        if not isinstance(given, list) or len(given) != len(gen_s):
            raise TraceError(f"{where}: field 'turn_tokens': expected a list of {len(gen_s)} "
                             f"counts (one per generate phase), got {given!r}")
        return [whole_number(f"{where}: turn {k + 1}", "turn_tokens", v, 1, INT32_MAX)
                for k, v in enumerate(given)]
    if decode_tps is None:
        raise TraceError(f"{where}: AReaL's session tracer logs no token counts: add a field "
                         "'turn_tokens' (generated tokens per generate phase) to its session "
                         "record, or give --decode-tps to estimate them from the generate seconds")
    counts = [decode_tps * s for s in gen_s]
    if not all(c < INT32_MAX for c in counts):
        raise TraceError(f"{where}: --decode-tps {decode_tps:g} x the generate seconds gives "
                         f"{max(counts):.3g} tokens for a turn, past {INT32_MAX:,}; give the "
                         "decode rate in tokens per second")
    return [max(1, round(c)) for c in counts]


def _tool_tokens(where: str, obj: dict, turns: int) -> list[int]:
    given = obj.get("turn_tool_tokens")
    if given is None:
        return [0] * turns
    if not isinstance(given, list) or len(given) not in (turns, turns - 1):
        raise TraceError(f"{where}: field 'turn_tool_tokens': expected a list of {turns - 1} "
                         f"counts (one per tool call between turns), got {given!r}")
    counts = [whole_number(f"{where}: call {k + 1}", "turn_tool_tokens", v, 0, INT32_MAX)
              for k, v in enumerate(given[:turns - 1])]
    return counts + [0]


def _notes(rows: Rows, skipped: int, estimated: int, decode_tps: float | None,
           default_prompt: int, prompt_len: int | None, no_tool_tokens: int) -> None:
    if skipped:
        rows.notes.append(f"skipped {skipped} AReaL sessions not accepted or rejected "
                          "(pending, failed or dropped)")
    if estimated:
        rows.notes.append(f"AReaL logs no token counts: {estimated} sessions' generated tokens "
                          f"per turn = round(generate seconds x {decode_tps:g} tok/s) "
                          "(--decode-tps); a turn that waited in the engine's queue counts its "
                          "wait as tokens")
    if default_prompt:
        rows.notes.append(f"AReaL logs no prompt length: {default_prompt} sessions get "
                          f"prompt_len {prompt_len or 1} (--prompt-len)")
    if no_tool_tokens:
        rows.notes.append(f"AReaL logs no tool-output tokens: {no_tool_tokens} multi-turn "
                          "sessions' tool calls append 0 tokens to the context")
    if rows.key:
        rows.notes.append("AReaL's sessions carry no training step: all are step 0")
