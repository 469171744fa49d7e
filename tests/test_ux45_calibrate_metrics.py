"""``calibrate --from-metrics`` with a part of the update time logged on a few steps only (verl's
``timing_s/ref`` on 3 of 100 steps): the fit used those 3 steps silently; it now notes which
column, how many steps it is logged on, and the steps it left out."""

from __future__ import annotations

import json

from synthetic_runs import PRESET, runner, verl_csv

from sortedrl.cli import app


def test_a_part_of_the_update_logged_on_few_steps_says_which_steps_it_left_out(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(verl_csv(tmp_path / "m.csv", range(1, 4))),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    note = ("timing_s/ref is logged on 3 of the 100 steps that log timing_s/update_actor, timing_s/old_log_prob "
            "and perf/total_num_tokens: the fit uses only the steps that log all of them, so it left out 97 "
            "(steps 4-100); log timing_s/ref on every step to fit them all")
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert tr["steps"] == 3 and tr["notes"][0] == note
    lines = r.stdout.splitlines()
    assert lines[1:3] == ["  trainer terms from 3 steps; update time MAPE 0.0%; sync_s from the preset (no sync "
                          "column read)", f"  {note}"]
    shown = runner.invoke(app, ["profile", "show", str(out)]).stdout.splitlines()
    assert f"  {note}" in shown


def test_every_other_step_missing_a_part_is_named_by_its_runs(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(verl_csv(tmp_path / "m.csv", range(1, 41, 2), 40)),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["fit"]["trainer"]["notes"][0] == (
        "timing_s/ref is logged on 20 of the 40 steps that log timing_s/update_actor, timing_s/old_log_prob and "
        "perf/total_num_tokens: the fit uses only the steps that log all of them, so it left out 20 (steps 2, 4, "
        "6 ... 40); log timing_s/ref on every step to fit them all")


def test_a_part_on_every_step_adds_no_note(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(verl_csv(tmp_path / "m.csv", range(1, 101))),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert tr["steps"] == 100 and not any("is logged on" in n for n in tr.get("notes", []))
