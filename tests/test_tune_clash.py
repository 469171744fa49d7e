"""``sortedrl tune`` with ``--param`` values a policy refuses in some combinations (knobs that
clash with each other, or with the trace): such a combination is skipped with its reason, naming
``--param`` (it said ``--set``, which tune has not, and aborted the whole tune); a policy that
refuses every combination is refused before any trial runs; a tune whose every trial is skipped
is one error line (it was a ValueError traceback).

Run: pytest tests/test_tune_clash.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import write_trace
from tests.conftest import make_trace

runner = CliRunner()
TINY = {"preset": "h100-llama3.1-8b", "gpus": 1, "max_num_seqs": 4, "kv_budget_tokens": 10000,
        "kv_watermark": 0.0, "costs": {"step_fixed_s": 1.0, "weight_read_s": 1.0, "kv_read_s_per_token": 0.0,
                                       "compute_s_per_seq": 0.0, "prefill_s_per_token": 0.0,
                                       "prefill_s_per_pair": 0.0, "train_per_token": 0.0, "train_fix": 10.0,
                                       "sync_s": 5.0}}
NO_REWARD = ("t.jsonl: policy sortedrl: filter_groups=true needs a reward column, "
             "and this trace has none")


@pytest.fixture()
def tiny(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace([3, 5]), trace)  # group size 1, no reward column
    cluster = tmp_path / "tiny.json"
    cluster.write_text(json.dumps(TINY))
    return ["--trace", str(trace), "--cluster", str(cluster)]


def tune(*args):
    return runner.invoke(app, ["tune", *args])


def test_combinations_that_clash_are_skipped_and_the_tune_carries_on(tiny, tmp_path):
    out = tmp_path / "o"
    r = tune(*tiny, "--policy", "sortedrl", "--param", "sortedrl.filter_groups=true,false",
             "--param", "sortedrl.harvest=groups,samples", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "--set" not in r.output
    assert "2 trials skipped (cannot run: see tune.json 'skipped')" in r.stdout
    d = json.loads((out / "tune.json").read_text())
    assert [t["params"] for t in d["trials"]] == [{"filter_groups": False, "harvest": "groups"},
                                                  {"filter_groups": False, "harvest": "samples"}]
    assert [t["id"] for t in d["trials"]] == [0, 1]
    assert d["skipped"] == [
        {"policy": "sortedrl", "params": {"filter_groups": True, "harvest": "groups"},
         "reason": f"--param sortedrl.filter_groups=true, sortedrl.harvest=groups: {NO_REWARD}"},
        {"policy": "sortedrl", "params": {"filter_groups": True, "harvest": "samples"},
         "reason": "--param sortedrl.filter_groups=true, sortedrl.harvest=samples: policy "
                   "sortedrl: filter_groups needs harvest=groups"}]


@pytest.mark.parametrize("params, line", [
    (["sortedrl.filter_groups=true", "sortedrl.harvest=samples"],  # the knobs clash
     "error: --param sortedrl.filter_groups=true, sortedrl.harvest=samples: policy sortedrl: "
     "filter_groups needs harvest=groups\n"),
    (["sortedrl.filter_groups=true", "sortedrl.harvest=groups,samples"],  # with the trace, too
     f"error: --param sortedrl.filter_groups=true, sortedrl.harvest=groups: {NO_REWARD} (each of "
     "sortedrl's 2 --param combinations clashes)\n"),
])
def test_a_policy_refusing_every_combination_is_refused_before_any_trial(tiny, tmp_path, monkeypatch,
                                                                         params, line):
    def no_simulation(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("sortedrl.tune.executors.simulate", no_simulation)
    out = tmp_path / "o"
    r = tune(*tiny, "--policy", "sortedrl", *(a for p in params for a in ("--param", p)),
             "--out", str(out))
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == line, r.output
    assert not out.exists()


def test_a_sampled_space_skips_the_clashing_trials_the_same_on_local_processes(tiny, tmp_path):
    # responses above the trace's group size (1) clash with the trace; eta's range is continuous,
    # so the space is sampled, not checked up front; the defaults trial always runs
    args = [*tiny, "--policy", "tail_batch", "--param", "tail_batch.responses=0:3",
            "--param", "tail_batch.eta=1:2", "--budget", "5", "--json"]
    inline = tune(*args, "--out", str(tmp_path / "i"))
    assert inline.exit_code == 0, inline.output
    d = json.loads(inline.stdout)
    assert d["search"] == "qmc+refine" and d["trials"][0]["params"] == {}
    assert d["skipped"] and all(s["params"]["responses"] > 1 for s in d["skipped"])
    for s in d["skipped"]:
        p = s["params"]
        assert s["reason"] == (f"--param tail_batch.eta={p['eta']}, tail_batch.responses="  # (by key)
                               f"{p['responses']}: policy tail_batch: responses ({p['responses']}) is "
                               "above the trace's group size (1)")
    assert all(t["params"].get("responses", 0) <= 1 for t in d["trials"])
    assert len(d["trials"]) + len(d["skipped"]) == 5
    local = tune(*args, "--workers", "2", "--out", str(tmp_path / "l"))
    assert local.exit_code == 0, local.output
    assert local.stdout == inline.stdout


def test_a_tune_whose_every_trial_is_skipped_is_one_error(tiny, tmp_path):
    out = tmp_path / "o"  # one GPU holds no tp=2 or tp=3 engine: both shapes skipped
    r = tune(*tiny, "--policy", "sync", "--param", "cluster.tp=2,3", "--out", str(out))
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: no trial could run (2 skipped); the first: {tmp_path}/tiny.json[tp=2]: "
                        "field 'tp': an engine of tp=2 needs 2 GPUs, and the cluster has 1\n"), r.stderr
    assert not out.exists()


def test_a_cluster_plan_counts_skipped_shapes_and_knobs_as_trials(tiny, tmp_path):
    out = tmp_path / "o"  # tp=2: a shape that cannot run; filter_groups=true: knobs refused
    r = tune(*tiny, "--policy", "sortedrl", "--param", "cluster.tp=1,2",
             "--param", "sortedrl.filter_groups=false,true", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout.count("trials skipped") == 1  # in the plan only, not again above it
    assert "3 trials skipped (cannot run: see tune.json 'skipped')" in r.stdout  # was "3 shapes"
    d = json.loads((out / "tune.json").read_text())
    assert [t["params"] for t in d["trials"]] == [{"cluster.tp": 1, "filter_groups": False}]
    assert [(s["params"], s["reason"]) for s in d["skipped"]] == [
        # (it blamed 'train_gpus', which a colocated cluster does not use; it named the file "tiny")
        ({"cluster.tp": 2, "filter_groups": False}, f"{tmp_path}/tiny.json[tp=2]: field 'tp': an engine "
         "of tp=2 needs 2 GPUs, and the cluster has 1"),
        ({"cluster.tp": 2, "filter_groups": True}, f"{tmp_path}/tiny.json[tp=2]: field 'tp': an engine "
         "of tp=2 needs 2 GPUs, and the cluster has 1"),
        ({"cluster.tp": 1, "filter_groups": True}, f"--param sortedrl.filter_groups=true: {NO_REWARD}")]


@pytest.mark.parametrize("ray", ["local", "auto"])
def test_workers_and_ray_together_are_one_error_line(tiny, tmp_path, ray):
    """--ray was taken and --workers silently ignored (make_executor checks ray first)."""
    out = tmp_path / "o"
    r = tune(*tiny, "--policy", "sync", "--workers", "2", "--ray", ray, "--out", str(out))
    assert (r.exit_code, r.stdout, r.stderr) == (
        2, "", f"error: --workers 2 and --ray {ray}: give one of them (--ray runs the trials on a Ray "
               "cluster's workers, --workers in local processes)\n")
    assert not out.exists()
