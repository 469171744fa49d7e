"""`sortedrl forecast`: a trace model's forecast is the mean of the simulations it ran, a fixed
trace's is its one simulation, and the report and bad inputs behave."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.forecast import step_times
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import load_cluster
from sortedrl.sim.run import simulate
from sortedrl.traces import write_trace
from sortedrl.traces.model import TraceModel, generate

MODEL = TraceModel(max_response_len=4096, group_size=4, prompts_per_step=16, mu0=6.0,
                   sigma_between=0.5, sigma_within=0.3, drift=0.01, runaway_share=0.01,
                   prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=1024,
                   pass_alpha=1.0, pass_beta=1.0, source="test")


def run(args):
    return CliRunner().invoke(app, args)


@pytest.fixture()
def model_file(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(MODEL.to_json())
    return path


def test_forecast_is_the_mean_of_its_simulations(model_file) -> None:
    r = run(["forecast", "--trace-model", str(model_file), "--steps", "6", "--policy", "sync",
             "--policy", "fast=sortedrl", "--cluster", "h100-llama3.1-8b", "--seeds", "3",
             "--seed", "5", "--gpu-hour-price", "2.5", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [o["policy"] for o in out] == ["sync", "fast"]
    assert [(o["seeds"], o["seed"]) for o in out] == [(3, 5), (3, 5)]  # (--seed was in no field)
    cluster = load_cluster("h100-llama3.1-8b")
    for o, name in zip(out, ["sync", "sortedrl"], strict=True):
        walls, steps = [], []
        for seed in (5, 6, 7):  # the seeds it ran: --seed, --seed + 1, ...
            trace = generate(MODEL, 6, seed=seed)
            result = simulate(trace, make_policy(name, [], trace), cluster, seed=seed)
            walls.append(result.summary["makespan_s"])
            steps.append(step_times(result.timeline))
        assert o["walls_s"] == walls
        assert o["wall_s"] == round(math.fsum(walls) / 3, 6)
        assert (o["wall_s_low"], o["wall_s_high"]) == (min(walls), max(walls))
        pooled = np.concatenate(steps)
        assert o["step_s_p50"] == round(float(np.percentile(pooled, 50)), 6)
        assert o["step_s_p90"] == round(float(np.percentile(pooled, 90)), 6)
        assert o["step_s_max"] == round(float(pooled.max()), 6)
        assert o["gpu_hours"] == pytest.approx(8 * o["wall_s"] / 3600, abs=1e-6)
        assert o["cost"] == pytest.approx(2.5 * o["gpu_hours"], abs=1e-5)
        # colocated: rollout, training and sync never overlap, so with idle they fill the wall
        busy = o["rollout_s"] + o["train_s"] + o["sync_s"] + o["offload_s"] + o["idle_s"]
        assert busy <= o["wall_s"] * (1 + 1e-6)
    assert out[0]["updates"] == 6  # sync: one update per step


def test_workers_give_the_same_forecast(model_file) -> None:
    """--workers N simulates the draws (policy x cluster x seed) in N processes: the same JSON."""
    args = ["forecast", "--trace-model", str(model_file), "--steps", "4", "--policy", "sync",
            "--policy", "sortedrl", "--cluster", "h100-llama3.1-8b", "--cluster",
            "h100-llama3.1-8b-16gpu", "--seeds", "2", "--json"]
    one, three = run(args), run([*args, "--workers", "3"])
    assert one.exit_code == three.exit_code == 0, one.output + three.output
    assert one.stdout == three.stdout
    assert [(o["policy"], o["gpus"], o["seeds"]) for o in json.loads(one.stdout)] == [
        ("sync", 8, 2), ("sortedrl", 8, 2), ("sync", 16, 2), ("sortedrl", 16, 2)]


def test_fixed_trace_runs_once(tmp_path) -> None:
    trace = generate(dataclasses.replace(MODEL, prompts_per_step=8), 2, seed=1)
    write_trace(trace, tmp_path / "t.jsonl")
    r = run(["forecast", "--trace", str(tmp_path / "t.jsonl"), "--policy", "sync",
             "--cluster", "h100-llama3.1-8b", "--cluster", "h100-llama3.1-8b-16gpu", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [(o["cluster"], o["gpus"], o["seeds"], o["seed"]) for o in out] == [
        ("h100-llama3.1-8b", 8, 1, 0), ("h100-llama3.1-8b-16gpu", 16, 1, 0)]
    expected = simulate(trace, make_policy("sync", [], trace), load_cluster("h100-llama3.1-8b"),
                        seed=0).summary["makespan_s"]
    assert out[0]["wall_s"] == out[0]["wall_s_low"] == out[0]["wall_s_high"] == expected


def test_report_is_written_offline(model_file, tmp_path) -> None:
    report = tmp_path / "f.html"
    r = run(["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync",
             "--seeds", "2", "--report", str(report)])
    assert r.exit_code == 0, r.output
    html = report.read_text()
    assert 'id="forecast-wall"' in html and 'id="forecast-table"' in html
    assert "<script src=" not in html  # plotly.js inlined, nothing from a CDN
    assert "forecast of model.json" in r.output and f"wrote {report}" in r.output


def test_the_report_table_prints_each_figure_at_its_one_precision(model_file, tmp_path) -> None:
    # docs/metrics.md "Printed precision": the HTML report as the terminal (it printed raw
    # floats: wall_h 17.075, cost 341.504, updates 300.000)
    report = tmp_path / "f.html"
    r = run(["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync",
             "--seeds", "2", "--gpu-hour-price", "2.5", "--report", str(report), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)[0]
    html = report.read_text()
    body = html[html.index('id="forecast-table"'):]
    head = re.findall(r"<th>([^<]*)</th>", body[: body.index("</thead>")])
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", body[: body.index("</tbody>")])
    row = dict(zip([h.split(" (")[0] for h in head], cells, strict=True))
    assert row["wall_h"] == f"{out['wall_h']:,.2f}" and row["cost"] == f"{out['cost']:,.2f}"
    assert row["gpu_hours"] == f"{out['gpu_hours']:,.3f}" and row["sync_s"] == f"{out['sync_s']:,.2f}"
    assert row["wall_s"] == f"{out['wall_s']:,.1f}" and row["idle_s"] == f"{out['idle_s']:,.1f}"
    assert row["updates"] == f"{out['updates']:,.0f}" and row["gpus"] == str(out["gpus"])


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0"], "--seeds must be from 1 to 1,000, got 0"),
    (["--gpu-hour-price", "-1"], "--gpu-hour-price must be from 0 to 1,000,000 ($ per GPU-hour), got -1"),
    (["--report", "x.png"], "must end in .html"),
    (["--policy", "nosuch"], "nosuch"),
    (["--workers", "0"], "--workers 0: must be >= 1"),
    (["--prompts", "0"], "--prompts must be >= 1, got 0"),  # was: the model's prompts per step
])
def test_bad_options(model_file, tmp_path, args, message) -> None:
    base = ["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync"]
    r = run(base + args)
    assert r.exit_code == 2 and r.output.startswith("error: ") and message in r.output
    assert r.output.count("\n") == 1


def test_trace_model_needs_steps(model_file) -> None:
    r = run(["forecast", "--trace-model", str(model_file), "--policy", "sync"])
    assert r.exit_code == 2
    assert r.output == "error: --trace-model needs --steps N >= 1: the length of the run to forecast\n"


def test_the_cost_asked_for_is_shown_at_80_columns(model_file) -> None:
    """At 80 columns `--gpu-hour-price` computed a cost the table then hid (the cost column went
    first to fit); a priced forecast keeps it and hides the other columns."""
    args = ["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync",
            "--policy", "one_step_off", "--cluster", "h100-llama3.1-8b", "--cluster",
            "h100-llama3.1-8b-16gpu", "--seeds", "1"]
    priced = CliRunner().invoke(app, [*args, "--gpu-hour-price", "2.5"], env={"COLUMNS": "80"})
    assert priced.exit_code == 0, priced.output
    lines = priced.stdout.splitlines()
    assert max(map(len, lines)) <= 80, lines
    assert lines[1].split() == ["policy", "cluster", "wall", "GPU-h", "cost", "step", "p50/p90/max"], lines[1]
    assert lines[2].split() == ["h", "$", "s"]
    out = json.loads(CliRunner().invoke(app, [*args, "--gpu-hour-price", "2.5", "--json"]).stdout)
    assert [line.split()[4] for line in lines[4:8]] == [f"{o['cost']:,.2f}" for o in out]
    hidden = next(x for x in lines if x.startswith("hidden to fit 80 columns: "))
    assert "cost" not in hidden
    free = CliRunner().invoke(app, args, env={"COLUMNS": "80"})  # no price: cost hides first, as before
    assert "cost" not in free.stdout.splitlines()[1]
    # a table too wide for the terminal even so (the README's, with its long step times, at 80)
    # hid the cluster column, and the rows on 8 and 16 GPUs read alike (a review of the README,
    # 6 Dec 2026): with several clusters it stays, priced or not
    for shown in (CliRunner().invoke(app, args, env={"COLUMNS": "60"}),
                  CliRunner().invoke(app, [*args, "--gpu-hour-price", "2.5"], env={"COLUMNS": "60"})):
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.splitlines()[1].split()[:2] == ["policy", "cluster"], shown.stdout
        assert "one_step_off  h100-llama3.1-8b-16gpu-disagg" in shown.stdout


def test_an_unpriced_forecast_shows_no_cost(model_file) -> None:
    """Without --gpu-hour-price the cost column read `0.00 $`, as if the run were free."""
    args = ["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync",
            "--cluster", "h100-llama3.1-8b", "--seeds", "1", "--wide"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    cost = lines[1].split().index("cost")
    assert lines[4].split()[cost] == "-", lines
    assert "cost: give --gpu-hour-price ($ per GPU-hour)" in r.stdout


def test_the_json_cost_is_null_without_a_price(model_file, tmp_path) -> None:
    """`forecast --json` wrote `cost: 0.0` without --gpu-hour-price, where the table prints `-`:
    a run priced at nothing read as a free run. It is null without a price (docs/metrics.md,
    "Forecast"), the number with one, and the --report table says `-` as the terminal does."""
    args = ["forecast", "--trace-model", str(model_file), "--steps", "2", "--policy", "sync",
            "--seeds", "1", "--json"]
    free = run([*args, "--report", str(tmp_path / "f.html")])
    assert free.exit_code == 0, free.output
    (out,) = json.loads(free.stdout)
    assert out["cost"] is None and out["gpu_hours"] > 0
    body = (tmp_path / "f.html").read_text()
    body = body[body.index('id="forecast-table"'):]
    head = re.findall(r"<th>([^<]*)</th>", body[: body.index("</thead>")])
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", body[: body.index("</tbody>")])
    row = dict(zip(head, cells, strict=True))
    assert row["cost ($)"] == "-" and row["gpus (GPUs)"] == str(out["gpus"])
    priced = run([*args, "--gpu-hour-price", "2.5"])
    assert priced.exit_code == 0, priced.output
    (paid,) = json.loads(priced.stdout)
    assert paid["cost"] > 0 and paid["cost"] == pytest.approx(2.5 * paid["gpu_hours"], abs=1e-5)
    assert paid["gpu_hours"] == out["gpu_hours"]


def test_a_trace_model_too_small_for_the_cluster_is_warned(tmp_path):
    """forecast --trace-model said nothing where simulate and forecast --trace warn."""
    model = tmp_path / "m.json"
    assert CliRunner().invoke(app, ["trace", "fit", "math-16k", "--out", str(model)]).exit_code == 0
    r = CliRunner().invoke(app, ["forecast", "--trace-model", str(model), "--steps", "2", "--prompts", "32",
                                 "--seeds", "1", "--cluster", "h100-llama3.1-8b-4gpu", "--policy", "sync"])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "warning: a step of m.json has 256 samples, filling 25% of the 1,024 decode slots of "
        "h100-llama3.1-8b-4gpu (4 engines x 256): every policy will mostly idle; try --cluster "
        "h100-llama3.1-8b-2gpu or more --prompts"]


def test_a_multi_turn_forecast_keeps_the_tool_figures(tmp_path):
    """forecast --json of an agentic trace had no tool_s or sandbox_wait_s, which simulate shows:
    a planner could not size the tool servers' pool from it."""
    trace = tmp_path / "retool.jsonl"
    r = CliRunner().invoke(app, ["trace", "synth", "agentic-retool", "--prompts", "8", "--steps", "2",
                                 "--out", str(trace)])
    assert r.exit_code == 0, r.output
    shape = ["--trace", str(trace), "--cluster", "h100-llama3.1-8b-1gpu", "--policy", "sync", "--json"]
    sim = CliRunner().invoke(app, ["simulate", *shape, "--out", str(tmp_path / "s")])
    fc = CliRunner().invoke(app, ["forecast", *shape])
    assert sim.exit_code == 0 and fc.exit_code == 0, sim.output + fc.output
    ran, forecast = json.loads(sim.stdout), json.loads(fc.stdout)[0]
    assert {k: forecast[k] for k in ("tool_calls", "tool_s", "sandbox_wait_s", "bubble_tool_ratio")} == {
        k: ran[k] for k in ("tool_calls", "tool_s", "sandbox_wait_s", "bubble_tool_ratio")}
    assert ran["tool_calls"] > 0


