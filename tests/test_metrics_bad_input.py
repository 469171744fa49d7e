"""Bad input to ``calibrate --from-metrics``, ``trace fit --drift-from``, ``--cluster PROFILE``
and ``profile show`` that an audit found read silently: a metric in two columns, rows cut at a
comma, steps that are no step numbers, a ``training/global_step`` of the wrong type, a profile's
counts and settings coerced, and hand-edited fit records printed as if fitted. Each is one error
line naming the file and the field, row or column, exit 2, nothing written. A step logged again
with other values (a run resumed from an earlier checkpoint into the same log) is read from its
last logging, with one note for the file."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.cli import app
from sortedrl.errors import ConfigError, TraceError
from sortedrl.sim.cluster import load_cluster
from sortedrl.traces import write_trace
from sortedrl.traces.model import TraceModel, generate
from sortedrl.traces.wandb_drift import drift_from_wandb, read_wandb_drift

FIX = Path(__file__).parent / "fixtures"
VERL = FIX / "metrics" / "verl_metrics.jsonl"
WANDB = FIX / "metrics" / "wandb_openrlhf.csv"
RUN = "openrlhf-qwen2.5-7b-grpo"
runner = CliRunner()
MODEL = TraceModel(max_response_len=8192, group_size=8, prompts_per_step=64, mu0=math.log(1500),
                   sigma_between=0.6, sigma_within=0.5, drift=0.004, runaway_share=0.01,
                   prompt_median=200.0, prompt_sigma=0.3, prompt_min=20, prompt_max=1000)


def calibrate_error(tmp_path: Path, metrics: Path, *extra: str) -> str:
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(metrics), "--cluster", "h100-llama3.1-8b",
                            "--samples-per-step", "256", *extra, "--out", str(out)])
    assert r.exit_code == 2 and not out.exists() and "Traceback" not in r.output, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {metrics}: "), r.output
    return lines[0].removeprefix(f"error: {metrics}: ")


def csv_lines() -> list[str]:
    return WANDB.read_text().splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# -- calibrate --from-metrics -----------------------------------------------------------------------


def test_a_metric_in_two_columns_is_one_error_naming_both(tmp_path):
    lines = csv_lines()
    lines[0] += f',"{RUN} - timing/ppo_train"'
    lines[1:] = [x + ",99" for x in lines[1:]]
    bad = write(tmp_path / "m.csv", lines)
    assert calibrate_error(tmp_path, bad) == (
        f"columns 2 ('{RUN} - timing/ppo_train') and 14 ('{RUN} - timing/ppo_train') both hold metric "
        "'timing/ppo_train': which to fit is unclear")


def repeated_note(path: Path, steps: int) -> str:
    return (f"{path}: {steps} step(s) logged more than once with other values (a resumed run?): the last "
            "logging of each is used")


def test_a_step_logged_again_with_another_value_keeps_the_last(tmp_path):
    # a run resumed from the checkpoint of step 2 logs steps 3 and 4 again: the later rows are the run's
    lines = VERL.read_text().splitlines()
    assert '"timing_s/update_actor": 10.45' in lines[2] and '"step": 4,' in lines[3]
    again = [lines[2].replace('"timing_s/update_actor": 10.45', '"timing_s/update_actor": 20.45'),
             lines[3].replace('"perf/total_num_tokens": ', '"perf/total_num_tokens": 1')]
    assert again[1] != lines[3]
    bad = write(tmp_path / "m.jsonl", [*lines, *again])
    last = write(tmp_path / "last.jsonl", [*lines[:2], *again, *lines[4:]])  # the run that went on
    read = read_metrics(bad)
    assert read["timing_s/update_actor"][3] == 20.45 and read == read_metrics(last)
    assert read.notes == [repeated_note(bad, 2)] and read_metrics(last).notes == []
    fit, want = fit_metrics(read, str(bad)), fit_metrics(read_metrics(last), str(last))
    assert fit["terms"] == want["terms"] and fit["notes"] == [repeated_note(bad, 2), *want.get("notes", [])]
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(bad), "--cluster", "h100-llama3.1-8b", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.count("logged more than once") == 1 and f"  {repeated_note(bad, 2)}\n" in r.output
    profile = json.loads(out.read_text())["fit"]["trainer"]
    assert profile["notes"][0] == repeated_note(bad, 2)
    assert profile["terms"]["train_fix"] == want["terms"]["train_fix"]
    rows = csv_lines()
    assert rows[2].startswith("2,12.5536,")
    bad = write(tmp_path / "m.csv", [*rows, rows[2].replace("2,12.5536,", "2,19.5,", 1)])
    last = write(tmp_path / "last.csv", [*rows[:2], rows[2].replace("2,12.5536,", "2,19.5,", 1), *rows[3:]])
    read = read_metrics(bad)
    assert read["timing/ppo_train"][2] == 19.5 and read == read_metrics(last)
    assert read.notes == [repeated_note(bad, 1)]
    assert fit_metrics(read, str(bad), samples_per_step=256)["terms"] == (
        fit_metrics(read_metrics(last), str(last), samples_per_step=256)["terms"])


def test_a_step_logged_again_with_other_values_only_of_metrics_no_fit_reads_is_not_noted(tmp_path):
    # W&B's history holds every metric: a step whose entropy or loss was logged twice, the fit's
    # columns once (or the same twice), is no resumed run of the fit's columns
    lines = VERL.read_text().splitlines()
    assert '"actor/entropy": 0.58' in lines[2]
    again = write(tmp_path / "m.jsonl", [*lines, lines[2].replace('"actor/entropy": 0.58', '"actor/entropy": 0.7')])
    read = read_metrics(again)
    assert read["actor/entropy"][3] == 0.7 and read.notes == []
    assert fit_metrics(read, str(again))["terms"] == fit_metrics(read_metrics(VERL), str(VERL))["terms"]
    assert not any("logged more than once" in n for n in fit_metrics(read, str(again)).get("notes", []))


def test_a_step_logged_again_with_the_same_values_is_read_once(tmp_path):
    lines = VERL.read_text().splitlines()
    again = write(tmp_path / "m.jsonl", [*lines, lines[2]])
    assert read_metrics(again) == read_metrics(VERL) and read_metrics(again).notes == []
    assert fit_metrics(read_metrics(again), str(again))["steps"] == 8


def test_two_step_columns_that_disagree_are_an_error(tmp_path):
    lines = csv_lines()
    lines[0] = '"Step","step",' + lines[0].split(",", 1)[1]
    lines[1:] = [f"{x.split(',')[0]},{x.split(',')[0]},{x.split(',', 1)[1]}" for x in lines[1:]]
    same = write(tmp_path / "same.csv", lines)
    assert fit_metrics(read_metrics(same), str(same), samples_per_step=256)["steps"] == 5
    lines[3] = "3,13," + lines[3].split(",", 2)[2]
    bad = write(tmp_path / "m.csv", lines)
    assert calibrate_error(tmp_path, bad) == ("row 4: columns 'Step' and 'step' give steps 3 and 13: which "
                                              "to read is unclear")


@pytest.mark.parametrize("cut", [lambda x: ",".join(x.split(",")[:3]), lambda x: x + ",1"])
def test_a_row_of_another_length_than_the_header_is_an_error(tmp_path, cut):
    lines = csv_lines()
    lines[3] = cut(lines[3])
    bad = write(tmp_path / "m.csv", lines)
    cells = len(lines[3].split(","))
    assert calibrate_error(tmp_path, bad) == f"row 4: {cells} cells, but the header has 13 columns"


def test_a_cell_past_the_csv_modules_limit_is_one_error_naming_the_row(tmp_path):
    lines = csv_lines()  # (it was a _csv.Error traceback)
    cells = lines[3].split(",")
    cells[-1] = "7" * 200_000
    bad = write(tmp_path / "m.csv", [*lines[:3], ",".join(cells), *lines[4:]])
    assert calibrate_error(tmp_path, bad) == (
        "row 4: not CSV (field larger than field limit (131072))")


def test_a_header_without_rows_says_so_not_that_no_column_was_found(tmp_path):
    bad = write(tmp_path / "m.csv", csv_lines()[:1])  # (it said "columns found: none")
    assert calibrate_error(tmp_path, bad) == (
        "no metric values: no row holds a number in a metric column (W&B's __MIN and __MAX "
        "columns are not read)")


@pytest.mark.parametrize("column", ["prompt_length/mean", "response_length/mean"])
def test_a_negative_mean_length_is_refused_though_the_sum_is_positive(tmp_path, column):
    lines = csv_lines()
    at = next(i for i, h in enumerate(lines[0].split(",")) if h == f'"{RUN} - {column}"')
    cells = lines[2].split(",")
    cells[at] = "-50"
    bad = write(tmp_path / "m.csv", [lines[0], lines[1], ",".join(cells), *lines[3:]])
    assert calibrate_error(tmp_path, bad) == f"{column} at step 2: -50 is not from 0 to 1e+15"


@pytest.mark.parametrize(("value", "message"), [
    ('"x"', "expected a number, got 'x'"), ("true", "expected a number, got True"),
    ("2.5", "expected a whole number of updates, got 2.5"),
    ("-2", "expected a whole number of updates, got -2")])
def test_a_global_step_of_the_wrong_type_is_an_error(tmp_path, value, message):
    lines = [json.dumps({"step": s, "data": {"fully_async/count": 1, "training/global_step": 2 * s,
                                             "timing_s/update_actor": 3.0 + s, "perf/total_num_tokens": 1000 * s}})
             for s in range(1, 5)]
    lines[1] = lines[1].replace('"training/global_step": 4', f'"training/global_step": {value}')
    bad = write(tmp_path / "m.jsonl", lines)
    assert calibrate_error(tmp_path, bad, "--updates-per-row", "2") == (
        f"line 2: metric 'training/global_step': {message}")


@pytest.mark.parametrize("step", ["-1", "9007199254740992"])
def test_a_step_out_of_range_is_an_error(tmp_path, step):
    lines = VERL.read_text().splitlines()
    lines[0] = lines[0].replace('"step": 1,', f'"step": {step},')
    bad = write(tmp_path / "m.jsonl", lines)
    assert calibrate_error(tmp_path, bad) == (f"line 1: field 'step': {step} is not a step number (a whole "
                                              "number from 0 to below 2**53)")
    rows = csv_lines()
    rows[1] = step + rows[1][1:]
    bad = write(tmp_path / "m.csv", rows)
    assert calibrate_error(tmp_path, bad) == f"row 2: column 'Step': expected a whole step number, got '{step}'"


# -- trace fit --drift-from -------------------------------------------------------------------------

HEAD = '"Step","r - response_length/mean"'


def drift_error(tmp_path: Path, lines: list[str]) -> str:
    csv = write(tmp_path / "w.csv", lines)
    trace, out = tmp_path / "t.jsonl", tmp_path / "m.json"
    write_trace(generate(MODEL, 1, seed=0, prompts=64), trace)
    r = runner.invoke(app, ["trace", "fit", str(trace), "--out", str(out), "--drift-from", str(csv)])
    assert r.exit_code == 2 and not out.exists() and "Traceback" not in r.output, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {csv}: "), r.stderr
    return r.stderr.strip().removeprefix(f"error: {csv}: ")


@pytest.mark.parametrize(("lines", "message"), [
    ([f'{HEAD},"r - response_length/mean"', "1,1000,2000", "2,1010,2000"],
     "columns 2 ('r - response_length/mean') and 3 ('r - response_length/mean') hold one metric: which "
     "to read is unclear"),
    ([HEAD, "1,1000", "2,1010", "3", "4,1030"], "line 4: 1 cell, but the header has 2 columns"),
    ([HEAD, "1,1000", "2,1010,7", "4,1030"], "line 3: 3 cells, but the header has 2 columns"),
    ([HEAD, "1,1000", "2,1010", "1e308,1020"],
     "line 4: column 'Step': '1e308' is not a step number (a whole number from 0 to below 2**53)"),
    ([HEAD, "1,1000", "-1,1010", "3,1020"],
     "line 3: column 'Step': '-1' is not a step number (a whole number from 0 to below 2**53)"),
    ([HEAD, "1,1000", "2.5,1010", "3,1020"],
     "line 3: column 'Step': '2.5' is not a step number (a whole number from 0 to below 2**53)"),
])
def test_a_drift_export_it_cannot_read_is_one_error_line(tmp_path, lines, message):
    assert drift_error(tmp_path, lines) == message


def test_a_step_logged_again_with_the_same_value_is_read_once(tmp_path):
    once = drift_from_wandb(write(tmp_path / "a.csv", [HEAD, "1,1000", "2,1010", "3,1030"]), MODEL)
    twice = read_wandb_drift(write(tmp_path / "b.csv", [HEAD, "1,1000", "2,1010", "2,1010", "3,1030"]), MODEL)
    assert twice.fields == once and not any("logged more than once" in n for n in twice.notes)


def test_a_step_logged_again_with_other_values_keeps_the_last(tmp_path):
    # resumed from the checkpoint of step 2 into the same run: steps 3 and 4 logged again, the later rows kept
    head = f'{HEAD},"r - response_length/clip_ratio","r - response_length/max"'
    first = ["1,1000,0.01,8000", "2,1010,0.01,8000", "3,1500,0.5,8192", "4,1600,0.6,8192"]
    resumed = ["3,1020,0.02,8100", "4,1030,0.02,8100", "5,1040,0.03,8150"]
    csv = write(tmp_path / "w.csv", [head, *first, *resumed])
    want = drift_from_wandb(write(tmp_path / "last.csv", [head, *first[:2], *resumed]), MODEL)
    got = read_wandb_drift(csv, MODEL)
    assert got.fields == want and set(want) == {"drift", "runaway_drift", "max_drift"}
    note = (f"note: {csv}: 2 step(s) logged more than once with other values (a resumed run?): the last "
            "logging of each is used")
    assert [n for n in got.notes if "logged more than once" in n] == [note]
    trace = tmp_path / "t.jsonl"
    write_trace(generate(MODEL, 1, seed=0, prompts=64), trace)
    fitted = {}
    for name in ("w.csv", "last.csv"):
        out = tmp_path / f"{name}.json"
        r = runner.invoke(app, ["trace", "fit", str(trace), "--out", str(out), "--drift-from", str(tmp_path / name),
                                "--json"])
        assert r.exit_code == 0, r.output
        fitted[name] = {k: json.loads(out.read_text())[k] for k in want}
        assert r.stderr.splitlines().count(note) == (name == "w.csv") and "logged more than once" not in r.stdout
    assert fitted["w.csv"] == fitted["last.csv"]


def test_large_steps_fit_without_a_numpy_warning(tmp_path):
    # steps near 2**53 made np.polyfit warn "Polyfit may be poorly conditioned" on stderr
    base = 2**52
    csv = write(tmp_path / "w.csv", [HEAD, *(f"{base + s},{1000 * math.exp(0.004 * s):.6f}" for s in range(4))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drift = drift_from_wandb(csv, MODEL)["drift"]
    small = drift_from_wandb(write(tmp_path / "s.csv", [HEAD, *(f"{s},{1000 * math.exp(0.004 * s):.6f}"
                                                                  for s in range(4))]), MODEL)["drift"]
    assert drift == pytest.approx(small, rel=1e-9)
    with pytest.raises(TraceError, match=r"x\.csv: line 4: column 'Step': '1e308' is not a step "
                       r"number \(a whole number from 0 to below 2\*\*53\)$"):
        drift_from_wandb(write(tmp_path / "x.csv", [HEAD, "1,1000", "2,1010", "1e308,1020"]), MODEL)


# -- --cluster PROFILE and profile show -------------------------------------------------------------


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("p") / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(VERL), "--cluster", "h100-llama3.1-8b",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: p["engine_config"].update(max_num_seqs=True), "field 'engine_config.max_num_seqs': expected int, got True"),
    (lambda p: p["engine_config"].update(max_num_seqs=2.9), "field 'engine_config.max_num_seqs': expected int, got 2.9"),
    (lambda p: p["engine_config"].update(max_num_seqs="256"),
     "field 'engine_config.max_num_seqs': expected int, got '256'"),
    (lambda p: p["cluster"].update(gpu_mem_utl=0.8), "field 'cluster': unknown gpu_mem_utl"),
    (lambda p: p["cluster"].update(chunked_prefill="yes"), "field 'cluster.chunked_prefill': expected bool, got 'yes'"),
    (lambda p: p["costs"].update(experts=2.5), "field 'costs.experts': expected a whole number, got 2.5"),
])
def test_a_profile_as_cluster_coerces_nothing(tmp_path, profile, edit, message):
    raw = json.loads(json.dumps(profile))
    edit(raw)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as e:
        load_cluster(str(bad))
    assert str(e.value) == f"{bad}: {message}"


def test_a_cluster_file_count_with_a_fraction_is_an_error(tmp_path):
    bad = tmp_path / "c.json"
    costs = json.loads((FIX / "cpu-profile.json").read_text())["costs"]
    bad.write_text(json.dumps({"preset": "h100-llama3.1-8b", "costs": {**costs, "experts": 2.5}}))
    with pytest.raises(ConfigError) as e:
        load_cluster(str(bad))
    assert str(e.value) == f"{bad}: field 'costs.experts': expected a whole number, got 2.5"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda p: p.update(sortedrl_profile=999), "field 'sortedrl_profile': format 999 is not 1"),
    (lambda p: p["fit"]["trainer"].update(steps="x"), "field 'fit.trainer.steps': expected a whole number >= 1, got 'x'"),
    (lambda p: p["fit"]["trainer"].update(updates_per_row=0),
     "field 'fit.trainer.updates_per_row': expected a whole number >= 1, got 0"),
    (lambda p: p["fit"]["trainer"].update(file=1), "field 'fit.trainer.file': expected a file name, got 1"),
    (lambda p: p["fit"]["trainer"]["terms"]["train_fix"].update(value="x"),
     "field 'fit.trainer.terms.train_fix.value': expected a number >= 0, got 'x'"),
    (lambda p: p["fit"]["trainer"]["terms"]["train_fix"].update(value=float("nan")),
     "field 'fit.trainer.terms.train_fix.value': expected a number >= 0, got nan"),
    (lambda p: p["fit"]["trainer"].update(update_mape_pct=-1),
     "field 'fit.trainer.update_mape_pct': expected a number >= 0, got -1"),
    (lambda p: p["fit"]["trainer"].update(columns={"update": "x"}),
     "field 'fit.trainer.columns': expected an object naming the columns read, got {'update': 'x'}"),
])
def test_profile_show_refuses_what_was_not_fitted(tmp_path, profile, edit, message):
    raw = json.loads(json.dumps(profile))
    edit(raw)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    r = runner.invoke(app, ["profile", "show", str(bad)])
    assert (r.exit_code, r.output) == (2, f"error: {bad}: {message}\n")
