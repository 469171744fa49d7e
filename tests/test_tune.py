"""``sortedrl tune``: grid and quasi-random search, the staleness constraint, the Pareto front,
and identical results on local processes and on Ray.

Run: pytest tests/test_tune.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import write_trace
from sortedrl.tune.search import pareto
from tests.conftest import make_trace

DATA = Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data"
runner = CliRunner()
TINY = {"preset": "h100-llama3.1-8b", "gpus": 1, "max_num_seqs": 4, "kv_budget_tokens": 10000,
        "kv_watermark": 0.0, "costs": {"step_fixed_s": 1.0, "weight_read_s": 1.0, "kv_read_s_per_token": 0.0,
                                       "compute_s_per_seq": 0.0, "prefill_s_per_token": 0.0,
                                       "prefill_s_per_pair": 0.0, "train_per_token": 0.0, "train_fix": 10.0,
                                       "sync_s": 5.0}}


def tune(*args):
    return runner.invoke(app, ["tune", *args])


@pytest.fixture()
def tiny(tmp_path):
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace([3, 5]), trace)
    cluster = tmp_path / "tiny.json"
    cluster.write_text(json.dumps(TINY))
    return str(trace), str(cluster)


def test_grid_finds_the_hand_computed_best(tiny, tmp_path):
    # Rollout ends at 10 s (prefill 2 s + 4 decode steps of 2 s for the 5-token response).
    # minibatches=k runs k updates of 10 s (no sync after the last): makespan 10 + 10k.
    trace, cluster = tiny
    r = tune("--trace", trace, "--cluster", cluster, "--policy", "sync",
             "--param", "sync.minibatches=1,2,3", "--objective", "makespan_s",
             "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["search"] == "grid"
    got = {t["params"]["minibatches"]: t["summary"]["makespan_s"] for t in d["trials"]}
    assert got == {1: 20.0, 2: 30.0, 3: 30.0}  # two samples: at most two updates
    assert d["trials"][d["best"]["overall"]]["params"] == {"minibatches": 1}
    assert json.loads((tmp_path / "o" / "tune.json").read_text()) == d


def test_max_staleness_is_a_hard_constraint(tiny, tmp_path):
    trace, cluster = tiny
    r = tune("--trace", trace, "--cluster", cluster, "--policy", "sync",
             "--param", "sync.minibatches=1,2", "--objective", "tokens_per_s",
             "--max-staleness", "0", "--out", str(tmp_path / "o"), "--json")
    d = json.loads(r.stdout)
    feasible = {t["params"]["minibatches"]: t["feasible"] for t in d["trials"]}
    assert feasible == {1: True, 2: False}
    assert d["trials"][d["best"]["overall"]]["summary"]["staleness_max"] == 0


def test_a_gpu_hours_tune_shows_the_gpu_hours_it_ranked_by(tmp_path):
    """By `--objective gpu_hours` the table had no GPU-hours column: the ranking's own figure
    was not shown (a review, 6 Dec 2026); the other objectives keep the table as it was."""
    args = ["--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--policy", "sync",
            "--param", "cluster.gpus=1,2", "--cluster", "h100-llama3.1-8b-2gpu"]
    r = tune(*args, "--objective", "gpu_hours", "--out", str(tmp_path / "g"))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    # its title is its unit (the unit row said h, under GPU-hours): nothing under it, as in the
    # plan's and forecast's tables
    assert lines[1].split()[-1] == "GPU-h" and lines[2].split()[-1] == "r+t"
    assert len(lines[2].rstrip()) < lines[1].index("GPU-h")
    d = json.loads((tmp_path / "g" / "tune.json").read_text())
    best = d["trials"][d["best"]["overall"]]
    assert lines[4].split()[-1] == f"{best['summary']['gpu_hours']:.3f}"
    plain = tune(*args, "--out", str(tmp_path / "p"))
    assert "GPU-h" not in plain.stdout.splitlines()[1]


def test_a_search_over_train_gpus_refines_a_colocated_trial(tmp_path):
    """A colocated policy's trials drop cluster.train_gpus (unused there); the search's
    refinement then read it from such a trial: KeyError traceback, exit 1 (a review, 6 Dec
    2026). It refines the other parameters, and the disaggregated policy keeps the split."""
    r = tune("--synthetic", "math-16k", "--prompts", "32", "--steps", "2",
             "--cluster", "h100-llama3.1-8b-2gpu", "--policy", "sync", "--policy", "async",
             "--param", "cluster.gpus=2,4,8", "--param", "cluster.train_gpus=1:3",
             "--budget", "12", "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["search"] != "grid"
    sync = [t["params"] for t in d["trials"] if t["policy"] == "sync"]
    assert sync and all("cluster.train_gpus" not in p for p in sync)
    assert any("cluster.train_gpus" in t["params"] for t in d["trials"] if t["policy"] == "async")


def test_async_eta_search_respects_the_bound(tmp_path):
    r = tune("--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--policy", "async",
             "--param", "async.eta=0:4", "--param", "async.drop_stale=true",  # eta bounds tokens too
             "--max-staleness", "2", "--cluster", "h100-llama3.1-8b-2gpu",
             "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    grid = [t for t in d["trials"] if "eta" in t["params"]]  # (and the defaults' trial)
    assert sorted(t["params"]["eta"] for t in grid) == [0, 1, 2, 3, 4]
    for t in grid:
        assert t["feasible"] == (t["summary"]["staleness_max"] <= 2)
        assert t["summary"]["staleness_max"] <= t["params"]["eta"]
    best = d["trials"][d["best"]["overall"]]
    assert best["feasible"] and best["params"].get("eta", 2) <= 2  # ({}: the defaults, eta 2)


SEARCH = ["--trace", str(DATA / "math-16k.jsonl"), "--policy", "sortedrl", "--policy", "sync",
          "--param", "sortedrl.mode=on_policy,partial", "--param", "sortedrl.update_batch=64:1024:log",
          "--param", "sortedrl.oversubscribe=1:4", "--param", "sync.minibatches=1,2",
          "--max-staleness", "2", "--budget", "16", "--cluster", "h100-llama3.1-8b-2gpu", "--json"]


def test_local_processes_and_ray_give_identical_trials(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
    local = json.loads(tune(*SEARCH, "--workers", "2", "--out", str(tmp_path / "l")).stdout)
    inline = json.loads(tune(*SEARCH, "--out", str(tmp_path / "i")).stdout)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = json.loads(tune(*SEARCH, "--ray", "auto", "--out", str(tmp_path / "r")).stdout)
    finally:
        ray.shutdown()
    assert local["search"] == "qmc+refine" and len(local["trials"]) <= 16
    assert local["trials"] == inline["trials"] == on_ray["trials"]
    assert local == on_ray
    # the defaults are a trial, so the best is at least as fast as sortedrl's defaults
    defaults = next(t for t in local["trials"] if t["policy"] == "sortedrl" and t["params"] == {})
    best = local["trials"][local["best"]["per_policy"]["sortedrl"]]
    assert best["summary"]["tokens_per_s"] >= defaults["summary"]["tokens_per_s"]
    assert best["summary"]["staleness_max"] <= 2


def test_a_ray_address_that_does_not_answer_is_one_line_at_once(tmp_path):
    pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
    # (Ray retried for 20 s, printing a line of its own each time, before the error)
    r = tune("--synthetic", "math-16k", "--prompts", "8", "--steps", "1", "--policy", "sync",
             "--cluster", "h100-llama3.1-8b-1gpu", "--ray", "127.0.0.1:1", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert r.stderr.startswith("error: --ray 127.0.0.1:1: no Ray cluster answers within 10 s (")
    assert r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("param, message", [
    ("sortedrl.update_batch=512:64", "lo (512) is above hi (64)"),
    ("sortedrl.update_batch=a:b", "lo and hi must be integers"),
    ("sortedrl.mode=1:3", "mode is not numeric; give a list of values instead"),
    # (was --set, then `--param mode=fast`, without the policy or the list it came from)
    ("sortedrl.mode=on_policy,fast", "error: --param 'sortedrl.mode=on_policy,fast': mode=fast: expected "
                                     "one of on_policy, partial"),
    ("sortedrl.nope=1:2", "unknown parameter for policy sortedrl"),
    ("sync.minibatches=1,2", "policy 'sync' is not among the --policy list (sortedrl)"),
    ("sortedrl.oversubscribe=0:2:log", "a log range needs lo > 0"),
    ("sortedrl.oversubscribe=1:2:lin", "a range is lo:hi or lo:hi:log"),
    ("sortedrl.update_batch", "expected NAME.key=lo:hi[:log] or NAME.key=v1,v2,..."),
    ("sortedrl.oversubscribe=-1:2", "error: --param 'sortedrl.oversubscribe=-1:2': policy sortedrl: "
                                    "oversubscribe must be >= 0, got -1.0"),
])
def test_bad_params_get_one_line_errors(tmp_path, param, message):
    out = tmp_path / "o"
    r = tune("--trace", str(DATA / "logic-8k.jsonl"), "--policy", "sortedrl", "--param", param,
             "--out", str(out))
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not out.exists()


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=30))
def test_pareto_front_is_exactly_the_non_dominated_trials(points):
    trials = [{"id": i, "summary": {"tokens_per_s": float(t), "staleness_mean": float(s)}}
              for i, (t, s) in enumerate(points)]
    front = set(pareto(trials))
    for a, (ta, sa) in enumerate(points):
        dominated = any(tb >= ta and sb <= sa and (tb > ta or sb < sa) for tb, sb in points)
        first = points.index((ta, sa)) == a  # exact ties: only the first is listed
        assert (a in front) == (not dominated and first)


def test_a_tune_without_param_says_it_ran_each_policy_once(tiny, tmp_path):
    """Without --param a "search" ran one trial a policy and said so nowhere ("1 trials")."""
    trace, cluster = tiny
    r = tune("--trace", trace, "--cluster", cluster, "--policy", "sync", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert ("note: no --param, so each policy ran once with its defaults; --param NAME.key=lo:hi or "
            "NAME.key=v1,v2,... searches a knob") in r.stderr.splitlines()
    assert r.stdout.splitlines()[-1] == f"wrote {tmp_path / 'o'}/tune.json (1 trial, grid)"


@pytest.mark.parametrize("option", ["--budget", "--workers"])
def test_a_bad_budget_or_worker_count_names_its_option(tiny, tmp_path, option):
    trace, cluster = tiny
    r = tune("--trace", trace, "--cluster", cluster, "--policy", "sync", option, "0",
             "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and r.stderr == f"error: {option} 0: must be >= 1\n"
