"""NeMo-Gym's per-rollout metrics: ``nemo_gym_metrics.json`` with ``per_turn_metrics``.

NeMo-Gym's SWE agents (OpenHands, OpenCode) write one ``nemo_gym_metrics.json`` per rollout, in
a directory named ``<instance_id>_<timestamp_ms>_<hash>``; its ``per_turn_metrics`` holds three
per-call lists (read by NeMo-Gym's own ``swe_trace_converter.py``):

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
or during a call wait on no turn and are left out (a note counts them). A naive ISO time is taken as UTC (NeMo-Gym's converter
also guesses a whole-hour offset for old OpenHands sandboxes; this importer does not).

A group is the rollouts of one ``instance_id`` (the field, else the directory name's first
part); the reward is ``resolved`` (1 or 0) when present; the step is ``step`` when present, else 0.
PATH is one metrics file, a JSONL file of such objects, or a directory searched for
``nemo_gym_metrics.json`` files.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sortedrl import jsonio
from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    covered_seconds,
    number_or_none,
    read_jsonl,
    whole_number,
)

NAME = "nemo_gym_metrics.json"
LISTS = ("response_latencies", "token_usages", "action_execution_latencies")


def read_nemo_gym(path: Path) -> tuple[Rows, int]:
    records = list(_records(path))
    rows, stats = Rows(), {"shrank": 0, "outside": 0, "no_step": 0}
    for where, key, obj in records:
        gen, tool_s, tool_tok, prompt = _turns(where, obj, stats)
        if "step" in obj:
            step = whole_number(where, "step", obj["step"])
        else:
            step, stats["no_step"] = 0, stats["no_step"] + 1
        reward = number_or_none(where, "resolved", obj.get("resolved", obj.get("reward")))
        turns = (gen, tool_s, tool_tok) if len(gen) > 1 else None
        rows.add(f"nemo-gym:{key}", step, prompt, sum(gen), reward, turns=turns)
    if stats["shrank"]:
        rows.notes.append(f"{stats['shrank']} NeMo-Gym tool calls were followed by a shorter "
                          "context (the agent condensed its history): they append 0 tokens")
    if stats["outside"]:
        rows.notes.append(f"left out {stats['outside']} NeMo-Gym actions that did not start "
                          "between two LLM calls (before the first, after the last, or during a "
                          "call): no turn waits for them")
    if stats["no_step"]:
        rows.notes.append(f"{stats['no_step']} NeMo-Gym rollouts carry no 'step': step 0")
    files = len({where.split(": line ")[0] for where, _, _ in records})
    return rows, files


def _records(path: Path):
    """(where, group key, object) for each rollout."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob(NAME) if p.is_file())
        if not files:
            raise TraceError(f"{path}: no NeMo-Gym {NAME} files under this directory")
    else:
        files = [path]
    for f in files:
        if f.suffix == ".jsonl":
            for lineno, obj in read_jsonl(f):
                where = f"{f}: line {lineno}"
                yield where, _instance(where, obj, None), obj
            continue
        try:
            obj = jsonio.loads(f.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TraceError(f"{f}: not a JSON object ({e.__class__.__name__})") from None
        if type(obj) is not dict:
            raise TraceError(f"{f}: expected a JSON object")
        yield str(f), _instance(str(f), obj, f.parent.name), obj


def _instance(where: str, obj: dict, dirname: str | None) -> str:
    if obj.get("instance_id") is not None:
        return str(obj["instance_id"])
    if dirname is not None and dirname.count("_") >= 2:
        return dirname.rsplit("_", 2)[0]  # <instance_id>_<timestamp_ms>_<hash>
    raise TraceError(f"{where}: field 'instance_id': missing (and no rollout directory named "
                     "<instance_id>_<timestamp_ms>_<hash>)")


def _turns(where: str, obj: dict, stats: dict) -> tuple[list[int], list[float], list[int], int]:
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
    return gen, tool_s + [0.0], tool_tok + [0], context[0]


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
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or latency != latency:
        raise TraceError(f"{where}: field '{field}.latency': expected seconds, got {latency!r}")
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


