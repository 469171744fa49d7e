"""``sortedrl export`` of a tune.json that is not as tune wrote it (hand-edited, or from someone
else): every field read from it is checked, and a bad one is one error line naming the file and
the field, exit 2. A trial's knobs were blamed on ``--set`` (not given); a ``cluster_pareto``
that is not an object was an AttributeError traceback; ``best.overall: true`` exported trial 1.

Run: pytest tests/test_export_fields.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

TRIALS = [{"id": 0, "policy": "sync", "params": {}}, {"id": 1, "policy": "sync", "params": {}}]


def export(path, *args):
    return CliRunner().invoke(app, ["export", "verl", str(path), *args])


def one_error(r, line: str) -> None:
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == line + "\n", r.output


@pytest.mark.parametrize("params, message", [
    ({"minibatches": "two"}, "trial 0: field 'params' minibatches=two: expected an integer"),
    ({"minibatches": 2.5}, "trial 0: field 'params' minibatches=2.5: expected an integer"),
    ({"nope": 1}, "trial 0: field 'params' nope: unknown parameter for policy sync (known: "
                  "rollout_batch, minibatches, filter_groups)"),
    ({"minibatches": 0}, "trial 0: field 'params': policy sync: minibatches must be >= 1, got 0"),
    ({"cluster.gpus": -1}, "trial 0: field 'params' on cluster h100-llama3.1-8b: field 'gpus': "
                           "must be >= 1, got -1"),
    ({"cluster.tp": 3}, "trial 0: field 'params' on cluster h100-llama3.1-8b: field 'gpus': 8 "
                        "rollout GPUs do not split into tp=3 engines"),
])
def test_a_trials_bad_params_name_the_file_and_field_not_set(tmp_path, params, message) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
                                "trials": [{"id": 0, "policy": "sync", "params": params}]}))
    one_error(export(path), f"error: {path}: {message}")


def test_knobs_that_clash_name_the_file_and_field(tmp_path) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"best": {"overall": 0}, "trials": [
        {"id": 0, "policy": "sortedrl", "params": {"filter_groups": True, "harvest": "samples"}}]}))
    one_error(export(path), f"error: {path}: trial 0: field 'params': policy sortedrl: "
                            "filter_groups needs harvest=groups")


@pytest.mark.parametrize("fields, args, message", [
    ({"cluster_pareto": "none"}, ["--trial", "knee"],  # was AttributeError: 'str' object ...
     "field 'cluster_pareto': expected an object, got 'none'"),
    ({"cluster_pareto": [1]}, ["--trial", "knee"], "field 'cluster_pareto': expected an object, got a list"),
    ({"cluster_pareto": {"knee": "1"}}, ["--trial", "knee"],
     "field 'cluster_pareto.knee': expected a trial id or null, got '1'"),
    ({"cluster_pareto": {"knee": True}}, ["--trial", "knee"],
     "field 'cluster_pareto.knee': expected a trial id or null, got True"),
    ({"cluster_pareto": {"knee": 1.0}}, ["--trial", "knee"],
     "field 'cluster_pareto.knee': expected a trial id or null, got 1.0"),
    ({"best": []}, [], "field 'best': expected an object, got a list"),
    ({"best": {"overall": True}}, [], "field 'best.overall': expected a trial id or null, got True"),
    ({"best": {"overall": "0"}}, [], "field 'best.overall': expected a trial id or null, got '0'"),
    ({"best": {}}, [], "not a tune.json (no field 'best.overall')"),
    ({"trials": {"0": TRIALS[0]}}, [], "field 'trials': expected a list of trials, got an object"),
    ({"trials": [{**TRIALS[0], "id": False}]}, [], "no trial with id 0"),
])
def test_a_bad_tune_json_field_is_one_error_naming_it(tmp_path, fields, args, message) -> None:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
                                "trials": TRIALS, **fields}))
    one_error(export(path, *args), f"error: {path}: {message}")


def test_a_tune_json_that_is_not_an_object_is_one_error(tmp_path) -> None:
    path = tmp_path / "tune.json"
    path.write_text("[1]")
    one_error(export(path), f"error: {path}: not a tune.json (expected an object, got a list)")


def test_set_still_names_set_for_a_policy_name() -> None:
    r = CliRunner().invoke(app, ["export", "verl", "sortedrl", "--set", "filter_groups=true",
                                 "--set", "harvest=samples"])
    one_error(r, "error: --set: policy sortedrl: filter_groups needs harvest=groups")
