"""``--seed`` outside 0 to 2**63 - 1 is one error line naming the flag and the largest seed, in
every command that takes it, before anything is drawn or written. Above 2**63 - 1 it was an
"argument out of range" traceback (exit 1) once a response was regenerated: the simulator hashes
``(seed, sample, attempt)`` as signed 64-bit numbers. A negative seed was refused only where a
trace was drawn (a synthetic preset, a trace model), and taken with a trace file.

Run: pytest tests/test_seed_range.py
"""

from __future__ import annotations

import json
import struct

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.limits import MAX_SEED
from sortedrl.sim.attempts import stream_key
from sortedrl.traces.io import write_trace
from tests.conftest import make_trace
from tests.test_tune_clash import TINY

runner = CliRunner()
ABOVE = str(MAX_SEED + 1)
TOO_BIG = f"error: --seed must be at most 9223372036854775807, got {ABOVE}\n"


@pytest.fixture()
def small(tmp_path):
    trace = tmp_path / "in" / "t.jsonl"
    trace.parent.mkdir()
    write_trace(make_trace([3, 5, 4, 6], group_size=2, steps=[0, 0, 1, 1], max_len=6), trace)
    cluster = tmp_path / "in" / "tiny.json"
    cluster.write_text(json.dumps(TINY))
    return ["--trace", str(trace), "--cluster", str(cluster)]


@pytest.mark.parametrize("command", [
    ["simulate", "--policy", "sync"],
    ["compare", "--policy", "sync", "--policy", "tail_batch"],
    ["tune", "--policy", "sync", "--budget", "1"],
])
@pytest.mark.parametrize(("seed", "line"), [(ABOVE, TOO_BIG), ("-1", "error: --seed must be >= 0, got -1\n")])
def test_a_seed_out_of_range_is_one_error_line_and_writes_nothing(tmp_path, small, command, seed, line):
    out = tmp_path / "o"
    r = runner.invoke(app, [*command, *small, "--seed", seed, "--out", str(out)])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


@pytest.mark.parametrize("args", [
    ["simulate", "--synthetic", "math-16k", "--policy", "sync", "--out", "o"],
    ["trace", "synth", "math-16k", "--out", "t.jsonl"],
    ["forecast", "--trace", "math-16k", "--policy", "sync"],
])
def test_every_command_with_a_seed_refuses_one_above_2_63(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, [*args, "--seed", ABOVE])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", TOO_BIG)
    assert list(tmp_path.iterdir()) == []


def test_a_forecast_of_several_draws_keeps_its_last_seed_in_range(tmp_path):
    """A trace model's draws use seeds --seed to --seed + seeds - 1: the last must fit too."""
    model = tmp_path / "m.json"
    assert runner.invoke(app, ["trace", "fit", "math-16k", "--out", str(model)]).exit_code == 0
    r = runner.invoke(app, ["forecast", "--trace-model", str(model), "--steps", "2", "--policy", "sync",
                            "--seed", str(MAX_SEED - 1)])
    assert (r.exit_code, r.stdout, r.stderr) == (
        2, "", "error: --seed must be at most 9223372036854775805 with --seeds 3 (the draws use --seed "
               "to --seed + 2), got 9223372036854775806\n")


def test_the_largest_seed_runs_and_is_printed_plainly(tmp_path, small):
    """2**63 - 1 hashes (the bound is the hash's), and a seed is an id: no thousands separators."""
    assert len(stream_key(MAX_SEED, 0, 1)) == 16
    with pytest.raises(struct.error):
        stream_key(MAX_SEED + 1, 0, 1)
    r = runner.invoke(app, ["simulate", "--policy", "tail_batch", *small, "--seed", str(MAX_SEED),
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert [line.split() for line in r.stdout.splitlines() if line.startswith("seed ")] == [
        ["seed", "9223372036854775807"]]
