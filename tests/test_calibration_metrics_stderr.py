"""``calibrate --from-metrics``: the standard error of each fitted trainer term, and the note
for a term it leaves poorly determined, on verl metrics of known terms (train_fix 2 s,
train_per_token 4.5e-5 s/token, a 1.25 s sync) with fixed-seed noise.

The standard error is checked against the formula computed here by hand (numpy, an explicit
inverse of the weighted normal matrix), the note against the rule (one standard error times the
term's mean feature per update over 10% of the mean update time), in the CLI's output and in
``profile show``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.calibration.metrics_fit import fit_metrics, term_errors
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.calibration.vllm_bench import fit_stderr
from sortedrl.cli import app

runner = CliRunner()
FIX, PER_TOKEN, SYNC = 2.0, 4.5e-5, 1.25
UNITS = ("s/update", "s/token")


def _metrics(path: Path, steps: int, noise: float, lo: int, hi: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """verl's file logger, one update a step: ``steps`` steps of lo..hi tokens, each update time
    the true one times (1 + noise x a standard normal draw). Returns the tokens and the times."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(lo, hi, steps).astype(float)
    times = (FIX + PER_TOKEN * tokens) * (1.0 + noise * rng.standard_normal(steps))
    path.write_text("".join(json.dumps({"step": s + 1, "data": {
        "timing_s/update_actor": float(times[s]), "perf/total_num_tokens": float(tokens[s]),
        "timing_s/update_weights": SYNC}}) + "\n" for s in range(steps)))
    return tokens, times


