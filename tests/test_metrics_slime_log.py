"""``calibrate --from-metrics`` reads slime's console log: by default slime logs to no W&B or
TensorBoard, so its ``perf N: {...}`` lines are the one per-rollout record every run has.

The fixture (tests/fixtures/metrics/slime_console.log, written by make_slime_log.py) holds the
six rollouts of wandb_slime.csv: perf/train_time = 4 + 3e-5·T, sync median 2.5 s.

Run: pytest tests/test_metrics_slime_log.py
"""

from __future__ import annotations

import pytest
from metrics_helpers import FIX, PRESET, calibrate, trainer_fit, values

from sortedrl.calibration.metrics_read import read_metrics

LOG = FIX / "slime_console.log"


def test_slime_console_holds_what_its_wandb_export_does():
    metrics = read_metrics(LOG)
    assert metrics.step_column == "perf rollout_id" and metrics.notes == []
    export = read_metrics(FIX / "wandb_slime.csv")  # (repr keeps every digit: equal values)
    assert {k: metrics[k] for k in export} == dict(export)
    assert metrics["rollout/raw_reward"] == {i: 0.25 + i / 100 for i in range(6)}  # np.float64(...)
    assert metrics["perf/rollout_time"] == {i: 80.0 + i for i in range(6)}  # the rollout's line


def test_slime_console_fits_alone(tmp_path):
    fit = trainer_fit(tmp_path / "p.json", "--from-metrics", str(LOG))
    assert fit["columns"]["tokens"] == "perf/actor_train_tok_per_s x perf/actor_train_time"
    assert values(fit) == pytest.approx({"train_fix": 4.0, "train_per_token": 3e-5, "sync_s": 2.5}, rel=1e-9)


def test_slime_console_merges_only_with_another_console_log(tmp_path):
    code, lines = calibrate("--from-metrics", str(LOG), str(FIX / "wandb_slime.csv"), "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert code == 2 and lines[0].startswith(
        f"error: {FIX / 'wandb_slime.csv'}: steps numbered by 'rollout/step', but {LOG} by 'perf rollout_id'")


@pytest.mark.parametrize("line, message", [
    ("[t] x.py:1 - perf 9: {'perf/train_time': 'n/a', 'x': 1}", "line 1: metric 'perf/train_time': expected a "
                                                                "number, got \"'n/a'\""),
    ("[t] x.py:1 - perf 99999999999999999: {'perf/train_time': 1.0}", "line 1: 'perf 99999999999999999': not a "
                                                                      "rollout id below 2**53"),
])
def test_a_bad_perf_line_is_one_error_naming_it(tmp_path, line, message):
    bad = tmp_path / "slime.log"
    bad.write_text(line + "\n")
    code, lines = calibrate("--from-metrics", str(bad), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {bad}: {message}"])


def test_only_top_level_keys_are_read():
    # a list, a string holding ", '", nested dicts holding a metric's name: values, not metrics
    # (a nested 'perf/train_time': 30.0 replaced the rollout's 8.5, and the fit still succeeded)
    from sortedrl.calibration.metrics_slime_log import read_slime_log

    line = ("perf 3: {'rollout/lens': [1, 2], 'note': \"it's, 'perf/train_time': 99, 'x\", "
            "'perf/train_time': np.float64(8.5), 'per_source': [{'n': 1, 'perf/train_time': 30.0}], "
            "'d': {'a': 1, 'perf/update_weights_time': 9.0}, \"it's\": 0.5, 'perf/update_weights_time': 2.5, "
            "'tiny': -1.5e-05}")
    metrics = read_slime_log(line, "m.log")
    assert metrics == {"perf/train_time": {3: 8.5}, "perf/update_weights_time": {3: 2.5}, "it's": {3: 0.5},
                       "tiny": {3: -1.5e-05}}
    assert metrics.notes == []


def test_a_perf_line_cut_short_is_noted_and_rays_repeat_mark_read_through():
    from sortedrl.calibration.metrics_slime_log import read_slime_log

    lines = LOG.read_text().splitlines()
    cut = lines[5][:120]  # rollout 1's training line, wrapped by a log collector
    lines[5:6] = [cut, lines[5][120:]]
    lines[3] += " [repeated 2x across cluster]"  # Ray's deduplication mark after rollout 0's line
    metrics = read_slime_log("\n".join(lines), "m.log")
    assert metrics.notes == ["m.log: 1 'perf N: {...}' line(s) cut short, not read (line 6): wrapped or "
                             "truncated by a log collector?"]
    assert sorted(metrics["perf/train_time"]) == [0, 2, 3, 4, 5]
