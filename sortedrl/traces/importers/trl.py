"""TRL's completions log: the ``completions`` table GRPOTrainer logs with ``log_completions``.

``GRPOTrainer.log`` (``trl/trainer/grpo_trainer.py``) builds one row per completion with
``step``, ``prompt`` and ``completion`` (text), one column per reward function (its raw,
unweighted values; NaN where it returned None), one per ``log_extra`` column a reward function
added, and ``advantage``. Since TRL 0.28 it writes the table to
``output_dir/completions/completions_{step:05d}.parquet``; W&B exports it as
``{"columns": [...], "data": [[...], ...]}`` (``*.table.json``); the same rows as JSONL objects
are read too. The step is logged as text (``str(global_step)``) and read as the number it
holds. It holds no token counts, so ``--tokenizer`` is needed; TRL decodes with
``skip_special_tokens=True``, so a chat template's special tokens are not in the text and not
counted. A group is the completions of one prompt text within one step (a prompt drawn twice in
one step is split by the common step, :func:`._common.form_groups`).

Reward: TRL's is ``nansum(rewards_per_func * reward_weights)``; the weights are not in the log
and the ``log_extra`` columns look like reward columns. ``--reward-columns NAME=WEIGHT,...``
names them (a name alone weighs 1); without it a table with exactly one numeric column
(numbers, NaN or null in every row) besides ``step`` and ``advantage`` takes that column, one
with several is an error listing them. A row every named column has NaN for (no reward function
scored it) has no reward; a named reward column's cell that is neither a number nor NaN or null
is an error naming its row and column, and so, when no column is all numbers, is the first
stray cell of a column of numbers but for a few (:func:`_no_stray_cell`).

The log is written at every logging step from the last generation batch, so with
``num_iterations`` or ``steps_per_generation`` above 1 a table repeats the previous one under a
new step number: such a table is dropped, and a note counts them.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from sortedrl import jsonio
from sortedrl.errors import ConfigError, TraceError
from sortedrl.traces.importers._common import (
    Rows,
    check_layout,
    check_text,
    dump_files,
    read_jsonl,
    whole_number,
)
from sortedrl.traces.importers._tokens import TokenCounter, tool_output_note

REQUIRED = ("step", "prompt", "completion")
NOT_REWARD = {"step", "prompt", "completion", "advantage"}
WHOLE_NUMBER_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")  # TRL logs the step as text: "10"


def parse_reward_columns(spec: str) -> dict[str, float]:
    """``{column: weight}`` from ``NAME=WEIGHT,...`` (a name alone weighs 1)."""
    out: dict[str, float] = {}
    for item in spec.split(","):
        name, eq, weight = (part.strip() for part in item.partition("="))
        if not name:
            raise ConfigError(f"--reward-columns {spec!r}: expected NAME=WEIGHT,... (e.g. "
                              f"accuracy_reward=1,format_reward=0.1)")
        if name in out:
            raise ConfigError(f"--reward-columns {spec!r}: column {name!r} named twice")
        try:
            value = float(weight) if eq else 1.0
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ConfigError(f"--reward-columns {spec!r}: weight {weight!r} of {name!r} is not "
                              f"a finite number")
        out[name] = value
    return out


def _table_json(f: Path, text: str) -> list[tuple[str, dict]] | None:
    try:
        table = jsonio.loads(text)
    except json.JSONDecodeError:
        return None
    if not (isinstance(table, dict) and "columns" in table and "data" in table):
        return None
    cols = table["columns"]
    if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
        raise TraceError(f"{f}: field 'columns': expected a list of column names")
    _no_duplicate(f, cols)
    if not isinstance(table["data"], list):
        raise TraceError(f"{f}: field 'data': expected a list of rows")
    out = []
    for i, row in enumerate(table["data"]):
        if not isinstance(row, list) or len(row) != len(cols):
            raise TraceError(f"{f}: row {i + 1}: expected {len(cols)} cells")
        out.append((f"{f}: row {i + 1}", dict(zip(cols, row, strict=True))))
    return out


def _no_duplicate(f: Path, columns: list[str]) -> None:
    """One error line for a column name given twice (a row read as a dict keeps one of them)."""
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            raise TraceError(f"{f}: column {name!r} appears twice (rename one of them)")
        seen.add(name)


def _parquet(f: Path) -> list[tuple[str, dict]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        _no_duplicate(f, pq.read_schema(f).names)
        rows = pq.read_table(f).to_pylist()
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TraceError(f"{f}: not a Parquet file: {first[:160]}") from None
    return [(f"{f}: row {i + 1}", row) for i, row in enumerate(rows)]


def _records(f: Path) -> list[tuple[str, dict]]:
    if f.suffix == ".parquet":
        return _parquet(f)
    try:
        text = jsonio.text(jsonio.read_text_bytes(f, TraceError))  # (after a byte-order mark, if any)
    except UnicodeDecodeError as e:
        raise TraceError(f"{f}: not UTF-8 text (byte {e.start})") from None
    if text.lstrip()[:1] == "{":
        table = _table_json(f, text)
        if table is not None:
            return table
    return [(f"{f}: line {n}", obj) for n, obj in read_jsonl(f)]


def _step(where: str, value: object) -> int:
    """A row's step: a whole number, or text holding one (TRL builds the table with
    ``"step": [str(self.state.global_step)] * n``, so W&B and Parquet hold ``"10"``)."""
    if isinstance(value, str) and WHOLE_NUMBER_TEXT.fullmatch(value):
        try:
            value = int(value)
        except ValueError:  # (past Python's limit on the digits of an int: no step, said below)
            pass
    return whole_number(where, "step", value)


def _tables(files: list[Path]) -> list[tuple[int, list[tuple[str, dict]]]]:
    """The logged tables, ``(step, records)``, by step: each file's runs of rows of one step."""
    tables: list[tuple[int, list[tuple[str, dict]]]] = []
    for f in files:
        last = None
        for where, obj in _records(f):
            check_layout(where, "TRL completions", obj, REQUIRED)
            for name in ("prompt", "completion"):
                if not isinstance(obj[name], str):
                    raise TraceError(f"{where}: field '{name}': expected text")
                check_text(where, name, obj[name])
            step = _step(where, obj["step"])
            if step != last:
                tables.append((step, []))
                last = step
            tables[-1][1].append((where, obj))
    return sorted(tables, key=lambda t: t[0])  # stable: a file's order within a step


