"""NeMo-Gym's per-rollout metrics: ``nemo_gym_metrics.json`` with ``per_turn_metrics``.

NeMo-Gym's SWE agents (OpenHands, OpenCode) write one ``nemo_gym_metrics.json`` per rollout
(``SWEBenchMetrics`` in responses_api_agents/swe_agents/app.py), in a directory named
``<instance_id>_<timestamp_ms>_<hash>`` under one ``swebench_results_<run_session_id>/`` per
server run; its ``per_turn_metrics`` holds three per-call lists (read by NeMo-Gym's own
``swe_trace_converter.py``):

- ``response_latencies``: one entry per LLM call: ``response_id``, ``latency`` (s),
  ``timestamp`` (ISO, when the completion came back) and optionally ``start_timestamp``;
- ``token_usages``: one entry per LLM call, matched by ``response_id``: ``prompt_tokens``
  (the whole context sent) and ``completion_tokens`` (generated);
- ``action_execution_latencies``: one entry per tool action: ``latency`` (s), ``timestamp`` and
  optionally ``start_timestamp``, ``observation_type``.

Each LLM call, in start order, is a turn: ``completion_tokens`` are its generated tokens; the
first call's ``prompt_tokens`` is the prompt. The actions that start after a call ended and
before the next call starts are that turn's tool call; its seconds are the time they cover (a
start is ``start_timestamp``, else ``timestamp - latency``). The tool output appended to the
context is the context's growth to the next call, ``prompt_tokens[k+1] - prompt_tokens[k] -
completion_tokens[k]``; an agent that condensed its history makes it negative: that call then
appends 0 tokens (a note counts them). Actions that start before the first call, after the last
or during a call wait on no turn and are left out (a note counts them). A naive ISO time is
taken as UTC, as NeMo-Gym's converter takes it.

A rollout whose agent failed has no ``per_turn_metrics`` (the file keeps ``resolved: false``,
or no ``resolved`` when it never got that far): it has no call times or token counts, so it is
skipped (a note counts them) but still counts in its group, which is then short and dropped;
one with no time at all (no ``step``, start time or directory timestamp) has no step, so no
group counts it (the note says how many).
The reward is ``resolved`` as NeMo-Gym scores it (``1.0 if resolved else 0.0``): a missing or
null ``resolved`` is 0 (a note counts them), else a ``reward`` field when present.

The files carry no step and the rollouts of a whole run share one directory, so the steps come
from time (unless every rollout has a ``step`` field): a rollout runs from its start
(``generation_start_timestamp``, else the directory's ``<timestamp_ms>``, else its first call)
to its last logged time (calls, actions, ``openhands_run_time``, the evaluation); a step is a
stretch of time in which some rollout was running, numbered from 0, because NeMo-RL waits for
a step's rollouts before it trains and starts the next step's after. A group is the rollouts of
one ``instance_id`` (the field, else the directory name's first part) within a step; the group
size n is the most common such count (ties: the smallest). An instance with more than n
rollouts in a step (an asynchronous run whose steps overlap, or an instance twice in a batch) is
split, in start order, into groups of n (a note counts them; a remainder is a short group).
PATH is one metrics file, a JSONL file of such objects, or a directory searched for
``nemo_gym_metrics.json`` files.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sortedrl import jsonio
from sortedrl.errors import TraceError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.traces.importers._common import (
    Rows,
    check_text,
    covered_seconds,
    empty_file,
    number_or_none,
    read_jsonl,
    whole_number,
)
from sortedrl.traces.importers._compressed import refuse_compressed_dumps

NAME = "nemo_gym_metrics.json"
LISTS = ("response_latencies", "token_usages", "action_execution_latencies")


@dataclass
class _Rollout:
    where: str
    instance: str
    order: int  # in reading order (ties of time keep it)
    start: float | None  # None: a failed rollout with no time at all
    end: float | None
    step: int | None  # the record's own ``step``; else from time
    row: tuple | None  # (prompt, turns, reward); None: skipped (no per_turn_metrics)


def read_nemo_gym(path: Path) -> tuple[Rows, int]:
    stats = {"shrank": 0, "outside": 0, "skipped": 0, "unresolved": 0}
    rollouts, files = [], set()
    for where, key, obj, dir_ts in _records(path):
        files.add(where.split(": line ")[0])
        rollouts.append(_rollout(where, key, obj, dir_ts, len(rollouts), stats))
    rows = Rows()
    if not any(r.row for r in rollouts):
        raise TraceError(f"{path}: none of the {len(rollouts)} NeMo-Gym rollouts has "
                         "per_turn_metrics (each agent failed, or its harness writes none: "
                         "anyswe_agent and anyterminal_agent do not): nothing to import")
    groups, n, split, timed = _groups(rollouts)
    stats["unplaced"] = sum(r.step is None and r.start is None for r in rollouts)
    for key, step, members in groups:
        for r in members:
            if r.row is not None:
                prompt, (gen, tool_s, tool_tok), reward = r.row
                turns = (gen, tool_s, tool_tok) if len(gen) > 1 else None
                rows.add(key, step, prompt, sum(gen), reward, turns=turns, where=r.where)
    _notes(rows.notes, stats, n, split, timed)
    return rows, len(files)


def _rollout(where: str, key: str, obj: dict, dir_ts: float | None, order: int,
             stats: dict) -> _Rollout:
    step = whole_number(where, "step", obj["step"]) if "step" in obj else None
    first = last = row = None
    if obj.get("per_turn_metrics") is None:  # the agent failed: app.py logged no calls
        stats["skipped"] += 1
    else:
        gen, tool_s, tool_tok, prompt, first, last = _turns(where, obj, stats)
        row = (prompt, (gen, tool_s, tool_tok), _reward(where, obj, stats))
    if obj.get("generation_start_timestamp") is not None:
        start = _time(where, "generation_start_timestamp", obj["generation_start_timestamp"])
    else:
        start = dir_ts if dir_ts is not None else first
    if start is None:
        return _Rollout(where, key, order, None, None, step, row)
    ends = [start] + ([last] if last is not None else [])
    run = _seconds(where, obj, "openhands_run_time")
    if run is not None:
        ends.append(start + run)
    fin = _seconds(where, obj, "final_eval_time")
    if fin is not None and obj.get("evaluation_start_timestamp") is not None:
        ends.append(_time(where, "evaluation_start_timestamp", obj["evaluation_start_timestamp"])
                    + fin)
    return _Rollout(where, key, order, start, max(ends), step, row)


def _reward(where: str, obj: dict, stats: dict) -> float:
    """NeMo-Gym's own score, ``1.0 if resolved else 0.0`` (app.py ``run``)."""
    if obj.get("resolved") is not None:
        return number_or_none(where, "resolved", obj["resolved"])
    if obj.get("reward") is not None:  # a JSONL of NeMo-Gym's verify responses
        return number_or_none(where, "reward", obj["reward"])
    stats["unresolved"] += 1
    return 0.0


