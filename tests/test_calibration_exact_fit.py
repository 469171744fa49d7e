"""A benchmark fit with no file to spare (five files without per-request latencies for the five
engine terms) has no residual left to measure the noise with (0 where no term sits at its bound
0), so the standard-error formula gave a figure from nothing, 0 for a fit through every file, and
flagged nothing. It gives no error instead, and says why."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from sortedrl.calibration.bench_file import read_bench
from sortedrl.calibration.vllm_bench import fit_bench
from sortedrl.cli import app
from sortedrl.sim.cluster import preset
from tests.test_calibration_vllm_bench import PRESET, lengths, synthetic

runner = CliRunner()
NOTE = ("5 file(s) for as many terms: no file to spare, so the fit has no standard error and "
        "cannot say how well the terms are determined; record more files, or save with --save-detailed")


def noisy_files(tmp_path, levels):
    """Duration-only files of known terms, each duration off by up to 3% (fixed draws)."""
    files = [synthetic(tmp_path, f"c{c}.json", *lengths(c, 10 + 7 * c), c, detailed=False) for c in levels]
    for p, off in zip(files, np.random.default_rng(0).uniform(-0.03, 0.03, len(files)), strict=True):
        raw = json.loads(p.read_text())
        raw["duration"] *= 1.0 + off
        p.write_text(json.dumps(raw))
    return files


def test_five_files_for_five_terms_give_no_error_and_a_note(tmp_path):
    files = noisy_files(tmp_path, (1, 2, 4, 8, 16))
    fit = fit_bench([read_bench(p) for p in files], preset(PRESET))
    assert fit["exact"] and all(t["stderr"] is None for t in fit["terms"].values())
    assert fit["host_stderr_s"] is None and fit["uncertain"] == [] and fit["full_batch"]["uncertain"] == {}
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *map(str, files), "--cluster", PRESET,
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert f"  {NOTE}" in r.output.splitlines()
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert shown.exit_code == 0 and f"  {NOTE}" in shown.output.splitlines()


def test_a_sixth_file_gives_errors_again(tmp_path):
    files = noisy_files(tmp_path, (1, 2, 3, 4, 8, 16))
    fit = fit_bench([read_bench(p) for p in files], preset(PRESET))
    assert "exact" not in fit
    assert all(isinstance(t["stderr"], float) and t["stderr"] > 0 for t in fit["terms"].values())
