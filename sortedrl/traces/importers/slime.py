"""slime's ``--save-debug-rollout-data`` dump: ``{rollout_id}.pt`` holding
``{"rollout_id": ..., "samples": [Sample.to_dict(), ...]}``.

Each sample gives ``group_index`` (its GRPO group: ``slime/rollout/data_source.py`` numbers
every group drawn, so it is unique), ``index``, ``tokens`` (prompt + response ids),
``response_length``, ``reward``, ``status`` (``completed``, ``truncated``, ``aborted``, ...) and
``metadata``. The prompt length is ``len(tokens) - response_length``; the step is
``rollout_id``; a group is a ``group_index`` within one rollout, and its prompt id is named by
its prompt text when the sample holds one (so a prompt revisited in a later rollout keeps its
id; a prompt drawn twice in one rollout gets ``#2`` on the second group's id). A sample is
truncated when its status says ``truncated`` or its ``metadata["truncated"]`` is true (slime's
agent path, ``slime/agent/trajectory.py``, always says ``completed`` and keeps truncation in
the metadata); a ``completed`` status or a false flag says it was not; with neither, the cap
decides. The file is opened with ``torch.load(weights_only=True)``: a file that needs pickled
code to load is refused.

slime writes an evaluation rollout beside the training one, as ``eval_{rollout_id}.pt``
(``slime/observability/rollout_data_utils.py``; its samples have no ``group_index``): those
files are skipped, and a note counts them.

Multi-turn samples (slime's custom generate functions for tool use) carry ``loss_mask`` over the
response: 1 for the model's tokens, 0 for tool output appended to the context. Its runs give the
turns (:func:`._common.turns_from_mask`): a sample is multi-turn when a run of 0s lies between
two runs of 1s; the response length is then the generated tokens only, and
``non_generation_time`` (the sample's seconds outside generation, when set) is split evenly over
its tool calls. 0s before the first 1 are tokens the model generated: a partial rollout with
``--mask-offpolicy-in-partial-rollout`` (``slime/rollout/sglang_rollout.py``) masks the part
generated in an earlier rollout, so they count in the first turn (the whole
``response_length`` of a one-turn sample).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.traces.importers._common import (
    Rows,
    check_layout,
    check_mask,
    dump_files,
    number_or_none,
    turns_from_mask,
    whole_number,
)

REQUIRED = ("group_index", "index", "response_length", "reward", "status")


def load_pt(path: Path) -> object:
    """The file's object, loaded without running pickled code; one error line for a file that
    is not a torch.save file (text renamed .pt, a truncated or corrupt dump) or needs code."""
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # "Detected pickle protocol N": a corrupt header
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        said = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(e))
        if said is None or said.group(1).startswith("Unsupported global"):
            first = str(e).strip().splitlines()[0] if str(e).strip() else "unsafe content"
            raise TraceError(f"{path}: refused: loading it needs pickled code, which could run "
                             f"arbitrary code (torch.load weights_only=True said: {first[:160]})"
                             ) from None
        why = f"corrupt pickle stream ({said.group(1)})"  # a bad opcode, not code to run
    except (RuntimeError, EOFError, OSError) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]  # an empty file: EOFError()
    except MemoryError:
        raise
    except Exception as e:  # the safe unpickler meets a corrupt stream with whatever its
        # opcode handling raised: KeyError, IndexError, struct.error, UnicodeDecodeError, ...
        kind = type(e).__name__
        if type(e).__module__ != "builtins":
            kind = f"{type(e).__module__}.{kind}"  # struct.error
        detail = (str(e).strip().splitlines() or [""])[0]
        why = f"corrupt pickle stream ({kind}{': ' + detail if detail else ''})"
    raise TraceError(f"{path}: not a torch.save file: {why[:160]}")


EVAL_FILE = re.compile(r"(?:^|[^0-9A-Za-z])eval_\d+\.pt$")  # the template's "eval_{rollout_id}"


def read_slime(path: Path) -> tuple[Rows, int]:
    files = dump_files(path, "*.pt", "slime debug rollout")
    train = [f for f in files if not EVAL_FILE.search(f.name)]
    if not train:
        raise TraceError(f"{path}: only evaluation rollouts (eval_*.pt: slime's eval dumps, with "
                         f"no GRPO groups); give the training rollouts ({{rollout_id}}.pt)")
    rows = Rows()
    if len(train) < len(files):
        rows.notes.append(f"skipped {len(files) - len(train)} evaluation rollout file(s) "
                          f"(eval_*.pt: slime's eval dumps, not training samples)")
    for f in train:
        data = load_pt(f)
        if not isinstance(data, dict):
            raise TraceError(f"{f}: not a slime dump: expected a dict with 'rollout_id' and "
                             f"'samples', found a {type(data).__name__}")
        check_layout(str(f), "slime debug rollout", data, ("rollout_id", "samples"))
        step = whole_number(str(f), "rollout_id", data["rollout_id"])
        if not isinstance(data["samples"], list):
            raise TraceError(f"{f}: field 'samples': expected a list, found a "
                             f"{type(data['samples']).__name__}")
        for i, sample in enumerate(data["samples"]):
            where = f"{f}: sample {i}"
            if not isinstance(sample, dict):
                raise TraceError(f"{where}: expected a dict, found a {type(sample).__name__}")
            check_layout(where, "slime debug rollout", sample, REQUIRED)
            response = whole_number(where, "response_length", sample["response_length"])
            tokens = sample.get("tokens")
            prompt = len(tokens) - response if isinstance(tokens, list) else 1
            group = whole_number(where, "group_index", sample["group_index"])
            text = sample.get("prompt")
            if text is not None and not isinstance(text, (str, list, dict)):
                raise TraceError(f"{where}: field 'prompt': expected text or chat messages, found "
                                 f"a {type(text).__name__}")
            key = f"rollout:{step}:group:{group}"
            name = f"prompt:{json.dumps(text, sort_keys=True)}" if text else key
            turns = _turns(where, sample, response)
            if turns is not None:
                response = sum(turns[0])
            rows.add(key, step, prompt, response, _reward(where, sample["reward"]),
                     stopped_at_cap=_truncated(sample), turns=turns, name=name)
    return rows, len(train)


def _truncated(sample: dict) -> bool | None:
    """Whether the engine stopped the sample at the cap: True when its status or its
    ``metadata["truncated"]`` says so, False when the flag is false or the status ``completed``
    (set from the engine's finish reason, except on the agent path, which sets the flag), None
    (the cap decides) when neither says."""
    status = str(sample["status"])
    metadata = sample.get("metadata")
    flag = metadata.get("truncated") if isinstance(metadata, dict) else None
    if status == "truncated" or flag is True:
        return True
    if flag is False or status == "completed":
        return False
    return None


def _turns(where: str, sample: dict, response: int):
    """The sample's turns from its ``loss_mask``, or None for a single-turn sample whose every
    token is generated (0s before the first 1 included)."""
    mask = sample.get("loss_mask")
    if mask is None:
        return None
    if hasattr(mask, "tolist"):  # a tensor in some versions
        mask = mask.tolist()
    if isinstance(mask, list) and len(mask) != response:
        raise TraceError(f"{where}: field 'loss_mask': {len(mask)} entries, but response_length "
                         f"is {response}")
    if 0 not in check_mask(where, "loss_mask", mask):  # every token generated: one turn
        return None
    tool_s = number_or_none(where, "non_generation_time", sample.get("non_generation_time"))
    if tool_s is not None and tool_s < 0:
        raise TraceError(f"{where}: field 'non_generation_time': {tool_s} is negative")
    turns = turns_from_mask(where, "loss_mask", mask, tool_s, leading_generated=True)
    if len(turns[0]) == 1 and turns[0][0] == response:  # 0s only before the first 1
        return None
    return turns


def _reward(where: str, value: object) -> float | None:
    if isinstance(value, dict):  # a reward dict: slime reads the --reward-key entry of it
        return None
    return number_or_none(where, "reward", value)
