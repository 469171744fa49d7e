"""``-`` for an input, which many tools read as standard input, says what to give instead:
``/dev/stdin`` where the reader takes a pipe, a file where it tells the format by the file's
name (it said only ``-: metrics file not found``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

STDIN = "(for standard input give /dev/stdin)"
FILE = "(standard input is not read here: save it to a file first)"


@pytest.mark.parametrize("args, line", [
    (["simulate", "--trace", "-", "--policy", "sync"], f"error: -: no such file {STDIN}"),
    (["calibrate", "--from-vllm-bench", "-", "--cluster", "h100-llama3.1-8b"],
     f"error: -: benchmark file not found {STDIN}"),
    (["calibrate", "--from-metrics", "-", "--cluster", "h100-llama3.1-8b"],
     f"error: -: metrics file not found {FILE}"),
    (["trace", "import", "-", "--from", "verl"], f"error: -: no such file or directory {FILE}"),
    (["trace", "import", "-", "--prompt-len-col", "p", "--response-len-col", "r",
      "--max-response-len", "64", "--group-size", "4"], f"error: -: no such file {STDIN}"),
])
def test_a_dash_for_an_input_says_what_to_give(tmp_path, monkeypatch, args, line):
    monkeypatch.chdir(tmp_path)  # (no file named "-" here)
    out = tmp_path / {"trace": "t.jsonl", "calibrate": "p.json"}.get(args[0], "out")
    r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 2 and r.stderr == line + "\n", r.output
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("args, line", [
    (["run", "--model", "m", "--policy", "sync", "--steps", "1", "--seed", "-3", "--out", "r"], "error: --seed must be >= 0, got -3"),
    (["model", "init", "--seed", "99999999999999999999", "--out", "m"],
     "error: --seed must be at most 9223372036854775807, got 99999999999999999999"),
    (["calibrate", "--model", "m", "--seed", "-1", "--out", "p.json"], "error: --seed must be >= 0, got -1"),
])
def test_the_real_runners_seed_is_checked_first(tmp_path, monkeypatch, args, line):
    """``run --seed -3`` and ``model init --seed -3`` ended in NumPy's traceback, a seed above
    2**63 - 1 in an overflow: refused as the simulator's commands refuse them, before anything."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.stderr == line + "\n", r.output
    assert list(tmp_path.iterdir()) == []
