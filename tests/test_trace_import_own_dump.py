"""`trace import` of a user's own rollout dump: a table with each row's training step, prompt
id and reward. Those columns were dropped without a word, so a dump of 3 steps became one step
of 192 prompts, and a dump in completion order (a step's prompts interleaved) was grouped by
order into groups of several prompts' responses. `--step-col`, `--prompt-id-col` and
`--reward-col` read them; a table grouped by order whose groups mix prompt lengths, and a column
that looks like one of them but was not named, are told on stderr."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import read_trace

runner = CliRunner()
COLS = ["--prompt-len-col", "prompt_tokens", "--response-len-col", "response_tokens", "--group-size", "2",
        "--max-response-len", "100"]
OWN = ["--step-col", "step", "--prompt-id-col", "uid", "--reward-col", "reward"]
# 2 steps x 2 prompts x 2 responses, in completion order (a step's prompts interleaved)
ROWS = [
    {"step": 1, "uid": "a", "prompt_tokens": 10, "response_tokens": 5, "reward": 1.0},
    {"step": 1, "uid": "b", "prompt_tokens": 20, "response_tokens": 7, "reward": 0.0},
    {"step": 1, "uid": "a", "prompt_tokens": 10, "response_tokens": 9, "reward": 0.5},
    {"step": 1, "uid": "b", "prompt_tokens": 20, "response_tokens": 100, "reward": 0.0},
    {"step": 2, "uid": "c", "prompt_tokens": 30, "response_tokens": 3, "reward": 1.0},
    {"step": 2, "uid": "a", "prompt_tokens": 10, "response_tokens": 4, "reward": 1.0},
    {"step": 2, "uid": "c", "prompt_tokens": 30, "response_tokens": 6, "reward": 0.0},
    {"step": 2, "uid": "a", "prompt_tokens": 10, "response_tokens": 8, "reward": 1.0},
]


def write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def run(tmp_path: Path, table: Path, *args: str):
    out = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["trace", "import", str(table), *COLS, *args, "--out", str(out)])
    assert "Traceback" not in r.output, r.output
    return r, out


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_steps_prompt_ids_and_rewards_are_read(tmp_path, suffix):
    r, out = run(tmp_path, write(tmp_path / f"dump{suffix}", ROWS), *OWN)
    assert r.exit_code == 0, r.output
    assert r.stdout == f"wrote {out}: 8 rows read, 4 prompts x 2 over 2 step(s), 0 rows dropped, 0 clipped\n"
    assert r.stderr == ""
    t = read_trace(out)
    assert t.step.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert t.prompt_id.tolist() == ["a", "a", "b", "b", "c", "c", "a", "a"]
    assert t.prompt_len.tolist() == [10, 10, 20, 20, 30, 30, 10, 10]
    assert t.response_len.tolist() == [5, 9, 7, 100, 3, 6, 4, 8]
    assert t.reward.tolist() == [1.0, 0.5, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    assert t.truncated.tolist() == [False, False, False, True, False, False, False, False]
    assert t.prompts_per_step == 2


def test_grouping_by_order_says_when_groups_mix_prompts_and_names_the_columns_it_did_not_read(tmp_path):
    r, out = run(tmp_path, write(tmp_path / "dump.jsonl", ROWS))
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "warning: 4 of 4 groups of 2 consecutive rows have rows of different prompt lengths, so they "
        "are not one prompt's responses: give --prompt-id-col to group the rows by prompt",
        "note: column 'step' was not read (give --step-col step to keep it)",
        "note: column 'uid' was not read (give --prompt-id-col uid to keep it)",
        "note: column 'reward' was not read (give --reward-col reward to keep it)"]
    assert read_trace(out).step is None


def test_a_step_column_alone_groups_consecutive_rows_within_each_step(tmp_path):
    rows = [dict(r, uid="x", prompt_tokens=10) for r in ROWS[:3] + ROWS[4:]]  # step 1 has 3 rows
    table = write(tmp_path / "dump.jsonl", rows)
    odd = write(tmp_path / "odd.jsonl", rows[:-1])  # one id: 3 rows in each step (4 would be split)
    r, out = run(tmp_path, odd, "--step-col", "step", "--prompt-id-col", "uid")
    assert (r.exit_code, r.stderr) == (2, f"error: {odd}: no prompt id in one step has 2 rows, the "
                                          "group size (--group-size)\n")
    r, out = run(tmp_path, table, "--step-col", "step", "--reward-col", "reward")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "note: dropped 1 row at the end of a step that does not fill a group of 2",
        "note: column 'uid' was not read (give --prompt-id-col uid to keep it)"]
    t = read_trace(out)
    assert t.step.tolist() == [1, 1, 2, 2, 2, 2]
    assert t.response_len.tolist() == [5, 7, 3, 4, 6, 8]


def test_a_prompt_group_of_another_size_is_dropped_and_counted(tmp_path):
    r, out = run(tmp_path, write(tmp_path / "dump.jsonl", ROWS[:3] + ROWS[4:]), *OWN)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "note: dropped 1 prompt group (1 row) whose size is not a multiple of --group-size 2 (a filtered or "
        "aborted sample?)"]
    assert read_trace(out).prompt_id.tolist() == ["a", "a", "c", "c", "a", "a"]


@pytest.mark.parametrize("change, args, message", [
    ({"step": "first"}, OWN, "line 3: column 'step': 'first' is not a step (an integer >= 0)"),
    ({"step": -1}, OWN, "line 3: column 'step': -1 is not a step (an integer >= 0)"),
    ({"reward": "NaN"}, OWN, "line 3: column 'reward': 'NaN' is not a finite number"),
    ({"reward": None}, OWN, "line 3: column 'reward' is null"),
    ({"uid": None}, OWN, "line 3: column 'uid' is null"),
    ({"uid": [1]}, OWN, "line 3: column 'uid': [1] is not a prompt id (text or an integer)"),
])
def test_a_bad_cell_is_one_error_naming_line_and_column(tmp_path, change, args, message):
    rows = [dict(r) for r in ROWS]
    rows[2].update(change)
    table = write(tmp_path / "dump.jsonl", rows)
    r, out = run(tmp_path, table, *args)
    assert (r.exit_code, r.stderr) == (2, f"error: {table}: {message}\n")
    assert not out.exists()


def test_misused_options_are_one_error(tmp_path):
    table = write(tmp_path / "dump.jsonl", ROWS)
    r, _ = run(tmp_path, table, "--step-col", "prompt_tokens")
    assert (r.exit_code, r.stderr) == (2, "error: --prompt-len-col and --step-col both name column "
                                          "'prompt_tokens'; a column has one role\n")
    r, _ = run(tmp_path, table, "--step-col", "epoch")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {table}: no column 'epoch'; available columns: 'step', 'uid'")
    back = write(tmp_path / "back.jsonl", ROWS[:2] + ROWS[4:6] + ROWS[2:4] + ROWS[6:])
    r, _ = run(tmp_path, back, "--step-col", "step")
    assert (r.exit_code, r.stderr) == (2, f"error: {back}: line 5: step 1 again after other steps' rows: sort "
                                          "the rows by step, or give --prompt-id-col to group by prompt\n")
    r = runner.invoke(app, ["trace", "import", str(table), "--from", "verl", "--step-col", "step",
                            "--out", str(tmp_path / "o.jsonl")])
    assert (r.exit_code, r.stderr) == (2, "error: --step-col: only for a table import, without --from (a "
                                          "framework's dump is read in its own layout); remove it\n")


def test_one_prompt_id_of_several_prompt_lengths_is_counted(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[2]["prompt_tokens"] = 11  # prompt a in step 1: 10 and 11
    r, out = run(tmp_path, write(tmp_path / "dump.jsonl", rows), *OWN)
    assert r.exit_code == 0, r.output
    assert r.stderr == "warning: 1 of 4 prompt ids have rows of different prompt lengths\n"
