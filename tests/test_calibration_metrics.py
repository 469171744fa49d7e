"""``calibrate --from-metrics``: exact recovery of known trainer terms from a verl metrics JSONL
and a W&B CSV export (named for OpenRLHF, but with verl's length names: tests/fixtures/README.md;
tests/fixtures/metrics, built from the terms named there), profiles that load as clusters, and bad
layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster, preset

FIX = Path(__file__).parent / "fixtures" / "metrics"
runner = CliRunner()


def test_verl_jsonl_recovers_the_update_and_sync_terms():
    fit = fit_metrics(read_metrics(FIX / "verl_metrics.jsonl"), "verl_metrics.jsonl")
    terms = {k: v["value"] for k, v in fit["terms"].items()}
    assert terms == pytest.approx({"train_fix": 4.0, "train_per_token": 4.5e-5, "sync_s": 1.25}, rel=1e-9)
    assert fit["steps"] == 8
    assert fit["columns"]["update"] == ["timing_s/update_actor", "timing_s/old_log_prob", "timing_s/ref"]
    assert fit["columns"]["tokens"] == "perf/total_num_tokens"
    assert fit["update_mape_pct"] == pytest.approx(0.0, abs=1e-7)


def test_wandb_csv_export_recovers_terms_from_mean_lengths():
    metrics = read_metrics(FIX / "wandb_openrlhf.csv")
    assert "timing/ppo_train" in metrics and not any(k.endswith(("__MIN", "__MAX")) for k in metrics)
    fit = fit_metrics(metrics, "wandb_openrlhf.csv", samples_per_step=256)
    terms = {k: v["value"] for k, v in fit["terms"].items()}
    assert terms == pytest.approx({"train_fix": 6.0, "train_per_token": 2.0e-5, "sync_s": 0.85}, rel=1e-9)
    assert fit["steps"] == 5  # step 3 has no update time (an empty cell)


def test_cli_writes_a_profile_that_loads_as_a_cluster(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(FIX / "verl_metrics.jsonl"),
                            "--cluster", "h100-llama3.1-8b", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cl = load_cluster(str(out))
    base = preset("h100-llama3.1-8b")
    assert (cl.gpus, cl.tp, cl.placement, cl.max_num_seqs) == (8, 1, "colocated", 256)
    c = cl.cost()
    assert (c.train_fix, c.sync_s) == pytest.approx((4.0, 1.25))
    assert c.train_per_token == pytest.approx(4.5e-5)
    assert (c.step_fixed_s, c.weight_read_s, c.compute_s_per_seq) == (  # engine: the preset's
        base.cost().step_fixed_s, base.cost().weight_read_s, base.cost().compute_s_per_seq)
    raw = json.loads(out.read_text())
    assert "step_fixed_s" in raw["fit"]["from_preset"] and "train_fix" not in raw["fit"]["from_preset"]
    # the fitted form has no pair term: the preset's would add the attention pairs twice
    assert c.train_per_pair == 0.0 and "train_per_pair" not in raw["fit"]["from_preset"]


def test_simulated_updates_follow_the_fitted_form(tmp_path):
    # Each simulated update takes train_fix + train_per_token x its tokens, the form fitted (it
    # took 13-26% more: the preset's pair term was kept beside the fitted terms).
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(FIX / "verl_metrics.jsonl"),
                            "--cluster", "h100-llama3.1-8b-2gpu", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = tmp_path / "run"
    r = runner.invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--cluster", str(out),
                            "--timeline", "jsonl", "--out", str(run)])
    assert r.exit_code == 0, r.output
    trains = [json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines()
              if '"kind":"train"' in line]
    assert len(trains) == 4
    for t in trains:
        assert t["t_end"] - t["t"] == pytest.approx(4.0 + 4.5e-5 * t["tokens"], rel=1e-6)
    shown = runner.invoke(app, ["profile", "show", str(out)]).output
    assert "train_per_pair" in shown and "0: the metrics fit's per-token term holds it" in shown


def test_unknown_layout_lists_the_columns_found_and_needed(tmp_path):
    bad = tmp_path / "m.csv"
    bad.write_text("Step,loss,reward\n1,0.5,0.1\n2,0.4,0.2\n")
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(bad), "--cluster", "h100-llama3.1-8b",
                            "--out", str(out)])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"error: {bad}: no update time: needs one of timing_s/update_actor, timing/ppo_train, "
        "timeperf/train_step, perf/train_time, perf/actor_train_time (columns found: loss, reward)"]
    assert not out.exists()


def test_mean_lengths_without_samples_per_step_is_an_error(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(FIX / "wandb_openrlhf.csv"),
                            "--cluster", "h100-llama3.1-8b", "--out", str(out)])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "no tokens per step: needs perf/total_num_tokens" in r.output and "--samples-per-step" in r.output
    assert not out.exists()


@pytest.mark.parametrize("step", ["1e400", "nan", "6.5", "x", ""])
def test_a_step_that_is_not_a_whole_number_is_a_one_line_error(tmp_path, step):
    # "1e400" read as infinity used to end in a traceback (OverflowError in int()).
    lines = (FIX / "wandb_openrlhf.csv").read_text().splitlines()
    lines[6] = step + lines[6][lines[6].index(","):]
    bad = tmp_path / "m.csv"
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(bad), "--cluster", "h100-llama3.1-8b",
                            "--samples-per-step", "256", "--out", str(out)])
    assert (r.exit_code, r.output.strip().splitlines()) == (2, [
        f"error: {bad}: row 7: column 'Step': expected a whole step number, got {step!r}"])
    assert not out.exists()


def test_non_finite_csv_metrics_count_as_not_logged_as_in_jsonl(tmp_path):
    # a NaN or inf cell is skipped like an empty one (the JSONL reader skips non-finite values)
    lines = (FIX / "wandb_openrlhf.csv").read_text().splitlines()
    header = lines[0].split(",")
    col = header.index('"openrlhf-qwen2.5-7b-grpo - timing/ppo_train"')
    for row, value in ((2, "nan"), (5, "inf")):
        cells = lines[row].split(",")
        cells[col] = value
        lines[row] = ",".join(cells)
    bad = tmp_path / "m.csv"
    bad.write_text("\n".join(lines) + "\n")
    updates = read_metrics(bad)["timing/ppo_train"]
    clean = read_metrics(FIX / "wandb_openrlhf.csv")["timing/ppo_train"]
    assert updates == {k: v for k, v in clean.items() if k not in (2, 5)}