def test_a_drift_that_moves_the_lengths_twofold_over_the_forecast_is_said(model_file):
    # drift 0.01 a step: x2.2 by step 80 (79 steps of it), x1.8 by step 60 (said from x2 on)
    def drift_notes(steps):
        r = run(["forecast", "--trace-model", str(model_file), "--steps", str(steps), "--prompts", "4",
                 "--seeds", "1", "--policy", "sync", "--cluster", "h100-llama3.1-8b-1gpu"])
        assert r.exit_code == 0, r.output
        return [line for line in r.stderr.splitlines() if "drift" in line]

    assert drift_notes(80) == [
        f"note: {model_file.name}: the trace model's drift, 0.01 log-tokens a step, makes the responses of step 80 "
        "x2.2 those of step 1 before the cap clips them (each step moves a prompt's mean log-length by it): "
        "check it against your run's growth (trace fit --drift-from), or set drift to 0 in the model for "
        "lengths that do not grow"]
    assert drift_notes(60) == []


def test_a_trace_models_warning_counts_the_sequences_the_kv_cache_holds(model_file, tmp_path):
    # the fixed trace's warning did (its mean length); a trace model's counted max_num_seqs
    cluster = tmp_path / "verl.json"
    cluster.write_text('{"preset": "h100-qwen3-8b-16gpu", "max_num_seqs": 1024, "gpu_mem_util": 0.5}')
    r = run(["forecast", "--trace-model", str(model_file), "--steps", "2", "--prompts", "4", "--seeds", "1",
             "--policy", "sync", "--cluster", str(cluster)])
    assert r.exit_code == 0, r.output
    (warning,) = [line for line in r.stderr.splitlines() if line.startswith("warning: a step")]
    assert "the KV cache holds" in warning and "under max_num_seqs 1,024)" in warning


def test_a_policy_that_trains_part_of_each_group_is_said_to_train_less(tmp_path) -> None:
    # tail_batch with responses=2 trains 2 of each group of 4: its wall covers a quarter less
    # training per group, so it read faster than sync with no word (compare said it)
    trace = generate(dataclasses.replace(MODEL, prompts_per_step=8), 2, seed=1)
    write_trace(trace, tmp_path / "t.jsonl")
    args = ["forecast", "--trace", str(tmp_path / "t.jsonl"), "--policy", "sync", "--policy", "tb=tail_batch",
            "--set", "tb.responses=2", "--cluster", "h100-llama3.1-8b-2gpu"]
    out = json.loads(run([*args, "--json"]).stdout)
    assert [(o["policy"], o["samples_trained"], o["samples_total"]) for o in out] == [
        ("sync", 64, 64), ("tb", 32, 64)]
    r = run(args)
    assert r.exit_code == 0, r.output
    assert ("trained less: tb @ h100-llama3.1-8b-2gpu trained 32 of its 64 samples (50%), where another "
            "trained 64: a makespan that covers less training reads faster than it is; compare their "
            "learnable_tokens_per_s (--json)") in " ".join(r.output.split())  # (wrapped to the terminal)
