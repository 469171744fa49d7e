"""`trace import` on input an audit found crashing or silently misread: text UTF-8 cannot encode
(a lone surrogate), slime prompts JSON cannot write, duplicate or stray TRL columns, and fields
of the wrong kind. Each is one `error:` line naming the file, row or sample and field, exit 2,
and no output file; a rollout directory whose name is not UTF-8 is read as any other."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sortedrl.traces.importers import import_framework
from tests.cli_helpers import import_error

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
LONE = "a \ud800"  # json.loads('"a \\ud800"'): valid JSON, not valid Unicode
SURROGATE = "not valid Unicode text (a lone surrogate, '\\ud800', at character 2)"


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# -- verl ------------------------------------------------------------------------------------------


def _verl(**extra) -> list[dict]:
    return [{"input": "sort 1 2 =", "output": "1 2", "gts": "1 2", "score": 1.0, "step": 1,
             **extra} for _ in range(2)]


@pytest.mark.parametrize("field", ["input", "output"])
def test_verl_lone_surrogate_in_text_is_one_error_line(tok, tmp_path, field) -> None:
    """Was a TypeError traceback from the tokenizer's encode_batch."""
    records = _verl()
    records[1][field] = LONE
    f = _jsonl(tmp_path / "verl" / "1.jsonl", records)
    assert import_error(tmp_path, [f.parent, "--from", "verl", "--tokenizer", tok]) == (
        f"error: {f}: line 2: field '{field}': {SURROGATE}")


@pytest.mark.parametrize(("uid", "kind"), [([1, 2], "list"), ({"a": 1}, "dict")])
def test_verl_uid_not_a_string_is_one_error_line(tok, tmp_path, uid, kind) -> None:
    """Was stringified: every sample one group."""
    f = _jsonl(tmp_path / "verl" / "1.jsonl", _verl(uid=uid))
    assert import_error(tmp_path, [f.parent, "--from", "verl", "--tokenizer", tok]) == (
        f"error: {f}: line 1: field 'uid': expected a string, got {kind}")


# -- TRL -------------------------------------------------------------------------------------------


def _trl_table() -> dict:
    return json.loads((FIXTURES / "trl_completions.table.json").read_text())


def _write_table(tmp_path: Path, table: dict) -> Path:
    f = tmp_path / "completions.table.json"
    f.write_text(json.dumps(table))
    return f


@pytest.mark.parametrize(("column", "field"), [(1, "prompt"), (2, "completion")])
def test_trl_lone_surrogate_in_text_is_one_error_line(tok, tmp_path, column, field) -> None:
    table = _trl_table()
    table["data"][2][column] = LONE
    f = _write_table(tmp_path, table)
    assert import_error(tmp_path, [f, "--from", "trl", "--tokenizer", tok]) == (
        f"error: {f}: row 3: field '{field}': {SURROGATE}")


def test_trl_duplicate_column_is_one_error_line(tok, tmp_path) -> None:
    """Was read with dict(zip(...)): the later column silently won."""
    table = _trl_table()
    table["columns"][4] = "accuracy_reward"  # (was advantage)
    f = _write_table(tmp_path, table)
    assert import_error(tmp_path, [f, "--from", "trl", "--tokenizer", tok]) == (
        f"error: {f}: column 'accuracy_reward' appears twice (rename one of them)")


def test_trl_duplicate_parquet_column_is_one_error_line(tok, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = _trl_table()["data"]
    names = ["step", "prompt", "completion", "accuracy_reward", "accuracy_reward"]
    f = tmp_path / "completions" / "completions_00000.parquet"
    f.parent.mkdir()
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in zip(*data, strict=True)],
                                        names=names), f)
    assert import_error(tmp_path, [f.parent, "--from", "trl", "--tokenizer", tok]) == (
        f"error: {f}: column 'accuracy_reward' appears twice (rename one of them)")


@pytest.mark.parametrize(("value", "shown"), [("x", "'x'"), ([1], "[1]")])
def test_trl_non_number_in_the_reward_column_is_one_error_line(tok, tmp_path, value,
                                                               shown) -> None:
    """Was: the column stopped counting as numeric and the reward was silently dropped."""
    table = _trl_table()
    table["data"][0][3] = value
    f = _write_table(tmp_path, table)
    assert import_error(tmp_path, [f, "--from", "trl", "--tokenizer", tok]) == (
        f"error: {f}: row 1: field 'accuracy_reward': {shown} is not a number (the column holds "
        "numbers otherwise: a reward column? give --reward-columns to name the rewards)")


def test_trl_text_and_number_extra_column_is_not_a_reward(tok, tmp_path) -> None:
    """A log_extra column of numbers and text alike (an answer: 7, "x=7") is neither a
    candidate reward nor a stray cell: the one all-numbers column is the reward, as before."""
    table = _trl_table()
    table["columns"].append("answer")
    for k, row in enumerate(table["data"]):
        row.append(7 if k % 2 else "x=7")
    f = _write_table(tmp_path, table)
    trace, _ = import_framework("trl", f, tok)
    assert list(trace.reward) == [row[3] for row in _trl_table()["data"]]


def test_trl_null_and_nan_reward_cells_still_read(tok, tmp_path) -> None:
    table = _trl_table()
    table["data"][0][3] = None
    f = _write_table(tmp_path, table)
    trace, _ = import_framework("trl", f, tok)
    assert trace.reward is None  # a row no reward function scored has no reward


# -- slime -----------------------------------------------------------------------------------------


