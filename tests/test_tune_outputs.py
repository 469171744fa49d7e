"""What ``tune`` records in ``tune.json`` and what ``report`` and ``export`` read from it: the
Pareto front holds feasible trials only, the report shows tune's own best (per its
``--objective``) and draws it as a star.

Run: pytest tests/test_tune_outputs.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.export import export as export_policy
from sortedrl.metrics import rank_rate
from sortedrl.plot.report import bar_entries, pareto_figure, write_report
from sortedrl.sim.cluster import cluster_from_dict, load_cluster
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
    # (the policies' trials in the order of their names; best.per_policy in the --policy order)
    assert [(t["policy"], t["feasible"], t["summary"]["staleness_max"]) for t in d["trials"]] == [
        ("partial", False, 2), ("partial", False, 2), ("partial", False, 2), ("sync", True, 0)]
    assert d["best"] == {"overall": 3, "per_policy": {"sync": 3, "partial": None}}
    assert d["pareto"] == [3]  # was [0, 1, 2, 3]: the infeasible partial trials on it too
    assert d["pareto"] == pareto([t for t in d["trials"] if t["feasible"]])


def test_every_trial_has_gpus_and_gpu_hours_without_cluster_dimensions(bounded):
    _, d = bounded  # (docs/metrics.md said: only with --param cluster.*)
    assert {t["summary"]["gpus"] for t in d["trials"]} == {2}
    for t in d["trials"]:  # rounded to 6 decimals as every float (was 2 * makespan_s / 3600 unrounded)
        assert t["summary"]["gpu_hours"] == round(2 * t["summary"]["makespan_s"] / 3600, 6)
    assert (d["cluster"], d["cluster_fields"]) == (CLUSTER, load_cluster(CLUSTER).fields())


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
    assert (list(star.x), list(star.y)) == ([best["staleness_mean"]], [rank_rate(best)])
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


SHAPE = ("'best' must be an object {\"overall\": trial id, \"per_policy\": {policy: trial id}} "
         "(null: no feasible trial)")


@pytest.mark.parametrize("best, message", [
    (3, SHAPE), ({"overall": 0, "per_policy": {"a": "0"}}, SHAPE),
    # these said the shape was wrong, or drew a page (a review, 6 Dec 2026)
    ({"overall": 5, "per_policy": {}}, "'best' overall: no trial with id 5"),
    ({"overall": 0, "per_policy": {"b": 0}}, "'best' b: trial 0 is a trial of 'a', not of 'b'"),
])
def test_a_bad_best_is_one_error_line(tmp_path, best, message):
    trials = [{"id": 0, "policy": "a", "summary": summary(1.0, 0.0, 1.0)}]
    (tmp_path / "tune.json").write_text(json.dumps({"trials": trials, "best": best}))
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and r.stderr == f"error: {tmp_path / 'tune.json'}: {message}\n", r.output


# -- export: the tuned cluster, rebuilt from tune.json ----------------------------------------------

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def tune_on(tmp_path, cluster: Path) -> Path:
    out = tmp_path / "tune"
    r = runner.invoke(app, ["tune", "--synthetic", "math-16k", "--prompts", "16", "--steps", "2",
                            "--cluster", str(cluster), "--policy", "sync", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def exported(path: Path, *args: str) -> dict:
    r = runner.invoke(app, ["export", "verl", str(path), "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["overrides"]


def shape(overrides: dict) -> tuple:
    return tuple(overrides[f"actor_rollout_ref.rollout.{k}"]
                 for k in ("tensor_model_parallel_size", "max_num_seqs"))


def test_export_uses_the_tuned_cluster_file_not_the_preset_it_is_named_after(tmp_path):
    cluster = tmp_path / f"{CLUSTER}.json"  # its name is a preset's, its shape is not
    cluster.write_text(json.dumps({"preset": CLUSTER, "max_num_seqs": 64, "tp": 2}))
    assert shape(exported(tune_on(tmp_path, cluster))) == (2, 64)  # was (1, 256): the preset's


def test_export_of_a_tune_on_a_profile_needs_the_profile_no_more(tmp_path):
    profile = tmp_path / "p.json"
    shutil.copy(FIXTURES / "cpu-profile.json", profile)
    out = tune_on(tmp_path, profile)
    profile.unlink()  # was: error: unknown cluster preset 'p'
    got = exported(out)
    assert shape(got) == (1, 32) and got["trainer.n_gpus_per_node"] == 1


@pytest.mark.parametrize("spec", [CLUSTER, "h200-qwen2.5-32b-tp2-16gpu-disagg",
                                  str(FIXTURES / "cpu-profile.json")])
def test_a_clusters_recorded_fields_rebuild_it_exactly(spec):
    cl = load_cluster(spec)
    fields = json.loads(json.dumps(cl.fields()))  # as tune.json holds them
    assert cluster_from_dict(fields, "tune.json", "?") == cl


def test_an_older_tune_json_naming_a_cluster_file_is_one_error(tmp_path):
    path = tmp_path / "tune.json"
    tune = {"cluster": "p", "best": {"overall": 0}, "trials": [{"id": 0, "policy": "sync", "params": {}}]}
    path.write_text(json.dumps(tune))
    r = runner.invoke(app, ["export", "verl", str(path)])
    assert r.exit_code == 2 and r.stderr == (
        f"error: {path}: field 'cluster': 'p' is not a cluster preset, and this tune.json (from "
        "before tune recorded 'cluster_fields') does not say the cluster's fields: give its file "
        "with --cluster\n"), r.output
    assert shape(exported(path, "--cluster", CLUSTER)) == (1, 256)
    path.write_text(json.dumps({**tune, "cluster": CLUSTER}))  # a preset's name: as before
    assert exported(path)["trainer.n_gpus_per_node"] == 2


def test_bad_cluster_fields_are_one_error_naming_the_field(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "c", "cluster_fields": {"name": "c", "tp": "2"},
                                "best": {"overall": 0},
                                "trials": [{"id": 0, "policy": "sync", "params": {}}]}))
    r = runner.invoke(app, ["export", "verl", str(path)])
    assert r.exit_code == 2 and r.stderr == (
        f"error: {path}: field 'cluster_fields': field 'tp': expected int, got '2'\n"), r.output


# -- auto knobs: export writes what the run used; --set takes what auto prints -----------------------


def test_export_writes_the_async_sizes_the_trial_ran_with(tmp_path):
    out = tmp_path / "tune3"
    r = runner.invoke(app, ["tune", *SMALL, "--policy", "async", "--budget", "1", "--out", str(out),
                            "--json"])
    assert r.exit_code == 0, r.output
    trial = json.loads(r.stdout)["trials"][0]
    assert (trial["policy"], trial["params"]) == ("async", {})  # the defaults
    assert trial["summary"]["auto_params"] == {"batch": 512, "max_concurrent": 256}  # 64 x 8
    assert trial["summary"]["samples_total"] == 1536
    r = runner.invoke(app, ["export", "areal", str(out), "--group-size", "8", "--json"])
    got = json.loads(r.stdout)
    assert {k: got["overrides"][k] for k in ("train_dataset.batch_size", "rollout.consumer_batch_size",
                                             "rollout.max_concurrent_rollouts")} == {
        "train_dataset.batch_size": 64, "rollout.consumer_batch_size": 64,
        "rollout.max_concurrent_rollouts": 32}  # samples / n (was left at consumer_batch_size)
    assert got["caveats"][1:3] == [
        "batch=0 (derived): the simulated run resolved it to 512 samples",
        "max_concurrent=0 (derived): the simulated run resolved it to 256 samples"]
    r = runner.invoke(app, ["export", "verl", str(out), "--group-size", "8", "--json"])
    got = json.loads(r.stdout)["overrides"]
    assert (got["actor_rollout_ref.actor.ppo_mini_batch_size"], got["rollout.total_rollout_steps"],
            got["async_training.concurrent_samples_per_replica"]) == (64, 192, 32)  # 1 replica


def test_a_sortedrl_trial_exports_no_over_sample_rate_and_says_why(tmp_path):
    path = tmp_path / "tune.json"
    trial = {"id": 0, "policy": "sortedrl", "params": {},
             "summary": {"auto_params": {"oversubscribe": 1.5}, "updates": 1}}
    path.write_text(json.dumps({"cluster": CLUSTER, "best": {"overall": 0}, "trials": [trial], "trace_shape": {
        "group_size": 8, "prompts_per_step": 128, "steps": 20, "max_response_len": 16384}}))
    got = json.loads(runner.invoke(app, ["export", "verl", str(path), "--json"]).stdout)
    assert "actor_rollout_ref.rollout.over_sample_rate" not in got["overrides"]  # was 0.333333
    assert got["caveats"][:2] == [
        "over-sampling: verl has no over-sampling with early stop: actor_rollout_ref.rollout."
        "over_sample_rate is read by nothing since verl 0.7 (PR #4422 removed its only reader, the "
        "SGLang SPMD rollout, which launched the step's N requests and aborted the rest once "
        "(1 - rate) x N had finished: requests, not groups); this is verl's synchronous trainer, "
        "which waits for every response of a step",
        "verl has no sorted early updates: SortedRL's harvests of the shortest responses into "
        "updates of their own are not reproduced (this trial made 1 update in its 20 steps; verl's "
        "synchronous trainer makes one a step)"]


@pytest.mark.parametrize("sets, auto, derived", [
    ([], {"oversubscribe": 0.167}, " (derived: the simulated run's)"), (["oversubscribe=0.167"], {}, "")])
def test_an_oversubscription_below_one_says_how_to_cap_concurrency(sets, auto, derived):
    got = export_policy("verl", "sortedrl", sets, auto=auto)
    assert "actor_rollout_ref.rollout.over_sample_rate" not in got.overrides  # was 0.0
    assert got.caveats[2] == (f"oversubscribe=0.167{derived} < 1: the run kept fewer samples "
                              "admitted than the engines' slots; for the same concurrency set "
                              "max_num_seqs to 0.167 x its value")


def test_slime_partial_sizes_its_over_sampling_from_the_runs_prompts_per_step():
    assert export_policy("slime", "partial", [], auto={"rollout_batch": 64}).overrides[
        "--over-sampling-batch-size"] == 128
    assert export_policy("slime", "partial", [], prompts=32, auto={"rollout_batch": 64}).overrides[
        "--over-sampling-batch-size"] == 64  # --prompts first


def test_set_takes_the_auto_knobs_a_run_printed_and_repeats_the_run(tmp_path):
    # a small trace on 768 slots: the derived window is half the 32-prompt loading group (0.167x)
    args = ["simulate", "--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--cluster",
            "h100-llama3.1-8b-4gpu-disagg", "--policy", "sortedrl", "--json"]
    auto = json.loads(runner.invoke(app, [*args, "--out", str(tmp_path / "a")]).stdout)
    assert auto["auto_params"] == {"group_prompts": 32, "oversubscribe": 0.166667, "update_batch": 64}
    sets = [x for k, v in auto["auto_params"].items() for x in ("--set", f"{k}={v}")]
    r = runner.invoke(app, [*args, *sets, "--out", str(tmp_path / "b")])  # was: oversubscribe must be >= 1
    assert r.exit_code == 0, r.output
    given = json.loads(r.stdout)
    assert given.pop("params") == {**auto.pop("params"), **auto.pop("auto_params")}
    assert given.pop("auto_params") == {} and given == auto  # every figure the same


@pytest.mark.parametrize("total, shown", [("x", "'x'"), (0, "0"), (True, "True"), (1.5, "1.5")])
def test_a_bad_samples_total_is_one_error_naming_the_field(tmp_path, total, shown):
    path = tmp_path / "tune.json"
    trial = {"id": 0, "policy": "async", "params": {}, "summary": {"samples_total": total}}
    path.write_text(json.dumps({"cluster": CLUSTER, "best": {"overall": 0}, "trials": [trial]}))
    r = runner.invoke(app, ["export", "verl", str(path)])
    assert r.exit_code == 2 and r.stderr == (
        f"error: {path}: trial 0: field 'summary.samples_total': expected an integer >= 1, "
        f"got {shown}\n"), r.output


def test_bad_auto_params_are_one_error_naming_the_field(tmp_path):
    path = tmp_path / "tune.json"
    trial = {"id": 0, "policy": "sortedrl", "params": {}, "summary": {"auto_params": {"oversubscribe": "x"}}}
    path.write_text(json.dumps({"cluster": CLUSTER, "best": {"overall": 0}, "trials": [trial]}))
    r = runner.invoke(app, ["export", "verl", str(path)])
    assert r.exit_code == 2 and r.stderr == (
        f"error: {path}: trial 0: field 'summary.auto_params.oversubscribe': expected a number, "
        "got 'x'\n"), r.output


# -- the defaults are a trial of a grid too ------------------------------------------------------------


def tuned(tmp_path, *args: str) -> dict:
    r = runner.invoke(app, ["tune", *SMALL, *args, "--out", str(tmp_path / "t"), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_grid_without_the_defaults_gets_them_first(tmp_path):
    d = tuned(tmp_path, "--policy", "sortedrl", "--param", "sortedrl.oversubscribe=0.5,0.75")
    assert d["search"] == "grid"
    assert [t["params"] for t in d["trials"]] == [{}, {"oversubscribe": 0.5}, {"oversubscribe": 0.75}]
    rates = [t["summary"]["learnable_tokens_per_s"] for t in d["trials"]]
    assert rates[0] > max(rates[1:])  # here the defaults (1.5 (auto)) beat both values given
    assert d["best"]["overall"] == 0  # was trial 1 of the two: worse than doing nothing


def test_a_grid_holding_the_defaults_adds_none_and_a_plan_adds_them_per_shape(tmp_path):
    d = tuned(tmp_path, "--policy", "sync", "--param", "sync.minibatches=1,2",  # 1: the default
              "--policy", "sortedrl", "--param", "sortedrl.oversubscribe=1.5,2",
              "--param", "cluster.gpus=2,4")
    assert [(t["policy"], t["params"]) for t in d["trials"]] == [  # (policies by name)
        ("sortedrl", {"cluster.gpus": 2}), ("sortedrl", {"cluster.gpus": 4}),  # defaults per shape
        ("sortedrl", {"cluster.gpus": 2, "oversubscribe": 1.5}),
        ("sortedrl", {"cluster.gpus": 2, "oversubscribe": 2.0}),
        ("sortedrl", {"cluster.gpus": 4, "oversubscribe": 1.5}),
        ("sortedrl", {"cluster.gpus": 4, "oversubscribe": 2.0}),
        ("sync", {"cluster.gpus": 2, "minibatches": 1}), ("sync", {"cluster.gpus": 2, "minibatches": 2}),
        ("sync", {"cluster.gpus": 4, "minibatches": 1}), ("sync", {"cluster.gpus": 4, "minibatches": 2})]
    assert [t["summary"]["gpus"] for t in d["trials"]] == [2, 4, 2, 2, 4, 4, 2, 2, 4, 4]


def test_a_users_policy_with_a_knob_without_default_gets_no_defaults_trial(tmp_path, monkeypatch):
    (tmp_path / "ordered.py").write_text(
        "from dataclasses import dataclass\n"
        "from sortedrl.policies.sync import SyncParams, SyncPolicy\n"
        "@dataclass(frozen=True, kw_only=True)\n"
        "class P(SyncParams):\n"
        "    order: str\n"
        "class Ordered(SyncPolicy):\n"
        "    name = 'ordered'\n"
        "    Params = P\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    d = tuned(tmp_path, "--policy", "ordered:Ordered", "--param", "ordered:Ordered.order=a,b")
    assert [t["params"] for t in d["trials"]] == [{"order": "a"}, {"order": "b"}]  # no {}: no defaults


def test_the_default_directory_names_the_seed_as_simulate_and_compare_do(tmp_path, monkeypatch):
    """`tune --seed 1` then `--seed 2` went to one runs/tune-TRACE-CLUSTER, the second refused."""
    monkeypatch.chdir(tmp_path)
    for seed in ("0", "1", "2"):
        r = runner.invoke(app, ["tune", *SMALL, "--policy", "sync", "--budget", "1", "--seed", seed])
        assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        f"tune-math-16k-{CLUSTER}", f"tune-math-16k-{CLUSTER}-seed1", f"tune-math-16k-{CLUSTER}-seed2"]


def test_export_of_a_trial_writes_the_batch_its_trace_had(tmp_path):
    """tune.json records its trace's shape; export of a trial wrote no rollout.n without
    --group-size (verl's default is 1: no GRPO group) and took any --prompts silently."""
    out = tmp_path / "tune4"
    r = runner.invoke(app, ["tune", *SMALL, "--policy", "sync", "--budget", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "tune.json").read_text())["trace_shape"] == {
        "group_size": 8, "prompts_per_step": 64, "steps": 3, "max_response_len": 16384}
    r = runner.invoke(app, ["export", "verl", str(out), "--json"])
    assert (r.exit_code, r.stderr) == (0, "")
    got = json.loads(r.stdout)["overrides"]
    assert (got["actor_rollout_ref.rollout.n"], got["data.train_batch_size"]) == (8, 64)
    r = runner.invoke(app, ["export", "verl", str(out), "--group-size", "16"])
    assert r.exit_code == 0
    assert r.stderr == (f"warning: --group-size 16: {out / 'tune.json'}: trial 0 ran 8 (group_size); the export "
                        "is of another run\n")
    assert "actor_rollout_ref.rollout.n=16" in r.stdout
    # a trial whose rollout_batch is its own prompts a step: that batch, not the trace's
    out = tmp_path / "tune5"
    r = runner.invoke(app, ["tune", *SMALL, "--policy", "sync", "--param", "sync.rollout_batch=32",
                            "--budget", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(runner.invoke(app, ["export", "verl", str(out), "--trial", "1", "--json"]).stdout)
    assert (got["params"]["rollout_batch"], got["overrides"]["data.train_batch_size"]) == (32, 32)


def test_export_of_a_multi_turn_trial_says_it_sets_no_turns(tmp_path):
    """An agentic trial's export said nothing of its tool calls: a caveat says the settings hold
    no multi-turn rollout, with the trial's calls a trajectory (its summary's)."""
    out = tmp_path / "agentic"
    r = runner.invoke(app, ["tune", "--synthetic", "agentic-retool", "--prompts", "8", "--steps", "2",
                            "--cluster", "h100-llama3.1-8b-1gpu", "--policy", "sync", "--budget", "1",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "tune.json").read_text())["trials"][0]["summary"]
    per = summary["tool_calls"] / summary["samples_total"]
    got = json.loads(runner.invoke(app, ["export", "verl", str(out), "--json"]).stdout)
    assert got["caveats"][-1] == (f"multi-turn: the trial's trajectories made {per:.2f} tool calls each; these "
                                  "settings hold no multi-turn rollout or tool server: configure verl's own")
    assert per > 1
