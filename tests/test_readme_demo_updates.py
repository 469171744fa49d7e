"""The README's "Fewer, larger updates" paragraph, as the demo's compare gives it.

On the demo's trace and cluster `sortedrl` trains in 2 updates to `sync`'s 4 (its loading
group is the whole trace), and at equal updates (`group_prompts=128`: two loading groups) its
makespan and ratio to `sync` are the ones the README quotes.

Run: pytest tests/test_readme_demo_updates.py
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
DEMO = ["compare", "--trace", str(ROOT / "sortedrl/traces/data/math-16k.jsonl"), "--policy", "sync",
        "--policy", "sortedrl", "--cluster", "h100-llama3.1-8b-2gpu"]


def summaries(out: Path, *sets: str) -> dict:
    r = CliRunner().invoke(app, [*DEMO, *sets, "--out", str(out)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    return {row["label"]: row for row in json.loads((out / "compare.json").read_text())}


def test_the_readme_quotes_the_updates_and_the_equal_update_makespan(tmp_path):
    readme = " ".join((ROOT / "README.md").read_text().split())
    default = summaries(tmp_path / "default")
    assert (default["sortedrl"]["updates"], default["sync"]["updates"]) == (2, 4)
    assert "`sortedrl` trains in 2 updates where `sync` trains in 4" in readme
    equal = summaries(tmp_path / "equal", "--set", "sortedrl.group_prompts=128")
    assert (equal["sortedrl"]["updates"], equal["sync"]["updates"]) == (4, 4)
    sortedrl, sync = equal["sortedrl"], equal["sync"]
    ratio = sortedrl["learnable_tokens_per_s"] / sync["learnable_tokens_per_s"]
    quoted = (f"gives a makespan of {sortedrl['makespan_s']:,.1f} s against `sync`'s {sync['makespan_s']:,.1f} s "
              f"({ratio:.2f}x its learnable tokens/s")
    assert quoted in readme
    assert quoted.startswith("gives a makespan of 883.7 s against `sync`'s 1,062.2 s (1.24x")