def _seconds(where: str, obj: dict, name: str) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or value == float("inf"):
        raise TraceError(f"{where}: field '{name}': expected seconds >= 0, got {value!r}")
    return float(value)


def _groups(rollouts: list[_Rollout]):
    """(key, step, members) per group, in step and start order; the group size n; how many
    (step, instance) pairs held more than n rollouts; the steps found from time (None: the
    rollouts' own ``step``)."""
    given = [r for r in rollouts if r.step is not None]
    if given and len(given) < len(rollouts):
        bare = next(r for r in rollouts if r.step is None)
        raise TraceError(f"{bare.where}: field 'step': missing, though {given[0].where} has one "
                         "(give every rollout a step, or none: steps then come from time)")
    placed = [r for r in rollouts if r.step is not None or r.start is not None]
    timed = None
    if not given:
        step, reach = -1, float("-inf")
        for r in sorted(placed, key=lambda r: (r.start, r.order)):
            if r.start > reach:  # nothing was running: a new step
                step += 1
            r.step, reach = step, max(reach, r.end)
        timed = step + 1
    pairs: dict[tuple[int, str], list[_Rollout]] = {}
    for r in placed:
        pairs.setdefault((r.step, r.instance), []).append(r)
    sizes = Counter(len(v) for v in pairs.values())
    n = min(size for size, count in sizes.items() if count == max(sizes.values()))
    out, split = [], 0
    for (step, instance), members in pairs.items():
        members.sort(key=lambda r: (r.start is None, r.start or 0.0, r.order))
        split += len(members) > n
        for j in range(0, len(members), n):
            suffix = "" if j == 0 else f"#{j // n + 1}"
            out.append((f"nemo-gym:{instance}{suffix}", step, members[j:j + n]))
    out.sort(key=lambda g: (g[1], min((r.start for r in g[2] if r.start is not None),
                                      default=0.0), g[0]))
    return out, n, split, timed


