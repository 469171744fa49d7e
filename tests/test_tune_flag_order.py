"""The order of `tune`'s `--policy` and `--param` flags changes nothing (an audit, det41).

- Each policy's Sobol sample was seeded with `--seed` + its position on the command line, and
  the budget's remainder went to the first policies given: `--policy sortedrl --policy partial`
  sampled other oversubscribe values than `--policy partial --policy sortedrl`, and another
  trial won. Policies are searched in the order of their names now (trials numbered so), so both
  orders write the same `tune.json`, but for `best.per_policy`, in the `--policy` order.
- A policy's dimensions were in the `--param` order, the i-th Sobol coordinate sampling the i-th
  of them: two params swapped sampled other points. They are in the order of their keys now
  (the cluster's shape first), for a grid too.

Run: pytest tests/test_tune_flag_order.py
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.tune.space import parse_spaces

runner = CliRunner()
BASE = ["tune", "--trace", "math-16k", "--cluster", "h100-llama3.1-8b-2gpu"]


def tuned(tmp_path, name: str, *args: str) -> tuple[dict, bytes]:
    out = tmp_path / name
    r = runner.invoke(app, [*BASE, *args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    raw = (out / "tune.json").read_bytes()
    return json.loads(raw), raw


def test_the_order_of_the_policies_changes_no_trial(tmp_path):
    params = ["--param", "sortedrl.oversubscribe=1.2:3", "--param", "partial.over_sample=1.1:3",
              "--budget", "13"]
    a, _ = tuned(tmp_path, "a", "--policy", "sortedrl", "--policy", "partial", *params)
    b, _ = tuned(tmp_path, "b", "--policy", "partial", "--policy", "sortedrl", *params)
    assert a["trials"] == b["trials"] and a["pareto"] == b["pareto"]
    assert a["best"]["overall"] == b["best"]["overall"]
    assert list(a["best"]["per_policy"]) == ["sortedrl", "partial"]  # (as given)
    assert list(b["best"]["per_policy"]) == ["partial", "sortedrl"]
    assert a["best"]["per_policy"] == b["best"]["per_policy"]
    assert {k: v for k, v in a.items() if k != "best"} == {k: v for k, v in b.items() if k != "best"}
    # by name: partial first (Sobol seed 0, and the odd trial of the 13: 7 trials against 6),
    # then sortedrl (seed 1), each from its defaults; sortedrl samples what `--policy partial
    # --policy sortedrl` sampled before (sortedrl first sampled 2.731, 1.289, 1.950)
    ran = [(t["policy"], t["params"]) for t in a["trials"]]
    assert [p for p, _ in ran] == ["partial"] * 5 + ["sortedrl"] * 4 + ["partial"] * 2 + ["sortedrl"] * 2
    assert ran[0] == ("partial", {}) and ran[5] == ("sortedrl", {})
    assert [round(p["oversubscribe"], 3) for _, p in ran[6:9]] == [1.48, 2.321, 2.962]


def test_the_order_of_a_policys_params_changes_no_trial(tmp_path):
    one = ["--param", "sortedrl.oversubscribe=1.2:3", "--param", "sortedrl.update_batch=128:1024:log"]
    args = ["--policy", "sortedrl", "--budget", "6"]
    a, raw_a = tuned(tmp_path, "a", *args, *one)
    b, raw_b = tuned(tmp_path, "b", *args, *one[2:], *one[:2])
    assert raw_a == raw_b  # the same file, byte for byte
    assert [list(t["params"]) for t in a["trials"][1:]] == [["oversubscribe", "update_batch"]] * 5


def test_a_grid_runs_in_the_order_of_the_keys(tmp_path):
    args = ["--policy", "sortedrl", "--budget", "8"]
    mode, span = ["--param", "sortedrl.mode=on_policy,partial"], ["--param", "sortedrl.max_span=1,2"]
    a, raw_a = tuned(tmp_path, "a", *args, *mode, *span)
    _, raw_b = tuned(tmp_path, "b", *args, *span, *mode)
    assert raw_a == raw_b and a["search"] == "grid"
    assert [t["params"] for t in a["trials"]] == [  # (the defaults, max_span 2 on_policy, in it)
        {"max_span": 1, "mode": "on_policy"}, {"max_span": 1, "mode": "partial"},
        {"max_span": 2, "mode": "on_policy"}, {"max_span": 2, "mode": "partial"}]


def test_dimensions_are_the_clusters_then_the_knobs_each_by_key():
    params = ["sync.minibatches=1,2", "cluster.tp=1,2", "sync.rollout_batch=8,16", "cluster.gpus=2,4"]
    spaces = parse_spaces(["sync"], params)
    assert [d.key for d in spaces[0].dims] == ["cluster.gpus", "cluster.tp", "minibatches", "rollout_batch"]
    assert parse_spaces(["sync"], params[::-1]) == spaces
