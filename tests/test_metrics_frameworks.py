"""``calibrate --from-metrics`` on the layouts and names an audit found unread: verl's
one-step-off sync, its PPO critic and its console log, AReaL's ``timeperf/*`` in a W&B history
CSV, slime's ``perf/*`` on its ``rollout/step`` x-axis, several W&B panel exports merged by step,
and gzip. The fixtures (tests/fixtures/metrics, tests/fixtures/README.md) are built from known
terms, which each test recovers exactly."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
from metrics_helpers import FIX, PRESET, calibrate, values

from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.compare import cluster_for
from sortedrl.sim.cluster import load_cluster, preset

# -- verl one-step-off: sync_rollout_weights, not the update_weights inside it ---------------------


def test_one_step_off_reads_sync_rollout_weights_not_the_update_weights_inside_it():
    # both are logged (one_step_off_policy/ray_trainer.py: _fit_update_weights, timed as
    # sync_rollout_weights, has its own update_weights timer); update_weights was read
    fit = fit_metrics(read_metrics(FIX / "verl_one_step_off.jsonl"), "m")
    assert fit["columns"]["sync"] == "timing_s/sync_rollout_weights"
    # 5 + 3e-5·T; the median of 2.10, 2.00, 2.05, 2.20, 2.15, 2.05 is (2.05 + 2.10) / 2
    assert values(fit) == pytest.approx({"train_fix": 5.0, "train_per_token": 3e-5, "sync_s": 2.075}, rel=1e-12)


def test_one_step_off_on_a_colocated_cluster_keeps_the_onload_and_syncs_the_split_as_measured(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(FIX / "verl_one_step_off.jsonl"), "--cluster", PRESET,
                            "--out", str(out))
    assert code == 0, lines
    base = preset(PRESET)
    was = base.cost().sync_s
    now = dataclasses.replace(base, placement="disaggregated").cost().sync_s
    profile = load_cluster(str(out))
    cost = profile.cost()
    assert cost.sync_s == pytest.approx(2.075 * was / now, rel=1e-12)
    assert cost.onload_s == base.cost().onload_s  # a pure sync: the onload was zeroed before
    # one_step_off and async run on the split, which syncs in the measured time
    assert cluster_for(("disaggregated",), profile).cost().sync_s == pytest.approx(2.075, rel=1e-12)
    note = (f"  sync_s {2.075 * was / now:.4g} s (the measured 2.075 s x {was / now:.4g}): "
            "timing_s/sync_rollout_weights is verl's one-step-off sync between separate rollout and trainer GPUs; "
            "on this colocated cluster it is scaled by the preset's colocated / disaggregated syncs "
            f"({was:.4g} / {now:.4g} s), so the policies that run on the split ({PRESET}-disagg) sync in the "
            "measured time")
    assert note in lines
    assert json.loads(out.read_text())["fit"]["trainer"]["terms"]["sync_s"]["value"] == pytest.approx(2.075)


def test_one_step_off_on_a_disaggregated_cluster_is_its_sync(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"preset": PRESET, "placement": "disaggregated", "train_gpus": 2}))
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(FIX / "verl_one_step_off.jsonl"), "--cluster", str(cluster),
                            "--out", str(out))
    assert code == 0, lines
    assert load_cluster(str(out)).cost().sync_s == pytest.approx(2.075, rel=1e-12)
    assert not any("one-step-off" in x for x in lines)


def test_one_step_off_on_a_cluster_with_no_split_is_one_error(tmp_path):
    m = FIX / "verl_one_step_off.jsonl"
    code, lines = calibrate("--from-metrics", str(m), "--cluster", "h100-llama3.1-8b-1gpu", "--out",
                            str(tmp_path / "p.json"))
    assert (code, lines) == (2, [
        f"error: {m}: timing_s/sync_rollout_weights is a sync between separate rollout and trainer GPUs "
        "(verl's one-step-off trainer), but --cluster h100-llama3.1-8b-1gpu has no disaggregated split: give "
        "the disaggregated cluster the run used"])
    assert not (tmp_path / "p.json").exists()


# -- verl's console log, and its PPO critic ---------------------------------------------------------


@pytest.mark.parametrize("name", ["verl_console_critic.log", "run.txt", "run.log.gz"])
def test_verl_console_log_with_a_critic_recovers_the_terms(tmp_path, name):
    src = FIX / "verl_console_critic.log"
    path = src if name == src.name else tmp_path / name
    if path != src:
        body = src.read_bytes()
        path.write_bytes(gzip.compress(body, mtime=0) if name.endswith(".gz") else body)
    metrics = read_metrics(path)
    assert sorted(metrics["timing_s/ref"]) == [1, 2, 3, 4, 5]  # np.float64(...) read as its number
    assert "perf/throughput" not in metrics  # nan: not logged
    fit = fit_metrics(metrics, str(path))
    assert fit["columns"]["update"] == ["timing_s/update_actor", "timing_s/old_log_prob", "timing_s/ref",
                                        "timing_s/values", "timing_s/update_critic"]
    # actor 3 + 2.5e-5·T, critic (values, update_critic) 2 + 2e-5·T; the median of 1.0, 1.2, 1.1, 1.3, 1.15
    assert values(fit) == pytest.approx({"train_fix": 5.0, "train_per_token": 4.5e-5, "sync_s": 1.15}, rel=1e-9)


@pytest.mark.parametrize("line, message", [
    ("(TaskRunner pid=1) step:x - timing_s/ref:1.0", "line 2: 'step:x' is not a step number (a whole number "
                                                     "from 0 to below 2**53)"),
    ("step:3 - timing_s/ref:tensor(1.0)", "line 2: metric 'timing_s/ref': expected a number, got 'tensor(1.0)'"),
    ("step:3 - timing_s/ref", "line 2: 'timing_s/ref' is not key:value"),
])
def test_a_bad_console_line_is_one_error_naming_it(tmp_path, line, message):
    bad = tmp_path / "m.log"
    bad.write_text("step:1 - timing_s/ref:1.0 - other:text\n" + line + "\n")
    code, lines = calibrate("--from-metrics", str(bad), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {bad}: {message}"])


# -- AReaL: timeperf/* in a W&B history CSV (_step) -------------------------------------------------


def test_areal_history_csv_sums_its_trainer_timers():
    metrics = read_metrics(FIX / "areal_history.csv")
    assert sorted(metrics["timeperf/train_step"]) == [0, 1, 2, 3, 4, 5]  # the steps of _step
    assert not any(k.startswith("_") or not k for k in metrics)  # _runtime, _timestamp, the index: not metrics
    fit = fit_metrics(metrics, "areal_history.csv")
    # the update's unpadded count, not ppo_actor/n_tokens (the padded batch's, logged beside it)
    assert fit["columns"]["tokens"] == "ppo_actor/update/n_tokens"
    assert fit["columns"]["update"] == ["timeperf/train_step", "timeperf/recompute_logp", "timeperf/ref_logp",
                                        "timeperf/critic_train_step"]
    assert fit["columns"]["sync"] == "timeperf/update_weights"
    assert values(fit) == pytest.approx({"train_fix": 4.0, "train_per_token": 4e-5, "sync_s": 3.15}, rel=1e-9)


# -- slime: perf/* on rollout/step ---------------------------------------------------------------------


def test_slime_export_fits_train_time_and_the_token_rate():
    fit = fit_metrics(read_metrics(FIX / "wandb_slime.csv"), "wandb_slime.csv")
    assert fit["columns"]["update"] == ["perf/train_time"]  # it holds the log-probs and the training
    assert fit["columns"]["tokens"] == "perf/actor_train_tok_per_s x perf/actor_train_time"
    assert fit["columns"]["sync"] == "perf/update_weights_time"
    assert (fit["steps"], values(fit)) == (6, pytest.approx(
        {"train_fix": 4.0, "train_per_token": 3e-5, "sync_s": 2.5}, rel=1e-9))


def test_slime_without_train_time_sums_its_parts(tmp_path):
    lines = (FIX / "wandb_slime.csv").read_text().splitlines()
    keep = [i for i, h in enumerate(lines[0].split(",")) if "perf/train_time" not in h]
    path = tmp_path / "m.csv"
    path.write_text("".join(",".join(line.split(",")[i] for i in keep) + "\n" for line in lines))
    fit = fit_metrics(read_metrics(path), str(path))
    assert fit["columns"]["update"] == ["perf/actor_train_time", "perf/log_probs_time", "perf/ref_log_probs_time"]
    assert values(fit) == pytest.approx({"train_fix": 4.0, "train_per_token": 3e-5, "sync_s": 2.5}, rel=1e-9)


# -- several files merged by step -----------------------------------------------------------------------


PANELS = [FIX / "wandb_panel_ppo_train.csv", FIX / "wandb_panel_total_length.csv"]


def test_two_panel_exports_are_merged_by_step(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(PANELS[0]), "--from-metrics", str(PANELS[1]),
                            "--samples-per-step", "128", "--cluster", PRESET, "--out", str(out))
    assert code == 0, lines
    raw = json.loads(out.read_text())
    tr = raw["fit"]["trainer"]
    assert (tr["steps"], values(tr)) == (6, pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5}, rel=1e-9))
    assert tr["file"] == f"{PANELS[0]} + {PANELS[1]}"
    assert raw["sources"] == [str(p) for p in PANELS]


def test_two_files_giving_one_metric_two_values_at_a_step_is_one_error(tmp_path):
    other = tmp_path / "again.csv"
    text = PANELS[0].read_text().splitlines()
    text[2] = "2,12.0,12.0,12.0"  # step 2 logged 6 + 3e-5 x 180,000 = 11.4 s
    other.write_text("\n".join(text) + "\n")
    code, lines = calibrate("--from-metrics", str(PANELS[0]), "--from-metrics", str(other), "--samples-per-step",
                            "128", "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {other}: metric 'train/timing/ppo_train' at step 2: 12.0, but "
                                 f"{PANELS[0]} gives 11.4: which to fit is unclear"])


def test_a_metrics_file_given_twice_is_one_error(tmp_path):
    code, lines = calibrate("--from-metrics", str(PANELS[0]), "--from-metrics", str(PANELS[0]),
                            "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {PANELS[0]}: metrics file given twice; give each file once"])


def test_total_length_without_samples_per_step_says_only_the_flag_is_missing(tmp_path):
    code, lines = calibrate("--from-metrics", str(PANELS[0]), "--from-metrics", str(PANELS[1]),
                            "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [
        f"error: {PANELS[0]} + {PANELS[1]}: no tokens per step: needs perf/total_num_tokens or "
        "ppo_actor/update/n_tokens, or --samples-per-step N "
        "(the samples trained in one update) with the mean lengths this file logs (train/total_length): only "
        "--samples-per-step is missing"])


def test_a_gzip_file_that_does_not_decompress_is_one_error(tmp_path):
    bad = tmp_path / "m.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not deflate data" * 4)  # the magic number, then no gzip stream
    code, lines = calibrate("--from-metrics", str(bad), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: {bad}: gzip-compressed, but it does not decompress (")
    assert lines[0].endswith("): it is damaged or cut short")
