"""``calibrate --from-metrics`` on files laid out as the upstream trainers log them: each builder
below follows the upstream code it cites (verl-project/verl, OpenRLHF/OpenRLHF), from per-update
costs with known terms, and each test recovers those terms exactly or checks what the profile
says about a column it could not trust."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster, preset

runner = CliRunner()
PRESET = "h100-llama3.1-8b"  # colocated, 8 GPUs
FIX, PER_TOKEN, SAMPLES, PROMPT = 5.0, 3e-5, 256, 300.0


def _tokens(i: int) -> int:
    """Tokens of update i (1-based): spread from 200k to 570k."""
    return 200_000 + 37_000 * ((7 * i) % 11)


def _verl_update(i: int) -> dict:
    """The metrics of one verl update (ray_trainer.py: compute_timing_metrics' timing_s/*,
    compute_data_metrics' */mean, compute_throughout_metrics' perf/total_num_tokens): the update
    parts take FIX + PER_TOKEN x tokens in all."""
    T = _tokens(i)
    return {"training/global_step": i, "training/epoch": 0, "timing_s/gen": 40.0 + i,
            "timing_s/update_actor": 3.0 + 2e-5 * T, "timing_s/old_log_prob": 1.0 + 5e-6 * T,
            "timing_s/ref": 1.0 + 5e-6 * T, "timing_s/step": 80.0 + i, "perf/total_num_tokens": T,
            "prompt_length/mean": PROMPT, "response_length/mean": T / SAMPLES - PROMPT}


def _aggregate(updates: list[dict]) -> dict:
    """verl's fully-async MetricsAggregator (recipe/fully_async_policy/detach_utils.py,
    _get_aggregation_type): its "last" list, then "timing_s/" summed, "mean" averaged, "total"
    summed; and its special trainer/idle_ratio."""
    out = {}
    for key in dict.fromkeys(k for u in updates for k in u):  # a key some updates lack: over those with it
        vals = [u[key] for u in updates if key in u]
        if key == "training/global_step" or key.startswith("fully_async/count/"):
            out[key] = vals[-1]
        elif "timing_s/" in key or ("mean" not in key and "total" in key):
            out[key] = sum(vals)
        else:
            out[key] = sum(vals) / len(vals)
    out["trainer/idle_ratio"] = out["timing_s/gen"] / out["timing_s/step"]
    return out


def _write_jsonl(path: Path, rows: list[tuple[int, dict]]) -> Path:
    # verl's FileLogger (verl/utils/tracking.py): {"step": step, "data": data} a line
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in rows))
    return path


def fully_async_recipe(path: Path, k: int = 4, syncs: int = 6, tail: int = 2, tokens: bool = True) -> Path:
    """verl v0.6.1-v0.7.0 recipe/fully_async_policy/fully_async_trainer.py (fit,
    _trigger_parameter_sync_step): each update's metrics go to the aggregator; after every k-th
    the aggregate is logged at step = the new parameter version, then {wait_last_valid,
    param_sync} at the same step; the final sync (fit's end) logs the `tail` updates left."""
    rows, i = [], 0
    for version, n in enumerate([k] * syncs + [tail], 1):
        ups = []
        for _ in range(n):
            i += 1
            ups.append({**_verl_update(i), "fully_async/count/current_param_version": version - 1,
                        "fully_async/count/stale_samples_processed": 3 * i})
            if not tokens:
                del ups[-1]["perf/total_num_tokens"]
        rows += [(version, _aggregate(ups)), (version, {"timing_s/wait_last_valid": 0.01, "timing_s/param_sync": 2.5})]
    return _write_jsonl(path, rows)


def fully_async_experimental(path: Path, k: int = 4, syncs: int = 6) -> Path:
    """verl since 2026-01 verl/experimental/fully_async_policy/fully_async_trainer.py (fit_step):
    the sync and the aggregate's log come before the syncing update is added (in
    _fit_postprocess_step), so the first row holds k - 1 updates and each later one k, the sync's
    own timer landing in the next row as timing_s/timing_s/param_sync; the rollouter's
    reset_staleness timing is logged at the same step (_fit_update_weights)."""
    rows, i = [], 0
    for version in range(1, syncs + 1):
        ups = []
        for _ in range(k - 1 if version == 1 else k):
            i += 1
            ups.append({**_verl_update(i), "fully_async/count/current_param_version": version - 1})
        if version > 1:
            ups[0]["timing_s/timing_s/param_sync"] = 2.5  # the sync that closed the row before
        agg = _aggregate(ups)
        agg["fully_async/trainer/idle_ratio"] = agg.pop("trainer/idle_ratio")
        rows += [(version, {"fully_async/rollouter/idle_ratio": 0.1, "fully_async/rollouter/active_time": 30.0}),
                 (version, agg)]
    return _write_jsonl(path, rows)


def calibrate(*args: str) -> tuple[int, list[str]]:
    r = runner.invoke(app, ["calibrate", *args])
    return r.exit_code, r.output.splitlines()


def show(path: Path) -> list[str]:
    r = runner.invoke(app, ["profile", "show", str(path)])
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def terms(path: Path) -> dict:
    return {k: v["value"] for k, v in json.loads(path.read_text())["fit"]["trainer"]["terms"].items()}


# -- 1. verl fully-async: a row sums the updates between two syncs --------------------------------


def test_fully_async_rows_are_divided_into_their_updates(tmp_path):
    # A row of k = 4 updates was fitted as one: train_fix came out 4x (20 s for 5 s).
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(fully_async_recipe(tmp_path / "m.jsonl")), "--cluster", PRESET,
                            "--updates-per-row", "4", "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": FIX, "train_per_token": PER_TOKEN}, rel=1e-9)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    # the first row is left out (its count unknown); 5 rows of 4 and the last, of 2, are fitted
    assert (tr["steps"], tr["updates"], tr["updates_per_row"]) == (6, 22, 4)
    assert tr["update_mape_pct"] == pytest.approx(0.0, abs=1e-9)
    assert "  trainer terms from 6 rows of up to 4 updates; update time MAPE 0.0%; sync_s from the preset " \
           "(no sync column read)" in lines
    shown = show(out)
    assert any(x.startswith("trainer fit (") and "6 rows, 22 updates: up to 4 a row" in x for x in shown)
    assert ("  timing_s/param_sync not read: verl's fully-async trainer times pausing the rollouter (which "
            "waits for its in-flight rollouts) with the sync") in shown