def _by_hand(tokens: np.ndarray, times: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sqrt(diag(inv(AᵀA)) · |r|² / (rows − 2)), A the rows [1, tokens] weighed by 1 / time,
    r = A·x − 1: the columns scaled to 1 for the inverse and scaled back."""
    X = np.column_stack([np.ones_like(tokens), tokens])
    A = X / times[:, None]
    r = A @ x - 1.0
    S = np.diag(1.0 / X.max(axis=0))
    cov = S @ np.linalg.inv(S @ A.T @ A @ S) @ S * (r @ r) / (len(times) - 2)
    return np.sqrt(np.diag(cov))


def _note(name: str, value: float, err: float, unit: str, mean: float, moved: float) -> str:
    return (f"{name} {value:.3g} +- {err:.3g} {unit} is poorly determined: one standard error moves the mean "
            f"update ({mean:.3g} s) by {100 * moved:.0f}%; record more steps, or steps whose tokens vary more")


def _calibrate(metrics: Path, out: Path) -> str:
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(metrics), "--cluster", "h100-llama3.1-8b",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return r.output


def _show(profile: Path) -> list[str]:
    r = runner.invoke(app, ["profile", "show", str(profile)])
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def test_noise_free_steps_give_the_exact_terms_and_no_error(tmp_path):
    f = tmp_path / "m.jsonl"
    _metrics(f, steps=15, noise=0.0, lo=100_000, hi=300_000)
    fit = fit_metrics(read_metrics(f), str(f))
    terms = fit["terms"]
    assert [terms[k]["value"] for k in ("train_fix", "train_per_token", "sync_s")] == pytest.approx(
        [FIX, PER_TOKEN, SYNC], rel=1e-9)
    assert terms["train_fix"]["stderr"] < 1e-12 and terms["train_per_token"]["stderr"] < 1e-17
    assert "stderr" not in terms["sync_s"]  # a median: its spread is kept instead
    assert "notes" not in fit
    _calibrate(f, tmp_path / "p.json")
    lines = _show(tmp_path / "p.json")
    # float dust prints as 0, as a value at its bound does
    assert next(x for x in lines if x.startswith("  train_fix ")).endswith("metrics fit, stderr 0")
    assert next(x for x in lines if x.startswith("  train_per_token ")).endswith("metrics fit, stderr 0")
    assert next(x for x in lines if x.startswith("  sync_s ")).endswith("metrics fit")


def test_noisy_steps_give_the_formulas_error_and_flag_both_terms(tmp_path):
    # 15 steps at 5% noise, the tokens 100k..200k: a reviewer's case (train_fix came back 2.66 s
    # for 2.0, and nothing said how loose it was); seed 490 is a draw that comes back as it did
    f, out = tmp_path / "m.jsonl", tmp_path / "p.json"
    tokens, times = _metrics(f, steps=15, noise=0.05, lo=100_000, hi=200_000, seed=490)
    printed = _calibrate(f, out)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    x = np.array([tr["terms"]["train_fix"]["value"], tr["terms"]["train_per_token"]["value"]])
    err = _by_hand(tokens, times, x)
    assert [tr["terms"][k]["stderr"] for k in ("train_fix", "train_per_token")] == pytest.approx(err, rel=1e-9)
    assert abs(x[0] - FIX) < err[0]  # the true 2 s within one standard error (2.64 +- 1.05 here)
    mean = float(np.mean(times))
    moved = err * np.array([1.0, tokens.mean()]) / mean
    assert tr["update_s_mean"] == pytest.approx(mean, rel=1e-12) and (moved > 0.1).all()
    notes = [_note(k, v, e, u, mean, m)
             for k, v, e, u, m in zip(("train_fix", "train_per_token"), x, err, UNITS, moved, strict=True)]
    # the fit's notes first, then the base's terms the fit's form set (the pairs, the onload)
    assert tr["notes"][:2] == notes and len(tr["notes"]) == 4
    assert [f"  {n}" in printed.splitlines() for n in notes] == [True, True]
    lines = _show(out)
    assert lines[-4:] == [f"  {n}" for n in tr["notes"]]
    assert next(x for x in lines if x.startswith("  train_fix ")).endswith(f"metrics fit, stderr {err[0]:.4g}")


def test_well_determined_terms_are_not_flagged(tmp_path):
    # 60 steps whose tokens vary tenfold, at 0.5% noise: each error moves the mean update by < 1%
    f, out = tmp_path / "m.jsonl", tmp_path / "p.json"
    tokens, times = _metrics(f, steps=60, noise=0.005, lo=50_000, hi=500_000, seed=1)
    printed = _calibrate(f, out)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    err = np.array([tr["terms"][k]["stderr"] for k in ("train_fix", "train_per_token")])
    assert (err * np.array([1.0, tokens.mean()]) / times.mean() < 0.01).all()
    assert not any("poorly determined" in n for n in tr["notes"])  # (the onload note of a colocated base)
    assert "poorly determined" not in printed and not any("poorly determined" in x for x in _show(out))


def test_a_profile_written_before_the_errors_still_shows(tmp_path):
    f, out = tmp_path / "m.jsonl", tmp_path / "p.json"
    _metrics(f, steps=15, noise=0.05, lo=100_000, hi=200_000)
    _calibrate(f, out)
    raw = json.loads(out.read_text())
    for term in raw["fit"]["trainer"]["terms"].values():
        term.pop("stderr", None)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(raw))
    assert next(x for x in _show(old) if x.startswith("  train_fix ")).endswith("metrics fit")
    raw["fit"]["trainer"]["terms"]["train_fix"]["stderr"] = -1.0  # a hand edit
    old.write_text(json.dumps(raw))
    r = runner.invoke(app, ["profile", "show", str(old)])
    assert (r.exit_code, r.output) == (2, f"error: {old}: field 'fit.trainer.terms.train_fix.stderr': "
                                          "expected a number >= 0, got -1.0\n")


def test_the_error_of_train_fix_survives_the_pairs_column():
    # With --trace a row holds ~1e9 attention pairs beside 1 update: in the normal matrix the
    # updates column is ~1e-18 of the pairs', under the pseudo-inverse's cut-off, and the
    # vllm-bench formula on the raw columns gives train_fix an error of 4e-12 s. On columns
    # scaled to 1 it is the formula's error.
    rng = np.random.default_rng(0)
    tokens = rng.uniform(1e5, 4e5, 20)
    X = np.column_stack([np.ones(20), tokens, tokens**2 / 512 * rng.uniform(0.5, 1.5, 20)])
    t = X @ np.array([1.0, 4e-5, 4e-9]) * (1.0 + 0.02 * rng.standard_normal(20))
    w = 1.0 / t
    scale = X.max(axis=0)
    x = np.linalg.lstsq(X / scale * w[:, None], t * w, rcond=None)[0] / scale
    A, S = X * w[:, None], np.diag(1.0 / scale)
    r = A @ x - t * w
    by_hand = np.sqrt(np.diag(S @ np.linalg.inv(S @ A.T @ A @ S) @ S * (r @ r) / (20 - 3)))
    assert term_errors(X, t, w, x) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand[0] == pytest.approx(0.1352, abs=1e-4) and fit_stderr(X, t, w, x)[0] < 1e-9


def test_as_many_steps_as_terms_give_no_error_rather_than_0(tmp_path):
    """Two steps for two terms: the fit passes through both, its residual is 0 whatever the
    noise, and the formula's error would be 0 (train_fix 2.54 s for a true 2 here, at +2% and -1%
    noise, printed as "stderr 0"). No error is given instead, and a note says why."""
    f, out = tmp_path / "m.jsonl", tmp_path / "p.json"
    tokens = np.array([150_000.0, 250_000.0])
    times = (FIX + PER_TOKEN * tokens) * np.array([1.02, 0.99])
    f.write_text("".join(json.dumps({"step": s + 1, "data": {
        "timing_s/update_actor": float(times[s]), "perf/total_num_tokens": float(tokens[s]),
        "timing_s/update_weights": SYNC}}) + "\n" for s in range(2)))
    printed = _calibrate(f, out)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert [tr["terms"][k]["stderr"] for k in ("train_fix", "train_per_token")] == [None, None]
    assert abs(tr["terms"]["train_fix"]["value"] / FIX - 1) > 0.2  # the noise moved it, unseen
    note = ("2 step(s) for 2 terms: no step to spare, so the fit has no standard error and "
            "cannot say how well the terms are determined; record more steps")
    assert tr["notes"][0] == note and f"  {note}" in printed.splitlines()
    lines = _show(out)
    assert f"  {note}" in lines
    assert next(x for x in lines if x.startswith("  train_fix ")).endswith("metrics fit")
