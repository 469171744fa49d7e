"""NeMo-RL's per-step training dump: ``train_data_step{N}.jsonl``, one object per sample.

NeMo-RL logs the training batch: ``input_lengths`` (tokens in the sample, prompt and response),
``token_ids`` and ``token_loss_mask`` (1 on tokens the policy generated), ``rewards`` and
``content``. The response length is the masked tokens within ``input_lengths``; the prompt is
the tokens before the first masked one. A group is the samples with the same prompt tokens within
one step; the step is ``N``. A multi-turn sample (environment output between generated runs, mask
0) becomes a row with turns: each run of 1s a turn, the 0s after it that turn's tool output
(NeMo-RL's dump has no tool seconds: 0). A single-turn sample keeps its trailing unmasked tokens
in the prompt length, as before.

Each line holds ONE sample, but NeMo-RL writes every field as a one-element list: its
``Logger.log_batched_dict_as_jsonl`` (nemo_rl/utils/logger.py) writes the slices of
``make_microbatch_iterator(1)``, so a line reads ``"input_lengths": [10], "rewards": [1.0],
"token_ids": [[...]], "token_loss_mask": [[...]]``. Such a one-element list is unwrapped; a plain
value (``"input_lengths": 10``, ``"token_ids": [...]``) is read as well; a list of another
length is one error line.
"""

from __future__ import annotations

import re
from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    check_layout,
    check_mask,
    dump_files,
    number_or_none,
    read_jsonl,
    turns_from_mask,
    whole_number,
)

REQUIRED = ("input_lengths", "token_ids", "token_loss_mask")
STEP = re.compile(r"train_data_step(\d+)\.jsonl$")


def read_nemo_rl(path: Path) -> tuple[Rows, int]:
    files = dump_files(path, "train_data_step*.jsonl", "NeMo-RL train_data_step")
    rows, empty = Rows(), []
    for f in files:
        match = STEP.search(f.name)
        if match is None:
            raise TraceError(f"{f}: not a NeMo-RL dump name: expected train_data_step{{N}}.jsonl")
        step = whole_number(str(f), "step (in the file name)", int(match.group(1)))
        for lineno, obj in read_jsonl(f):
            where = f"{f}: line {lineno}"
            check_layout(where, "NeMo-RL train_data_step", obj, REQUIRED)
            total = whole_number(where, "input_lengths", _one(where, obj, "input_lengths"), 2)
            ids, mask = _row(where, obj, "token_ids"), _row(where, obj, "token_loss_mask")
            if not isinstance(ids, list) or not isinstance(mask, list) or len(mask) < total \
                    or len(ids) < total:
                raise TraceError(f"{where}: 'token_ids' and 'token_loss_mask' must be lists of "
                                 f"at least input_lengths = {total} entries")
            mask = check_mask(where, "token_loss_mask", mask[:total])  # (past it: padding)
            prompt = mask.index(1) if 1 in mask else total  # (none: vLLM generated nothing)
            key = "ids:" + ",".join(map(str, ids[:prompt]))
            reward = number_or_none(where, "rewards", _one(where, obj, "rewards"))
            if prompt == total:  # (the prompt filled the context: counted 1, it stopped the import)
                empty.append(where)
                rows.add(key, step, max(1, total), 1, reward, where=where)
                continue
            response = sum(1 for m in mask if m)
            turns = turns_from_mask(where, "token_loss_mask", mask[prompt:], None)
            if len(turns[0]) == 1:
                rows.add(key, step, max(1, total - response), response, reward, where=where)
            else:
                rows.add(key, step, max(1, prompt), response, reward, turns=turns, where=where)
    if empty:
        rows.notes.append(f"{len(empty)} sample(s) with no generated token ('token_loss_mask' all 0: "
                          f"the prompt filled the context) counted as 1 token; the first: {empty[0]}")
    return rows, len(files)


def _one(where: str, obj: dict, name: str) -> object:
    """A per-sample scalar: NeMo-RL's one-element slice ``[v]`` unwrapped, or a plain ``v``."""
    value = obj.get(name)
    if isinstance(value, list):
        if len(value) != 1:
            raise TraceError(f"{where}: field '{name}': a list of {len(value)} entries; a line "
                             "holds one sample (NeMo-RL writes a one-element list, or give a "
                             "plain value)")
        value = value[0]
    return value


def _row(where: str, obj: dict, name: str) -> object:
    """A per-token list: NeMo-RL's one-element slice ``[[...]]`` unwrapped, or a plain ``[...]``."""
    value = obj[name]
    if isinstance(value, list) and value and isinstance(value[0], list):
        if len(value) != 1:
            raise TraceError(f"{where}: field '{name}': a list of {len(value)} token lists; a "
                             "line holds one sample (NeMo-RL writes a one-element list)")
        value = value[0]
    return value