def _notes(notes: list[str], stats: dict, n: int, split: int, timed: int | None) -> None:
    if split:
        notes.append(f"{split} NeMo-Gym instances had more than {n} rollouts (the group size: "
                     "the most common count per instance and step) within one step, their runs "
                     "overlapping (an asynchronous run, or an instance twice in a batch): split "
                     f"into groups of {n} in start order")
    if stats["skipped"]:
        notes.append(f"skipped {stats['skipped']} NeMo-Gym rollouts without per_turn_metrics "
                     "(the agent failed: no call times or token counts; NeMo-Gym scores them "
                     "0): a group that lost one is short and dropped"
                     + (f"; {stats['unplaced']} of them had no time at all (no step, "
                        "generation_start_timestamp or directory timestamp), so no step and no "
                        "group could count them" if stats["unplaced"] else ""))
    if stats["unresolved"]:
        notes.append(f"{stats['unresolved']} NeMo-Gym rollouts have no 'resolved' (never "
                     "evaluated): reward 0, as NeMo-Gym scores them")
    if stats["shrank"]:
        notes.append(f"{stats['shrank']} NeMo-Gym tool calls were followed by a shorter "
                     "context (the agent condensed its history): they append 0 tokens")
    if stats["outside"]:
        notes.append(f"left out {stats['outside']} NeMo-Gym actions that did not start "
                     "between two LLM calls (before the first, after the last, or during a "
                     "call): no turn waits for them")
    if timed is not None:
        notes.append(f"NeMo-Gym rollouts carry no step: {timed} step(s) found from their times "
                     "(a step is a stretch in which some rollout was running; NeMo-RL trains "
                     "between steps)")