def test_fully_async_mean_lengths_count_every_update_of_a_row(tmp_path):
    # without perf/total_num_tokens the row's tokens are k x samples x the averaged mean lengths
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(fully_async_recipe(tmp_path / "m.jsonl", tokens=False)),
                            "--cluster", PRESET, "--updates-per-row", "4", "--samples-per-step", str(SAMPLES),
                            "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": FIX, "train_per_token": PER_TOKEN}, rel=1e-9)


def test_fully_async_first_row_of_k_minus_1_updates_is_left_out(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(fully_async_experimental(tmp_path / "m.jsonl")),
                            "--cluster", PRESET, "--updates-per-row", "4", "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": FIX, "train_per_token": PER_TOKEN}, rel=1e-9)
    assert json.loads(out.read_text())["fit"]["trainer"]["updates"] == 20


def test_fully_async_without_updates_per_row_is_one_error_naming_the_keys(tmp_path):
    m = fully_async_recipe(tmp_path / "m.jsonl")
    code, lines = calibrate("--from-metrics", str(m), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [
        f"error: {m}: logged by verl's fully-async trainer (fully_async/count/current_param_version, "
        "fully_async/count/stale_samples_processed, timing_s/param_sync, ...): a row sums the updates between "
        "two weight syncs; give --updates-per-row K (its async_training.trigger_parameter_sync_step)"])
    assert not (tmp_path / "p.json").exists()


def test_updates_per_row_disagreeing_with_the_global_step_is_an_error(tmp_path):
    m = fully_async_recipe(tmp_path / "m.jsonl")
    code, lines = calibrate("--from-metrics", str(m), "--cluster", PRESET, "--updates-per-row", "2",
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {m}: training/global_step rises by up to 4 updates a row, not "
                                 "--updates-per-row 2"])


def test_updates_per_row_works_for_any_file(tmp_path):
    # verl's v1 trainers (verl/trainer/ppo/v1/trainer_base.py, step: parameter_sync_step updates a
    # logged step, timing_raw accumulated across them) mark nothing: the option alone says so
    rows = [(s, {k: v for k, v in _aggregate([_verl_update(2 * s - 1), _verl_update(2 * s)]).items()
                 if k != "trainer/idle_ratio"}) for s in range(1, 9)]
    m = _write_jsonl(tmp_path / "m.jsonl", rows)
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(m), "--cluster", PRESET, "--updates-per-row", "2", "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": FIX, "train_per_token": PER_TOKEN}, rel=1e-9)


