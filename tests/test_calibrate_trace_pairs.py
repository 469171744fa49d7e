"""``calibrate --from-metrics FILE --trace T``: the run's length trace gives each step's tokens
and attention pairs, so the fit recovers ``train_per_pair`` (and with it ``train_fix`` and
``train_per_token``) instead of folding the pairs into the per-token term.

The metrics are what the preset's own cost model gives for the trace (``CostModel.update`` of
each step's samples), logged as verl logs them (tests/test_trainer_fit_roundtrip.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import preset
from sortedrl.traces.io import write_trace
from sortedrl.traces.schema import Trace, TraceMeta

runner = CliRunner()
PRESET = "h100-llama3.1-8b-2gpu"  # colocated; prices the attention pairs
TERMS = ("train_fix", "train_per_token", "train_per_pair")
PAIR_NOTE = "train_per_pair 0 (the base's"


def _trace(path: Path, steps: range, seed: int = 0, samples: int = 256) -> Path:
    """A trace of ``samples`` samples a step, prompt + response from 200 to 200 + 800·step
    tokens (the lengths of tests/test_trainer_fit_roundtrip.py's run)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("prompt_id", "sample", "prompt_len", "response_len", "truncated", "step")}
    for step in steps:
        lengths = rng.integers(200, 200 + 800 * step, samples)  # as the round trip's, draw for draw
        for i, length in enumerate(lengths):
            cols["prompt_id"].append(f"p{step}-{i // 4}")
            cols["sample"].append(i % 4)
            cols["prompt_len"].append(100)
            cols["response_len"].append(int(length) - 100)
            cols["truncated"].append(False)
            cols["step"].append(step)
    write_trace(Trace.from_columns(cols, TraceMeta(max_response_len=100 + 800 * max(steps), group_size=4)), path)
    return path


def _metrics(path: Path, trace: Path, drop: set[int] = frozenset()) -> Path:
    """verl's file logger for the trace's run on the preset's costs, one update a step."""
    from sortedrl.traces.io import read_trace

    t, costs = read_trace(trace), preset(PRESET).cost()
    lines = []
    for step in sorted(set(t.step.tolist()) - drop):
        at = t.step == step
        lengths = (t.prompt_len[at] + t.response_len[at]).tolist()
        u = costs.update(lengths)
        lines.append({"step": step, "data": {
            "timing_s/update_actor": 0.8 * u, "timing_s/old_log_prob": 0.15 * u, "timing_s/ref": 0.05 * u,
            "perf/total_num_tokens": float(sum(lengths)),
            "timing_s/update_weights": costs.sync_s + costs.onload_s}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _calibrate(tmp_path: Path, *extra: str) -> tuple[object, Path]:
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(tmp_path / "m.jsonl"), "--cluster", PRESET,
                            "--out", str(out), *extra])
    return r, out


def _terms(out: Path) -> dict[str, float]:
    return json.loads(out.read_text())["costs"]


def test_the_trace_recovers_the_presets_trainer_terms(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", range(1, 9))
    _metrics(tmp_path / "m.jsonl", trace)
    r, out = _calibrate(tmp_path, "--trace", str(trace))
    assert r.exit_code == 0, r.output
    own, got = preset(PRESET).cost(), _terms(out)
    for term in TERMS:
        assert got[term] == pytest.approx(getattr(own, term), rel=1e-6), term
    prof = json.loads(out.read_text())
    tr = prof["fit"]["trainer"]
    assert str(trace) in prof["sources"] and tr["trace"] == str(trace)
    assert not any(n.startswith(("train_per_pair ", "train_fix ", "the trace's tokens", "--trace"))
                   for n in tr.get("notes", []))
    assert "train_per_pair" in prof["measured_terms"] and "train_per_pair" not in tr["fixed_by_model"]
    shown = runner.invoke(app, ["profile", "show", str(out)]).output
    assert f"sources: {tmp_path / 'm.jsonl'}, {trace}" in shown
    assert f"tokens = trace {trace} (prompt + response of each step's samples)" in shown


def test_without_the_trace_the_old_fit_and_notes(tmp_path):
    # the audit's figures: train_fix at its bound 0, train_per_token +10-11%
    trace = _trace(tmp_path / "t.jsonl", range(1, 9))
    _metrics(tmp_path / "m.jsonl", trace)
    r, out = _calibrate(tmp_path)
    assert r.exit_code == 0, r.output
    own, got = preset(PRESET).cost(), _terms(out)
    assert got["train_per_pair"] == 0 and got["train_fix"] < 1e-6 * own.train_fix
    assert 1.05 < got["train_per_token"] / own.train_per_token < 1.15
    notes = json.loads(out.read_text())["fit"]["trainer"]["notes"]
    assert any(n.startswith(PAIR_NOTE) for n in notes)
    assert any(n.startswith("train_fix ") and "at its bound 0" in n for n in notes)


def test_a_trace_of_another_run_is_noted(tmp_path):
    _metrics(tmp_path / "m.jsonl", _trace(tmp_path / "t.jsonl", range(1, 9)))
    other = _trace(tmp_path / "other.jsonl", range(1, 9), seed=7)
    r, out = _calibrate(tmp_path, "--trace", str(other))
    assert r.exit_code == 0, r.output
    notes = json.loads(out.read_text())["fit"]["trainer"]["notes"]
    assert any(n.startswith("the trace's tokens differ from perf/total_num_tokens by more than 1% in ")
               and n.endswith(f"{other} is probably not the trace of this run") for n in notes)


def test_rows_and_steps_left_out_are_counted(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", range(1, 9))
    _metrics(tmp_path / "m.jsonl", _trace(tmp_path / "longer.jsonl", range(1, 11)), drop={3})
    r, out = _calibrate(tmp_path, "--trace", str(trace))
    assert r.exit_code == 0, r.output
    notes = json.loads(out.read_text())["fit"]["trainer"]["notes"]
    assert (f"--trace {trace}: 7 metrics rows matched; left out 2 row(s) of {tmp_path / 'm.jsonl'} whose steps "
            "the trace lacks and 1 trace step(s) no fitted row covers") in notes


def test_no_matching_steps_is_one_error_and_no_profile(tmp_path):
    metrics = _metrics(tmp_path / "m.jsonl", _trace(tmp_path / "a.jsonl", range(1, 9)))
    trace = _trace(tmp_path / "t.jsonl", range(20, 24))
    r, out = _calibrate(tmp_path, "--trace", str(trace))
    assert r.exit_code == 2
    assert r.output == (f"error: --trace {trace}: 0 of the 8 metrics rows match the trace's steps: fitting "
                        "train_fix, train_per_token, train_per_pair needs at least 4 (metrics "
                        f"{metrics}: steps 1-8; trace {trace}: steps 20-23)\n")
    assert not out.exists()


def test_trace_without_from_metrics_is_an_error(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", range(1, 5))
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--trace", str(trace), "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 2
    assert r.output == ("error: --trace: only with --from-metrics (the length trace of the run the metrics "
                        "logged)\n")
    assert not out.exists()


def test_a_fully_async_row_of_k_updates_sums_k_trace_steps(tmp_path):
    # verl's fully-async trainer (told by its keys), --updates-per-row 2: row r holds the
    # updates (trace steps) 2r - 1 and 2r
    trace = _trace(tmp_path / "t.jsonl", range(1, 11))
    single = [json.loads(x) for x in _metrics(tmp_path / "one.jsonl", trace).read_text().splitlines()]
    rows = []
    for r in range(1, 6):
        a, b = single[2 * r - 2]["data"], single[2 * r - 1]["data"]
        rows.append({"step": r, "data": {k: a[k] + b[k] for k in a if k != "timing_s/update_weights"}
                     | {"timing_s/update_weights": a["timing_s/update_weights"], "trainer/idle_ratio": 0.1}})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    r, out = _calibrate(tmp_path, "--trace", str(trace), "--updates-per-row", "2")
    assert r.exit_code == 0, r.output
    own, got = preset(PRESET).cost(), _terms(out)
    for term in TERMS:
        assert got[term] == pytest.approx(getattr(own, term), rel=1e-6), term
    assert not any(n.startswith(("the trace's tokens", "--trace"))
                   for n in json.loads(out.read_text())["fit"]["trainer"].get("notes", []))


def test_a_synchronous_row_of_k_minibatches_is_one_trace_step(tmp_path):
    # verl's synchronous trainer with 2 mini-batches a step: one row and one trace step a step,
    # two optimizer steps (two fixed times) in the row; --updates-per-row 2 counts them, and row
    # N is still the trace's step N (before: steps 2N - 1 and 2N, half the rows left out and the
    # terms wrong)
    trace = _trace(tmp_path / "t.jsonl", range(1, 9))
    own = preset(PRESET).cost()
    rows = [json.loads(x) for x in _metrics(tmp_path / "one.jsonl", trace).read_text().splitlines()]
    for row in rows:
        row["data"]["timing_s/update_actor"] += own.train_fix  # the second mini-batch's fixed time
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    r, out = _calibrate(tmp_path, "--trace", str(trace), "--updates-per-row", "2")
    assert r.exit_code == 0, r.output
    got = _terms(out)
    for term in TERMS:
        assert got[term] == pytest.approx(getattr(own, term), rel=1e-6), term
    notes = json.loads(out.read_text())["fit"]["trainer"].get("notes", [])
    assert not any(n.startswith(("the trace's tokens", "--trace")) for n in notes), notes
