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

One rollout may be written as several samples (slime's agent path, ``slime/agent/trajectory.py``:
one per branch of the session's message tree, and a new one at each fork; other custom generate
functions alike). slime links them by the sample's own ``rollout_id`` (not the file's), shared by
every sample of one rollout: the samples of one group sharing a non-null one are folded into one
row (:func:`add_trajectories`), so the group keeps n_samples_per_prompt rows. A null one is a
rollout of its own, as slime reads it. Samples sharing an ``index`` with no ``rollout_id`` are not
linked by anything slime defines: they stay separate rows, and a note says why their group is
dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.limits import INT64_MAX
from sortedrl.traces.importers._common import (
    Rows,
    check_layout,
    check_mask,
    dump_files,
    number_or_none,
    turns_from_mask,
    whole_number,
)
from sortedrl.traces.importers._compressed import file_compression

REQUIRED = ("group_index", "index", "response_length", "reward", "status")


@dataclass(frozen=True)
class Call:
    """One dumped ``Sample``: one LLM call, or several (its ``loss_mask``), of a trajectory."""

    where: str
    key: str  # the group: rollout and group_index
    name: str
    step: int
    prompt: int
    response: int
    tokens: list | None
    mask: list | None
    tool_s: float | None
    reward: float | None
    truncated: bool | None
    link: int | None  # the per-sample rollout_id: one trajectory's samples share it
    index: object


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
            detail = f"torch.load weights_only=True said: {first[:160]}"
            named = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
            if named is not None:  # (torch's first line says only that the load failed)
                detail = f"it needs {named.group(1)[:120]} to load"  # (a class, or a function: numpy's)
                if named.group(1).startswith("PIL."):
                    detail += ": a vision-language run's images, in multimodal_inputs"
            raise TraceError(f"{path}: refused: loading it needs pickled code, which could run "
                             f"arbitrary code ({detail})") from None
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
    packed = file_compression(path)  # a gzip file reads as a bad pickle stream: say what it is
    if packed not in (None, "zip"):  # (torch.save's own format is a zip archive)
        raise TraceError(f"{path}: {packed}-compressed: decompress it first")
    if len(why) > 160:  # its first sentence (torch's zip error goes on with a paragraph of advice)
        why = re.split(r"(?<=\.)\s+", why, maxsplit=1)[0]
        why = why if len(why) <= 160 else why[:157] + "..."
    raise TraceError(f"{path}: not a torch.save file: {why}")


EVAL_FILE = re.compile(r"(?:^|[^0-9A-Za-z])eval_\d+\.pt$")  # the template's "eval_{rollout_id}"


def read_slime(path: Path) -> tuple[Rows, int]:
    files = dump_files(path, "*.pt", "slime debug rollout", ignore=EVAL_FILE)
    train = [f for f in files if not EVAL_FILE.search(f.name)]
    if not train:
        raise TraceError(f"{path}: only evaluation rollouts (eval_*.pt: slime's eval dumps, with "
                         f"no GRPO groups); give the training rollouts ({{rollout_id}}.pt)")
    rows = Rows()
    if len(train) < len(files):
        rows.notes.append(f"skipped {len(files) - len(train)} evaluation rollout file(s) "
                          f"(eval_*.pt: slime's eval dumps, not training samples)")
    calls: list[Call] = []
    for f in train:
        calls.extend(_read_file(f))
    add_trajectories(rows, calls)
    return rows, len(train)


def _read_file(f: Path) -> list[Call]:
    data = load_pt(f)
    if not isinstance(data, dict):
        raise TraceError(f"{f}: not a slime dump: expected a dict with 'rollout_id' and "
                         f"'samples', found a {type(data).__name__}")
    check_layout(str(f), "slime debug rollout", data, ("rollout_id", "samples"))
    step = whole_number(str(f), "rollout_id", data["rollout_id"])
    if not isinstance(data["samples"], list):
        raise TraceError(f"{f}: field 'samples': expected a list, found a "
                         f"{type(data['samples']).__name__}")
    return [_read_sample(f"{f}: sample {i}", step, sample)
            for i, sample in enumerate(data["samples"])]