@pytest.mark.parametrize("extra, message", [
    (["--updates-per-row", "0"], "--updates-per-row: must be >= 1, got 0"),
    (["--from-vllm-bench", "x.json", "--updates-per-row", "2"],
     "--updates-per-row: only with --from-metrics (the updates a logged row holds)"),
])
def test_bad_updates_per_row_is_one_error_line(tmp_path, extra, message):
    metrics = [] if "--from-vllm-bench" in extra else ["--from-metrics", str(tmp_path / "m.jsonl")]
    code, lines = calibrate(*metrics, *extra, "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {message}"])


@pytest.mark.parametrize("extra, given", [
    (["--repeats", "5", "--task", "sort-long"], "--repeats, --task"),
    (["--model", "tiny", "--max-num-seqs", "64"], "--model, --max-num-seqs"),
])
def test_runner_options_with_measurements_taken_elsewhere_are_one_error_line(tmp_path, extra, given):
    """The options of `calibrate --model`'s own runs were dropped without a word beside
    --from-metrics / --from-vllm-bench (exit 0)."""
    code, lines = calibrate("--from-metrics", str(tmp_path / "m.jsonl"), *extra, "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {given}: only with --model, without --from-vllm-bench / "
                                 "--from-metrics (they choose the measurements taken here)"])
    assert not (tmp_path / "p.json").exists()


# -- 2. which verl column is a weight sync ------------------------------------------------------------


def _one_step_off(path: Path) -> Path:
    """verl one_step_off_policy/ray_trainer.py (_fit_generate): the sync is timed alone as
    sync_rollout_weights; the update as in ray_trainer.py."""
    return _write_jsonl(path, [(i, {**_verl_update(i), "timing_s/sync_rollout_weights": 4.0 + 0.01 * (i % 3)})
                               for i in range(1, 9)])


def test_one_step_off_sync_rollout_weights_is_the_sync(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_one_step_off(tmp_path / "m.jsonl")), "--cluster", PRESET,
                            "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": FIX, "train_per_token": PER_TOKEN, "sync_s": 4.01}, rel=1e-9)
    assert "  sync = median of timing_s/sync_rollout_weights (spread 0.02 s)" in show(out)
    # a separate trainer's pure sync: the preset's onload stays
    assert load_cluster(str(out)).cost().onload_s == preset(PRESET).cost().onload_s


def test_verl_up_to_0_7_0_has_no_sync_column_and_the_profile_says_so(tmp_path):
    # ray_trainer.py of v0.7.0 times no sync (agent_loop.py generate_sequences wakes the rollout
    # inside timing_s/gen); timing_s/sync_weights, read before, is logged by no verl version
    rows = [(i, {**_verl_update(i), "timing_s/sync_weights": 9.0}) for i in range(1, 9)]
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_write_jsonl(tmp_path / "m.jsonl", rows)), "--cluster", PRESET,
                            "--out", str(out))
    assert code == 0, lines
    assert "sync_s" not in terms(out) and load_cluster(str(out)).cost().sync_s == preset(PRESET).cost().sync_s
    note = ("  verl v0.7.0 and earlier log no sync column: the sync (and the rollout's wake-up) is inside "
            "timing_s/gen")
    assert note in lines and note in show(out)
    assert "  no sync column read: sync_s is the preset's" in show(out)


# -- 3. a padded base: the fitted tokens are unpadded ----------------------------------------------


@pytest.mark.parametrize("padded, micro, shown", [(True, 0.0, "0"), (False, 4e6, "4e+06")])
def test_a_padded_base_takes_the_fitted_unpadded_form(tmp_path, padded, micro, shown):
    # the base's padding was kept beside terms fitted to unpadded tokens: the update below took
    # 127.8 s (train_padded) or 71.0 s (micro-batches) in the simulator for the fit's 70.9 s
    m = _one_step_off(tmp_path / "m.jsonl")
    first = tmp_path / "first.json"
    assert calibrate("--from-metrics", str(m), "--cluster", PRESET, "--out", str(first))[0] == 0
    base = json.loads(first.read_text())
    base["costs"].update(train_padded=padded, train_micro_pairs=micro)
    (tmp_path / "base.json").write_text(json.dumps(base))
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(m), "--cluster", str(tmp_path / "base.json"), "--out", str(out))
    assert code == 0, lines
    cost = load_cluster(str(out)).cost()
    lengths = [300 + (97 * i) % 3700 for i in range(1024)]  # a batch the fit's form prices exactly
    assert cost.update(lengths) == pytest.approx(FIX + PER_TOKEN * sum(lengths), rel=1e-9)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert {"train_padded", "train_micro_pairs", "train_per_pair"} <= set(tr["fixed_by_model"])
    lines = show(out)
    assert next(x for x in lines if x.startswith("  train_padded ")).endswith(
        "false: the metrics fit's tokens are unpadded")
    assert (f"  train_padded {str(padded).lower()} and train_micro_pairs {shown} of the base set to false and 0: "
            "the fitted tokens are unpadded") in lines


