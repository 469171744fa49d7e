"""``sortedrl export ... --trial ID`` of a trial that broke the tune's ``--max-staleness``
(``"feasible": false``): exported as asked, exit 0, with one ``warning:`` line on stderr naming
the trial, the bound it broke and the best feasible trial, and the same line at the top of the
output (a ``# warning:`` comment, or a ``warning`` field first in ``--json``). Before, it was
exported with no word of it. A feasible trial gets neither.

Run: pytest tests/test_export_infeasible.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import write_trace
from tests.conftest import make_trace
from tests.test_tune import TINY

runner = CliRunner()


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """A real tune under --max-staleness 0: sync with minibatches=1 (trial 0, staleness_max 0,
    the best) and minibatches=2 (trial 1, staleness_max 1: infeasible)."""
    work = tmp_path_factory.mktemp("bounded")
    write_trace(make_trace([3, 5]), work / "t.jsonl")
    (work / "tiny.json").write_text(json.dumps(TINY))
    out = work / "tune"
    r = runner.invoke(app, ["tune", "--trace", str(work / "t.jsonl"), "--cluster", str(work / "tiny.json"),
                            "--policy", "sync", "--param", "sync.minibatches=1,2",
                            "--objective", "tokens_per_s", "--max-staleness", "0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads((out / "tune.json").read_text())
    assert [(t["id"], t["params"], t["feasible"], t["summary"]["staleness_max"])
            for t in result["trials"]] == [(0, {"minibatches": 1}, True, 0),
                                           (1, {"minibatches": 2}, False, 1)]
    assert result["best"]["overall"] == 0
    return out


def warning_of(out) -> str:
    return (f"{out / 'tune.json'}: trial 1 is infeasible: its staleness_max 1 is over the tune's "
            "--max-staleness 0.0; the best feasible trial is 0")


@pytest.mark.parametrize("framework, header", [
    ("verl", '# verl: sync {"rollout_batch": 0, "minibatches": 2, "filter_groups": false} -> '
             "verl/trainer/config/ppo_trainer.yaml (python -m verl.trainer.main_ppo)"),
    ("slime", '# slime: sync {"rollout_batch": 0, "minibatches": 2, "filter_groups": false} -> train.py'),
    ("areal", '# areal: sync {"rollout_batch": 0, "minibatches": 2, "filter_groups": false} -> '
              "areal GRPOConfig (areal/api/cli_args.py), e.g. examples/math/gsm8k_rl.py"),
])
def test_an_infeasible_trial_is_exported_with_a_warning_and_a_comment(bounded, framework, header):
    r = runner.invoke(app, ["export", framework, str(bounded), "--trial", "1"])
    assert r.exit_code == 0, r.output
    assert r.stderr == f"warning: {warning_of(bounded)}\n"
    assert r.stdout.splitlines()[:2] == [f"# warning: {warning_of(bounded)}", header]
    # the rest is the export of those settings, as it was: the policy with the trial's knobs
    # on the tune's cluster
    shape = json.loads((bounded / "tune.json").read_text())["trace_shape"]  # (the trial's batch)
    same = runner.invoke(app, ["export", framework, "sync", "--set", "minibatches=2",
                               "--cluster", str(bounded.parent / "tiny.json"), "--group-size",
                               str(shape["group_size"]), "--prompts", str(shape["prompts_per_step"])])
    assert (same.exit_code, same.stderr) == (0, "")
    assert r.stdout.splitlines()[1:] == same.stdout.splitlines()


def test_an_infeasible_trial_as_json_has_the_warning_first(bounded):
    r = runner.invoke(app, ["export", "verl", str(bounded / "tune.json"), "--trial", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert r.stderr == f"warning: {warning_of(bounded)}\n"
    got = json.loads(r.stdout)
    assert list(got) == ["warning", "framework", "policy", "params", "entry", "overrides", "caveats"]
    assert got["warning"] == warning_of(bounded) and got["params"]["minibatches"] == 2


@pytest.mark.parametrize("args", [[], ["--trial", "0"], ["--json"], ["--trial", "0", "--json"]])
def test_a_feasible_trial_has_no_warning(bounded, args):
    r = runner.invoke(app, ["export", "verl", str(bounded), *args])
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    assert "warning" not in r.stdout
    if "--json" in args:
        assert list(json.loads(r.stdout)) == ["framework", "policy", "params", "entry", "overrides",
                                              "caveats"]
    else:
        assert r.stdout.startswith('# verl: sync {"rollout_batch": 0, "minibatches": 1, ')


def hand_written(tmp_path, trial: dict, overall=None, **fields) -> str:
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "h100-llama3.1-8b", "best": {"overall": overall},
                                "trials": [trial], **fields}))
    return str(path)


@pytest.mark.parametrize("fields, trial_summary, reason", [
    ({}, None, 'tune.json marks it "feasible": false'),  # (no bound, no figures)
    ({"max_staleness": 2}, {"staleness_max": 1}, 'tune.json marks it "feasible": false'),
    ({"max_staleness": 2}, {"staleness_max": 3}, "its staleness_max 3 is over the tune's --max-staleness 2"),
])
def test_a_hand_written_infeasible_trial_says_what_it_can(tmp_path, fields, trial_summary, reason):
    """No best trial to point at (best.overall null), and the reason only where the figures
    behind the mark are there."""
    trial = {"id": 0, "policy": "sync", "params": {}, "feasible": False}
    if trial_summary is not None:
        trial["summary"] = trial_summary
    path = hand_written(tmp_path, trial, **fields)
    r = runner.invoke(app, ["export", "verl", path, "--trial", "0"])
    assert r.exit_code == 0, r.output
    line = f"{path}: trial 0 is infeasible: {reason}"
    assert r.stderr == f"warning: {line}\n"
    assert r.stdout.splitlines()[0] == f"# warning: {line}"


def test_a_hand_written_best_that_is_infeasible_is_exported_with_the_warning(tmp_path):
    """(It cannot point at itself as the best feasible trial.)"""
    path = hand_written(tmp_path, {"id": 0, "policy": "sync", "params": {}, "feasible": False}, 0)
    r = runner.invoke(app, ["export", "verl", path])
    assert r.exit_code == 0, r.output
    assert r.stderr == f'warning: {path}: trial 0 is infeasible: tune.json marks it "feasible": false\n'


def test_a_feasible_mark_not_true_or_false_is_one_error(tmp_path):
    path = hand_written(tmp_path, {"id": 0, "policy": "sync", "params": {}, "feasible": "yes"}, 0)
    r = runner.invoke(app, ["export", "verl", path])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"error: {path}: trial 0: field 'feasible': expected true or false, got 'yes'\n"
