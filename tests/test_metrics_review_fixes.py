"""``calibrate --from-metrics`` after a review: files on two step axes are not merged, AReaL's
critic forward pass is read, the files after one ``--from-metrics`` (or ``--from-vllm-bench``)
belong to it, a console key holding `` - ``, ``.gz`` names, a log of no ``step:N`` line, and a
conflict between files printed with every digit. Built from known terms (tokens T below),
which each test recovers exactly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from metrics_helpers import FIX, PRESET, TOKENS, calibrate, values

from sortedrl.calibration.file_options import spread
from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics, read_metrics_files, step_axis
from sortedrl.errors import ConfigError


def panel(path: Path, step: str, first: int, metric: str, cells: list[float]) -> Path:
    """A one-panel W&B chart export on x-axis ``step`` (numbered from ``first``)."""
    rows = "".join(f"{first + i},{v!r}\n" for i, v in enumerate(cells))
    path.write_text(f"{step},run - {metric}\n{rows}")
    return path


UPDATE = [6 + 3e-5 * t for t in TOKENS]  # train/timing/ppo_train: 6 s + 3e-5 s/token
LENGTH = [t / 128 for t in TOKENS]  # train/total_length of 128 samples an update


# -- 1. files on two step axes -------------------------------------------------------------------------


def test_files_on_two_step_axes_are_one_error_naming_both(tmp_path):
    # Step counts from 0, train/global_step from 1: merged by number, each update time met the
    # tokens of the update before (it fitted train_fix 10.7 s and train_per_token ~0, exit 0)
    a = panel(tmp_path / "a0.csv", "Step", 0, "train/timing/ppo_train", UPDATE)
    b = panel(tmp_path / "b1.csv", "train/global_step", 1, "train/total_length", LENGTH)
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(a), "--from-metrics", str(b), "--samples-per-step", "128",
                            "--cluster", PRESET, "--out", str(out))
    assert (code, lines) == (2, [
        f"error: {b}: steps numbered by 'train/global_step', but {a} by 'Step': two step counters (W&B's "
        "Step or _step; a framework's train/global_step or rollout/step) that need not start at the same "
        "number, so merging by step number could pair different steps; export both with the same x-axis"])
    assert not out.exists()


@pytest.mark.parametrize("axis, first", [("Step", 0), ("train/global_step", 1)])
def test_files_on_one_step_axis_are_merged_and_fit_exactly(tmp_path, axis, first):
    a = panel(tmp_path / "a.csv", axis, first, "train/timing/ppo_train", UPDATE)
    b = panel(tmp_path / "b.csv", axis, first, "train/total_length", LENGTH)
    merged = read_metrics_files([a, b])
    assert merged.step_column == axis
    fit = fit_metrics(merged, "m", samples_per_step=128)
    assert (fit["steps"], values(fit)) == (6, pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5},
                                                            rel=1e-9))


def test_step_axes_of_each_layout():
    # W&B's Step and _step and verl's step are one counter (verl sets W&B's step to its own)
    assert [step_axis(c) for c in ("Step", "step", "_step", "train/global_step", "run - train/global_step",
                                   "rollout/step")] == ["step", "step", "step", "train/global_step",
                                                        "train/global_step", "rollout/step"]
    assert read_metrics(FIX / "verl_metrics.jsonl").step_column == "step"
    assert read_metrics(FIX / "verl_console_critic.log").step_column == "step"
    assert read_metrics(FIX / "areal_history.csv").step_column == "_step"
    assert read_metrics(FIX / "wandb_slime.csv").step_column == "rollout/step"


def test_a_history_csv_on_step_merges_with_an_export_on_step(tmp_path):
    a = panel(tmp_path / "a.csv", "Step", 0, "train/timing/ppo_train", UPDATE)
    b = tmp_path / "h.csv"  # run.history().to_csv(): the index, _step, the metric
    b.write_text(",_step,train/total_length\n" + "".join(f"{i},{i},{v!r}\n" for i, v in enumerate(LENGTH)))
    fit = fit_metrics(read_metrics_files([a, b]), "m", samples_per_step=128)
    assert values(fit) == pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5}, rel=1e-9)


# -- 2. AReaL's critic forward pass --------------------------------------------------------------------


def test_areal_critic_values_is_added_to_the_update(tmp_path):
    lines = (FIX / "areal_history.csv").read_text().splitlines()
    path = tmp_path / "areal.csv"  # + timeperf/critic_values = 1 + 1e-5·T (rl_trainer.py: critic_values)
    path.write_text(f"{lines[0]},timeperf/critic_values\n" + "".join(
        f"{line},{1 + 1e-5 * t!r}\n" for line, t in zip(lines[1:], TOKENS, strict=True)))
    fit = fit_metrics(read_metrics(path), "areal.csv")
    assert fit["columns"]["update"] == ["timeperf/train_step", "timeperf/recompute_logp", "timeperf/ref_logp",
                                        "timeperf/critic_values", "timeperf/critic_train_step"]
    # the fixture's 4 + 4e-5·T, and the critic's forward pass
    assert values(fit) == pytest.approx({"train_fix": 5.0, "train_per_token": 5e-5, "sync_s": 3.15}, rel=1e-9)


# -- 3. the files after one flag -------------------------------------------------------------------------


def test_the_files_after_from_metrics_are_its_own(tmp_path):
    a = panel(tmp_path / "a.csv", "Step", 0, "train/timing/ppo_train", UPDATE)
    b = panel(tmp_path / "b.csv", "Step", 0, "train/total_length", LENGTH)
    out = tmp_path / "p.json"  # (it said: unexpected argument '.../b.csv')
    code, lines = calibrate("--from-metrics", str(a), str(b), "--samples-per-step", "128", "--cluster", PRESET,
                            "--out", str(out))
    assert code == 0, lines
    raw = json.loads(out.read_text())
    assert raw["sources"] == [str(a), str(b)]
    assert values(raw["fit"]["trainer"]) == pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5}, rel=1e-9)


def test_names_go_to_the_file_option_they_follow():
    # (after --from-vllm-bench X Y --from-metrics p q, q was read as a benchmark file)
    assert spread(["--from-vllm-bench", "x.json", "y.json", "--from-metrics", "p.csv", "q.csv", "--out", "o.json"]) \
        == ["--from-vllm-bench", "x.json", "--from-vllm-bench", "y.json", "--from-metrics", "p.csv",
            "--from-metrics", "q.csv", "--out", "o.json"]
    assert spread(["--from-metrics=p.csv", "q.csv", "--force", "r.csv"]) == \
        ["--from-metrics=p.csv", "--from-metrics", "q.csv", "--force", "r.csv"]
    assert spread(["--from-metrics", "p.csv", "--", "q.csv"]) == ["--from-metrics", "p.csv", "--", "q.csv"]


def test_a_name_after_another_option_is_one_error(tmp_path):
    a = panel(tmp_path / "a.csv", "Step", 0, "train/timing/ppo_train", UPDATE)
    code, lines = calibrate("--from-metrics", str(a), "--cluster", PRESET, "b.csv", "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, ["error: unexpected argument 'b.csv': give each file after --from-vllm-bench or "
                                 "--from-metrics (FILE ... or repeat the flag)"])


# -- 4. a console key holding " - " ----------------------------------------------------------------------


def console(path: Path, extra: str) -> Path:
    path.write_text("".join(f"step:{i + 1} - timing_s/update_actor:{u!r}{extra} - perf/total_num_tokens:{t}\n"
                            for i, (u, t) in enumerate(zip(UPDATE, TOKENS, strict=True))))
    return path


@pytest.mark.parametrize("extra, key, value", [
    (" - val-core/a - b/reward:0.5", "val-core/a - b/reward", 0.5),  # (it was "'val-core/a' is not key:value")
    (" - note:'a - b' - val-core/x - y - z:0.25", "val-core/x - y - z", 0.25),  # a quoted value holding one
])
def test_a_console_key_holding_a_dash_is_read_whole(tmp_path, extra, key, value):
    metrics = read_metrics(console(tmp_path / "run.log", extra))
    assert metrics[key] == dict.fromkeys(range(1, 7), value)
    fit = fit_metrics(metrics, "run.log")
    assert values(fit) == pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5}, rel=1e-9)


def test_a_piece_last_on_a_console_line_ends_the_value_before_it(tmp_path):
    bad = tmp_path / "run.log"
    bad.write_text("step:1 - timing_s/update_actor:1.5 - trailing\n")
    with pytest.raises(ConfigError) as e:
        read_metrics(bad)
    assert str(e.value) == f"{bad}: line 1: metric 'timing_s/update_actor': expected a number, got '1.5 - trailing'"


# -- 5. .gz names ---------------------------------------------------------------------------------------


def test_a_plain_file_named_gz_is_read_by_the_suffix_inside_and_noted(tmp_path):
    path = tmp_path / "m.jsonl.gz"  # (it said: unknown metrics format '.gz')
    path.write_bytes((FIX / "verl_one_step_off.jsonl").read_bytes())
    metrics = read_metrics(path)
    assert metrics.notes == [f"{path}: named .gz, but not gzip-compressed: read as plain text"]
    fit = fit_metrics(metrics, str(path))
    assert fit["notes"][0] == f"{path}: named .gz, but not gzip-compressed: read as plain text"
    assert values(fit) == pytest.approx({"train_fix": 5.0, "train_per_token": 3e-5, "sync_s": 2.075}, rel=1e-12)


def test_a_gzip_file_with_no_suffix_inside_says_to_name_its_format(tmp_path):
    path = tmp_path / "x.gz"  # (it said: unknown metrics format '')
    path.write_bytes(gzip.compress((FIX / "verl_one_step_off.jsonl").read_bytes(), mtime=0))
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [
        f"error: {path} (gzip-compressed): no format suffix inside .gz (known: .jsonl, .json, .csv, .log, .txt, "
        "each maybe gzip-compressed as .gz): name the file by its format, e.g. metrics.jsonl.gz"])


def test_a_binary_file_named_gz_that_is_not_gzip_says_so(tmp_path):
    path = tmp_path / "m.csv.gz"
    path.write_bytes(b"BZh91AY&SY\xff\xfe")  # bzip2, named .gz
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {path}: named .gz, but not gzip-compressed, and not UTF-8 text "
                                 "(byte 10)"])


def test_an_unknown_suffix_names_it(tmp_path):
    path = tmp_path / "m.parquet"
    path.write_text("x")
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [
        f"error: {path}: unknown metrics format '.parquet' (known: .jsonl, .json, .csv, .log, .txt, each maybe "
        "gzip-compressed as .gz): name the file by its format, e.g. metrics.jsonl.gz"])


# -- 6. a log of no step:N line -----------------------------------------------------------------------


def test_a_log_of_no_step_line_says_so(tmp_path):
    bad = tmp_path / "run.log"  # (it said: no metric values ... W&B's __MIN and __MAX columns)
    bad.write_text("INFO starting\nTraining Progress: 0%\n2025-01-01 10:00:00 step 1 loss 0.5\n")
    code, lines = calibrate("--from-metrics", str(bad), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {bad}: no 'step:N - key:value' line (verl's console logger's form), "
                                 "AReaL's 'Train step N/M done.' and its stats table, or slime's 'perf N: {...}' "
                                 "in this log"])


def test_a_bracketed_timestamp_before_step_is_read(tmp_path):
    path = console(tmp_path / "run.txt", "")
    path.write_text("".join(f"[2025-01-01 10:00:0{i}] [rank0] {line}\n"
                            for i, line in enumerate(path.read_text().splitlines())))
    fit = fit_metrics(read_metrics(path), "run.txt")
    assert (fit["steps"], values(fit)) == (6, pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5},
                                                            rel=1e-9))


# -- 7. a conflict printed with every digit ----------------------------------------------------------


def test_a_conflict_between_files_prints_every_digit(tmp_path):
    a = panel(tmp_path / "a.csv", "Step", 0, "train/timing/ppo_train", [8.6, 9.0])
    c = panel(tmp_path / "c1.csv", "Step", 0, "train/timing/ppo_train", [8.600000000000001, 9.0])
    code, lines = calibrate("--from-metrics", str(a), "--from-metrics", str(c), "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {c}: metric 'train/timing/ppo_train' at step 0: 8.600000000000001, "
                                 f"but {a} gives 8.6: which to fit is unclear"])


def test_the_files_after_each_flag_are_its_own_with_both_flags(tmp_path):
    # (q.csv, after --from-metrics p.csv, was read as a benchmark file)
    bench = [Path(__file__).parent / "fixtures" / "vllm_bench" / f"c{c}-r0.json" for c in (4, 16)]
    a = panel(tmp_path / "p.csv", "Step", 0, "train/timing/ppo_train", UPDATE)
    b = panel(tmp_path / "q.csv", "Step", 0, "train/total_length", LENGTH)
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-vllm-bench", *map(str, bench), "--from-metrics", str(a), str(b),
                            "--samples-per-step", "128", "--cluster", "h100-llama3.1-8b-1gpu-32seq", "--out", str(out))
    assert code == 0, lines
    raw = json.loads(out.read_text())
    assert raw["sources"] == [*map(str, bench), str(a), str(b)]
    assert [f["path"] for f in raw["fit"]["engine"]["files"]] == list(map(str, bench))
    assert values(raw["fit"]["trainer"]) == pytest.approx({"train_fix": 6.0, "train_per_token": 3e-5}, rel=1e-9)


def test_a_file_of_no_token_count_points_to_trace(tmp_path):
    # the error named slime's and OpenRLHF's metrics only, not --trace
    rows = [line.split(",") for line in (FIX / "areal_history.csv").read_text().splitlines()]
    keep = [j for j, name in enumerate(rows[0]) if not name.endswith("n_tokens")]
    path = tmp_path / "areal.csv"  # AReaL's history without its token counts
    path.write_text("".join(",".join(row[j] for j in keep) + "\n" for row in rows))
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(out))
    assert code == 2 and len(lines) == 1 and not out.exists()
    assert lines[0].startswith(f"error: {path}: no tokens per step: needs perf/total_num_tokens or "
                               "ppo_actor/update/n_tokens, or ")
    assert ("or give --trace with the run's length trace, which holds each step's tokens (columns found: "
            "ppo_actor/task_reward/avg, timeperf/critic_train_step, ") in lines[0]
