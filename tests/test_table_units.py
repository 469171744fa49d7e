"""The unit a table prints beside a summary field is the one docs/metrics.md gives it.

The key-value tables of `simulate` and `compare --wide` printed `learnable_tokens`,
`learnable_tokens_per_s`, `offload_s` and `regen_sigma` with an empty unit cell, where the
docs give tokens, tokens/s, s and log-tokens.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.tables import UNITS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHORT = {"tokens": "tok", "tokens/s": "tok/s", "log-tokens": "log-tokens", "s": "s", "versions": "versions",
         "ratio": "ratio", "count": "count"}


def documented_units() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]*) \|", DOCS.read_text(encoding="utf-8"), re.M)
    return {key: unit.strip() for key, unit in rows}


def test_every_unit_a_table_prints_is_the_documented_one():
    docs = documented_units()
    assert {k: SHORT.get(docs.get(k, "?"), "?") for k in UNITS} == UNITS


def test_every_summary_field_with_a_documented_unit_prints_it(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "agentic-retool", "--policy", "sync", "--steps", "1", "--prompts", "4",
                                 "--json", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert "tool_s" in summary and "learnable_tokens" in summary  # (the agentic fields too)
    docs = documented_units()
    with_unit = {k for k in summary if docs.get(k) in SHORT}
    assert with_unit - set(UNITS) == set()


def test_validate_prints_the_bubble_in_percent_as_documented(tmp_path):
    """validate printed the bubble as a ratio (0.763) where every other table prints %."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "run-sync", run)
    r = CliRunner().invoke(app, ["validate", str(run), "--profile", str(FIXTURES / "cpu-profile.json"),
                                 "--wide"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    header = re.split(r"\s{2,}", lines[1].strip())
    assert header[-2:] == ["real bubble %", "sim bubble %"]
    steps = json.loads((run / "validate.json").read_text())["steps"]
    rows = [line.split() for line in lines[3:3 + len(steps)]]
    assert [row[-2:] for row in rows] == [[f"{100 * s['real_bubble_ratio']:.1f}", f"{100 * s['sim_bubble_ratio']:.1f}"]
                                          for s in steps]
    assert rows[0][-2:] == ["76.8", "76.3"]  # was 0.768, 0.763
    assert "| `real/sim bubble %` (validate) | % |" in DOCS.read_text(encoding="utf-8")