# -- 6. verl's colocated update_weights holds the onload -------------------------------------------------


def _colocated(path: Path) -> Path:
    """verl >= 0.7.1 ray_trainer.py (fit): update_weights times checkpoint_manager.update_weights,
    which for the colocated (naive) backend resumes the rollout's weights, syncs, and resumes its
    KV cache (engine_workers.py update_weights)."""
    return _write_jsonl(path, [(i, {**_verl_update(i), "timing_s/update_weights": 3.0}) for i in range(1, 9)])


def test_colocated_update_weights_holds_the_onload(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_colocated(tmp_path / "m.jsonl")), "--cluster", PRESET,
                            "--out", str(out))
    assert code == 0, lines
    cost = load_cluster(str(out)).cost()
    assert (cost.sync_s, cost.onload_s) == (3.0, 0.0)
    assert cost.offload_s == preset(PRESET).cost().offload_s  # the sleep after rollout is not in it
    shown = show(out)
    assert next(x for x in shown if x.startswith("  onload_s ")).endswith(
        "0: the fitted sync (verl's colocated update_weights) holds it")
    note = (f"  onload_s 0 (the base's {preset(PRESET).cost().onload_s:.4g} s): verl's colocated "
            "timing_s/update_weights resumes the rollout's weights and KV cache before the sync")
    assert note in shown and note in lines


def test_a_disaggregated_cluster_keeps_its_onload(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"preset": PRESET, "placement": "disaggregated", "train_gpus": 4}))
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_colocated(tmp_path / "m.jsonl")), "--cluster", str(cluster),
                            "--out", str(out))
    assert code == 0, lines
    assert "onload_s" not in json.loads(out.read_text())["fit"]["trainer"]["fixed_by_model"]


# -- 4, 5. OpenRLHF: train/ names, total_length, and the async trainer's broadcast ----------------------


OR_FIX, OR_PER_TOKEN, OR_SAMPLES = 6.0, 3e-5, 128


def _openrlhf_status(step: int, trainer: str) -> dict:
    """One step's status (ppo_trainer.py train_step: timing/make_experience, timing/ppo_train,
    timing/broadcast, _compute_rollout_stats' rollout/*; ppo_actor.py: the per-sample means
    response_length and total_length, prompt + response), then the trainer's own: the
    synchronous fit (ppo_trainer.py) adds timing/generation and timing/step_total, the sum of
    its timing/*; the async TrainingActor.fit (ppo_trainer_async.py) the same keys with
    step_total its loop's wall time and a broadcast that first waited on vllm_lock for the
    generation in flight; before 2026-03-23 the async trainer logged neither."""
    T = _tokens(step)
    wait = 30.0 + 3.0 * (step % 4) if trainer != "sync" else 0.0
    s = {"policy_loss": 0.01, "response_length": T / OR_SAMPLES - 250.0, "total_length": T / OR_SAMPLES,
         "timing/make_experience": 1.5 + 5e-6 * T, "timing/ppo_train": 4.5 + 2.5e-5 * T,
         "timing/broadcast": 2.0 + wait, "rollout/response_length_mean": T / OR_SAMPLES - 250.0}
    if trainer == "sync":
        s["timing/generation"] = 50.0 + step
        s["timing/step_total"] = sum(v for k, v in s.items() if k.startswith("timing/"))
    elif trainer == "async":
        s["timing/generation"] = 50.0 + step
        s["timing/step_total"] = s["timing/make_experience"] + s["timing/ppo_train"] + s["timing/broadcast"] + 0.4
    return s


