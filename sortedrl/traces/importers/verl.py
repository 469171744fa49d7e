"""verl's ``trainer.rollout_data_dir`` dump: ``{global_steps}.jsonl``, one object per response.

verl writes ``input`` (the decoded prompt), ``output`` (the decoded response), ``gts``,
``score`` and ``step``, plus any per-sample reward extras (``uid`` among them in newer
versions). It holds text only, so token counts come from the user's tokenizer (``--tokenizer``).
A group is the responses with the same ``uid`` when present, else the same prompt text, within
one step. The response count is of the decoded text: the end-of-sequence token the decoder
dropped is not counted, and a response cut at the cap is only known as such when
``--max-response-len`` (verl's ``data.max_response_length``) is given.

Multi-turn (agent-loop) samples: verl marks model tokens 1 and tool tokens 0 in ``response_mask``.
When a record carries it (a reward function's extra info is dumped per sample), its runs give the
turns and the response length is the generated tokens only; the dump has no per-call tool
seconds (verl logs ``timing_s/agent_loop/tool_calls`` per batch), so the calls count 0 s unless
the record has ``tool_s`` (the sample's total tool seconds). ``num_turns`` alone cannot split the
response into turns and is not read.
"""

from __future__ import annotations

from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    TokenCounter,
    check_layout,
    dump_files,
    number_or_none,
    read_jsonl,
    turns_from_mask,
    whole_number,
)

REQUIRED = ("input", "output", "score", "step")


def read_verl(path: Path, tokenizer: Path | None) -> tuple[Rows, int]:
    files = dump_files(path, "*.jsonl", "verl rollout dump")
    records = []
    for f in files:
        for lineno, obj in read_jsonl(f):
            where = f"{f}: line {lineno}"
            check_layout(where, "verl rollout_data_dir", obj, REQUIRED)
            for name in ("input", "output"):
                if not isinstance(obj[name], str):
                    raise TraceError(f"{where}: field '{name}': expected text, got "
                                     f"{type(obj[name]).__name__}")
            records.append((where, obj))
    counter = TokenCounter(tokenizer, "verl", "'input', 'output'")
    prompt_tokens = counter.count([obj["input"] for _, obj in records])
    response_tokens = counter.count([obj["output"] for _, obj in records])
    rows = Rows()
    for (where, obj), p_len, r_len in zip(records, prompt_tokens, response_tokens, strict=True):
        turns = None
        if obj.get("response_mask") is not None:
            tool_s = number_or_none(where, "tool_s", obj.get("tool_s"))
            turns = turns_from_mask(where, "response_mask", obj["response_mask"], tool_s)
            r_len = sum(turns[0])
        rows.add(_group_key(obj), whole_number(where, "step", obj["step"]), p_len, r_len,
                 number_or_none(where, "score", obj["score"]), turns=turns)
    return rows, len(files)


def _group_key(obj: dict) -> str:
    """The prompt's ``uid`` (verl V1's ``{sample}_{rollout}_{output}`` names the prompt by its
    first part [inferred]), else the prompt text."""
    uid = obj.get("uid")
    if uid is None:
        return f"text:{obj['input']}"
    parts = str(uid).split("_")
    if len(parts) == 3 and all(part.isdigit() for part in parts):
        return f"uid:{parts[0]}"
    return f"uid:{uid}"

