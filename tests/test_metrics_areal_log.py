"""``calibrate --from-metrics`` reads AReaL's own log (main.log): by default AReaL logs to no W&B
or TensorBoard, so its log's stats tables are the one per-step record every run has.

The fixture (tests/fixtures/metrics/areal_main.log, written by make_areal_log.py with AReaL's
tabulate_stats and log format, colour codes included) holds the six steps of areal_history.csv.

Run: pytest tests/test_metrics_areal_log.py
"""

from __future__ import annotations

import pytest
from metrics_helpers import FIX, PRESET, TOKENS, calibrate, trainer_fit, values

from sortedrl.calibration.metrics_read import read_metrics, read_metrics_files

LOG = FIX / "areal_main.log"


def test_areal_log_reads_each_steps_table_at_the_step_it_prints():
    metrics = read_metrics(LOG)
    assert metrics.step_column == "Train step" and metrics.notes == []
    # "Train step 1/6 done." is step 1 (W&B's step 0 since AReaL v1.0, 1 before)
    assert metrics["ppo_actor/update/n_tokens"] == dict(enumerate(map(float, TOKENS), 1))
    # every stat of the history, a step later, to the five significant digits ".4e" prints
    history = read_metrics(FIX / "areal_history.csv")
    assert {k: sorted(v) for k, v in metrics.items()} == {k: sorted(s + 1 for s in v) for k, v in history.items()}
    for name, column in history.items():
        assert metrics[name] == pytest.approx({s + 1: v for s, v in column.items()}, rel=5e-5)
    assert metrics["ppo_actor/n_tokens"][2] == 229380.0  # 229,376 printed as 2.2938e+05


def test_areal_log_fits_alone_as_its_wandb_history_does(tmp_path):
    fit = trainer_fit(tmp_path / "p.json", "--from-metrics", str(LOG))
    assert fit["columns"]["tokens"] == "ppo_actor/update/n_tokens"
    assert values(fit) == pytest.approx({"train_fix": 4.0, "train_per_token": 4e-5, "sync_s": 3.15}, rel=1e-9)


def test_areal_log_merges_only_with_another_areal_log(tmp_path):
    # which W&B step a "Train step N" was depends on AReaL's version (N - 1 from v1.0, N before)
    history = FIX / "areal_history.csv"
    code, lines = calibrate("--from-metrics", str(LOG), str(history), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert code == 2 and lines[0].startswith(f"error: {history}: steps numbered by '_step', but {LOG} by 'Train step'")
    # two logs of one run (its first steps, then the rest): merged by step
    text = LOG.read_text()
    cut = text.rindex("\n", 0, text.index("Train step 4/6")) + 1
    first, rest = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(text[:cut])
    rest.write_text(text[cut:])
    assert read_metrics_files([first, rest]) == read_metrics(LOG)


def test_a_ray_prefix_on_every_line_is_read_through():
    # a console captured under Ray: "(pid=...) " before every line, the table's too
    prefixed = "".join(f"(RLTrainer pid=77) {line}\n" for line in LOG.read_text().splitlines())
    from sortedrl.calibration.metrics_areal_log import read_areal_log

    assert read_areal_log(prefixed, "m.log") == read_metrics(LOG)


def test_a_resumed_log_reads_the_later_logging_of_a_step(tmp_path):
    text = LOG.read_text()
    start = text.index("Train step 5/6")
    start = text.rindex("\n", 0, start) + 1
    again = text[start:].replace("4.4000e+00", "9.9000e+00")  # (no step 5 or 6 holds 4.4: unchanged)
    step4 = text[text.rindex("\n", 0, text.index("Train step 4/6")) + 1:start]
    path = tmp_path / "main.log"  # resumed after step 3: steps 4-6 logged again, step 4 with other times
    path.write_text(text + step4.replace("6.8000e+00", "7.0000e+00") + again)
    metrics = read_metrics(path)
    assert metrics["timeperf/train_step"][4] == 7.0 and metrics["timeperf/train_step"][5] == 6.2
    assert metrics.notes == [f"{path}: 1 step(s) logged more than once with other values (a resumed run?): "
                             "the last logging of each is used"]


@pytest.mark.parametrize("cell, message", [
    ("not-a-number", "metric 'timeperf/train_step': expected a number, got 'not-a-number'"),
])
def test_a_bad_value_of_a_read_metric_is_one_error_naming_its_line(tmp_path, cell, message):
    text = LOG.read_text()
    path = tmp_path / "main.log"
    path.write_text(text.replace("6.8000e+00", cell, 1))
    line = 1 + text[:text.index("6.8000e+00")].count("\n")
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {path}: line {line}: {message}"])


def test_commit_lines_without_tables_are_one_error(tmp_path):
    path = tmp_path / "main.log"
    path.write_text("".join(line + "\n" for line in LOG.read_text().splitlines()
                            if "Train step" in line or "Stats (" in line))
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {path}: AReaL's log, but no stats table after its 'Train step N/M "
                                 "done.' and 'Stats (i/n):' lines (StatsLogger.commit's)"])
    assert not (tmp_path / "p.json").exists()


def test_tables_without_their_stats_line_are_one_error_naming_it(tmp_path):
    # StatsLogger.commit prints 'Stats (i/n):' before each table: a log without it is not read
    path = tmp_path / "main.log"
    path.write_text("".join(line + "\n" for line in LOG.read_text().splitlines() if "Stats (" not in line))
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {path}: AReaL's log, but no 'Stats (i/n):' line after its 'Train step "
                                 "N/M done.' lines (StatsLogger.commit prints one before each step's stats table)"])
    assert not (tmp_path / "p.json").exists()