def _content(records: list[tuple[str, dict]]) -> str:
    """A table's rows less their step, comparable (NaN equals NaN)."""
    return json.dumps([{k: v for k, v in obj.items() if k != "step"} for _, obj in records],
                      sort_keys=True, default=repr)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _reward_weights(path: Path, records: list[tuple[str, dict]],
                    spec: str | None) -> tuple[dict[str, float], str | None]:
    """The reward columns and their weights, and a note when the importer chose them."""
    columns: dict[str, None] = {}
    for _, obj in records:
        columns.update(dict.fromkeys(obj))
    numeric = [c for c in columns if c not in NOT_REWARD
               and any(_is_number(obj.get(c)) for _, obj in records)
               and all(obj.get(c) is None or _is_number(obj.get(c)) for _, obj in records)]
    if spec is not None:
        weights = parse_reward_columns(spec)
        for name in weights:
            if name not in columns:
                raise TraceError(f"{path}: --reward-columns: no column {name!r}; numeric columns: "
                                 f"{', '.join(numeric) or 'none'}")
        return weights, None
    if len(numeric) > 1:
        example = ",".join(f"{c}=1.0" for c in numeric[:2])
        raise TraceError(
            f"{path}: {len(numeric)} numeric columns could be rewards ({', '.join(numeric)}): "
            f"TRL's reward sums only its reward functions' columns times reward_weights "
            f"(log_extra columns are not rewards); name them: --reward-columns {example}")
    if not numeric:
        _no_stray_cell(path, records, columns)
        return {}, None
    return {numeric[0]: 1.0}, (f"reward: column {numeric[0]!r}, the only numeric column besides "
                               f"step and advantage (a reward_weights entry other than 1 is not "
                               f"in the log: give --reward-columns {numeric[0]}=WEIGHT)")


def _no_stray_cell(path: Path, records: list[tuple[str, dict]], columns: dict) -> None:
    """No column is all numbers, so none is taken for the reward. One that is numbers but for a
    few cells is then the reward with a stray cell (its reward would be lost without a word):
    one error line naming the first such cell. A column with as many text cells as numbers (a
    ``log_extra`` column such as an answer) is not a reward and is let be."""
    for c in columns:
        if c in NOT_REWARD:
            continue
        cells = [(where, obj.get(c)) for where, obj in records if obj.get(c) is not None]
        numbers = sum(_is_number(v) for _, v in cells)
        if numbers and numbers > len(cells) - numbers:
            where, value = next((w, v) for w, v in cells if not _is_number(v))
            raise TraceError(f"{where}: field {c!r}: {value!r} is not a number (the column holds "
                             f"numbers otherwise: a reward column? give --reward-columns to name "
                             f"the rewards)")


def _reward(where: str, obj: dict, weights: dict[str, float]) -> float | None:
    """``nansum(value * weight)`` over the reward columns; None when all are NaN or null."""
    total, scored = 0.0, False
    for name, weight in weights.items():
        if name not in obj:
            raise TraceError(f"{where}: missing field {name!r} (a reward column)")
        value = obj[name]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if not jsonio.finite(value):
            raise TraceError(f"{where}: field {name!r}: {value!r} is not a number")
        total += weight * float(value)
        scored = True
    return total if scored else None


def read_trl(path: Path, tokenizer: Path | None,
             reward_columns: str | None = None) -> tuple[Rows, int]:
    files = dump_files(path, ("*.json*", "*.parquet"), "TRL completions")
    tables = _tables(files)
    records: list[tuple[str, dict]] = []
    steps: list[int] = []
    repeats = 0
    for i, (step, table) in enumerate(tables):
        if i and _content(table) == _content(tables[i - 1][1]):
            repeats += 1
            continue
        records += table
        steps += [step] * len(table)
    if not records:
        raise TraceError(f"{path}: the completions log holds no rows")
    weights, note = _reward_weights(path, records, reward_columns)
    counter = TokenCounter(tokenizer, "trl", "'prompt', 'completion'")
    prompt_tokens = counter.count([o["prompt"] for _, o in records])
    rows = Rows()
    response_tokens = counter.responses(records, "completion", rows.notes)
    if note:
        rows.notes.append(note)
    tools = tool_output_note(records, "completion", "TRL's table keeps no tool mask")
    if tools:
        rows.notes.append(tools)
    if repeats:
        rows.notes.append(f"dropped {repeats} logged table(s) identical to the one before but for "
                          f"the step (TRL logs the last generation batch at every logging step: "
                          f"num_iterations or steps_per_generation > 1)")
    for (where, obj), step, p_len, r_len in zip(records, steps, prompt_tokens, response_tokens,
                                                strict=True):
        rows.add(f"text:{obj['prompt']}", step, p_len, r_len,
                 _reward(where, obj, weights) if weights else None, where=where)
    return rows, len(files)