def _read_sample(where: str, step: int, sample: object) -> Call:
    if not isinstance(sample, dict):
        raise TraceError(f"{where}: expected a dict, found a {type(sample).__name__}")
    check_layout(where, "slime debug rollout", sample, REQUIRED)
    response = whole_number(where, "response_length", sample["response_length"])
    tokens = sample.get("tokens")
    prompt = len(tokens) - response if isinstance(tokens, list) else 1
    if prompt < 0:
        raise TraceError(f"{where}: field 'tokens': {len(tokens)} tokens, fewer than "
                         f"response_length {response} (tokens hold the prompt and the response)")
    group = whole_number(where, "group_index", sample["group_index"])
    text = sample.get("prompt")
    if text is not None and not isinstance(text, (str, list, dict)):
        raise TraceError(f"{where}: field 'prompt': expected text or chat messages, found "
                         f"a {type(text).__name__}")
    key = f"rollout:{step}:group:{group}"
    name = f"prompt:{_prompt_text(where, text)}" if text else key
    return Call(where=where, key=key, name=name, step=step, prompt=prompt, response=response,
                tokens=tokens if isinstance(tokens, list) else None,
                mask=_mask(where, sample, response), tool_s=_tool_seconds(where, sample),
                reward=_reward(where, sample["reward"]), truncated=_truncated(sample),
                link=trajectory_link(where, sample), index=sample["index"])


