"""verl's ``trainer.rollout_data_dir`` dump: ``{global_steps}.jsonl``, one object per response.

verl writes ``input`` (the decoded prompt), ``output`` (the decoded response), ``gts``,
``score`` and ``step``, plus any per-sample reward extras. It holds text only, so token counts
come from the user's tokenizer (``--tokenizer``); verl decodes with ``skip_special_tokens=True``,
so a chat template's special tokens are not in the text and not counted. The response count is
of the decoded text: the end-of-sequence token the decoder dropped is not counted, and a
response cut at the cap is only known as such when ``--max-response-len`` (verl's
``data.max_response_length``) is given.

Groups. verl V1's trainer (``verl/trainer/ppo/v1/trainer_base.py``, ``_log_rollout_data``)
writes ``uid`` = the TransferQueue key ``{uid}_{session_id}_{index}`` (``agent_loop_tq.py``):
``uid`` a uuid4 per prompt drawn, ``session_id`` the GRPO sample in ``[0, n)``, ``index`` the
agent loop's output within the session. A group is then the prompt ``uid``, a sample one
session, and the prompt id is named by the prompt text (a uid is drawn anew each time the
prompt is sampled, so the text is what keeps a revisited prompt's id). A session with several
outputs (an agent loop that returns a list) is one trajectory: verl scores it once (the final
output's score is copied to the others) and computes the GRPO advantage over final outputs only
(``v1/utils.py``), so its outputs are folded into one sample: each output is a turn (its
``response_mask`` runs when it has one), the tool output between two outputs is the growth of
the context (the next prompt's tokens less this output's prompt and response, 0 if it shrank),
the prompt is the first output's, the reward the last's. Any other ``uid`` groups by itself. The legacy trainer (``ray_trainer.py``) writes no ``uid``: a group is
the same prompt text within one step, and a prompt drawn twice in one step makes a group of
2 x n that the common step splits in file order (verl reorders the batch for balance before the
dump, so which draw a sample belongs to is not known; the lengths are the same).

Order. verl dumps after ``_balance_batch`` (``ray_trainer.py`` ``fit``: balance, train, then
``_log_rollout_data``), so a step's file order is the balance order, not the order verl
dispatched the prompts in. The simulator places samples on engines by file order
(``policies/placement.py``), where verl routed each request to the least-loaded server: a
replay's placement differs from the run's (the audit measured +1.9% makespan on one case; one
case, not a bound). docs/traces.md says the same.

Multi-turn (agent-loop) samples: verl marks model tokens 1 and tool tokens 0 in ``response_mask``.
When a record carries it (a reward function's extra info is dumped per sample), its runs give the
turns and the response length is the generated tokens only; the dump has no per-call tool
seconds (verl logs ``timing_s/agent_loop/tool_calls`` per batch), so the calls count 0 s unless
the record has ``tool_s`` (the sample's total tool seconds). ``num_turns`` alone cannot split the
response into turns and is not read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    Turns,
    check_layout,
    check_text,
    dump_files,
    number_or_none,
    read_jsonl,
    turns_from_mask,
    whole_number,
)
from sortedrl.traces.importers._tokens import TokenCounter, tool_output_note

REQUIRED = ("input", "output", "score", "step")
DIGITS = re.compile(r"[0-9]+")


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
                check_text(where, name, obj[name])
            uid = check_text(where, "uid", obj.get("uid"))
            if uid is not None and (isinstance(uid, bool) or not isinstance(uid, (str, int))):
                raise TraceError(f"{where}: field 'uid': expected a string, got "
                                 f"{type(uid).__name__}")
            records.append((where, obj))
    counter = TokenCounter(tokenizer, "verl", "'input', 'output'")
    prompt_tokens = counter.count([obj["input"] for _, obj in records])
    notes: list[str] = []
    response_tokens = counter.responses(records, "output", notes)
    tools = tool_output_note(records, "output", "give each record its 'response_mask' to split "
                             "them: docs/traces.md")
    sessions: dict[tuple[int, str, object], list[Output]] = {}  # (step, key, session) -> outputs
    for (where, obj), p_len, r_len in zip(records, prompt_tokens, response_tokens, strict=True):
        step = whole_number(where, "step", obj["step"])
        key, session, index = _group_key(obj)
        turns = None
        if obj.get("response_mask") is not None:
            tool_s = number_or_none(where, "tool_s", obj.get("tool_s"))
            turns = turns_from_mask(where, "response_mask", obj["response_mask"], tool_s)
        out = Output(where, index, f"text:{obj['input']}", p_len, r_len,
                     number_or_none(where, "score", obj["score"]), turns)
        # a record outside V1's key scheme is a session of its own
        alone = ("record", len(sessions))
        outputs = sessions.setdefault((step, key, alone if session is None else session), [])
        if any(o.index == index for o in outputs):
            raise TraceError(f"{where}: field 'uid': {obj['uid']!r} appears twice in step {step} "
                             f"(first at {next(o.where for o in outputs if o.index == index)})")
        outputs.append(out)
    rows = Rows()
    rows.notes += notes + ([tools] if tools else [])
    folded = 0
    for (step, key, _), outputs in sessions.items():
        outputs.sort(key=lambda o: o.index)
        folded += len(outputs) > 1
        response, turns = _fold(outputs)
        rows.add(key, step, outputs[0].prompt_len, response, outputs[-1].score, turns=turns,
                 name=outputs[0].text, where=outputs[-1].where)
    if folded:
        rows.notes.append(f"verl V1: {folded} session(s) had several agent-loop outputs "
                          f"('uid' {{uid}}_{{session}}_{{index}} with index > 0); each session "
                          f"is one sample, its outputs its turns, its reward the last output's")
    return rows, len(files)


class Output(NamedTuple):
    """One record: an agent loop output (V1), or a whole sample."""

    where: str
    index: int
    text: str  # names the prompt: a uid is drawn anew each time verl samples the prompt
    prompt_len: int
    response_len: int  # tokens of the decoded response, tool output included
    score: float | None
    turns: Turns | None  # from response_mask


def _fold(outputs: list[Output]) -> tuple[int, Turns | None]:
    """The response length (generated tokens) and turns of one session's outputs in order."""
    if len(outputs) == 1:
        o = outputs[0]
        return (o.response_len, None) if o.turns is None else (sum(o.turns[0]), o.turns)
    gen: list[int] = []
    tool_s: list[float] = []
    tool_tokens: list[int] = []
    for k, o in enumerate(outputs):
        g, s, t = o.turns or ([o.response_len], [0.0], [0])
        gen += g
        tool_s += s
        tool_tokens += t
        if k + 1 < len(outputs):  # the context's growth up to the next output's prompt
            tool_tokens[-1] = max(0, outputs[k + 1].prompt_len - o.prompt_len - o.response_len)
    return sum(gen), (gen, tool_s, tool_tokens)


def _group_key(obj: dict) -> tuple[str, int | None, int]:
    """``(group key, session, output index)``: verl V1's ``uid`` ``{uid}_{session}_{index}``
    gives its first part and the two numbers; another ``uid`` is the key itself, session None;
    without ``uid``, the prompt text."""
    uid = obj.get("uid")
    if uid is None:
        return f"text:{obj['input']}", None, 0
    parts = str(uid).rsplit("_", 2)
    if len(parts) == 3 and parts[0] and all(map(DIGITS.fullmatch, parts[1:])):
        return f"uid:{parts[0]}", int(parts[1]), int(parts[2])
    return f"uid:{uid}", None, 0
