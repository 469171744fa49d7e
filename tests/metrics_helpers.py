"""Helpers shared by the tests of ``calibrate --from-metrics`` on the frameworks' layouts: the
fixtures' folder and token counts, a ``calibrate`` call returning its exit code and lines, and
a fit's term values."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).parent / "fixtures" / "metrics"
PRESET = "h100-llama3.1-8b"  # colocated, 8 GPUs
TOKENS = [120000, 180000, 150000, 240000, 210000, 90000]  # of the fixtures' steps, in order
runner = CliRunner()


def calibrate(*args: str) -> tuple[int, list[str]]:
    r = runner.invoke(app, ["calibrate", *args])
    return r.exit_code, r.output.splitlines()


def values(fit: dict) -> dict[str, float]:
    return {k: v["value"] for k, v in fit["terms"].items()}


def trainer_fit(out: Path, *args: str) -> dict:
    """``calibrate ARGS --cluster PRESET --out OUT``, which must succeed: the profile's trainer fit."""
    code, lines = calibrate(*args, "--cluster", PRESET, "--out", str(out))
    assert code == 0, lines
    return json.loads(out.read_text())["fit"]["trainer"]
