"""`trace import --from` on input a second audit found misread: one missing reward dropped every
reward without a word, an empty response was named by a 0-based position in the whole dump, an
empty dump file was skipped yet counted as read, a truncated NeMo-Gym metrics file said only
"JSONDecodeError", and AReaL token counts past 32 bits were taken. Each bad input is one
`error:` line naming the file, line (row) and field, exit 2, and no output file; an assumption is
one `note:` line on stderr."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.importers import import_framework
from sortedrl.traces.io import read_trace

runner = CliRunner()
FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
NO_REWARD = ("the trace has no reward column (a trace's reward is on every row or on none)")


def _import(tmp_path: Path, args: list):
    """``trace import ARGS --out TMP/out.jsonl`` (test_trace_import_table_input2 uses it too)."""
    out = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["trace", "import", *map(str, args), "--out", str(out)])
    assert "Traceback" not in r.output, r.output
    return r, out


def _one_error(tmp_path: Path, args: list) -> str:
    r, out = _import(tmp_path, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert not out.exists()
    return lines[0]


def _verl_copy(tmp_path: Path) -> Path:
    d = tmp_path / "verl"
    shutil.copytree(FIXTURES / "verl_rollout", d)
    return d


def _set_line(path: Path, lineno: int, **fields) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = json.dumps({**json.loads(lines[lineno - 1]), **fields}) + "\n"
    path.write_text("".join(lines))


# -- 1. a reward missing on some samples -------------------------------------------------------


def test_verl_one_null_score_is_a_note_naming_it_and_the_trace_has_no_reward(tok,
                                                                           tmp_path) -> None:
    """Was: 32 samples written, none with a reward, nothing said. A trace's reward column is on
    every row or none (docs/traces.md), so the rewards cannot be kept: the note says so."""
    d = _verl_copy(tmp_path)
    _set_line(d / "2.jsonl", 3, score=None)
    r, out = _import(tmp_path, [d, "--from", "verl", "--tokenizer", tok])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        f"note: no reward for 1 of 32 samples (the first: {d / '2.jsonl'}: line 3): {NO_REWARD}"]
    assert read_trace(out).reward is None


def test_verl_every_score_null_says_nothing(tok, tmp_path) -> None:
    """A dump with no reward at all is a trace without one, as before: no note."""
    d = _verl_copy(tmp_path)
    for f in (d / "1.jsonl", d / "2.jsonl"):
        for k in range(1, 17):
            _set_line(f, k, score=None)
    r, out = _import(tmp_path, [d, "--from", "verl", "--tokenizer", tok])
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert read_trace(out).reward is None


def test_verl_rewards_on_every_sample_are_kept(tok, tmp_path) -> None:
    trace, report = import_framework("verl", FIXTURES / "verl_rollout", tok)
    assert trace.reward is not None and len(trace.reward) == 32
    assert report.notes == ()


def test_trl_one_nan_reward_is_a_note_naming_its_row(tok, tmp_path) -> None:
    """TRL logs NaN where a reward function returned None: that row has no reward."""
    table = json.loads((FIXTURES / "trl_completions.table.json").read_text())
    table["data"][4][3] = float("nan")
    f = tmp_path / "completions.table.json"
    f.write_text(json.dumps(table))  # (NaN, as W&B writes it)
    r, out = _import(tmp_path, [f, "--from", "trl", "--tokenizer", tok])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[-1] == (
        f"note: no reward for 1 of 24 samples (the first: {f}: row 5): {NO_REWARD}")
    assert read_trace(out).reward is None


# -- 2. an empty response ----------------------------------------------------------------------


def test_verl_empty_response_counts_its_end_of_sequence_token_and_keeps_its_group(tok, tmp_path) -> None:
    """Was: `error: DIR: sample 18: response has 0 tokens` (a 0-based place in the dump), then
    an error asking to remove the record (dropping its group): a response of only the
    end-of-sequence token decodes to empty text. It counts as that one token now, with a note
    naming the first such record (helper 207: one empty response stopped a whole import)."""
    d = _verl_copy(tmp_path)
    before, _ = import_framework("verl", d, tok)
    _set_line(d / "2.jsonl", 3, output="")
    trace, report = import_framework("verl", d, tok)
    changed = np.flatnonzero(trace.response_len != before.response_len)
    assert len(trace.response_len) == len(before.response_len) == 32
    assert len(changed) == 1 and trace.response_len[changed[0]] == 1
    assert report.notes == (
        f"1 response(s) that count no token ('output': empty or blank text, as only the "
        f"end-of-sequence token decodes) counted as 1 token; the first: {d / '2.jsonl'}: line 3",)


def test_trl_blank_completion_counts_one_token_with_a_note(tok, tmp_path) -> None:
    table = json.loads((FIXTURES / "trl_completions.table.json").read_text())
    table["data"][6][2] = "   "
    f = tmp_path / "completions.table.json"
    f.write_text(json.dumps(table))
    r, out = _import(tmp_path, [f, "--from", "trl", "--tokenizer", tok])
    assert r.exit_code == 0, r.output
    assert (f"note: 1 response(s) that count no token ('completion': empty or blank text, as only "
            f"the end-of-sequence token decodes) counted as 1 token; the first: {f}: row 7") in r.stderr.splitlines()
    assert len(read_trace(out).response_len) == 24 and 1 in read_trace(out).response_len


# -- 3. an empty dump file ---------------------------------------------------------------------

EMPTY = "empty file (a dump cut short? remove it to import the others)"


@pytest.mark.parametrize("text", ["", "\n  \n\n"])
def test_verl_empty_step_file_is_an_error(tok, tmp_path, text) -> None:
    """Was: skipped, and counted as read ("16 samples from 2 verl file(s)")."""
    d = _verl_copy(tmp_path)
    (d / "2.jsonl").write_text(text)
    assert _one_error(tmp_path, [d, "--from", "verl", "--tokenizer", tok]) == (
        f"error: {d / '2.jsonl'}: {EMPTY}")


def test_nemo_rl_and_areal_empty_files_are_errors(tmp_path) -> None:
    d = tmp_path / "nemo"
    shutil.copytree(FIXTURES / "nemo_rl_logs", d)
    (d / "train_data_step2.jsonl").write_text("")
    assert _one_error(tmp_path, [d, "--from", "nemo-rl"]) == (
        f"error: {d / 'train_data_step2.jsonl'}: {EMPTY}")
    a = tmp_path / "session_tracer"
    a.mkdir()
    (a / "sessions-r0.jsonl").write_text("\n")
    assert _one_error(tmp_path, [a, "--from", "areal"]) == (
        f"error: {a / 'sessions-r0.jsonl'}: {EMPTY}")


# -- NeMo-Gym metrics files --------------------------------------------------------------------


def _gym(tmp_path: Path, texts: list[str]) -> Path:
    base = tmp_path / "swebench_results_1"
    for j, text in enumerate(texts):
        d = base / f"i{j}_{1_700_000_000_000 + j}_ab{j}"
        d.mkdir(parents=True)
        (d / "nemo_gym_metrics.json").write_text(text)
    return base


def test_nemo_gym_truncated_metrics_json_names_line_and_column(tmp_path) -> None:
    """Was: `not a JSON object (JSONDecodeError)`, with no place."""
    base = _gym(tmp_path, ['{\n  "resolved": true,\n  "per_turn_metrics": {"response_'])
    f = base / "i0_1700000000000_ab0" / "nemo_gym_metrics.json"
    assert _one_error(tmp_path, [base, "--from", "nemo-gym"]) == (
        f"error: {f}: line 3: bad JSON: Unterminated string starting at (column 24)")


def test_nemo_gym_empty_or_binary_metrics_file(tmp_path) -> None:
    base = _gym(tmp_path, [""])
    f = base / "i0_1700000000000_ab0" / "nemo_gym_metrics.json"
    assert _one_error(tmp_path, [base, "--from", "nemo-gym"]) == f"error: {f}: {EMPTY}"
    f.write_bytes(b'{"a": "\xff"}')
    assert _one_error(tmp_path, [base, "--from", "nemo-gym"]) == (
        f"error: {f}: not UTF-8 text (byte 7)")


# -- 5. AReaL token counts past 32 bits --------------------------------------------------------


def _session(**extra) -> dict:
    return {"task_id": 1, "session_id": 0, "rank": 0, "status": "accepted", "submit_ts": 0.0,
            "finalized_ts": 10.0, "phases": {"generate": [{"start_ts": 0.0, "end_ts": 1.0},
                                                          {"start_ts": 2.0, "end_ts": 3.0}]},
            "turn_tokens": [5, 6], **extra}


@pytest.mark.parametrize(("field", "value", "where"), [
    ("turn_tokens", [5, 2**31], "line 1: turn 2"),
    ("turn_tool_tokens", [2**31], "line 1: call 1"),
    ("prompt_tokens", 2**31, "line 1"),
])
def test_areal_token_counts_past_32_bits_are_refused(tmp_path, field, value, where) -> None:
    """Was: accepted up to 2**63 (turn_tokens), though lengths are 32-bit in a run."""
    d = tmp_path / "session_tracer"
    d.mkdir()
    (d / "sessions-r0.jsonl").write_text(json.dumps(_session(**{field: value})) + "\n")
    assert _one_error(tmp_path, [d, "--from", "areal"]) == (
        f"error: {d / 'sessions-r0.jsonl'}: {where}: field '{field}': 2,147,483,648 is above "
        "2,147,483,647, the largest token count (lengths are 32-bit in a run)")


def test_areal_turns_adding_up_past_32_bits_are_refused(tmp_path) -> None:
    """Each turn fits; their sum, the response, does not."""
    d = tmp_path / "session_tracer"
    d.mkdir()
    (d / "sessions-r0.jsonl").write_text(
        json.dumps(_session(turn_tokens=[2**31 - 1, 2])) + "\n")
    assert _one_error(tmp_path, [d, "--from", "areal"]) == (
        f"error: {d / 'sessions-r0.jsonl'}: line 1: response has 2,147,483,649 tokens, above "
        "2,147,483,647 (lengths are 32-bit in a run)")


def test_nemo_gym_calls_adding_up_past_int64_are_one_error_line(tmp_path) -> None:
    """Was an OverflowError traceback: two calls of 2**62 + 5 tokens sum past int64."""
    calls = {"response_latencies": [], "token_usages": [], "action_execution_latencies": []}
    for k in (1, 2):
        calls["response_latencies"].append(
            {"latency": 1.0, "response_id": f"r{k}", "timestamp": f"2026-01-01T00:00:0{2 * k}"})
        calls["token_usages"].append(
            {"prompt_tokens": 100, "completion_tokens": 2**62 + 5, "response_id": f"r{k}"})
    base = _gym(tmp_path, [json.dumps({"resolved": True, "per_turn_metrics": calls})])
    f = base / "i0_1700000000000_ab0" / "nemo_gym_metrics.json"
    assert _one_error(tmp_path, [base, "--from", "nemo-gym"]) == (
        f"error: {f}: response has 9,223,372,036,854,775,818 tokens, above 2,147,483,647 "
        "(lengths are 32-bit in a run)")
