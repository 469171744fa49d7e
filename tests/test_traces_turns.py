"""Traces with turns: the ragged turn columns, their three file spellings, and bad turn input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app as main_app
from sortedrl.errors import TraceError
from sortedrl.traces import Trace, TraceMeta, read_trace, synthesize, write_trace

runner = CliRunner()
META = TraceMeta(max_response_len=10, group_size=2, source="t")


def _columns(**over) -> dict:
    """Two groups given out of canonical order: b's samples come first, a's rows interleave."""
    cols = dict(
        prompt_id=["b", "a", "b", "a"], sample=[0, 0, 1, 1], prompt_len=[5, 6, 5, 6],
        response_len=[3, 4, 5, 6], truncated=[False] * 4,
        turn_gen=[[1, 2], [4], [2, 3], [1, 2, 3]],
        turn_tool_s=[[0.5, 0.0], [0.0], [1 / 3, 0.0], [0.1, 0.2, 0.0]],
        turn_tool_tokens=[[7, 0], [0], [8, 0], [1, 2, 0]],
    )
    cols.update(over)
    return cols


def test_turns_are_reordered_with_their_rows() -> None:
    t = Trace.from_columns(_columns(), META)
    assert t.prompt_id.tolist() == ["b", "b", "a", "a"]
    assert t.turn_offsets.tolist() == [0, 2, 4, 5, 8]
    assert t.turn_gen.tolist() == [1, 2, 2, 3, 4, 1, 2, 3]
    assert t.turn_tool_s.tolist() == [0.5, 0.0, 1 / 3, 0.0, 0.0, 0.1, 0.2, 0.0]
    assert t.turn_tool_tokens.tolist() == [7, 0, 8, 0, 0, 1, 2, 0]
    assert t.turns_per_row().tolist() == [2, 2, 1, 3]
    assert t.has_turns
    # the flat form (with offsets) reads back to the same trace
    assert Trace.from_columns({**t.columns(), **t.turn_columns()}, META) == t


def test_a_trace_without_turns_is_unchanged() -> None:
    t = synthesize("logic-8k", prompts=4, group_size=2, steps=1)
    assert t.turn_offsets is None and t.turn_columns() == {} and not t.has_turns
    assert t.turns_per_row().tolist() == [1] * 8
    with_turns = Trace.from_columns(
        {**t.columns(), "turn_gen": [[v] for v in t.response_len.tolist()],
         "turn_tool_s": [[0.0]] * 8, "turn_tool_tokens": [[0]] * 8}, t.meta)
    assert with_turns != t  # a one-turn trace is not the same trace as one without turns


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_round_trip_is_exact(tmp_path: Path, ext: str) -> None:
    t = Trace.from_columns(_columns(), META)
    write_trace(t, tmp_path / f"t.{ext}")
    back = read_trace(tmp_path / f"t.{ext}")
    assert back == t
    assert back.turn_tool_s[2] == 1 / 3  # bit for bit


def test_jsonl_and_csv_spellings(tmp_path: Path) -> None:
    t = Trace.from_columns(_columns(), META)
    write_trace(t, tmp_path / "t.jsonl")
    write_trace(t, tmp_path / "t.csv")
    row = (tmp_path / "t.jsonl").read_text().splitlines()[1]
    assert row.endswith('"turns": [{"gen": 1, "tool_s": 0.5, "tool_tokens": 7}, '
                        '{"gen": 2, "tool_s": 0.0, "tool_tokens": 0}]}')
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[1].endswith(",turn_gen,turn_tool_s,turn_tool_tokens")
    assert lines[5] == "a,1,6,6,false,1 2 3,0.1 0.2 0.0,1 2 0"


turn = st.tuples(st.integers(1, 50), st.floats(0, 1e4, allow_nan=False), st.integers(0, 300))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(turn, min_size=1, max_size=5), min_size=1, max_size=6))
def test_round_trip_any_turns(tmp_path_factory, rows) -> None:
    for r in rows:  # no tool call after the last turn
        r[-1] = (r[-1][0], 0.0, 0)
    cols = dict(
        prompt_id=[f"p{i}" for i in range(len(rows))], sample=[0] * len(rows),
        prompt_len=[3] * len(rows), response_len=[sum(g for g, _, _ in r) for r in rows],
        truncated=[False] * len(rows), turn_gen=[[g for g, _, _ in r] for r in rows],
        turn_tool_s=[[s for _, s, _ in r] for r in rows],
        turn_tool_tokens=[[k for _, _, k in r] for r in rows],
    )
    t = Trace.from_columns(cols, TraceMeta(250, 1, "h"))
    assert (np.add.reduceat(t.turn_gen, t.turn_offsets[:-1]) == t.response_len).all()
    d = tmp_path_factory.mktemp("rt")
    for ext in ("jsonl", "csv", "parquet"):
        write_trace(t, d / f"t.{ext}")
        assert read_trace(d / f"t.{ext}") == t


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (dict(turn_tool_s=[[-0.5, 0.0], [0.0], [1.0, 0.0], [0.1, 0.2, 0.0]]),
         "x: row 1: field 'turn_tool_s': turn 1: -0.5 is negative"),
        (dict(turn_tool_tokens=[[7, 0], [0], [8, 0], [1, -2, 0]]),
         "x: row 4: field 'turn_tool_tokens': turn 2: -2 is negative"),
        (dict(turn_gen=[[1, 2], [4], [2, 3], [1, 2, 4]]),
         "x: row 4: field 'turn_gen': the turns sum to 7 tokens, but response_len is 6"),
        (dict(turn_gen=[[1, 2], [4], [2, 3], [-1, 4, 3]]),
         "x: row 4: field 'turn_gen': turn 1: -1 is negative"),
        (dict(turn_tool_tokens=[[7, 0], [0], [8, 3], [1, 2, 0]]),
         "x: row 3: field 'turn_tool_tokens': turn 2: 3 after the last turn "
         "(no tool call follows it; use 0)"),
        (dict(turn_tool_tokens=[[7, 0], [0], [8], [1, 2, 0]]),
         "x: row 3: field 'turn_tool_tokens': 1 turns, but 'turn_gen' has 2"),
        (dict(turn_gen=[[1, 2], [], [2, 3], [1, 2, 3]]),
         "x: row 2: field 'turn_gen': no turns (a row has at least one)"),
        (dict(turn_tool_s=None),
         "x: missing column 'turn_tool_s' (a trace with turns needs turn_gen, turn_tool_s, "
         "turn_tool_tokens)"),
        (dict(turn_tool_s=[[0.5, 0.0], [0.0], [float("inf"), 0.0], [0.1, 0.2, 0.0]]),
         "x: row 3: field 'turn_tool_s': turn 1: inf is not finite"),
    ],
)
def test_bad_turns_name_row_field_and_turn(over, message) -> None:
    with pytest.raises(TraceError) as e:
        Trace.from_columns(_columns(**over), META, where="x")
    assert str(e.value) == message


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    meta = '{"sortedrl_trace": 1, "max_response_len": 10, "group_size": 1}'
    jsonl = tmp_path / "neg.jsonl"
    jsonl.write_text(
        meta + "\n"
        '{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 3, "truncated": false, '
        '"turns": [{"gen": 1, "tool_s": 0.5, "tool_tokens": 7}, {"gen": 2, "tool_s": 0.0, '
        '"tool_tokens": 0}]}\n'
        '{"prompt_id": "b", "sample": 0, "prompt_len": 5, "response_len": 3, "truncated": false, '
        '"turns": [{"gen": 1, "tool_s": -2.0, "tool_tokens": 7}, {"gen": 2, "tool_s": 0.0, '
        '"tool_tokens": 0}]}\n'
    )
    csv = tmp_path / "sum.csv"
    csv.write_text(
        f"# sortedrl_trace {meta}\n"
        "prompt_id,sample,prompt_len,response_len,truncated,turn_gen,turn_tool_s,turn_tool_tokens\n"
        "a,0,5,3,false,1 2,0.5 0.0,7 0\n"
        "b,0,5,4,false,1 2,0.5 0.0,7 0\n"
    )
    parquet = tmp_path / "neg.parquet"
    table = pa.table({
        "prompt_id": ["a", "b"], "sample": [0, 0], "prompt_len": [5, 5], "response_len": [3, 3],
        "truncated": [False, False], "turn_gen": [[1, 2], [1, 2]],
        "turn_tool_s": [[0.5, 0.0], [0.5, 0.0]], "turn_tool_tokens": [[7, 0], [-7, 0]],
    })
    pq.write_table(table, parquet)
    keys = "key 'gen'"
    bad_key = tmp_path / "key.jsonl"
    bad_key.write_text(jsonl.read_text().replace('"gen": 1, "tool_s": -2.0', '"tool_s": -2.0'))
    return {
        "jsonl": (jsonl, f"{jsonl}: line 3: field 'turns': turn 1: 'tool_s': -2.0 is negative"),
        "csv": (csv, f"{csv}: line 4: field 'turn_gen': the turns sum to 3 tokens, but "
                     "response_len is 4"),
        "parquet": (parquet, f"{parquet}: row 2: field 'turn_tool_tokens': turn 1: -7 is negative"),
        keys: (bad_key, f"{bad_key}: line 3: field 'turns': turn 1: expected an object with keys "
                        "gen, tool_s, tool_tokens, got {'tool_s': -2.0, 'tool_tokens': 7}"),
    }


@pytest.mark.parametrize("case", ["jsonl", "csv", "parquet", "key 'gen'"])
def test_bad_turn_files_fail_with_one_line_and_write_nothing(tmp_path: Path, case: str) -> None:
    path, message = _bad_files(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "run"
    result = runner.invoke(main_app, ["simulate", "--trace", str(path), "--policy", "sync", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {message}"]
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