def _prompt_text(where: str, text: str | list | dict) -> str:
    """The prompt as JSON (it names the prompt id); one error line for a prompt JSON cannot
    write (bytes, a tensor, keys of mixed types): slime's is text or a list of chat messages."""
    try:
        return json.dumps(text, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise TraceError(f"{where}: field 'prompt': expected text or chat messages, found a "
                         f"{type(text).__name__} holding what JSON cannot write ({e})") from None


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


def _mask(where: str, sample: dict, response: int) -> list | None:
    """The sample's ``loss_mask`` as a checked list of 0/1 (None when the dump has none)."""
    mask = sample.get("loss_mask")
    if mask is None:
        return None
    if hasattr(mask, "tolist"):  # a tensor in some versions
        mask = mask.tolist()
    if isinstance(mask, list) and len(mask) != response:
        raise TraceError(f"{where}: field 'loss_mask': {len(mask)} entries, but response_length "
                         f"is {response}")
    return check_mask(where, "loss_mask", mask)


def _tool_seconds(where: str, sample: dict) -> float | None:
    tool_s = number_or_none(where, "non_generation_time", sample.get("non_generation_time"))
    if tool_s is not None and tool_s < 0:
        raise TraceError(f"{where}: field 'non_generation_time': {tool_s} is negative")
    return tool_s


def _reward(where: str, value: object) -> float | None:
    if isinstance(value, dict):  # a reward dict: slime reads the --reward-key entry of it
        return None
    return number_or_none(where, "reward", value)


# -- trajectories of several samples ---------------------------------------------------------------


def trajectory_link(where: str, sample: dict) -> int | None:
    """The sample's own ``rollout_id`` (not the file's): slime sets one value on every Sample
    split out of one rollout execution (``validate_rollout_id_annotated``); None: its own."""
    link = sample.get("rollout_id", sample.get("group_id"))  # group_id: slime's #1984 name
    if link is None:
        return None
    return whole_number(where, "rollout_id", link, minimum=-INT64_MAX)


def add_trajectories(rows: Rows, calls: list[Call]) -> None:
    """One row per trajectory: a sample alone, or the samples of one group sharing a link,
    folded in file order (:func:`_fold`)."""
    trajectories: dict[tuple, list[Call]] = {}
    for i, c in enumerate(calls):
        own = ("sample", i) if c.link is None else ("link", c.link)
        trajectories.setdefault((c.step, c.key, own), []).append(c)
    resent = differ = 0
    for traj in trajectories.values():
        if len(traj) == 1:
            c = traj[0]
            turns = _turns(c, folded=False)
            response = c.response if turns is None else sum(turns[0])
            rows.add(c.key, c.step, c.prompt, response, c.reward,
                     stopped_at_cap=c.truncated, turns=turns, name=c.name, where=c.where)
            continue
        turns, unknown = _fold(traj)
        reward, mixed = _trajectory_reward(traj)
        resent += unknown
        differ += mixed
        rows.add(traj[0].key, traj[0].step, traj[0].prompt, sum(turns[0]), reward,
                 stopped_at_cap=traj[-1].truncated, turns=turns, name=traj[0].name,
                 where=traj[-1].where)
    _notes(rows, calls, trajectories, resent, differ)


def _fold(traj: list[Call]) -> tuple[tuple[list[int], list[float], list[int]], int]:
    """The trajectory's turns: each sample's, in order; between two samples, the context the
    next one adds after the previous one's last generated token, when its tokens extend them
    (else unknown: 0, and counted). A sample with no trained token (a branch re-emitting turns
    another sample trained, and context) adds no turn: its tokens are context, and the next
    sample is compared with the one before it."""
    traj = [c for c in traj if c.mask is None or 1 in c.mask] or traj
    gen: list[int] = []
    secs: list[float] = []
    tools: list[int] = []
    unknown = 0
    for k, c in enumerate(traj):
        if k:
            between = _context_between(traj[k - 1], c)
            unknown += between is None
            tools[-1] = between or 0
        g, s, t = _turns(c, folded=True)
        gen += g
        secs += s
        tools += t
    return (gen, secs, tools), unknown


def _context_between(prev: Call, cur: Call) -> int | None:
    """Tokens between ``prev``'s last generated token and ``cur``'s first, when ``cur``'s
    tokens start with ``prev``'s up to there; None when they do not (a fork or branch re-sends
    its context, re-tokenized or cut: nothing says which of its tokens are new)."""
    end = prev.prompt + _span(prev)[1]
    start = cur.prompt + _span(cur)[0]
    if prev.tokens is None or cur.tokens is None or start < end:
        return None
    return start - end if cur.tokens[:end] == prev.tokens[:end] else None


def _span(c: Call) -> tuple[int, int]:
    """Where the sample's generated tokens start and end in its response: 0s of its mask
    before the first 1 and after the last are context."""
    if c.mask is None or 1 not in c.mask:
        return 0, c.response
    return c.mask.index(1), len(c.mask) - c.mask[::-1].index(1)


def _turns(c: Call, folded: bool):
    """The sample's turns from its ``loss_mask``. Alone (``folded`` false), None for a
    single-turn sample whose every token is generated (0s before the first 1 included: a
    partial rollout's resumed tokens). In a trajectory of several samples, always its turns,
    and 0s before the first 1 are context: a turn shared with a sibling branch, re-emitted
    untrained (``slime/agent/trajectory.py``)."""
    if c.mask is None or 0 not in c.mask:
        return ([c.response], [0.0], [0]) if folded else None
    leading = not folded or 1 not in c.mask
    turns = turns_from_mask(c.where, "loss_mask", c.mask, c.tool_s, leading_generated=leading)
    if not folded and len(turns[0]) == 1 and turns[0][0] == c.response:
        return None  # 0s only before the first 1
    return turns


def _trajectory_reward(traj: list[Call]) -> tuple[float | None, bool]:
    """The trajectory's reward: the one its samples share (slime's agent path gives each the
    whole reward); their mean, flagged, when they differ; None when one has none."""
    rewards = [c.reward for c in traj]
    if any(r is None for r in rewards):
        return None, False
    if len(set(rewards)) == 1:
        return rewards[0], False
    return sum(rewards) / len(rewards), True


def _notes(rows: Rows, calls: list[Call], trajectories: dict, resent: int, differ: int) -> None:
    folded = [t for t in trajectories.values() if len(t) > 1]
    if folded:
        rows.notes.append(
            f"folded {sum(len(t) for t in folded)} samples into {len(folded)} trajectories "
            f"(samples of one group sharing a per-sample rollout_id: one rollout split into "
            f"several Samples), one row each, the samples' turns in file order")
    if resent:
        rows.notes.append(
            f"{resent} sample(s) of a folded trajectory do not extend the previous sample's "
            f"tokens (a fork or branch re-sends its context): the tool-output tokens before "
            f"them are unknown, counted 0")
    if differ:
        rows.notes.append(f"{differ} folded trajectory(ies) whose samples' rewards differ: "
                          f"reward is their mean")
    seen: dict[tuple, int] = {}
    for c in calls:
        if c.link is None:
            k = (c.step, c.key, repr(c.index))
            seen[k] = seen.get(k, 0) + 1
    shared = {(s, key) for (s, key, _), n in seen.items() if n > 1}
    if shared:
        rows.notes.append(
            f"{len(shared)} group(s) hold several samples with one 'index' but no per-sample "
            f"'rollout_id' linking them: each is read as its own trajectory, so such a group "
            f"is larger than the others and dropped; slime links the Samples of one rollout "
            f"by Sample.rollout_id (set it on each Sample a custom generate returns for one "
            f"rollout) and the dump keeps it")
