"""Traces with turns: the ragged turn columns, their three file spellings, and bad turn input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app as main_app
from sortedrl.errors import TraceError
from sortedrl.traces import (
    Trace,
    TraceMeta,
    _fast,
    _text,
    read_trace,
    synthesize,
    trace_stats,
    write_trace,
)
from sortedrl.traces.importers import import_framework
from sortedrl.traces.synth_agentic import AGENTIC_PRESETS

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
         "x: row 3: field 'turn_tool_tokens': 1 turn, but 'turn_gen' has 2"),
        (dict(turn_gen=[[1, 2], [], [2, 3], [1, 2, 3]]),
         "x: row 2: field 'turn_gen': no turns (a row has at least one)"),
        (dict(turn_tool_s=None),
         "x: missing column 'turn_tool_s' (a trace with turns needs turn_gen, turn_tool_s, "
         "turn_tool_tokens)"),
        (dict(turn_tool_s=[[0.5, 0.0], [0.0], [float("inf"), 0.0], [0.1, 0.2, 0.0]]),
         "x: row 3: field 'turn_tool_s': turn 1: inf is not finite"),
        (dict(turn_tool_s=[[0.5, 0.0], [0.0], [10**400, 0.0], [0.1, 0.2, 0.0]]),  # (OverflowError)
         "x: row 3: field 'turn_tool_s': turn 1: inf is not finite"),
        (dict(turn_tool_s=[[0.5, 0.0], [0.0], [1e308, 0.0], [0.1, 0.2, 0.0]]),  # the clock: inf
         "x: row 3: field 'turn_tool_s': turn 1: 1e+308 is above 1e+09 s (no tool call takes "
         "decades; the simulated clock would overflow)"),
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


# -- statistics ------------------------------------------------------------------------------


def test_stats_show_turns_and_tool_time() -> None:
    cols = _columns(turn_tool_s=[[0.5, 0.0], [0.0], [1.0, 0.0], [0.25, 0.25, 0.0]])
    stats = trace_stats(Trace.from_columns(cols, META))
    assert stats["turns_mean"] == 2.0 and stats["turns_max"] == 3 and stats["turns_p50"] == 2.0
    assert stats["gen_tokens_per_turn_mean"] == 18 / 8
    assert stats["tool_calls"] == 4  # 8 turns, 4 of them last in their trajectory
    assert stats["tool_s_mean"] == 0.5 and stats["tool_s_max"] == 1.0
    assert stats["tool_s_p50"] == 0.375
    assert stats["tool_s_per_trajectory_mean"] == 0.5  # (0.5 + 0 + 1 + 0.5) / 4
    assert stats["tool_tokens_per_call_mean"] == (7 + 8 + 1 + 2) / 4
    plain = trace_stats(synthesize("logic-8k", prompts=2, group_size=2, steps=1))
    assert not any(k.startswith(("turns_", "tool_")) for k in plain)


# -- agentic presets -------------------------------------------------------------------------


def test_retool_preset_matches_its_published_turn_count(tmp_path: Path) -> None:
    t = synthesize("agentic-retool", steps=2, seed=0)
    p = AGENTIC_PRESETS["agentic-retool"]
    assert t.has_turns and len(t) == 2 * 64 * 16 and t.meta.max_response_len == 16384
    assert t == synthesize("agentic-retool", steps=2, seed=0)  # deterministic
    turns = t.turns_per_row()
    assert turns.max() <= p.max_turns and turns.min() >= 1
    # verl's num_turns (user + assistant turns + 1) = 2 * tool calls + 2: 7.2 after SFT
    num_turns = 2 * (turns.mean() - 1) + 2
    assert num_turns == pytest.approx(7.2, rel=0.1)
    assert t.turn_tool_s.max() <= p.tool_timeout_s and t.turn_tool_tokens.max() <= p.obs_cap
    assert (t.response_len <= p.max_response_len).all()
    write_trace(t, tmp_path / "r.parquet")
    assert read_trace(tmp_path / "r.parquet") == t


def test_search_and_swe_presets_keep_their_caps() -> None:
    for name in ("agentic-search", "agentic-swe"):
        p = AGENTIC_PRESETS[name]
        t = synthesize(name, prompts=16, group_size=4, steps=2, seed=1)
        assert t.turns_per_row().max() <= p.max_turns
        assert t.turn_gen.max() <= p.turn_cap and t.turn_tool_s.max() <= p.tool_timeout_s
        last = t.turn_offsets[1:] - 1
        assert (t.turn_tool_s[last] == 0).all()


def test_cli_synth_and_stats_of_an_agentic_preset(tmp_path: Path) -> None:
    out = tmp_path / "a.jsonl"
    r = runner.invoke(main_app, ["trace", "synth", "agentic-search", "--out", str(out),
                                 "--prompts", "8", "--group-size", "2", "--steps", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main_app, ["trace", "stats", str(out), "--json"])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.stdout)
    t = read_trace(out)
    assert stats["turns_max"] == int(t.turns_per_row().max())
    assert stats["tool_calls"] == int(t.turn_gen.size - len(t))


# -- importers -------------------------------------------------------------------------------


def _slime_sample(group: int, index: int, mask: list[int], tool_s: float) -> dict:
    return {"group_index": group, "index": index, "tokens": [1, 5, 6] + [7] * len(mask),
            "response_length": len(mask), "reward": 1.0, "status": "completed",
            "loss_mask": mask, "non_generation_time": tool_s}


def test_slime_loss_mask_gives_turns(tmp_path: Path) -> None:
    samples = [
        _slime_sample(0, 0, [1, 1, 0, 0, 0, 1, 1, 1], 3.0),  # two turns, 3 tool tokens
        _slime_sample(0, 1, [1, 1, 1, 1], 0.0),  # one turn
        _slime_sample(1, 2, [1, 0, 1, 0, 0, 1, 0], 4.0),  # three turns; trailing tool output
        _slime_sample(1, 3, [1, 1], 0.0),
    ]
    torch.save({"rollout_id": 0, "samples": samples}, tmp_path / "0.pt")
    t, _ = import_framework("slime", tmp_path / "0.pt")
    assert t.response_len.tolist() == [5, 4, 3, 2]  # generated tokens only
    assert t.turns_per_row().tolist() == [2, 1, 3, 1]
    assert t.turn_gen.tolist() == [2, 3, 4, 1, 1, 1, 2]
    assert t.turn_tool_tokens.tolist() == [3, 0, 0, 1, 2, 0, 0]
    assert t.turn_tool_s.tolist() == [3.0, 0.0, 0.0, 2.0, 2.0, 0.0, 0.0]
    bad = [_slime_sample(0, 0, [1, 0, 1], -1.0), _slime_sample(0, 1, [1], 0.0)]
    torch.save({"rollout_id": 0, "samples": bad}, tmp_path / "bad.pt")
    with pytest.raises(TraceError) as e:
        import_framework("slime", tmp_path / "bad.pt")
    assert str(e.value) == f"{tmp_path / 'bad.pt'}: sample 0: field 'non_generation_time': -1.0 is negative"


def test_nemo_rl_multi_turn_sample_gives_turns(tmp_path: Path) -> None:
    rows = [
        {"input_lengths": 9, "token_ids": list(range(9)), "token_loss_mask": [0, 0, 1, 1, 0, 0, 1, 1, 1]},
        {"input_lengths": 4, "token_ids": [0, 1, 5, 6], "token_loss_mask": [0, 0, 1, 1]},
    ]
    (tmp_path / "train_data_step3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t, _ = import_framework("nemo-rl", tmp_path)
    assert t.response_len.tolist() == [5, 2] and t.prompt_len.tolist() == [2, 2]
    assert t.turn_gen.tolist() == [2, 3, 2] and t.turn_tool_tokens.tolist() == [2, 0, 0]


# -- the fast path (pyarrow) reads turns too ---------------------------------------------------


@pytest.mark.parametrize("ext", ["jsonl", "csv"])
def test_fast_path_reads_turns_as_the_reference_does(tmp_path: Path, ext: str) -> None:
    t = synthesize("agentic-search", prompts=16, group_size=4, steps=2, seed=3)
    path = tmp_path / f"t.{ext}"
    write_trace(t, path)
    fast = (_fast.read_jsonl_fast if ext == "jsonl" else _fast.read_csv_fast)(path, path.read_bytes())
    assert fast is not None and fast == t  # taken, and exact
    with open(path, encoding="utf-8", newline="") as f:
        assert (_text.read_jsonl if ext == "jsonl" else _text.read_csv)(path, f) == t


def test_fast_path_leaves_odd_turns_to_the_reference(tmp_path: Path) -> None:
    extra = tmp_path / "extra.jsonl"  # a turn with an unknown key: an error, named by line
    extra.write_text('{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 1, '
                     '"truncated": false, "turns": [{"gen": 1, "tool_s": 0.0, "tool_tokens": 0, '
                     '"x": 1}]}\n')
    assert _fast.read_jsonl_fast(extra, extra.read_bytes()) is None
    with pytest.raises(TraceError) as e:
        read_trace(extra)
    assert str(e.value).startswith(f"{extra}: line 1: field 'turns': turn 1: expected an object")
    spaces = tmp_path / "spaces.csv"  # two spaces: the reference splits on any whitespace
    spaces.write_text("prompt_id,sample,prompt_len,response_len,truncated,turn_gen,turn_tool_s,"
                      "turn_tool_tokens\na,0,5,3,false,1  2,0.5 0.0,7 0\n")
    assert _fast.read_csv_fast(spaces, spaces.read_bytes()) is None
    assert read_trace(spaces).turn_gen.tolist() == [1, 2]
