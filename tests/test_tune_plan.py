"""Cluster planning in `tune`: `--param cluster.*` on a small grid against hand-computed
makespans, the Pareto front of wall-clock against GPU-hours (and staleness) and its knee."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.tune.executors import Executor
from sortedrl.tune.search import TuneConfig, Tuner, cluster_front, knee
from sortedrl.tune.space import parse_spaces
from tests.conftest import make_trace, tiny_cluster


def test_a_split_that_changes_nothing_is_one_trial() -> None:
    """`cluster.train_gpus` ran a colocated policy once a value, identical runs shown as shapes,
    and 0 (the default quarter) as a trial beside the value it stands for (a review, 6 Dec
    2026): sync is one trial here, async one a split it can run."""
    trace = make_trace([3, 3, 3, 3, 5, 5, 5, 5], group_size=4)
    spaces = parse_spaces(["sync", "async"], ["cluster.train_gpus=0,1,2", "cluster.gpus=4"])
    result = Tuner(spaces, TuneConfig(objective="makespan_s", budget=16),
                   Executor(trace, tiny_cluster(max_num_seqs=4), 0)).run()
    ran = [(t["policy"], t["params"]) for t in result["trials"]]
    assert ran == [("async", {"cluster.gpus": 4, "cluster.train_gpus": 1}),  # (policies by name)
                   ("async", {"cluster.gpus": 4, "cluster.train_gpus": 2}),
                   ("sync", {"cluster.gpus": 4})], ran
    assert result["skipped"] == []


def test_small_grid_against_hand_computed_makespans() -> None:
    # Four 3-token samples, sync, one sequence per engine; each sample: prefill 2 s (step_fixed_s + weight_read_s)
    # and 2 decode steps of 2 s = 6 s; then train 10 s (tests/conftest.py costs; no sync after
    # the last update). E engines (gpus / tp) take ceil(4 / E) samples one after another:
    # E=1: 24 + 10 = 34 s; E=2: 12 + 10 = 22 s; E=3: 2 samples on one engine: 22 s; E=4: 16 s.
    trace = make_trace([3, 3, 3, 3])
    spaces = parse_spaces(["sync"], ["cluster.gpus=1,2,3,4", "cluster.tp=1,2"])
    result = Tuner(spaces, TuneConfig(objective="makespan_s", budget=16),
                   Executor(trace, tiny_cluster(max_num_seqs=1), 0)).run()
    got = {(t["params"]["cluster.gpus"], t["params"]["cluster.tp"]):
           (t["summary"]["makespan_s"], t["summary"]["gpu_hours"]) for t in result["trials"]}
    gpu_s = {(1, 1): (34.0, 34.0), (2, 1): (22.0, 44.0), (3, 1): (22.0, 66.0),
             (4, 1): (16.0, 64.0), (2, 2): (34.0, 68.0), (4, 2): (22.0, 88.0)}
    # GPU-seconds in hours, rounded to 6 decimals as every float tune writes
    assert got == {k: (m, round(s / 3600, 6)) for k, (m, s) in gpu_s.items()}
    # gpus 1 and 3 do not split into tp=2 engines: skipped, never simulated
    assert [(s["params"]["cluster.gpus"], s["params"]["cluster.tp"]) for s in result["skipped"]] \
        == [(1, 2), (3, 2)]
    assert "do not split into tp=2 engines" in result["skipped"][1]["reason"]
    trials = result["trials"]
    front = [(trials[i]["params"]["cluster.gpus"], trials[i]["params"]["cluster.tp"])
             for i in result["cluster_pareto"]["front"]]
    assert front == [(4, 1), (2, 1), (1, 1)]  # fastest first
    # scaled to [0, 1]: (22 s, 44 GPU-s) lies 1/3 + 1/3 from the corner, 1/3 below the line
    k = result["cluster_pareto"]["knee"]
    assert (trials[k]["params"]["cluster.gpus"], trials[k]["params"]["cluster.tp"]) == (2, 1)
    assert trials[result["best"]["overall"]]["params"]["cluster.gpus"] == 4  # fastest


def test_front_keeps_staleness_as_third_objective() -> None:
    def trial(i, wall, gpu_h, stale):
        return {"id": i, "feasible": True,
                "summary": {"makespan_s": wall, "gpu_hours": gpu_h, "staleness_mean": stale}}

    trials = [trial(0, 10, 4, 1.0), trial(1, 10, 4, 0.0), trial(2, 12, 5, 0.0),
              trial(3, 20, 2, 0.5), trial(4, 11, 6, 2.0)]
    assert cluster_front(trials) == [1, 3]  # 0 loses to 1; 2 loses to 1; 4 loses to 1
    assert cluster_front([*trials[:3], trial(5, 9, 9, 0.0)]) == [5, 1]
    assert knee(trials, [1, 3]) is None  # two points: no interior member, no knee
    straight = [trial(0, 10, 30, 0), trial(1, 20, 20, 0), trial(2, 30, 10, 0)]
    assert knee(straight, [0, 1, 2]) is None  # on the line: no knee
    bent = [trial(0, 10, 30, 0), trial(1, 12, 12, 0), trial(2, 30, 10, 0)]
    assert knee(bent, [0, 1, 2]) == 1


@pytest.mark.parametrize("param, message", [
    ("cluster.nodes=2", "KEY one of gpus, train_gpus, tp, max_num_seqs, placement"),
    ("cluster.gpus=0,8", "gpus must be >= 1"),
    ("cluster.placement=hybrid", "unknown placement 'hybrid'"),
    ("cluster.tp=a", "tp takes integers"),
])
def test_bad_cluster_params(param, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spaces(["sync"], [param])


def test_tune_cli_plans_and_reports(tmp_path) -> None:
    out = tmp_path / "tune"
    r = CliRunner().invoke(app, [
        "tune", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "4", "--policy", "sync",
        "--param", "cluster.gpus=2,4,8", "--param", "cluster.placement=colocated,disaggregated",
        "--cluster", "h100-llama3.1-8b", "--objective", "makespan_s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Cluster plan" in r.output
    result = json.loads((out / "tune.json").read_text())
    plan = result["cluster_pareto"]
    assert plan["knee"] is None or plan["knee"] in plan["front"]
    assert len(result["trials"]) == 6
    walls = {t["id"]: t["summary"]["makespan_s"] for t in result["trials"]}
    hours = {t["id"]: t["summary"]["gpu_hours"] for t in result["trials"]}
    for t in result["trials"]:  # every trial off the front is beaten by one on it
        if t["id"] not in plan["front"]:
            assert any(walls[i] <= walls[t["id"]] and hours[i] <= hours[t["id"]] for i in plan["front"])
    r = CliRunner().invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text()
    assert 'id="plan"' in page and "Cluster planning" in page


def test_tune_table_shows_each_trials_own_shape(tmp_path) -> None:
    r = CliRunner().invoke(app, [
        "tune", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "4", "--policy", "sync",
        "--policy", "one_step_off", "--param", "cluster.gpus=4", "--cluster", "h100-llama3.1-8b",
        "--out", str(tmp_path / "tune")])
    assert r.exit_code == 0, r.output
    assert "4 shared" in r.output and "3+1" in r.output  # not the base cluster's 8 GPUs
    assert "8 shared" not in r.output