def _wandb_export(path: Path, trainer: str, x_axis: str = "train/global_step") -> Path:
    """logging_utils.py WandbLogger.log_train: every key as train/<key> with train/global_step,
    the x-axis of train/* (define_metric); the samples table is its own wandb.log call, so W&B's
    Step rises by 2 a training step. A W&B chart's "Export CSV": the x-axis column, then
    "<run> - <metric>" with its __MIN/__MAX buckets."""
    run, steps = "orl-grpo", range(1, 11)
    rows = [{f"train/{k}": v for k, v in {**_openrlhf_status(s, trainer), "global_step": s}.items()} for s in steps]
    names = [k for k in rows[0] if k != "train/global_step"]
    header = [x_axis] + [f"{run} - {n}{b}" for n in names for b in ("", "__MIN", "__MAX")]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for s, r in zip(steps, rows, strict=True):
            w.writerow([s if x_axis == "train/global_step" else 2 * s] + [repr(r[n]) for n in names for _ in range(3)])
    return path


def test_openrlhf_wandb_export_with_train_prefix_and_total_length(tmp_path):
    # "train/timing/ppo_train" was not an update time, and no Step column was an error
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_wandb_export(tmp_path / "m.csv", "sync")), "--cluster", PRESET,
                            "--samples-per-step", str(OR_SAMPLES), "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": OR_FIX, "train_per_token": OR_PER_TOKEN, "sync_s": 2.0},
                                       rel=1e-9)
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert tr["columns"] == {"update": ["train/timing/ppo_train", "train/timing/make_experience"],
                             "tokens": f"{OR_SAMPLES} x train/total_length", "sync": "train/timing/broadcast"}
    # the synchronous trainer: a pure sync (on this colocated preset with the weights' wake-up in it,
    # whose note tests/test_openrlhf_colocated.py checks; the pair term's: tests/test_trainer_fit_roundtrip.py)
    assert [n for n in tr.get("notes", []) if not n.startswith(("onload_s 0 ", "train_per_pair 0 "))] == []
    assert "sync_upper_bound" not in tr


def test_openrlhf_export_by_wandb_step_reads_the_same(tmp_path):
    a = _wandb_export(tmp_path / "a.csv", "sync")
    b = _wandb_export(tmp_path / "b.csv", "sync", x_axis="Step")
    for m in (a, b):
        out = tmp_path / f"{m.stem}.json"
        assert calibrate("--from-metrics", str(m), "--cluster", PRESET, "--samples-per-step", str(OR_SAMPLES),
                         "--out", str(out))[0] == 0
    assert terms(tmp_path / "a.json") == pytest.approx(terms(tmp_path / "b.json"), rel=1e-12)


def test_openrlhf_async_broadcast_is_not_taken_as_the_sync(tmp_path):
    # its broadcast waited on vllm_lock for the generation: sync_s came out 33-41 s for 2 s
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_wandb_export(tmp_path / "m.csv", "async")), "--cluster", PRESET,
                            "--samples-per-step", str(OR_SAMPLES), "--out", str(out))
    assert code == 0, lines
    assert terms(out) == pytest.approx({"train_fix": OR_FIX, "train_per_token": OR_PER_TOKEN}, rel=1e-9)
    assert load_cluster(str(out)).cost().sync_s == preset(PRESET).cost().sync_s
    note = ("  train/timing/broadcast not read: OpenRLHF's async trainer (timing/step_total is its loop's wall "
            "time, not the sum of its phases) times the wait for the generation in flight (vllm_lock) with the "
            "broadcast")
    assert note in lines and note in show(out)


def test_openrlhf_broadcast_without_step_total_is_an_upper_bound_and_said_so(tmp_path):
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(_wandb_export(tmp_path / "m.csv", "async-2026-03-19")),
                            "--cluster", PRESET, "--samples-per-step", str(OR_SAMPLES), "--out", str(out))
    assert code == 0, lines
    assert terms(out)["sync_s"] == pytest.approx(2.0 + 30.0 + 4.5)  # the median of the waits and the sync
    note = ("  sync_s is an upper bound: train/timing/broadcast of OpenRLHF's async trainer includes the wait for "
            "the generation in flight, and this file (no timing/step_total) does not say which trainer logged it")
    shown = show(out)
    assert note in lines and note in shown
    assert "  sync = median of train/timing/broadcast (spread 9 s; an upper bound)" in shown


def test_a_global_step_that_does_not_rise_is_one_error_line(tmp_path):
    m = fully_async_recipe(tmp_path / "m.jsonl")
    rows = [json.loads(x) for x in m.read_text().splitlines()]
    rows[4]["data"]["training/global_step"] = rows[2]["data"]["training/global_step"]  # row 3 repeats row 2's
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, lines = calibrate("--from-metrics", str(m), "--cluster", PRESET, "--updates-per-row", "4",
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {m}: training/global_step at step 3: 8 after 8 in the row before: "
                                 "expected a rise of a whole number of updates, 1 or more"])
