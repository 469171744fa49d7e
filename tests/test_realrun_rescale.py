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
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.realrun.rescale import RESCALE_SEED, rescaled

PROFILE = Path(__file__).parent / "fixtures" / "cpu-profile.json"
FACTORS = {"engine_factor": 1.25, "update_factor": 0.5, "sync_factor": 2.0}


def runnable(max_num_seqs: int = 16) -> dict:
    """The fixture profile, with the runner run recorded as calibrate records it now."""
    prof = json.loads(PROFILE.read_text())
    prof["fit"]["runner"].update(task="sort", max_tokens=16, prompts=4, group_size=4, warm_tokens=0)
    prof["engine_config"]["max_num_seqs"] = max_num_seqs
    return prof


def test_rescaled_scales_each_kind_of_term_by_its_factor():
    prof = runnable()
    prof["costs"].update(engine_contention=2.0, train_contention=1.3, train_per_pair=4e-9)
    prof["fit"]["runner"].update(ray_round_s=0.002, ray_sync_s=0.04)
    prof["fit"]["shared_host"] = {"step_overhead_s": 0.001, "step_overhead_one_s": 0.0008, "ray_step_factor": 1.1}
    new = rescaled(prof, {**FACTORS, "steps": 10}, "a.json")
    old, c = prof["costs"], new["costs"]
    assert c["step_table"] == [x * 1.25 for x in old["step_table"]]
    for k in ("a1", "p1", "p2", "pn", "p0", "f0", "t_fix"):
        assert c[k] == old[k] * 1.25
    assert (c["train_fix"], c["train_per_token"], c["train_per_pair"]) == (
        old["train_fix"] * 0.5, old["train_per_token"] * 0.5, 4e-9 * 0.5)
    assert c["sync_s"] == old["sync_s"] * 2.0
    assert (c["engine_contention"], c["train_contention"], c["prefill_in_step"]) == (2.0, 1.3, True)
    steps = new["fit"]["steps"]
    assert steps["table"] == [x * 1.25 for x in prof["fit"]["steps"]["table"]]
    assert steps["pr"] == prof["fit"]["steps"]["pr"] * 1.25 and steps["mape"] == prof["fit"]["steps"]["mape"]
    assert (new["fit"]["runner"]["ray_round_s"], new["fit"]["runner"]["ray_sync_s"]) == (0.002 * 1.25, 0.04 * 2.0)
    assert new["fit"]["shared_host"] == {"step_overhead_s": 0.001 * 1.25, "step_overhead_one_s": 0.0008 * 1.25,
                                         "ray_step_factor": 1.1}
    assert new["rescaled"]["from"] == "a.json" and new["rescaled"]["earlier"] is None
    assert prof["costs"] is old and old["sync_s"] == json.loads(PROFILE.read_text())["costs"]["sync_s"]
    again = rescaled(new, FACTORS, "b.json")
    assert again["rescaled"]["earlier"]["from"] == "a.json"
    assert again["costs"]["sync_s"] == old["sync_s"] * 4.0


def test_profile_show_prints_every_rescale():
    from sortedrl.calibration.show import render

    new = rescaled(rescaled(runnable(), {**FACTORS, "steps": 10, "updates": 2, "syncs": 2}, "a.json"),
                   {**FACTORS, "steps": 7, "updates": 2, "syncs": 1}, "b.json")
    text = [line for line in render(new, "c.json") if "rescaled at" in line]
    assert len(text) == 2
    assert text[0].endswith("from b.json: engine x1.250 (7 steps), updates x0.500 (2), sync x2.000 (1)")
    assert text[1].endswith("from a.json: engine x1.250 (10 steps), updates x0.500 (2), sync x2.000 (2)")


def test_a_profile_not_from_calibrate_model_cannot_be_rescaled(tmp_path, tiny_model):
    src = tmp_path / "a.json"
    src.write_text(PROFILE.read_text())  # its runner record lacks the run's task and caps
    out = tmp_path / "b.json"
    r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(src), "--out", str(out)])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"error: {src}: field 'fit.runner': missing or without task, max_tokens, prompts, group_size "
        "(only a profile from `sortedrl calibrate --model` can be rescaled)"]
    assert not out.exists()
    r = CliRunner().invoke(app, ["calibrate", "--rescale", str(src), "--out", str(out)])
    assert r.exit_code == 2 and "give --model DIR" in r.output and not out.exists()
    r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(tmp_path / "none.json"),
                                 "--out", str(out)])
    assert r.exit_code == 2 and "none.json: profile not found" in r.output and not out.exists()


def test_a_real_rescale_compares_its_run_with_the_profile(tmp_path, tiny_model):
    from sortedrl.calibration.show import render
    from sortedrl.sim.cluster import load_cluster

    src, out = tmp_path / "a.json", tmp_path / "b.json"
    src.write_text(json.dumps(runnable()))
    before = src.read_bytes()
    r = CliRunner().invoke(app, ["calibrate", "--model", tiny_model, "--rescale", str(src), "--out", str(out),
                                 "--repeats", "1"])
    assert r.exit_code == 0, r.output
    assert src.read_bytes() == before
    prof, new = json.loads(before), json.loads(out.read_text())
    f = new["rescaled"]
    assert f["seed"] == RESCALE_SEED and f["repeats"] == 1 and f["steps"] >= 16
    assert f["updates"] == 2 and f["syncs"] >= 1  # the sync run: two steps, one update each
    assert f["engine_factor"] == f["measured_step_s"] / f["predicted_step_s"] > 0
    assert f["update_factor"] > 0 and f["sync_factor"] > 0
    assert new["costs"]["step_table"] == [x * f["engine_factor"] for x in prof["costs"]["step_table"]]
    assert new["costs"]["train_fix"] == prof["costs"]["train_fix"] * f["update_factor"]
    assert new["costs"]["sync_s"] == prof["costs"]["sync_s"] * f["sync_factor"]
    assert f"wrote {out}: {src} rescaled to this host now: engine x{f['engine_factor']:.3f}" in r.output
    assert load_cluster(str(out)).costs.step_table[0] == new["costs"]["step_table"][0]
    assert any("rescaled at" in line for line in render(new, str(out)))
