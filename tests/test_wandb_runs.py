"""``--run``: the run that ``calibrate --from-metrics`` and ``trace fit --drift-from`` read of a
W&B "export CSV" of several runs (one ``<run> - <metric>`` column per run plotted).

Before, ``trace fit`` read the first run's column of each metric, so a metric the first run
lacked came from the next run (the mean of one beside the clip ratio of another), and
``calibrate`` refused the file with no way to pick a run. Now a file of several runs needs
``--run``; a file of one run reads as before, with or without it.

Run: pytest tests/test_wandb_runs.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
CLUSTER = "h100-llama3.1-8b"
STEPS = range(1, 21)
FIRST, SECOND = "grpo-a", "qwen - grpo-b"  # a run name may hold " - "
LENGTHS = ("response_length/mean", "response_length/max", "response_length/clip_ratio")
TRAINER = ("timing_s/update_actor", "perf/total_num_tokens", "timing_s/update_weights")


def _value(run: str, metric: str, step: int) -> float:
    """Two runs unlike in every metric: the second grows 5x as fast and trains 2x as slowly."""
    fast = run == SECOND
    return {
        "response_length/mean": (1200 if fast else 1500) * math.exp((0.01 if fast else 0.002) * step),
        "response_length/max": 7000.0 if fast else 6000.0,
        "response_length/clip_ratio": 0.02 + 0.001 * step if fast else 0.01,
        "timing_s/update_actor": (2 if fast else 1) * (10 + 0.3 * step + step % 3),
        "perf/total_num_tokens": 100000.0 + 5000 * step + 700 * (step % 4),
        "timing_s/update_weights": 3.0 if fast else 1.0,
    }[metric]


def _export(path: Path, runs: dict[str, tuple[str, ...]]) -> Path:
    """A W&B export: ``Step``, then per run and metric ``<run> - <metric>`` with its
    ``__MIN``/``__MAX`` buckets."""
    head = ["Step"] + [f"{run} - {m}{end}" for run, ms in runs.items() for m in ms
                       for end in ("", "__MIN", "__MAX")]
    lines = [",".join(f'"{h}"' for h in head)]
    for step in STEPS:
        values = [_value(run, m, step) for run, ms in runs.items() for m in ms]
        lines.append(",".join([str(step)] + [repr(v) for v in values for _ in range(3)]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _both(tmp: Path, metrics: tuple[str, ...] = LENGTHS + TRAINER) -> Path:
    return _export(tmp / "two.csv", {FIRST: metrics, SECOND: metrics})


def _one_error(args: list[str]) -> str:
    """The single stderr line of a command that must fail with exit 2."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _calibrate(metrics: Path, out: Path, *run: str) -> list[str]:
    return ["calibrate", "--from-metrics", str(metrics), "--cluster", CLUSTER, "--out", str(out),
            *(["--run", *run] if run else [])]


def _trace_fit(export: Path, out: Path, *run: str) -> list[str]:
    return ["trace", "fit", "logic-8k", "--out", str(out), "--drift-from", str(export), "--json",
            *(["--run", *run] if run else [])]


