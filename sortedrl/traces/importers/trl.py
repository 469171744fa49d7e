"""TRL's completions log: the ``completions`` table GRPOTrainer logs with ``log_completions``.

TRL logs one row per completion with ``step``, ``prompt`` and ``completion`` (text) plus one
column per reward function and ``advantage``; W&B exports the table as
``{"columns": [...], "data": [[...], ...]}`` (``*.table.json``), and the same rows as JSONL
objects are read too. It holds no token counts, so ``--tokenizer`` is needed. A group is the
completions of one prompt text within one step; the reward is the sum of the reward-function
columns (every numeric column other than ``step`` and ``advantage``).
"""

from __future__ import annotations

import json
from pathlib import Path

from sortedrl import jsonio
from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    TokenCounter,
    check_layout,
    dump_files,
    read_jsonl,
    whole_number,
)

REQUIRED = ("step", "prompt", "completion")
NOT_REWARD = {"step", "prompt", "completion", "advantage"}


def _records(f: Path) -> list[tuple[str, dict]]:
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    head = text.lstrip()[:1]
    if head == "{":
        try:
            table = jsonio.loads(text)
        except json.JSONDecodeError:
            table = None
        if isinstance(table, dict) and "columns" in table and "data" in table:
            cols = table["columns"]
            if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
                raise TraceError(f"{f}: field 'columns': expected a list of column names")
            if not isinstance(table["data"], list):
                raise TraceError(f"{f}: field 'data': expected a list of rows")
            out = []
            for i, row in enumerate(table["data"]):
                if not isinstance(row, list) or len(row) != len(cols):
                    raise TraceError(f"{f}: row {i + 1}: expected {len(cols)} cells")
                out.append((f"{f}: row {i + 1}", dict(zip(cols, row, strict=True))))
            return out
    return [(f"{f}: line {n}", obj) for n, obj in read_jsonl(f)]


def read_trl(path: Path, tokenizer: Path | None) -> tuple[Rows, int]:
    files = dump_files(path, "*.json*", "TRL completions")
    records = []
    for f in files:
        for where, obj in _records(f):
            check_layout(where, "TRL completions", obj, REQUIRED)
            for name in ("prompt", "completion"):
                if not isinstance(obj[name], str):
                    raise TraceError(f"{where}: field '{name}': expected text")
            records.append((where, obj))
    if not records:
        raise TraceError(f"{path}: the completions log holds no rows")
    counter = TokenCounter(tokenizer, "trl", "'prompt', 'completion'")
    prompt_tokens = counter.count([o["prompt"] for _, o in records])
    response_tokens = counter.count([o["completion"] for _, o in records])
    rows = Rows()
    for (where, obj), p_len, r_len in zip(records, prompt_tokens, response_tokens, strict=True):
        rewards = [v for k, v in obj.items() if k not in NOT_REWARD
                   and isinstance(v, (int, float)) and not isinstance(v, bool)]
        rows.add(f"text:{obj['prompt']}", whole_number(where, "step", obj["step"]), p_len,
                 r_len, float(sum(rewards)) if rewards else None)
    return rows, len(files)
