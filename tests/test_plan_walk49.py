"""What an engineer planning a run met (a fresh-eyes walk, stop 49), mended."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
RUN = ["--synthetic", "math-16k", "--prompts", "16", "--group-size", "4", "--steps", "2",
       "--cluster", "h100-llama3.1-8b-2gpu"]


def test_simulate_takes_a_knob_as_compare_and_tune_print_it(tmp_path):
    """tune's best is printed as sortedrl.oversubscribe=1.638 (compare's --set form): simulate
    runs it as the plain key, the same run (the same summary, the same rerun identity)."""
    got = []
    for knob in ("sortedrl.oversubscribe=1.638", "oversubscribe=1.638"):
        out = tmp_path / knob.partition(".")[0]
        r = runner.invoke(app, ["simulate", *RUN, "--policy", "sortedrl", "--set", knob, "--out", str(out)])
        assert r.exit_code == 0, r.output
        got.append((out / "summary.json").read_bytes())
    assert got[0] == got[1]
    assert json.loads(got[0])["params"]["oversubscribe"] == 1.638


def test_forecast_says_it_has_no_synthetic_and_what_to_do_instead():
    r = runner.invoke(app, ["forecast", "--synthetic", "agentic-swe", "--policy", "sync"])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.endswith(": no --synthetic: a forecast runs a trace (--trace) or a trace model (--trace-model, "
                             "for --steps); draw a synthetic trace first with `sortedrl trace synth PRESET --out "
                             "T.jsonl`, or fit a model with `sortedrl trace fit`\n"), r.stderr


def test_tune_under_a_seed_says_to_rerun_with_it(tmp_path):
    args = ["tune", *RUN, "--policy", "tail_batch", "--param", "tail_batch.eta=1.0:2.0", "--budget", "2"]
    r = runner.invoke(app, [*args, "--seed", "7", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "\nseed: every trial ran with --seed 7; rerun one with its knobs and --seed 7\n" in r.stdout
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert r.exit_code == 0 and "seed:" not in r.stdout, r.output


def test_the_mostly_idle_warning_suggests_a_cluster_every_policy_can_run_on(tmp_path):
    """With async beside sync, a 1-GPU cluster has no split for async: the warning suggests
    fewer sequences on the same GPUs instead (it sent the user to a cluster compare refuses)."""
    args = ["compare", "--synthetic", "agentic-search", "--prompts", "16", "--group-size", "8", "--steps", "2",
            "--cluster", "h100-qwen3-8b-2gpu"]
    r = runner.invoke(app, [*args, "--policy", "sync", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0 and "try --cluster h100-qwen3-8b-1gpu or more --prompts" in r.stderr, r.output
    r = runner.invoke(app, [*args, "--policy", "sync", "--policy", "async", "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert "try --cluster h100-qwen3-8b-2gpu-128seq or more --prompts" in r.stderr, r.stderr
    r = runner.invoke(app, ["compare", "--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--policy", "sync",
                            "--policy", "async", "--cluster", "h100-qwen3-32b", "--out", str(tmp_path / "d")])
    hint = "try --cluster h100-qwen3-32b-tp2-8gpu-64seq or more --prompts"  # (not tp2-2gpu: no split of tp2)
    assert r.exit_code == 0 and hint in r.stderr, r.stderr


def test_forecast_runs_a_cluster_once(tmp_path):
    """A cluster named twice another way is refused; a policy whose split of one --cluster is
    another --cluster as given runs once, with a note (it was two identical rows, and the
    trainer note was printed twice)."""
    trace = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "synth", "agentic-search", "--prompts", "8", "--steps", "2", "--out", str(trace)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "sync", "--cluster", "h100-qwen3-8b",
                            "--cluster", "h100-qwen3-8b-8gpu"])
    assert (r.exit_code, r.stderr) == (2, "error: --cluster h100-qwen3-8b-8gpu is the cluster --cluster h100-qwen3-8b "
                                          "gives (8 x h100, qwen3-8b, tp 1, colocated, max_num_seqs 256): give it once\n")
    r = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "sync", "--policy", "async",
                            "--cluster", "h100-qwen3-8b-disagg", "--cluster", "h100-qwen3-8b", "--json"])
    assert r.exit_code == 0, r.output
    rows = [(f["policy"], f["cluster"]) for f in json.loads(r.stdout)]
    assert rows == [("sync", "h100-qwen3-8b-disagg"), ("async", "h100-qwen3-8b-disagg"), ("sync", "h100-qwen3-8b")]
    assert ("note: async runs on one cluster, h100-qwen3-8b-disagg, for --cluster h100-qwen3-8b-disagg and "
            "--cluster h100-qwen3-8b: forecast once\n") in r.stderr
    assert len([line for line in r.stderr.splitlines() if "kept the trainer busier" in line]) <= 1
    r = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "async", "--cluster", "h100-qwen3-8b",
                            "--cluster", "h100-qwen3-8b-disagg", "--json"])  # (the other order)
    assert r.exit_code == 0 and [f["cluster"] for f in json.loads(r.stdout)] == ["h100-qwen3-8b-disagg"], r.output
    assert ("note: async runs on one cluster, h100-qwen3-8b-disagg, for --cluster h100-qwen3-8b and "
            "--cluster h100-qwen3-8b-disagg: forecast once\n") in r.stderr
    for name, placement in (("a", "colocated"), ("b", "disaggregated")):  # two files named alike
        (tmp_path / name).mkdir()
        (tmp_path / name / "c.json").write_text(json.dumps({"name": "c", "gpu": "h100", "model": "qwen3-8b",
                                                            "gpus": 8, "placement": placement}))
    r = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "async", "--policy", "sync", "--cluster",
                            str(tmp_path / "a" / "c.json"), "--cluster", str(tmp_path / "b" / "c.json"), "--json"])
    assert r.exit_code == 0, r.output
    assert [f["policy"] for f in json.loads(r.stdout)] == ["async", "sync", "sync"]  # (async was lost by name)


def test_a_multi_turn_trace_too_long_for_the_kv_names_its_longest_trajectory(tmp_path):
    """The first error gave prompt + cap (17,052), and a budget that held it failed again at
    17,506 with no reason: the tool outputs stay in the context. Now the first says so."""
    trace = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "synth", "agentic-retool", "--prompts", "16", "--steps", "3", "--out", str(trace)])
    assert r.exit_code == 0, r.output
    cl = tmp_path / "kv.json"
    cl.write_text(json.dumps({"preset": "h100-qwen3-8b-2gpu", "kv_budget_tokens": 5000}))
    r = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "sync", "--cluster", str(cl),
                            "--out", str(tmp_path / "o")])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (f"error: {cl}: impossible cluster: the KV budget of 4,950 tokens per engine cannot hold one "
                        "sequence of 17,506 tokens (trace t.jsonl: its longest trajectory, prompt p000041 sample 3: a "
                        "prompt of 590 tokens, 16,384 generated and 532 of tool outputs; a cluster with more KV cache "
                        "fits it)\n")
    cl.write_text(json.dumps({"preset": "h100-qwen3-8b-2gpu", "kv_budget_tokens": 17_700}))  # 17,523 usable
    r = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "sync", "--cluster", str(cl),
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output


def test_a_tensor_parallel_size_that_does_not_split_the_heads_is_refused():
    """vLLM refuses tp=3 for a 32-head model: a plan must not pick such a shape."""
    from sortedrl.errors import ConfigError
    from sortedrl.sim.cluster import preset

    for name, message in [
        ("h100-qwen3-8b-tp3-6gpu", "h100-qwen3-8b-tp3-6gpu: field 'tp': tp=3 does not split qwen3-8b's 32 attention "
                                   "heads (8 KV heads) evenly, which vLLM requires; tp 1, 2, 4, 8, 16, 32 do"),
        ("h100-qwen2.5-7b-tp8", "h100-qwen2.5-7b-tp8: field 'tp': tp=8 does not split qwen2.5-7b's 28 attention "
                                "heads (4 KV heads) evenly, which vLLM requires; tp 1, 2, 4, 28 do")]:
        try:
            preset(name)
        except ConfigError as e:
            assert str(e) == message
        else:
            raise AssertionError(f"{name} was accepted")
    assert preset("h100-qwen2.5-7b-tp4").tp == 4 and preset("h100-llama3.1-70b-tp8").tp == 8
    # with expert parallelism the attention runs on tp // ep GPUs (data-parallel over the rest)
    from sortedrl.sim.cluster import cluster_from_dict

    ds = cluster_from_dict({"gpu": "h100", "model": "deepseek-v3", "gpus": 256, "tp": 256, "ep": 256}, "ds.json", "ds")
    assert (ds.tp, ds.ep) == (256, 256)


def test_an_engine_alone_holds_no_list_the_size_of_its_index():
    """Each engine made a list of index + 1 next times until the backend bound its own: n
    engines held n^2 / 2 floats (1.7 GB of peak RSS at 20,000 GPUs, out of memory at 100,000)."""
    import sys

    from sortedrl.sim.cluster import preset
    from sortedrl.sim.engine import Engine
    from sortedrl.timeline import Timeline

    cl = preset("h100-qwen3-8b")
    e = Engine(1_000_000, cl.cost(), cl.max_num_seqs, cl.kv_budget, cl.kv_admit_budget, [5], [3], Timeline())
    assert sys.getsizeof(e._slots) < 1_000
    e.plan()  # alone, it still records its next time by its index
    assert e._slots == {1_000_000: e.next_t}


def test_compare_says_when_a_row_trained_part_of_the_trace(tmp_path):
    """tail_batch with responses below the group size trains part of each group: the fastest
    makespan of the table, flagged only by its wasted share."""
    args = ["compare", "--synthetic", "agentic-search", "--prompts", "16", "--group-size", "8", "--steps", "2",
            "--cluster", "h100-qwen3-8b-2gpu", "--policy", "sync", "--policy", "tb=tail_batch"]
    r = runner.invoke(app, [*args, "--set", "tb.responses=4", "--json", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    trained = {s["label"]: (s["samples_trained"], s["samples_total"]) for s in json.loads(r.stdout)}
    assert trained == {"sync": (256, 256), "tb": (128, 256)}
    r = runner.invoke(app, [*args, "--set", "tb.responses=4", "--out", str(tmp_path / "b")])
    text = " ".join(r.stdout.split())
    assert ("trained less: tb trained 128 of its 256 samples (50%), where another trained 256: a makespan that "
            "covers less training reads faster than it is; compare the learnable tok/s") in text, r.stdout
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and "trained less" not in r.stdout, r.output


def test_a_front_of_one_shape_says_it_has_nothing_to_trade():
    from sortedrl.tune.plan import plan_text

    trial = {"id": 0, "policy": "sync", "params": {"cluster.gpus": 8},
             "summary": {"makespan_s": 100.0, "gpu_hours": 0.5, "staleness_mean": 0.0}}
    one = plan_text({"cluster_pareto": {"front": [0], "knee": None}, "trials": [trial]}, 100)
    assert "no knee: one shape is both the fastest and the cheapest, so there is no trade to make" in one
    other = {**trial, "id": 1, "params": {"cluster.gpus": 16},
             "summary": {"makespan_s": 60.0, "gpu_hours": 0.6, "staleness_mean": 0.0}}
    two = plan_text({"cluster_pareto": {"front": [1, 0], "knee": None}, "trials": [trial, other]}, 200)
    assert "no knee: no shape on the front beats the straight line" in two


def test_a_shaped_trials_split_keeps_its_shape_last():
    import dataclasses

    from sortedrl.cluster_split import split_name
    from sortedrl.sim.cluster import preset

    shaped = dataclasses.replace(preset("h100-llama3.1-8b"), name="h100-llama3.1-8b[gpus=8]")
    assert split_name(shaped) == "h100-llama3.1-8b-disagg[gpus=8]"  # (was ...[gpus=8]-disagg)
    assert split_name(preset("h100-llama3.1-8b")) == "h100-llama3.1-8b-disagg"


def test_compare_names_a_tool_pool_that_is_the_bottleneck(tmp_path):
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"preset": "h100-qwen3-8b", "gpus": 2, "tool_pool": 1, "tool_holds_slot": True}))
    args = ["compare", "--synthetic", "agentic-search", "--prompts", "8", "--group-size", "4", "--steps", "2",
            "--policy", "sync"]
    r = runner.invoke(app, [*args, "--cluster", str(pool), "--json", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    [s] = json.loads(r.stdout)
    assert s["sandbox_wait_s"] > s["tool_s"] > 0
    r = runner.invoke(app, [*args, "--cluster", str(pool), "--out", str(tmp_path / "b")])
    text = " ".join(r.stdout.split())
    assert (f"sandboxes: trajectories waited longer for a free sandbox than their tool calls ran (sync "
            f"{s['sandbox_wait_s']:,.0f} s against {s['tool_s']:,.0f} s): the cluster's tool_pool of 1 is the "
            "bottleneck; a cluster file's tool_pool raises it") in text, r.stdout
    r = runner.invoke(app, [*args, "--cluster", "h100-qwen3-8b-2gpu", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and "sandboxes:" not in r.stdout, r.output


def test_simulate_takes_a_user_policys_knob_under_its_compare_label_too():
    """compare labels pkg.mod:Mine as Mine (its runs print Mine: k=16); simulate's --set takes
    Mine.k=16 as it takes pkg.mod:Mine.k=16 and k=16."""
    from dataclasses import dataclass

    from sortedrl.policies.base import parse_params

    @dataclass(frozen=True)
    class MineParams:
        k: int = 1

    for knob in ("k=16", "pkg.mod:Mine.k=16", "Mine.k=16"):
        assert parse_params(MineParams, [knob], "pkg.mod:Mine").k == 16


def test_profile_show_calls_a_preset_a_preset_even_when_a_later_check_refuses_it():
    from sortedrl.calibration.show import _base_name

    assert _base_name("h100-qwen2.5-7b-tp8") == "preset h100-qwen2.5-7b-tp8"  # (its tp is refused now)
    assert _base_name("myc") == "myc (a cluster file or profile of that name)"
