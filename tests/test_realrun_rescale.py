"""``sortedrl calibrate --rescale``: a profile rescaled to the host's speed now.

- Every engine-side time term scales by the engine factor, the update terms by the update factor,
  the sync by the sync factor; the shared-host ratios do not change; the record nests.
- A real rescale on the tiny model: the factors are what its run measured against what the
  profile predicted for the same steps, updates and syncs, and the written profile loads.
- A profile that cannot be rescaled (not from ``calibrate --model``) is one error line, exit 2,
  and nothing written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.realrun.rescale import factors, rescaled, run_config, speed_ratios

PROFILE = Path(__file__).parent / "fixtures" / "cpu-profile.json"
FACTORS = {"engine_factor": 1.25, "update_factor": 0.5, "sync_factor": 2.0}


def runnable(max_num_seqs: int = 16) -> dict:
    """The fixture profile, with the runner run recorded as calibrate records it now."""
    prof = json.loads(PROFILE.read_text())
    prof["fit"]["runner"].update(task="sort", max_tokens=16, prompts=4, group_size=4, warm_tokens=0)
    prof["engine_config"]["max_num_seqs"] = max_num_seqs
    return prof


def test_every_cost_term_has_a_rescale_rule():
    import dataclasses

    from sortedrl.realrun import rescale as r
    from sortedrl.sim.cost import CostModel

    ruled = (*r.ENGINE_COSTS, *r.TRAIN_COSTS, *r.SYNC_COSTS, *r.SPECIAL_COSTS, *r.UNSCALED_COSTS)
    assert sorted(ruled) == sorted(f.name for f in dataclasses.fields(CostModel))


def test_rescaled_scales_each_kind_of_term_by_its_factor():
    prof = runnable()
    prof["costs"].update(engine_contention=2.0, train_contention=1.3, train_per_pair=4e-9, step_fixed_s=0.001,
                         offload_s=0.5, step_overhead_s=0.003)
    prof["fit"]["runner"].update(ray_round_s=0.002, ray_sync_s=0.04)
    prof["fit"]["shared_host"] = {"step_overhead_s": 0.001, "ray_step_factor": 1.1}
    new = rescaled(prof, {**FACTORS, "steps": 10}, "a.json")
    old, c, fit = prof["costs"], new["costs"], prof["fit"]
    host_step = fit["runner"]["host_s_per_step"]
    # the engine part of each step x1.25, the runner's host step as it was
    assert c["step_table"] == [x + 0.25 * e for x, e in zip(old["step_table"], fit["steps"]["table"], strict=True)]
    assert c["step_table"][0] == pytest.approx(1.25 * fit["steps"]["table"][0] + host_step, rel=1e-12)
    # the engine's part of an admission
    assert c["admit_s_per_request"] == old["admit_s_per_request"] + 0.25 * fit["steps"]["admit_s_per_request"]
    for k in ("kv_read_s_per_token", "prefill_s_per_token", "prefill_s_per_pair", "admit_step_s", "step_fixed_s"):
        assert c[k] == old[k] * 1.25
    assert (c["train_fix"], c["train_per_token"], c["train_per_pair"], c["offload_s"]) == (
        old["train_fix"] * 0.5, old["train_per_token"] * 0.5, 4e-9 * 0.5, 0.25)
    assert c["sync_s"] == old["sync_s"] * 2.0
    assert (c["policy_event_s"], c["step_overhead_s"]) == (old["policy_event_s"], 0.003)  # Python work is not rescaled
    assert (c["engine_contention"], c["train_contention"], c["prefill_in_step"]) == (2.0, 1.3, True)
    steps = new["fit"]["steps"]
    assert steps["table"] == [x * 1.25 for x in fit["steps"]["table"]]
    assert steps["admit_s_per_request"] == fit["steps"]["admit_s_per_request"] * 1.25
    assert steps["mape"] == fit["steps"]["mape"]
    assert (new["fit"]["runner"]["ray_round_s"], new["fit"]["runner"]["ray_sync_s"]) == (0.002, 0.04 * 2.0)
    assert new["fit"]["shared_host"] == {"step_overhead_s": 0.001, "ray_step_factor": 1.1}
    assert new["rescaled"]["from"] == "a.json" and new["rescaled"]["earlier"] is None
    assert old["sync_s"] == json.loads(PROFILE.read_text())["costs"]["sync_s"]  # the input is not changed
    again = rescaled(new, FACTORS, "b.json")
    assert again["rescaled"]["earlier"]["from"] == "a.json"
    assert again["costs"]["sync_s"] == old["sync_s"] * 4.0
    assert again["costs"]["step_table"][0] == pytest.approx(1.5625 * fit["steps"]["table"][0] + host_step, rel=1e-12)


def test_the_factors_divide_this_runs_ratios_by_the_calibrations():
    """By hand, on the fixture's step fit: two decode steps at batch 1 and 2 (KV 100 and 300), an
    update of sequences 10 and 30 tokens long, and three syncs."""
    prof = runnable()
    st, costs = prof["fit"]["steps"], prof["costs"]
    pred = [st["table"][0] + st["kv_read_s_per_token"] * 100, st["table"][1] + st["kv_read_s_per_token"] * 300]
    steps = [(1, 0, 0, 0, 100, 2 * pred[0]), (2, 0, 0, 0, 300, 1.0 * pred[1])]
    update = costs["train_fix"] + costs["train_per_token"] * 60  # padded: 2 x 30 tokens
    syncs = [costs["sync_s"] * 0.5, costs["sync_s"] * 0.7, costs["sync_s"] * 0.9]
    now = speed_ratios(prof, steps, [([10, 30], 3 * update)], syncs)
    assert now["steps"] == pytest.approx((2 * pred[0] + pred[1]) / (pred[0] + pred[1]), rel=1e-12)
    assert now["updates"] == pytest.approx(3.0, rel=1e-12) and now["syncs"] == pytest.approx(0.7, rel=1e-12)
    assert (now["step_count"], now["update_count"], now["sync_count"]) == (2, 1, 3)
    run = run_config(prof, "m", "p.json")
    prof["fit"]["runner"]["sync_ratios"] = {"steps": 1.2, "updates": 1.5, "syncs": 0.5}
    f = factors(prof, now, run, 1)
    assert f["engine_factor"] == pytest.approx(now["steps"] / 1.2, rel=1e-12)
    assert f["update_factor"] == pytest.approx(2.0, rel=1e-12)
    assert f["sync_factor"] == pytest.approx(1.4, rel=1e-12)
    # a run without updates or syncs leaves those terms alone, whatever the calibration's ratio
    f = factors(prof, speed_ratios(prof, steps, []), run, 1)
    assert (f["update_factor"], f["sync_factor"]) == (1.0, 1.0)
    del prof["fit"]["runner"]["sync_ratios"]  # a profile calibrated before the ratios were recorded
    assert factors(prof, now, run, 1)["engine_factor"] == now["steps"]


def test_the_calibration_records_the_median_ratios_of_its_sync_runs():
    from sortedrl.realrun.calibrate import sync_ratios

    prof = runnable()
    st, costs = prof["fit"]["steps"], prof["costs"]
    one = st["table"][0] + st["kv_read_s_per_token"] * 100
    update = costs["train_fix"] + costs["train_per_token"] * 60
    runs = [([(1, 0, 0, 0, 100, k * one)], [([10, 30], k * update)], [k * costs["sync_s"]]) for k in (1.0, 1.5, 4.0)]
    assert sync_ratios(prof, runs) == pytest.approx({"steps": 1.5, "updates": 1.5, "syncs": 1.5}, rel=1e-12)
    prof["fit"]["runner"]["seed"] = 3
    assert run_config(prof, "m", "p.json")["seed"] == 3


def test_profile_show_prints_every_rescale():
    from sortedrl.calibration.show import render

    new = rescaled(rescaled(runnable(), {**FACTORS, "steps": 10, "updates": 2, "syncs": 2}, "a.json"),
                   {**FACTORS, "steps": 7, "updates": 2, "syncs": 1}, "b.json")
    text = [line for line in render(new, "c.json") if "rescaled at" in line]
    assert len(text) == 2
    assert text[0].endswith("from b.json: engine x1.250 (7 steps), updates x0.500 (2), sync x2.000 (1)")
    assert text[1].endswith("from a.json: engine x1.250 (10 steps), updates x0.500 (2), sync x2.000 (2)")


def test_a_profile_not_from_calibrate_model_cannot_be_rescaled(tmp_path, tiny_model):
    src, out = tmp_path / "a.json", tmp_path / "b.json"

    def rescale(profile: dict | None, *extra: str) -> str:
        if profile is not None:
            src.write_text(json.dumps(profile))
        r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(src), "--out", str(out),
                                     *extra])
        assert r.exit_code == 2 and not out.exists(), r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), r.output
        return lines[0]

    old = json.loads(PROFILE.read_text())  # its runner record lacks the run's task and caps
    assert rescale(old) == (f"error: {src}: field 'fit.runner': missing or without task, max_tokens, prompts, "
                            "group_size (only a profile from `sortedrl calibrate --model` can be rescaled)")
    no_steps = runnable()
    del no_steps["fit"]["steps"]["admit_s_per_request"]
    assert rescale(no_steps).startswith(f"error: {src}: field 'fit.steps': expected the step fit's table and "
                                        "kv_read_s_per_token")
    no_config = runnable()
    del no_config["engine_config"]
    assert rescale(no_config) == f"error: {src}: field 'engine_config': missing (not a profile from sortedrl calibrate?)"
    bad_cap = runnable()
    bad_cap["fit"]["runner"]["max_tokens"] = "16"
    assert rescale(bad_cap) == f"error: {src}: field 'fit.runner.max_tokens': expected a whole number, got '16'"
    bad_ratios = runnable()
    bad_ratios["fit"]["runner"]["sync_ratios"] = {"steps": "x"}
    assert rescale(bad_ratios) == (f"error: {src}: field 'fit.runner.sync_ratios': expected ratios > 0 (or null), "
                                   "got {'steps': 'x'}")
    short = runnable()
    short["costs"]["step_table"] = short["costs"]["step_table"][:3]
    assert rescale(short) == (f"error: {src}: field 'costs.step_table': 3 batch sizes, but 'fit.steps.table' has "
                              f"{len(short['fit']['steps']['table'])}")
    listed = runnable()
    listed["fit"] = []
    assert rescale(listed) == f"error: {src}: field 'fit': expected an object, got []"  # (as profile show)
    src.write_text("{")
    assert rescale(None).startswith(f"error: {src}: not valid JSON")
    src.write_text(json.dumps(runnable()))
    assert rescale(None, "--task", "sort-long") == (
        "error: --rescale: --task not allowed (the rescale repeats the run the profile records; only "
        "--model, --out, --repeats, --warm-tokens and --force apply)")
    assert rescale(None, "--from-vllm-bench", str(src)) == (
        "error: --rescale: not with --from-vllm-bench / --from-metrics (it measures this host)")
    assert rescale(None, "--out", str(src)).startswith("error: --out")  # never over its input
    r = CliRunner().invoke(app, ["calibrate", "--rescale", str(src), "--out", str(out)])
    assert r.exit_code == 2 and "give --model DIR" in r.output and not out.exists()
    r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(tmp_path / "none.json"),
                                 "--out", str(out)])
    assert r.exit_code == 2 and "none.json: profile not found" in r.output and not out.exists()


def test_a_real_rescale_compares_its_run_with_the_profile(tmp_path, tiny_model):
    from sortedrl.calibration.show import render
    from sortedrl.sim.cluster import load_cluster

    src, out = tmp_path / "a.json", tmp_path / "b.json"
    prof = runnable()
    prof["fit"]["runner"]["sync_ratios"] = {"steps": 1.25, "updates": 0.8, "syncs": None}
    src.write_text(json.dumps(prof))
    before = src.read_bytes()
    r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(src), "--out", str(out),
                                 "--repeats", "1"])
    assert r.exit_code == 0, r.output
    assert src.read_bytes() == before
    new = json.loads(out.read_text())
    f = new["rescaled"]
    assert f["seed"] == 0 and f["repeats"] == 1 and f["steps"] >= 16 and f["ratios"]["step_count"] == f["steps"]
    assert f["updates"] == 2 and f["syncs"] >= 1  # the sync run: two steps, one update each
    assert f["engine_factor"] == f["ratios"]["steps"] / 1.25 and f["ratios"]["steps"] > 0
    assert (f["ratios"]["step_count"], f["ratios"]["update_count"]) == (f["steps"], 2)
    assert f["update_factor"] == f["ratios"]["updates"] / 0.8 and f["sync_factor"] == f["ratios"]["syncs"] > 0
    assert new["costs"]["train_fix"] == prof["costs"]["train_fix"] * f["update_factor"]
    assert new["costs"]["sync_s"] == prof["costs"]["sync_s"] * f["sync_factor"]
    assert new["fit"]["steps"]["table"] == [x * f["engine_factor"] for x in prof["fit"]["steps"]["table"]]
    assert f"wrote {out}: {src} rescaled to this host now: engine x{f['engine_factor']:.3f}" in r.output
    said = [line for line in r.stderr.splitlines() if line.startswith("calibrate --rescale: ")]
    runner = prof["fit"]["runner"]
    assert len(said) == 2 and re.fullmatch(  # (stderr is no terminal here: lines, not the bar)
        rf"calibrate --rescale: run 1 of 1 starts: the profile's sync run, 2 steps of {runner['prompts']} "
        rf"prompts x {runner['group_size']}, \d+ s elapsed", said[0]), said
    assert said[1] == (f"calibrate --rescale: 1 of 1 runs done (run 1: {f['steps']:,} engine steps, 2 updates, "
                       f"{f['syncs']} sync{'s' if f['syncs'] != 1 else ''})" + said[1][said[1].rindex(", "):])
    assert re.fullmatch(r", \d+ s elapsed", said[1][said[1].rindex(", "):])
    assert load_cluster(str(out)).costs.step_table[0] == new["costs"]["step_table"][0]
    assert any("rescaled at" in line for line in render(new, str(out)))