def _ok(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output[-2000:]
    return r


def _trainer_fit(profile: Path) -> dict:
    fit = json.loads(profile.read_text())["fit"]["trainer"]
    return {k: v for k, v in fit.items() if k != "file"}


def _drift(model: Path) -> dict:
    fields = json.loads(model.read_text())
    return {k: fields[k] for k in ("drift", "runaway_drift", "max_drift")}


# -- several runs, no --run: one error line, nothing written ----------------------------------


@pytest.mark.parametrize("command", [_calibrate, _trace_fit])
def test_several_runs_without_run_is_one_error_and_writes_nothing(tmp_path, command) -> None:
    two, out = _both(tmp_path), tmp_path / "out.json"
    line = _one_error(command(two, out))
    assert line == (f"error: {two}: 2 runs in this W&B export ({FIRST}, {SECOND}): "
                    "choose one with --run")
    assert not out.exists()


def test_trace_fit_no_longer_mixes_the_runs_columns(tmp_path) -> None:
    # the first run was exported without its clip ratio: the old reader took the second run's
    lengths = ("response_length/mean", "response_length/max")
    mixed = _export(tmp_path / "mixed.csv", {FIRST: lengths, SECOND: LENGTHS})
    alone = _export(tmp_path / "alone.csv", {FIRST: lengths})
    _ok(_trace_fit(mixed, tmp_path / "mixed.json", FIRST))
    _ok(_trace_fit(alone, tmp_path / "alone.json"))
    assert _drift(tmp_path / "mixed.json") == _drift(tmp_path / "alone.json")


# -- --run picks a run: the fit of a file holding that run alone -------------------------------


def test_calibrate_run_reads_that_runs_columns(tmp_path) -> None:
    alone = _export(tmp_path / "alone.csv", {SECOND: LENGTHS + TRAINER})
    _ok(_calibrate(_both(tmp_path), tmp_path / "picked.json", SECOND))
    _ok(_calibrate(alone, tmp_path / "alone.json"))
    picked = _trainer_fit(tmp_path / "picked.json")
    assert picked == _trainer_fit(tmp_path / "alone.json")
    assert picked["terms"]["sync_s"]["value"] == 3.0  # the second run's sync, not the first's 1.0


def test_trace_fit_run_reads_that_runs_columns(tmp_path) -> None:
    alone = _export(tmp_path / "alone.csv", {SECOND: LENGTHS})
    _ok(_trace_fit(_both(tmp_path), tmp_path / "picked.json", SECOND))
    _ok(_trace_fit(alone, tmp_path / "alone.json"))
    picked = _drift(tmp_path / "picked.json")
    assert picked == _drift(tmp_path / "alone.json")
    _ok(_trace_fit(_both(tmp_path), tmp_path / "first.json", FIRST))
    assert picked["drift"] > 2 * _drift(tmp_path / "first.json")["drift"]  # the runs do differ


# -- --run that cannot apply -------------------------------------------------------------------


@pytest.mark.parametrize("command", [_calibrate, _trace_fit])
def test_an_unknown_run_lists_the_runs_found(tmp_path, command) -> None:
    two, out = _both(tmp_path), tmp_path / "out.json"
    line = _one_error(command(two, out, "grpo"))
    assert line == f"error: --run grpo: no such run in {two} (runs found: {FIRST}, {SECOND})"
    assert not out.exists()


def test_run_on_json_lines_is_an_error(tmp_path) -> None:
    verl = Path(__file__).resolve().parent / "fixtures" / "metrics" / "verl_metrics.jsonl"
    line = _one_error(_calibrate(verl, tmp_path / "out.json", FIRST))
    assert line == (f"error: --run {FIRST}: {verl} is JSON lines (verl's file logger): --run applies "
                    "to W&B export CSVs only")


def test_run_on_a_csv_of_no_runs_is_an_error(tmp_path) -> None:
    plain = tmp_path / "plain.csv"
    plain.write_text("step,timing_s/update_actor,perf/total_num_tokens\n1,10,1000\n2,12,2000\n")
    line = _one_error(_calibrate(plain, tmp_path / "out.json", FIRST))
    assert line == (f"error: --run {FIRST}: {plain} has no '<run> - <metric>' columns: --run "
                    "applies to W&B export CSVs only")


@pytest.mark.parametrize("args, option", [
    (["calibrate", "--from-vllm-bench", "b.json", "--cluster", CLUSTER], "--from-metrics"),
    (["calibrate", "--model", "m"], "--from-metrics"),
    (["trace", "fit", "logic-8k"], "--drift-from"),
])
def test_run_without_a_wandb_input_is_an_error(tmp_path, args, option) -> None:
    line = _one_error([*args, "--out", str(tmp_path / "out.json"), "--run", FIRST])
    assert line == f"error: --run: only with {option} (the run of a W&B export to read)"


@pytest.mark.parametrize("option", ["--metric", "--step-column"])
def test_a_drift_column_without_a_wandb_input_is_an_error(tmp_path, option) -> None:
    """trace fit took --metric and --step-column without --drift-from, and ignored them (exit 0)."""
    out = tmp_path / "out.json"
    line = _one_error(["trace", "fit", "logic-8k", "--out", str(out), option, "train/x"])
    assert line == f"error: {option}: only with --drift-from (a column of the W&B export to read)"
    assert not out.exists()


# -- one run: as before, with or without --run -------------------------------------------------


@pytest.mark.parametrize("command", [_calibrate, _trace_fit])
def test_one_run_reads_the_same_with_or_without_run(tmp_path, command) -> None:
    alone = _export(tmp_path / "alone.csv", {SECOND: LENGTHS + TRAINER})
    (tmp_path / "without").mkdir()
    (tmp_path / "with").mkdir()
    without = _ok(command(alone, tmp_path / "without" / "out.json"))
    named = _ok(command(alone, tmp_path / "with" / "out.json", SECOND))
    assert (tmp_path / "without" / "out.json").read_bytes() == (tmp_path / "with" / "out.json").read_bytes()
    assert without.output.replace("without", "with") == named.output
