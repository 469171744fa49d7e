"""What ``tune`` records in ``tune.json`` and what ``report`` and ``export`` read from it: the
Pareto front holds feasible trials only, the report shows tune's own best (per its
``--objective``) and draws it as a star.

Run: pytest tests/test_tune_outputs.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.plot.report import bar_entries, pareto_figure, write_report
from sortedrl.tune.search import pareto

runner = CliRunner()
CLUSTER = "h100-llama3.1-8b-2gpu"
SMALL = ["--synthetic", "math-16k", "--prompts", "64", "--steps", "3", "--cluster", CLUSTER]


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """sync and partial under --max-staleness 1: every partial trial has staleness_max 2."""
    out = tmp_path_factory.mktemp("tune") / "tune4"
    r = runner.invoke(app, ["tune", *SMALL, "--policy", "sync", "--policy", "partial",
                            "--param", "partial.over_sample=1.5,2,3", "--max-staleness", "1",
                            "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def test_the_pareto_front_holds_feasible_trials_only(bounded):
    _, d = bounded
    assert [(t["policy"], t["feasible"], t["summary"]["staleness_max"]) for t in d["trials"]] == [
        ("sync", True, 0), ("partial", False, 2), ("partial", False, 2), ("partial", False, 2)]
    assert d["best"] == {"overall": 0, "per_policy": {"sync": 0, "partial": None}}
    assert d["pareto"] == [0]  # was [0, 1, 2, 3]: the infeasible partial trials on it too
    assert d["pareto"] == pareto([t for t in d["trials"] if t["feasible"]])


def test_the_report_shows_no_infeasible_trial_as_best(bounded):
    out, _ = bounded
    entries, source = bar_entries(out)
    assert [(e["label"], e["staleness_max"]) for e in entries] == [("sync (best of 1)", 0)]
    assert source == (f"best trial per policy in {out / 'tune.json'} (tune's best by "
                      "learnable_tokens_per_s); no feasible trial for: partial")
    text = write_report(out).read_text()
    assert "partial (best of 3)" not in text and ">sync (best of 1)</td>" in text


def summary(tps: float, staleness: float, makespan: float) -> dict:
    return {"tokens_per_s": tps, "learnable_tokens_per_s": tps, "staleness_mean": staleness,
            "staleness_max": staleness, "makespan_s": makespan, "bubble_ratio": 0.5}


def test_the_report_shows_tunes_best_by_its_objective(tmp_path):
    # tune --objective makespan_s: trial 1 is the fastest; trial 0 has the most tokens/s
    trials = [{"id": 0, "policy": "sortedrl", "params": {}, "feasible": True,
               "summary": summary(900.0, 0.0, 708.8)},
              {"id": 1, "policy": "sortedrl", "params": {"oversubscribe": 2.0}, "feasible": True,
               "summary": summary(800.0, 0.0, 667.4)}]
    tune = {"objective": "makespan_s", "trials": trials, "pareto": [0],
            "best": {"overall": 1, "per_policy": {"sortedrl": 1}}}
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    entries, source = bar_entries(tmp_path)
    assert [(e["label"], e["makespan_s"]) for e in entries] == [("sortedrl (best of 2)", 667.4)]
    assert source.endswith("(tune's best by makespan_s)")


def test_the_report_draws_tunes_best_as_a_star(bounded):
    _, d = bounded
    (star,) = [t for t in pareto_figure(d).data if t.name == "best"]
    best = d["trials"][d["best"]["overall"]]["summary"]
    assert (list(star.x), list(star.y)) == ([best["staleness_mean"]], [best["tokens_per_s"]])
    assert star.marker.symbol == "star"


def test_an_older_front_with_infeasible_trials_is_recomputed_over_feasible_ones(tmp_path):
    trials = [{"policy": "a", "feasible": True, "summary": summary(10.0, 0.0, 1.0)},
              {"policy": "a", "feasible": False, "summary": summary(20.0, 1.0, 1.0)},
              {"policy": "a", "feasible": True, "summary": summary(15.0, 1.5, 1.0)}]
    fig = pareto_figure({"trials": trials, "pareto": [0, 1]})  # trial 1 dominated trial 2
    front = next(t for t in fig.data if t.name == "Pareto front")
    assert (list(front.x), list(front.y)) == ([0.0, 1.5], [10.0, 15.0])
    (star,) = [t for t in fig.data if t.name == "best"]  # no 'best': the top feasible trial
    assert (list(star.x), list(star.y)) == ([1.5], [15.0])


@pytest.mark.parametrize("best", [3, {"overall": 5, "per_policy": {}},
                                  {"overall": 0, "per_policy": {"a": "0"}}])
def test_a_bad_best_is_one_error_line(tmp_path, best):
    trials = [{"id": 0, "policy": "a", "summary": summary(1.0, 0.0, 1.0)}]
    (tmp_path / "tune.json").write_text(json.dumps({"trials": trials, "best": best}))
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and r.stderr == (
        f"error: {tmp_path / 'tune.json'}: 'best' must be an object {{\"overall\": trial id, "
        "\"per_policy\": {policy: trial id}} (null: no feasible trial)\n"), r.output
