"""What the framework importers share: the rows they collect, layout checks, token counting,
and the step from per-sample rows to a canonical :class:`~sortedrl.traces.schema.Trace`.

Each framework dumps per-sample rollout data in its own layout (peers.md §4). An importer reads
its layout into :class:`Rows` (one entry per response: a group key, step, prompt and response
tokens, reward, whether the engine stopped it at the cap); :func:`to_trace` then forms GRPO groups,
drops groups that are not full (a filtered or aborted sample leaves its group short) and names
prompts by a hash of their group key, so that the same prompt keeps its id across steps.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.traces.schema import Trace, TraceMeta


@dataclass(frozen=True)
class FrameworkReport:
    """What an import did: rows read, groups kept, and what was dropped."""

    framework: str
    files: int  # dump files read
    rows: int  # samples read
    groups: int  # full groups kept
    group_size: int
    steps: int  # distinct steps kept
    dropped_groups: int  # groups with fewer samples than group_size (filtered or aborted)
    dropped_rows: int


@dataclass
class Rows:
    """Per-sample values collected by an importer, in file order."""

    key: list[str] = field(default_factory=list)  # the group: prompt text, uid or token prefix
    step: list[int] = field(default_factory=list)
    prompt_len: list[int] = field(default_factory=list)
    response_len: list[int] = field(default_factory=list)
    reward: list[float | None] = field(default_factory=list)
    stopped_at_cap: list[bool | None] = field(default_factory=list)  # None: unknown (text dumps)

    def add(self, key: str, step: int, prompt_len: int, response_len: int,
            reward: float | None, stopped_at_cap: bool | None = None) -> None:
        self.key.append(key)
        self.step.append(step)
        self.prompt_len.append(prompt_len)
        self.response_len.append(response_len)
        self.reward.append(reward)
        self.stopped_at_cap.append(stopped_at_cap)


def check_layout(where: str, framework: str, record: dict, required: tuple[str, ...]) -> None:
    """Raise a one-line error naming the missing fields and the ones found."""
    missing = [k for k in required if k not in record]
    if missing:
        found = ", ".join(map(str, list(record)[:20])) or "none"
        raise TraceError(f"{where}: not a {framework} dump: missing field(s) "
                         f"{', '.join(missing)}; found: {found}")


def dump_files(path: Path, pattern: str, what: str) -> list[Path]:
    """``path`` itself, or the files in directory ``path`` matching ``pattern``, sorted."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.glob(pattern) if p.is_file())
    if not files:
        raise TraceError(f"{path}: no {what} files ({pattern}) in this directory")
    return files


def read_jsonl(path: Path):
    """Yield (line number, object) for each non-empty line; one-line errors for bad JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start})") from None
    for lineno, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}: line {lineno}: bad JSON: {e.msg}") from None
        if type(obj) is not dict:
            raise TraceError(f"{path}: line {lineno}: expected a JSON object")
        yield lineno, obj


def whole_number(where: str, name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise TraceError(f"{where}: field '{name}': {value!r} is not an integer")
    if int(value) < minimum:
        raise TraceError(f"{where}: field '{name}': {value!r} is below {minimum}")
    return int(value)


def number_or_none(where: str, name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not np.isfinite(value):
        raise TraceError(f"{where}: field '{name}': {value!r} is not a number")
    return float(value)


# -- tokenizer --------------------------------------------------------------------------------------


class TokenCounter:
    """Counts tokens of text with a local tokenizer directory (its ``tokenizer.json``).

    Loaded with the ``tokenizers`` library from the file itself, so nothing can reach a model
    hub. Special tokens are not added: the dumps hold decoded text, so a response's count is its
    generated tokens less the end-of-sequence token the decoder dropped.
    """

    def __init__(self, directory: Path | None, framework: str, fields: str) -> None:
        if directory is None:
            raise TraceError(f"--from {framework}: the dump holds text ({fields}); token counts "
                             f"need a local tokenizer directory: give --tokenizer DIR")
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise TraceError(f"--tokenizer {directory}: no tokenizer.json in this directory "
                             f"(a Hugging Face tokenizer saved with save_pretrained)")
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises plain Exception on a bad file
            raise TraceError(f"{path}: not a tokenizer file: {str(e).splitlines()[0]}") from None
        self.directory = Path(directory)

    def count(self, texts: list[str]) -> list[int]:
        encoded = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encoded]


# -- rows -> trace ----------------------------------------------------------------------------------


def prompt_name(key: str) -> str:
    return "p" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def to_trace(rows: Rows, framework: str, files: int, where: str,
             max_response_len: int | None, source: str) -> tuple[Trace, FrameworkReport]:
    """Group rows by (step, key), keep full groups, and build the trace."""
    if not rows.key:
        raise TraceError(f"{where}: the dump holds no samples")
    members: dict[tuple[int, str], list[int]] = {}
    for i, (step, key) in enumerate(zip(rows.step, rows.key, strict=True)):
        members.setdefault((step, key), []).append(i)
    sizes = Counter(len(v) for v in members.values())
    group_size = max(sizes)
    kept = [idx for idx in members.values() if len(idx) == group_size]
    order = np.array([i for idx in kept for i in idx], dtype=np.int64)
    response = np.array(rows.response_len, dtype=np.int64)[order]
    if response.min() < 1:
        i = int(order[int(np.argmin(response))])
        raise TraceError(f"{where}: sample {i}: response has {rows.response_len[i]} tokens; "
                         f"need at least 1")
    cap = int(response.max()) if max_response_len is None else max_response_len
    if response.max() > cap:
        raise TraceError(f"{where}: a response has {int(response.max())} tokens, above "
                         f"--max-response-len {cap}")
    at_cap = np.array([rows.stopped_at_cap[i] for i in order], dtype=object)
    truncated = np.where(at_cap == None, response >= cap, at_cap == True)  # noqa: E711,E712
    truncated = truncated.astype(bool)
    rewards = [rows.reward[i] for i in order]
    columns = {
        "prompt_id": np.array([prompt_name(rows.key[i]) for i in order]),
        "sample": np.array([k for idx in kept for k in range(len(idx))], dtype=np.int64),
        "prompt_len": np.maximum(1, np.array(rows.prompt_len, dtype=np.int64)[order]),
        "response_len": response,
        "truncated": truncated,
        "step": np.array(rows.step, dtype=np.int64)[order],
        "finish_reason": np.where(truncated, "length", "stop"),
    }
    if all(r is not None for r in rewards):
        columns["reward"] = np.array(rewards, dtype=np.float64)
    meta = TraceMeta(max_response_len=cap, group_size=group_size, source=source)
    trace = Trace.from_columns(columns, meta, where=where)
    report = FrameworkReport(
        framework=framework, files=files, rows=len(rows.key), groups=len(kept),
        group_size=group_size, steps=len({rows.step[idx[0]] for idx in kept}),
        dropped_groups=len(members) - len(kept), dropped_rows=len(rows.key) - order.size)
    return trace, report