def _records(path: Path):
    """(where, instance, object, the directory's start time or None) for each rollout."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir():
        refuse_compressed_dumps(path, (NAME,), "NeMo-Gym metrics", recursive=True)
        files = sorted(p for p in path.rglob(NAME) if p.is_file())
        if not files:
            raise TraceError(f"{path}: no NeMo-Gym {NAME} files under this directory")
    else:
        files = [path]
    for f in files:
        if f.suffix == ".jsonl":
            for lineno, obj in read_jsonl(f):
                where = f"{f}: line {lineno}"
                yield where, _instance(where, obj, None), obj, None
            continue
        try:
            text = jsonio.text(jsonio.read_text_bytes(f, TraceError))  # (after a byte-order mark, if any)
        except UnicodeDecodeError as e:
            raise TraceError(f"{f}: not UTF-8 text (byte {e.start})") from None
        if not text.strip():
            raise empty_file(f)
        try:
            obj = jsonio.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"{f}: line {e.lineno}: bad JSON: {e.msg} (column {e.colno})") \
                from None
        if type(obj) is not dict:
            raise TraceError(f"{f}: expected a JSON object")
        parts = f.parent.name.rsplit("_", 2)  # <instance_id>_<timestamp_ms>_<hash>
        digits = len(parts) == 3 and parts[1].isascii() and parts[1].isdigit()
        dir_ts = int(parts[1]) / 1000 if digits else None
        yield str(f), _instance(str(f), obj, f.parent.name), obj, dir_ts


def _instance(where: str, obj: dict, dirname: str | None) -> str:
    if obj.get("instance_id") is not None:
        return str(check_text(where, "instance_id", obj["instance_id"]))
    if dirname is not None and dirname.count("_") >= 2:
        return dirname.rsplit("_", 2)[0]  # <instance_id>_<timestamp_ms>_<hash>
    raise TraceError(f"{where}: field 'instance_id': missing (and no rollout directory named "
                     "<instance_id>_<timestamp_ms>_<hash>)")


def _turns(where: str, obj: dict, stats: dict):
    """Generated tokens, tool seconds and tool tokens per turn, the prompt, and the first
    call's start and the last logged end (calls and actions)."""
    ptm = obj.get("per_turn_metrics")
    if not isinstance(ptm, dict) or not all(isinstance(ptm.get(k), list) for k in LISTS):
        found = ", ".join(map(str, list(ptm)[:10])) if isinstance(ptm, dict) else "none"
        raise TraceError(f"{where}: not a NeMo-Gym rollout: field 'per_turn_metrics' needs the "
                         f"lists {', '.join(LISTS)}; found: {found}")
    calls = sorted(_span(where, "response_latencies", k, r) + (k, r)
                   for k, r in enumerate(ptm["response_latencies"]))  # ties: in logged order
    if not calls:
        raise TraceError(f"{where}: field 'per_turn_metrics.response_latencies': no LLM call")
    usage = _by_response_id(where, "token_usages", ptm["token_usages"])
    _by_response_id(where, "response_latencies", ptm["response_latencies"])  # checked alike
    gen, context = [], []
    for k, (_, _, _, call) in enumerate(calls):
        rid = call["response_id"]
        if rid not in usage:
            raise TraceError(f"{where}: field 'per_turn_metrics.token_usages': no entry for "
                             f"response_id {rid!r} (LLM call {k + 1})")
        j, u = usage[rid]
        field = f"per_turn_metrics.token_usages[{j}]"
        gen.append(whole_number(where, f"{field}.completion_tokens", u.get("completion_tokens"), 1))
        context.append(whole_number(where, f"{field}.prompt_tokens", u.get("prompt_tokens"), 1))
    actions = sorted(_span(where, "action_execution_latencies", k, a)[:2]
                     for k, a in enumerate(ptm["action_execution_latencies"]))
    tool_s, tool_tok, used = [], [], 0
    for k in range(len(calls) - 1):
        end, nxt = calls[k][1], calls[k + 1][0]
        mine = [a for a in actions if end <= a[0] < nxt]
        used += len(mine)
        tool_s.append(covered_seconds(mine))
        grown = context[k + 1] - context[k] - gen[k]
        stats["shrank"] += grown < 0
        tool_tok.append(max(grown, 0))
    stats["outside"] += len(actions) - used
    last = max([c[1] for c in calls] + [a[1] for a in actions])
    return gen, tool_s + [0.0], tool_tok + [0], context[0], calls[0][0], last


def _by_response_id(where: str, name: str, entries: list) -> dict:
    """``entries`` by their ``response_id``: each one present, a string or an integer, and
    unique (the id is what pairs an LLM call with its token counts)."""
    by_id: dict = {}
    for j, entry in enumerate(entries):
        field = f"per_turn_metrics.{name}[{j}]"
        if not isinstance(entry, dict):
            raise TraceError(f"{where}: field '{field}': expected an object")
        rid = entry.get("response_id")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise TraceError(f"{where}: field '{field}.response_id': expected a string or an "
                             f"integer, got {rid!r}")
        if rid in by_id:
            raise TraceError(f"{where}: field '{field}.response_id': {rid!r} appears twice")
        by_id[rid] = (j, entry)
    return by_id


def _span(where: str, name: str, k: int, entry: object) -> tuple[float, float]:
    field = f"per_turn_metrics.{name}[{k}]"
    if not isinstance(entry, dict):
        raise TraceError(f"{where}: field '{field}': expected an object")
    latency = entry.get("latency")
    if not finite(latency):  # (an infinite one started the call at -inf: a step of -1)
        raise TraceError(f"{where}: field '{field}.latency': expected seconds, "
                         f"got {short_repr(latency)}")
    if latency < 0:
        raise TraceError(f"{where}: field '{field}.latency': {latency} is negative")
    end = _time(where, f"{field}.timestamp", entry.get("timestamp"))
    start = (_time(where, f"{field}.start_timestamp", entry["start_timestamp"])
             if entry.get("start_timestamp") else end - latency)
    if end < start:
        raise TraceError(f"{where}: field '{field}': ends before it starts")
    return start, end


def _time(where: str, field: str, value: object) -> float:
    if not isinstance(value, str):
        raise TraceError(f"{where}: field '{field}': expected an ISO time, got {value!r}")
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise TraceError(f"{where}: field '{field}': {value!r} is not an ISO time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


