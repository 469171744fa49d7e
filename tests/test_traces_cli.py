"""The ``trace`` command group: import, synth and stats, including how errors are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl import traces
from sortedrl.traces import read_trace, synthesize
from sortedrl.traces.commands import app

FIXTURE = Path(__file__).parent / "fixtures" / "splitwise_conv_head.csv"
DATA = Path(traces.__file__).parent / "data"
runner = CliRunner()


def _ok(args: list[str]) -> tuple[str, str]:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def _fails(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_import(tmp_path: Path) -> None:
    out = tmp_path / "azure.csv"
    args = ["import", str(FIXTURE), "--prompt-len-col", "num_prefill_tokens"]
    stdout, stderr = _ok(
        [*args, "--response-len-col", "num_decode_tokens", "--group-size", "4", "--out", str(out)]
    )
    assert stdout == f"wrote {out}: 50 rows read, 12 prompts x 4, 2 rows dropped, 0 clipped\n"
    assert stderr == "note: dropped 2 trailing rows that do not fill a group of 4\n"
    t = read_trace(out)
    assert len(t) == 48 and t.meta.group_size == 4 and t.meta.max_response_len == 401


def test_import_with_cap_and_source(tmp_path: Path) -> None:
    out = tmp_path / "azure.jsonl"
    stdout, stderr = _ok(
        [
            "import",
            str(FIXTURE),
            "--prompt-len-col",
            "num_prefill_tokens",
            "--response-len-col",
            "num_decode_tokens",
            "--max-response-len",
            "200",
            "--source",
            "azure",
            "--out",
            str(out),
        ]
    )
    assert stdout.endswith(": 50 rows read, 50 prompts x 1, 0 rows dropped, 4 clipped\n")
    assert stderr == "note: clipped 4 responses to max_response_len 200\n"
    assert read_trace(out).meta.source == "azure"


def test_import_error_leaves_no_output(tmp_path: Path) -> None:
    out = tmp_path / "azure.jsonl"
    line = _fails(
        [
            "import",
            str(FIXTURE),
            "--prompt-len-col",
            "prefill",
            "--response-len-col",
            "num_decode_tokens",
            "--out",
            str(out),
        ]
    )
    assert line == (
        f"error: {FIXTURE}: no column 'prefill'; available columns: "
        "'arrived_at', 'num_prefill_tokens', 'num_decode_tokens'"
    )
    assert list(tmp_path.iterdir()) == []


def test_synth_and_stats_json(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    stdout, _ = _ok(
        [
            "synth",
            "math-16k",
            "--out",
            str(out),
            "--prompts",
            "16",
            "--group-size",
            "4",
            "--steps",
            "3",
            "--seed",
            "5",
            "--dataset-size",
            "32",
        ]
    )
    assert stdout == f"wrote {out}: 192 samples, 16 prompts x 4 per step, 3 steps\n"
    assert read_trace(out) == synthesize("math-16k", 16, 4, 3, seed=5, dataset_size=32)
    stdout, _ = _ok(["stats", str(out), "--json"])
    stats = json.loads(stdout)
    assert stats["count"] == 192 and stats["prompts"] == 32 and stats["steps"] == 3
    assert [s["step"] for s in stats["per_step"]] == [0, 1, 2]


def test_stats_table(tmp_path: Path) -> None:
    stdout, _ = _ok(["stats", str(DATA / "math-16k.jsonl")])
    assert "trace statistics" in stdout and "mean / cap" in stdout and "per step" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["synth", "nope"], "error: unknown preset 'nope'; known presets: logic-8k, math-16k, "
                            "agentic-retool, agentic-search, agentic-swe"),
        (["synth", "math-16k", "--prompts", "0"], "error: --prompts must be >= 1, got 0"),
        (
            ["synth", "math-16k", "--dataset-size", "3"],
            "error: --dataset-size (3) must be >= prompts per step (128)",
        ),
        (  # refused before anything is drawn (a MemoryError traceback before)
            ["synth", "agentic-swe", "--prompts", "100000000000"],
            "error: 100,000,000,000 prompts x 8 samples x 4 steps = 3,200,000,000,000 samples: a "
            "run holds at most 2,147,483,647 (a timeline's sample ids are 32-bit)",
        ),
    ],
)
def test_synth_errors(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "t.jsonl"
    assert _fails([*args, "--out", str(out)]) == message
    assert not out.exists()


def test_synth_unknown_output_format(tmp_path: Path) -> None:
    out = tmp_path / "t.txt"
    assert _fails(["synth", "logic-8k", "--out", str(out)]) == (
        f"error: {out}: unknown trace format '.txt'; use one of .jsonl, .csv, .parquet"
    )
    assert list(tmp_path.iterdir()) == []


def test_stats_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sortedrl_trace": 1}\n{"prompt_id": "a",\n')
    assert _fails(["stats", str(bad)]) == (
        f"error: {bad}: line 2: bad JSON: Expecting property name enclosed in double quotes "
        "(column 19)"
    )
    assert _fails(["stats", str(tmp_path / "none.csv"), "--json"]) == (
        f"error: {tmp_path / 'none.csv'}: no such file"
    )


def test_no_args_shows_help() -> None:
    result = runner.invoke(app, [])
    assert "synth" in result.output and "import" in result.output and "stats" in result.output


@pytest.mark.parametrize("args, line", [
    (["trace", "synth", "math-16k", "--group-size", "0"], "error: --group-size must be >= 1, got 0"),
    (["trace", "synth", "math-16k", "--dataset-size", "0"], "error: --dataset-size must be >= 1, got 0"),
    (["simulate", "--synthetic", "math-16k", "--policy", "sync", "--seed", "-1"], "error: --seed must be >= 0, got -1"),
])
def test_a_synthetic_traces_refused_value_names_its_option(tmp_path: Path, args: list[str], line: str) -> None:
    """The errors named synthesize()'s parameters (`group_size must be >= 1`), not the options."""
    from sortedrl.cli import app as sortedrl_app

    out = tmp_path / ("t.jsonl" if args[0] == "trace" else "run")
    r = runner.invoke(sortedrl_app, [*args, "--out", str(out)])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line + "\n")
    assert not out.exists()
