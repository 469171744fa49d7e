"""Calibration and validation: the fits recover known costs, profiles are checked, and
``validate`` reports its error table on a run recorded by the real runner (a bundled fixture).

Run: pytest tests/test_calibrate.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import load_cluster
from sortedrl.sim.cost import CostModel
from sortedrl.sim.profile import fit_step_table, fit_train, profile_cluster
from sortedrl.timeline import Timeline
from sortedrl.validate import step_table

FIX = Path(__file__).resolve().parent / "fixtures"
RUN, PROFILE = FIX / "run-sync", FIX / "cpu-profile.json"
runner = CliRunner()


def test_step_fit_recovers_a_known_cost_model():
    rng = np.random.default_rng(0)
    table = np.array([1.0, 1.1, 1.25, 1.3, 1.5, 1.6, 1.8, 2.0]) * 1e-3
    want = dict(kv_read_s_per_token=2e-8, admit_step_s=3e-4, admit_s_per_request=5e-5, prefill_s_per_token=4e-6,
                prefill_s_per_pair=1e-9)
    kv_read_s_per_token, admit_step_s, admit_s_per_request, prefill_s_per_token, prefill_s_per_pair = want.values()
    rows = []
    for _ in range(400):
        b = int(rng.integers(1, 9))
        new = int(rng.integers(0, b + 1)) if rng.random() < 0.3 else 0
        lens = rng.integers(4, 40, size=new)
        T, P = int(lens.sum()), int((lens * (lens + 1) // 2).sum())
        S = int(rng.integers(b * 5, b * 100))
        t = (table[b - 1] + kv_read_s_per_token * S + (admit_step_s if new else 0.0) + admit_s_per_request * new
             + prefill_s_per_token * T + prefill_s_per_pair * P)
        rows.append((b, new, T, P, S, t))
    fit = fit_step_table(*zip(*rows, strict=True), max_batch=8)
    np.testing.assert_allclose(fit["table"], table, rtol=1e-6)
    for name, value in want.items():
        assert fit[name] == pytest.approx(value, rel=1e-5), name
    assert fit["mape"] < 1e-6 and fit["measurements"] == 400


def test_step_fit_fills_unseen_batch_sizes_and_keeps_the_table_monotone():
    rows = [(b, 0, 0, 0, 0, t) for b, t in ((1, 1.0), (2, 1.2), (5, 1.8)) for _ in range(5)]
    fit = fit_step_table(*zip(*rows, strict=True), max_batch=6)
    np.testing.assert_allclose(fit["table"], [1.0, 1.2, 1.4, 1.6, 1.8, 1.8], rtol=1e-6)


def test_train_fit_recovers_fixed_and_per_token_costs():
    tokens = np.array([100, 400, 900, 1600, 2500])
    fit = fit_train(tokens, 0.01 + 2e-5 * tokens)
    assert fit["terms"]["train_fix"]["value"] == pytest.approx(0.01, rel=1e-6)
    assert fit["terms"]["train_per_token"]["value"] == pytest.approx(2e-5, rel=1e-6)


def test_a_profile_is_a_cluster():
    c = load_cluster(str(PROFILE))
    raw = json.loads(PROFILE.read_text())
    assert c.name == "cpu-profile" and c.engines == 1 and c.placement == "colocated"
    assert c.max_num_seqs == raw["engine_config"]["max_num_seqs"]
    cost = c.cost()
    assert cost.step_table == tuple(raw["costs"]["step_table"]) and cost.prefill_in_step
    assert cost.decode_step(3, 100) == pytest.approx(raw["costs"]["step_table"][2]
                                                     + 100 * raw["costs"]["kv_read_s_per_token"])
    assert isinstance(cost, CostModel)


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.pop("costs"), "field 'costs': missing (not a profile from sortedrl calibrate?)"),
    (lambda p: p["costs"].pop("train_fix"), "field 'costs.train_fix': missing"),
    (lambda p: p["costs"].update(kv_read_s_per_token=-1),
     "field 'costs.kv_read_s_per_token': expected a finite number >= 0, got -1"),
    (lambda p: p["costs"].update(kv_read_s_per_token="fast"),
     "field 'costs.kv_read_s_per_token': expected a finite number >= 0, got 'fast'"),
    (lambda p: p["costs"].update(step_table=[]), "field 'costs.step_table': expected a list of seconds"),
    (lambda p: p["costs"].update(prefill_in_step=1), "field 'costs.prefill_in_step': expected true or false"),
    (lambda p: p["costs"].update(bogus=1), "field 'costs': unknown bogus"),
    (lambda p: p.update(sortedrl_profile=99), "field 'sortedrl_profile': format 99 is not 1"),
    (lambda p: p["engine_config"].pop("max_num_seqs"), "field 'engine_config': needs integer max_num_seqs"),
])
def test_bad_profiles_are_rejected_clearly(tmp_path, edit, message):
    raw = json.loads(PROFILE.read_text())
    edit(raw)
    with pytest.raises(ConfigError) as e:
        profile_cluster(raw, "p.json", "p")
    assert str(e.value).startswith("p.json: ") and message in str(e.value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    r = runner.invoke(app, ["simulate", "--trace", str(RUN / "trace.jsonl"), "--policy", "sync",
                            "--cluster", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and message in r.stderr and not (tmp_path / "o").exists()


def test_simulate_accepts_a_profile(tmp_path):
    r = runner.invoke(app, ["simulate", "--trace", str(RUN / "trace.jsonl"), "--policy", "sync",
                            "--cluster", str(PROFILE), "--out", str(tmp_path / "s"), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["cluster"] == "cpu-profile" and s["samples_trained"] == 128


def test_validate_prints_the_error_table_for_a_recorded_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for f in RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--plot", str(tmp_path / "v.html")])
    assert r.exit_code == 0, r.output
    v = json.loads((run / "validate.json").read_text())
    assert v["policy"] == "sync" and v["updates_real"] == v["updates_sim"] == len(v["steps"]) == 4
    real = step_table(Timeline.read_jsonl(run / "timeline.jsonl"))
    assert [s["real_step_s"] for s in v["steps"]] == [x["step_s"] for x in real]
    for s in v["steps"]:
        assert s["step_err_pct"] == pytest.approx(abs(s["sim_step_s"] - s["real_step_s"]) / s["real_step_s"] * 100)
    assert v["step_time_mape"] == pytest.approx(np.mean([s["step_err_pct"] for s in v["steps"]]))
    assert v["bubble_ratio_abs_err"] == pytest.approx(abs(v["sim"]["bubble_ratio"] - v["real"]["bubble_ratio"]))
    assert v["sim"]["samples_trained"] == v["real"]["samples_trained"] == 128
    # the replay itself, pinned: the recorded run's trace on the committed profile
    assert [round(s["sim_step_s"], 6) for s in v["steps"]] == [0.111623, 0.131802, 0.130904, 0.12703]
    # (makespan: no sync after the last update since 6 Dec 2026; the recording, older, has one)
    assert (v["sim"]["makespan_s"], v["sim"]["bubble_ratio"]) == (0.501358, 0.723793)
    assert round(v["step_time_mape"], 4) == 5.6876
    for word in ("real step s", "sim step s", "step_time_mape", "bubble_ratio_abs_err"):
        assert word in r.stdout
    html = (tmp_path / "v.html").read_text()
    assert "validate sync" in html and "<script src=\"http" not in html
    # deterministic: a second validation gives the same numbers
    r2 = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--json"])
    assert json.loads(r2.stdout) == v
    # its own validate.json is replaced with a note, as plot and report replace theirs (it was
    # replaced without a word)
    assert r2.stderr.splitlines()[-1] == f"note: replacing {run / 'validate.json'}"


def split_updates(run: Path) -> None:
    """Cut every update of the recorded ``sync`` run into two of 16 samples each, as a run that
    trained half batches would have: 8 real updates, where the replay (sync, 32 samples an
    update) makes 4. Its summary.json counts them, as that run's would (validate refuses a
    timeline whose updates are not its summary's)."""
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "updates": 2 * summary["updates"]}))
    lines = []
    for line in (run / "timeline.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] != "train":
            lines.append(line)
            continue
        mid, half = (r["t"] + r["t_end"]) / 2, len(r["samples"]) // 2
        lines.append(json.dumps({**r, "t_end": mid, "samples": r["samples"][:half], "tokens": r["tokens"] // 2}))
        lines.append(json.dumps({**r, "t": mid, "samples": r["samples"][half:],
                                 "tokens": r["tokens"] - r["tokens"] // 2}))
    (run / "timeline.jsonl").write_text("\n".join(lines) + "\n")


def test_validate_compares_the_steps_both_runs_have_and_says_so(tmp_path):
    """A real update the simulation has no update of its own for was a 0 s simulated step, a
    100% error averaged into step_time_mape, and the counts were not shown."""
    run = tmp_path / "run"
    run.mkdir()
    for f in RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    split_updates(run)
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--wide"])
    assert r.exit_code == 0, r.output
    v = json.loads((run / "validate.json").read_text())
    assert (v["updates_real"], v["updates_sim"], v["steps_compared"], len(v["steps"])) == (8, 4, 4, 8)
    sim = [s for s in v["steps"] if s["sim_step_s"] is not None]
    assert [s["step"] for s in sim] == [0, 2, 4, 6]  # 16 trained: the first sim update; 32: the same one
    for s in v["steps"][1::2]:  # no update of its own: not compared
        assert s["sim_step_s"] is s["sim_rollout_s"] is s["step_err_pct"] is s["bubble_abs_err"] is None
        assert s["progress_err_pct"] is not None  # the simulation did reach its count of trained samples
    real = step_table(Timeline.read_jsonl(run / "timeline.jsonl"))
    for s in sim:
        assert s["real_step_s"] == real[s["step"]]["step_s"]
        assert s["step_err_pct"] == pytest.approx(abs(s["sim_step_s"] - s["real_step_s"]) / s["real_step_s"] * 100)
    assert v["step_time_mape"] == pytest.approx(np.mean([s["step_err_pct"] for s in sim]))
    lines = r.stdout.splitlines()
    assert ("updates: real 8, simulated 4; 4 real update(s) have no simulated update of their own (the "
            "simulation trained their samples in a larger update, or never did; '-' below): the "
            "per-step errors are over the 4 steps both have") in " ".join(x.strip() for x in lines)
    row = next(x for x in lines if x.split()[:1] == ["1"])
    assert row.split()[1:] == [f"{v['steps'][1]['real_step_s']:.3f}", "-", "-", f"{v['steps'][1]['real_rollout_s']:.3f}",
                               "-", f"{v['steps'][1]['real_train_s']:.3f}", "-",
                               f"{100 * v['steps'][1]['real_bubble_ratio']:.1f}", "-"]


def test_validate_does_not_compare_steps_the_simulation_never_reached(tmp_path):
    """A replay that trained fewer samples than the run (its trace lacked the last step, as the
    real runner's trace of a run with filtered groups did): the steps past what it trained are
    not compared (they were matched with its last update: a 0 s step, a 100% error)."""
    run = tmp_path / "run"
    run.mkdir()
    for f in RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    head, *rows = (RUN / "trace.jsonl").read_text().splitlines()
    (run / "trace.jsonl").write_text("\n".join([head] + [x for x in rows if json.loads(x)["step"] < 3]) + "\n")
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)
    assert (v["updates_real"], v["updates_sim"], v["steps_compared"]) == (4, 3, 3)
    last = v["steps"][3]
    assert last["sim_step_s"] is last["step_err_pct"] is last["progress_err_pct"] is None
    assert v["step_time_mape"] == pytest.approx(np.mean([s["step_err_pct"] for s in v["steps"][:3]]))
    assert v["progress_time_mape"] == pytest.approx(np.mean([s["progress_err_pct"] for s in v["steps"][:3]]))


def test_validate_errors(tmp_path):
    r = runner.invoke(app, ["validate", str(tmp_path), "--profile", str(PROFILE)])
    assert r.exit_code == 2 and "missing timeline.jsonl" in r.stderr
    r = runner.invoke(app, ["validate", str(RUN)])
    assert r.exit_code == 2 and "profile.json: not found (make one with `sortedrl calibrate`)" in r.stderr
    # a run directory that is not there was reported as its missing profile.json
    r = runner.invoke(app, ["validate", str(tmp_path / "nosuch")])
    assert r.exit_code == 2 and r.stderr == f"error: {tmp_path / 'nosuch'}: no such run directory\n"
    r = runner.invoke(app, ["validate", str(PROFILE)])
    assert r.exit_code == 2 and r.stderr == (f"error: {PROFILE}: not a directory (validate takes the "
                                             "directory of a `sortedrl run`)\n")
    # another file of the run as the profile was "unknown cluster preset 'RUN/trace.jsonl'"
    r = runner.invoke(app, ["validate", str(RUN), "--profile", str(RUN / "trace.jsonl")])
    assert r.exit_code == 2 and r.stderr == (f"error: --profile {RUN / 'trace.jsonl'}: not a profile: give "
                                             "the .json file `sortedrl calibrate` wrote (or a cluster file)\n")
    # a simulated run was reported as its missing profile.json
    sim = tmp_path / "sim"
    r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "8", "--steps", "1",
                            "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu", "--out", str(sim)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["validate", str(sim)])
    assert r.exit_code == 2 and r.stderr == (f"error: {sim}: written by `sortedrl simulate`, not by `sortedrl "
                                             "run`: validate replays a real run in the simulator (a simulated "
                                             f"one has no real run to compare with: draw it with `sortedrl plot {sim}`)\n")


def test_dropped_attempts_come_from_the_real_timeline():
    from sortedrl.validate import dropped_attempts

    tl = Timeline({})
    tl.spans += [(0.0, 1.0, 0, 4, 0, 0, 3, "abort"), (1.0, 2.0, 0, 4, 1, 1, 2, "abort"),
                 (2.0, 3.0, 0, 4, 2, 2, 5, "finish"), (0.0, 1.0, 0, 7, 0, 0, 4, "finish")]
    assert dropped_attempts(tl, 64) == {(4, 0): 64, (4, 1): 64}


def test_a_replay_gives_each_attempt_its_own_length():
    from sortedrl.policies.registry import make_policy
    from sortedrl.sim.run import simulate
    from tests.conftest import make_trace, tiny_cluster

    trace = make_trace([3, 5])
    plain = simulate(trace, make_policy("sync", [], trace), tiny_cluster())
    replay = simulate(trace, make_policy("sync", [], trace), tiny_cluster(), attempt_lengths={(0, 0): 7})
    assert [s[6] for s in sorted(plain.timeline.spans, key=lambda s: s[3])] == [3, 5]
    assert [s[6] for s in sorted(replay.timeline.spans, key=lambda s: s[3])] == [7, 5]


def test_validate_replays_the_auto_knobs_as_the_run_resolved_them(tmp_path):
    # a run records its auto knobs (meta auto_params); a later release may size them otherwise,
    # so the replay pins them: here the run split each step of 8 prompts into two rollouts of 4
    run = tmp_path / "run"
    run.mkdir()
    for f in RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    meta, *rest = (RUN / "timeline.jsonl").read_text().splitlines(keepends=True)
    head = json.loads(meta)
    assert "auto_params" not in head and head["params"]["rollout_batch"] == 0  # auto: 8 prompts
    (run / "timeline.jsonl").write_text(json.dumps({**head, "auto_params": {"rollout_batch": 4}})
                                        + "\n" + "".join(rest))
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--json"])
    assert r.exit_code == 0, r.output
    v = json.loads((run / "validate.json").read_text())
    assert (v["sets"], v["auto_params"], v["updates_sim"]) == ([], {"rollout_batch": 4}, 8)
    assert v["sim"]["auto_params"] == {} and v["sim"]["params"]["rollout_batch"] == 4  # pinned
    (run / "validate.json").unlink()
    (run / "timeline.jsonl").write_text(json.dumps({**head, "auto_params": {"rollout_batch": "4"}})
                                        + "\n" + "".join(rest))
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE)])
    assert r.exit_code == 2 and not (run / "validate.json").exists()
    assert r.output.strip() == (f"error: {run / 'timeline.jsonl'}: field 'auto_params': expected an "
                                'object of knob values, got {"rollout_batch": "4"}')