def _slime(tmp_path: Path, change) -> Path:
    import torch

    data = torch.load(FIXTURES / "slime_rollout" / "rollout_data_0.pt", weights_only=True)
    data["samples"] = [dict(s) for s in data["samples"]]
    change(data["samples"], torch)
    f = tmp_path / "0.pt"
    torch.save(data, f)
    return f


@pytest.mark.parametrize(("prompt", "kind", "why"), [
    (lambda t: ["x", b"\xff"], "list", "Object of type bytes is not JSON serializable"),
    (lambda t: [t.tensor([1, 2])], "list", "Object of type Tensor is not JSON serializable"),
    (lambda t: {1: "a", "b": 2}, "dict", "'<' not supported between instances of 'str' and 'int'"),
])
def test_slime_prompt_json_cannot_write_is_one_error_line(tmp_path, prompt, kind, why) -> None:
    """Was a TypeError traceback from json.dumps naming the prompt."""
    f = _slime(tmp_path, lambda samples, torch: samples[0].update(prompt=prompt(torch)))
    assert import_error(tmp_path, [f, "--from", "slime"]) == (
        f"error: {f}: sample 0: field 'prompt': expected text or chat messages, found a {kind} "
        f"holding what JSON cannot write ({why})")


def test_slime_tokens_shorter_than_the_response_is_one_error_line(tmp_path) -> None:
    """Was a negative prompt length, silently raised to 1."""
    def cut(samples, torch):
        samples[1]["tokens"] = samples[1]["tokens"][:1]
    f = _slime(tmp_path, cut)
    n = _slime_response_length(1)
    assert import_error(tmp_path, [f, "--from", "slime"]) == (
        f"error: {f}: sample 1: field 'tokens': 1 tokens, fewer than response_length {n} "
        f"(tokens hold the prompt and the response)")


def _slime_response_length(i: int) -> int:
    import torch

    data = torch.load(FIXTURES / "slime_rollout" / "rollout_data_0.pt", weights_only=True)
    return data["samples"][i]["response_length"]


# -- AReaL -----------------------------------------------------------------------------------------


def _session(task: object = 0, rank: object = 0, status: object = "accepted") -> dict:
    return {"task_id": task, "session_id": 0, "rank": rank, "role": "rollout", "status": status,
            "submit_ts": 1000.0, "finalized_ts": 1002.0,
            "phases": {"generate": [{"start_ts": 1000.0, "end_ts": 1001.0}]},
            "turn_tokens": [10]}


@pytest.mark.parametrize(("field", "record"), [
    ("task_id", _session(task=LONE)), ("rank", _session(rank=LONE))])
def test_areal_lone_surrogate_in_a_key_is_one_error_line(tmp_path, field, record) -> None:
    """Was a UnicodeEncodeError traceback hashing the prompt id."""
    f = _jsonl(tmp_path / "rollout" / "sessions-r0.jsonl", [_session(), record])
    assert import_error(tmp_path, [f.parent, "--from", "areal"]) == (
        f"error: {f}: line 2: field '{field}': {SURROGATE}")


def test_areal_status_not_a_string_is_one_error_line(tmp_path) -> None:
    """Was skipped as a session neither accepted nor rejected."""
    f = _jsonl(tmp_path / "rollout" / "sessions-r0.jsonl",
               [_session(), _session(status=["accepted"])])
    assert import_error(tmp_path, [f.parent, "--from", "areal"]) == (
        f"error: {f}: line 2: field 'status': expected a string such as 'accepted', got "
        f"['accepted']")


# -- NeMo-Gym --------------------------------------------------------------------------------------


def _metrics(t: datetime, **extra) -> dict:
    def iso(s: float) -> str:
        return (t + timedelta(seconds=s)).isoformat()
    return {"generation_start_timestamp": iso(0), "resolved": True, **extra,
            "per_turn_metrics": {
                "response_latencies": [{"latency": 5.0, "response_id": "r1",
                                        "timestamp": iso(5)}],
                "token_usages": [{"prompt_tokens": 100, "completion_tokens": 20,
                                  "response_id": "r1"}],
                "action_execution_latencies": []}}


def _gym(tmp_path: Path, rollouts: list[tuple[str, dict]]) -> Path:
    """``{instance_id}_{timestamp_ms}_{hash}`` directories, each with its metrics file."""
    base = tmp_path / "swebench_results_1"
    for j, (instance, metrics) in enumerate(rollouts):
        d = base / f"{instance}_{1_700_000_000_000 + j}_ab{j}"
        d.mkdir(parents=True)
        (d / "nemo_gym_metrics.json").write_text(json.dumps(metrics))
    return base


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_nemo_gym_lone_surrogate_in_instance_id_is_one_error_line(tmp_path) -> None:
    base = _gym(tmp_path, [("a", _metrics(T0)), ("b", _metrics(T0, instance_id=LONE))])
    f = base / "b_1700000000001_ab1" / "nemo_gym_metrics.json"
    assert import_error(tmp_path, [base, "--from", "nemo-gym"]) == (
        f"error: {f}: field 'instance_id': {SURROGATE}")


def test_nemo_gym_directory_name_not_utf8_is_read_as_a_key(tmp_path) -> None:
    """Was a UnicodeEncodeError traceback hashing the prompt id: a directory name is bytes,
    and the instance it names only groups the rollouts."""
    bad = os.fsdecode(b"dj\xff")
    base = _gym(tmp_path, [(bad, _metrics(T0)), (bad, _metrics(T0)),
                           ("ok", _metrics(T0)), ("ok", _metrics(T0))])
    trace, report = import_framework("nemo-gym", base)
    assert (report.rows, report.groups, report.group_size) == (4, 2, 2)
    ids = trace.prompt_id.tolist()
    assert ids[0] == ids[1] != ids[2] == ids[3]
