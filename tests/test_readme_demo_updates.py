"""The README's figures that a rerun gives: "Fewer, larger updates" and the tune example.

On the demo's trace and cluster `sortedrl` trains in 2 updates to `sync`'s 4 (its loading
group is the whole trace), and at equal updates (`group_prompts=128`: two loading groups) its
makespan and ratio to `sync` are the ones the README quotes. The tune example's best trials,
its front, and the printed float that reruns a trial, as tune samples them now.

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


TUNE = ["tune", "--synthetic", "math-16k", "--prompts", "256", "--steps", "8", "--cluster", "h100-llama3.1-8b",
        "--policy", "sync", "--policy", "sortedrl", "--param", "sync.minibatches=1,2,4",
        "--param", "sortedrl.mode=on_policy,partial", "--param", "sortedrl.update_batch=128:2048:log",
        "--param", "sortedrl.oversubscribe=1:4", "--param", "sortedrl.max_span=1:3",
        "--max-staleness", "2", "--budget", "48"]


def test_the_readme_quotes_its_tune_example_as_it_runs_now(tmp_path):
    """The README's tune paragraph: the best trials, the front, and that the printed float
    reruns the trial (tune samples floats at 4 significant digits of the range's width)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    r = CliRunner().invoke(app, [*TUNE, "--out", str(tmp_path / "tune")], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    tune = json.loads((tmp_path / "tune" / "tune.json").read_text())
    trials = {t["id"]: t for t in tune["trials"]}
    feasible = sorted((t for t in tune["trials"] if t["feasible"]),
                      key=lambda t: -t["summary"]["learnable_tokens_per_s"])
    best = feasible[0]
    assert (len(trials), best["policy"], best["params"]) == (
        47, "sortedrl", {"max_span": 2, "mode": "partial", "oversubscribe": 1.638, "update_batch": 1797})
    s = best["summary"]
    assert (f"{s['learnable_tokens_per_s']:,.0f}", f"{s['staleness_mean']:.2f}", s["staleness_max"], s["updates"]) == (
        "12,990", "0.33", 2, 6)
    assert ("`oversubscribe=1.638` (a loading group of 1,024 prompts), `max_span=2`, 12,990 learnable tokens/s "
            "at staleness 0.33 mean, 2 at most, in 6 updates against `sync`'s 8") in readme
    twelve = feasible[:12]
    assert all(t["params"]["mode"] == "partial" and t["params"]["max_span"] == 2 for t in twelve)
    spread = sorted(t["params"]["oversubscribe"] for t in twelve)
    assert f"`oversubscribe` {spread[0]}-{spread[-1]}" in readme
    on_policy = next(t for t in feasible if t["params"]["mode"] == "on_policy")
    assert (on_policy["params"]["update_batch"], on_policy["params"]["oversubscribe"],
            round(on_policy["summary"]["learnable_tokens_per_s"]), on_policy["summary"]["staleness_max"]) == (
        1797, 1.638, 12403, 0)
    assert "`oversubscribe=1.638`: 12,403 at staleness 0) heads the Pareto front of eight" in readme
    front = tune["pareto"]
    assert len(front) == 8 and front[0] == on_policy["id"] and tune["best"]["overall"] == best["id"]
    # the printed value reruns the trial
    sets = [a for k, v in best["params"].items() for a in ("--set", f"{k}={v}")]
    r = CliRunner().invoke(app, ["simulate", *TUNE[1:9], "--policy", "sortedrl", *sets, "--json",
                                 "--out", str(tmp_path / "rerun")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["learnable_tokens_per_s"] == s["learnable_tokens_per_s"]
    assert trials[37]["params"]["oversubscribe"] == 1.919
    assert round(trials[37]["summary"]["learnable_tokens_per_s"]) == 12860
    assert "(12,860 at 1.919, as it is sampled now)" in readme
