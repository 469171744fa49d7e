"""Robust calibration of the real runner, and the pieces validation at scale builds on.

- The step fit survives steps slowed down by another job (dropped as outliers), where the plain
  fit does not; the update fit (soft-L1) likewise, and it keeps the form (padded, per sequence or
  the trainer's micro-batches) the measurements follow.
- Two calibrations from independently noisy measurements of the same machine agree within 3%.
- The trainer's micro-batches give the whole batch's gradient; the widened model answers like the
  small one; ``validate`` simulates a run on its own shape, with the Ray terms for runs on Ray.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from sortedrl.realrun.calibrate import agreement, fit_train, predict_steps, robust_step_fit
from sortedrl.sim.contention import host_costs
from sortedrl.sim.profile import fit_step_table
from sortedrl.validate import run_cluster
from tests.conftest import tiny_cluster

TABLE = np.array([4.0, 4.2, 4.5, 4.7, 5.0, 5.3, 5.5, 6.0]) * 1e-3
TRUE = {"table": TABLE.tolist(), "kv_read_s_per_token": 2e-7, "prefill_s_per_token": 3e-6, "prefill_s_per_pair": 1e-9,
        "admit_step_s": 5e-4, "admit_s_per_request": 1e-4}


def measurements(seed: int, noise: float = 0.03, slowed: float = 0.1):
    """Grid medians (quiet: repeated and reduced) and runner steps of which a share ``slowed``
    ran while another job took the CPU (1.5-3x slower)."""
    rng = np.random.default_rng(seed)

    def rows(n):
        out = []
        for _ in range(n):
            b = int(rng.integers(1, 9))
            new = int(rng.integers(0, b + 1)) if rng.random() < 0.2 else 0
            lens = rng.integers(8, 200, size=new)
            out.append((b, new, int(lens.sum()), int((lens * (lens + 1) // 2).sum()),
                        int(rng.integers(b * 10, b * 600))))
        return out

    grid = rows(300)
    runner = rows(1500)
    t_grid = predict_steps(TRUE, grid) * rng.normal(1.0, noise / 3, len(grid))
    t_run = predict_steps(TRUE, runner) * rng.normal(1.0, noise, len(runner))
    hit = rng.random(len(runner)) < slowed
    t_run[hit] *= rng.uniform(1.5, 3.0, hit.sum())
    return ([(*r, t) for r, t in zip(grid, t_grid, strict=True)],
            [(*r, t, 0) for r, t in zip(runner, t_run, strict=True)], int(hit.sum()))


def test_step_fit_drops_steps_another_job_slowed_down():
    grid, runner, slowed = measurements(0)
    d, kept, dropped = robust_step_fit(grid, runner, max_batch=8)
    assert slowed * 0.9 <= dropped <= slowed * 1.1 and kept + dropped == len(runner)
    probe = [r[:5] for r in runner]
    truth = predict_steps(TRUE, probe).sum()
    assert abs(predict_steps(d, probe).sum() / truth - 1) < 0.01
    plain = fit_step_table(*zip(*[r[:6] for r in grid + runner], strict=True), max_batch=8)
    assert predict_steps(plain, probe).sum() / truth - 1 > 0.03  # the slow steps pull it up


def test_two_noisy_calibrations_agree_within_three_percent():
    fits = []
    for seed in (1, 2):
        grid, runner, _ = measurements(seed, noise=0.05, slowed=0.15)
        fits.append({"fit": {"steps": robust_step_fit(grid, runner, max_batch=8)[0]}})
    probe = [r[:5] for r in measurements(3)[1]]
    assert agreement(fits[0], fits[1], probe) < 0.03


FORMS = {"padded": {"train_padded": True}, "per_sequence": {"train_padded": False},
         "micro_batches": {"train_padded": True, "train_micro_pairs": float(2**21)}}


@pytest.mark.parametrize("form", list(FORMS))
def test_update_fit_is_robust_and_keeps_the_measured_form(form):
    from sortedrl.sim.cost import CostModel

    rng = np.random.default_rng(4)
    truth = CostModel(0, 0, 0, 0, 0, 0, train_per_token=2e-4, train_fix=0.3, sync_s=0,
                      train_per_pair=4e-8, **FORMS[form])
    updates = []
    for k in range(40):
        lens = rng.integers(20, 1200, size=int(rng.integers(4, 17))).tolist()
        t = truth.update(lens) * rng.normal(1.0, 0.02) * (2.5 if k % 10 == 3 else 1.0)
        updates.append((lens, t))
    fit = fit_train(updates)
    assert fit["form"] == form and fit["costs"] == FORMS[form]
    terms = {k: v["value"] for k, v in fit["terms"].items()}
    assert terms["train_fix"] == pytest.approx(0.3, rel=0.1)
    assert terms["train_per_token"] == pytest.approx(2e-4, rel=0.1)
    model = CostModel(0, 0, 0, 0, 0, 0, sync_s=0, **FORMS[form], **terms)
    # the pair term is a tenth of the time here, so it is loosely pinned; the predictions are not
    errors = [abs(model.update(lens) / truth.update(lens) - 1) for lens, _ in updates]
    assert max(errors) < 0.03


def test_micro_batches_bound_the_attention_and_cover_the_batch():
    from sortedrl.realrun.trainer import Rollout, micro_batches

    lens = [5, 900, 40, 300, 1500, 60, 700]
    batch = [Rollout(i, 0, [1] * 3, [2] * (n - 3), [], [], 0.0) for i, n in enumerate(lens)]
    parts = micro_batches(batch, max_pairs=1_000_000)
    assert sorted(k for p in parts for k in p) == list(range(len(lens)))
    for p in parts:  # each within the bound, unless one sequence alone exceeds it
        assert len(p) * max(lens[k] for k in p) ** 2 <= 1_000_000 or len(p) == 1
    assert [k for p in parts for k in p] == sorted(range(len(lens)), key=lambda k: lens[k])
    assert micro_batches(batch, max_pairs=10**9) == [list(range(len(lens)))]  # fits: as is


def test_micro_batched_update_equals_the_whole_batch(tiny_model):
    import torch

    from sortedrl.realrun.trainer import GRPOTrainer, Rollout

    rng = np.random.default_rng(5)
    batch = [Rollout(i, i // 2, [1, 11, 12, 8, 10], rng.integers(4, 14, size=n).tolist(), [-2.0] * n,
                     [0] * n, float(i % 2)) for i, n in enumerate([3, 17, 9, 30, 5, 22])]
    adv = [0.7, -0.7, 1.0, -1.0, 0.3, -0.3]
    weights = []
    for max_pairs in (10**9, 1500):  # one micro-batch; several
        trainer = GRPOTrainer(tiny_model, seed=0, max_pairs=max_pairs)
        metrics = trainer.update(batch, adv, 0)
        weights.append({k: v.detach().clone() for k, v in trainer.state_dict().items()})
        assert metrics["tokens"] == sum(len(r.response) for r in batch)
    for k in weights[0]:
        torch.testing.assert_close(weights[0][k], weights[1][k], rtol=1e-5, atol=1e-6)


def test_widened_model_answers_like_the_small_one(tiny_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from sortedrl.realrun.model import widen_model

    out, params = widen_model(tiny_model, tmp_path / "wide", hidden=192, layers=4, intermediate=1536)
    assert params > 3_000_000
    small = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    wide = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert wide.config.num_attention_heads == 6 and wide.config.num_hidden_layers == 4
    ids = torch.tensor([[1, 4, 9, 7, 5, 6, 8, 5]])
    with torch.no_grad():
        a, b = small(ids).logits, wide(ids).logits
    assert (a - b).abs().max() < 0.05
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_validate_simulates_the_runs_shape_with_the_ray_terms():
    cluster = tiny_cluster(engines=1, step_table=(1.0, 2.0), sync_s=5.0)
    meta = {"engines": 2, "placement": "disaggregated", "run": {"max_num_seqs": 16, "engines": 2}}
    c = run_cluster(cluster, meta, {"ray_round_s": 0.25, "ray_sync_s": 0.5})
    assert (c.engines, c.trainer_gpus, c.placement, c.max_num_seqs) == (2, 1, "disaggregated", 16)
    assert (c.costs.step_overhead_s, c.costs.step_overhead_one_s, c.costs.sync_s) == (0.25, 0.0, 0.5)
    for busy in (1, 2):  # an older profile's round time, from one async run, for any number busy
        assert host_costs(c.costs, busy, 2, training=False).step_table == (1.25, 2.25)
    local = {"engines": 1, "placement": "colocated", "run": {"max_num_seqs": 8}}
    c = run_cluster(cluster, local, {"ray_round_s": 0.25, "ray_sync_s": 0.5})
    assert (c.engines, c.placement, c.costs.step_table, c.costs.sync_s) == (1, "colocated", (1.0, 2.0), 5.0)
    assert c.costs.step_overhead_s == 0.0


# -- the update forms, told apart by updates of chosen shapes --------------------------------------

@pytest.mark.parametrize("form", list(FORMS))
def test_updates_of_chosen_shapes_tell_the_forms_apart_and_the_runners_share(form):
    from sortedrl.realrun.update_shapes import update_shapes
    from sortedrl.sim.cost import CostModel

    rng = np.random.default_rng(5)
    truth = CostModel(0, 0, 0, 0, 0, 0, train_per_token=1.3e-4, train_fix=0.2, sync_s=0,
                      train_per_pair=2.6e-7, **FORMS[form])
    # runner updates: 16 samples of one run's lengths, which hardly tell the forms apart, each
    # with 0.35 s of log and checkpoint on top; and three repeats of the bare shapes
    runner = [(lens, (truth.update(lens) + 0.35) * rng.normal(1.0, 0.02))
              for lens in (sorted(rng.integers(150, 260, size=16).tolist()) for _ in range(12))]
    shapes = update_shapes(16, 512)
    bare = [(lens, truth.update(lens) * rng.normal(1.0, 0.02)) for _ in range(3) for lens in shapes.values()]
    fit = fit_train(runner, bare)
    assert fit["form"] == form and fit["bare_updates"] == 12
    assert fit["runner_update_s"] == pytest.approx(0.35, rel=0.2)
    terms = {k: v["value"] for k, v in fit["terms"].items()}  # train_fix: what a runner update pays
    model = CostModel(0, 0, 0, 0, 0, 0, sync_s=0, **FORMS[form], **terms)
    errors = [abs(model.update(lens) / (truth.update(lens) + 0.35) - 1) for lens, _ in runner]
    errors += [abs((model.update(lens) - fit["runner_update_s"]) / truth.update(lens) - 1) for lens in shapes.values()]
    assert max(errors) < 0.03


def test_the_skewed_shape_separates_padded_from_micro_batches():
    from sortedrl.realrun.update_shapes import update_shapes
    from sortedrl.sim.cost import CostModel

    shapes = update_shapes(16, 512)
    assert shapes["skewed"] == [102] * 15 + [1024] and shapes["uniform_long"] == [1024] * 8
    padded, micro, per_seq = (CostModel(0, 0, 0, 0, 0, 0, 0, 0, 0, **FORMS[f])
                              for f in ("padded", "micro_batches", "per_sequence"))
    assert padded.train_tokens(shapes["skewed"]) == 16 * 1024
    assert micro.train_tokens(shapes["skewed"]) == per_seq.train_tokens(shapes["skewed"]) == 15 * 102 + 1024
    assert micro.train_tokens(shapes["two_level"]) == padded.train_tokens(shapes["two_level"]) == 16 * 306
    assert per_seq.train_tokens(shapes["two_level"]) == 8 * 102 + 8 * 306


# -- engines and trainer on one host -----------------------------------------------------------------

def test_contention_factors_recover_known_slowdowns_from_noisy_pairs():
    from sortedrl.realrun.contention import pair_ratios, summary

    rng = np.random.default_rng(6)
    base = {j: 0.004 + 0.0001 * j for j in range(12)}

    def steps(factor, n):
        return {j: list(factor * base[j] * rng.normal(1.0, 0.03, n)) for j in range(12)}

    pairs = []
    for k in range(6):
        load = 3.0 if k == 2 else 1.0  # another job slowed every measurement of one pair alike
        beside = steps(1.3 * 2.2 * load, 20)
        beside[5][:3] = [1.0, 1.0, 1.0]  # a few steps another job stalled
        solo, peers = steps(load, 4), steps(1.3 * load, 8)
        solo[-1] = list(0.001 * load * rng.normal(1.0, 0.03, 40))  # the driver's time a round
        peers[-1] = list(0.002 * load * rng.normal(1.0, 0.03, 40))
        beside_one = steps(1.5 * load, 10)
        pairs.append(pair_ratios(solo, peers, beside, 2.0 * load, 2.0 * 1.4 * load * (1.6 if k == 4 else 1.0),
                                 beside_one, 2.0 * 1.1 * load))
    out = summary(pairs, engines=2, batch=8, context=64, lengths=[100] * 16)
    assert out["engine_contention"] == pytest.approx(2.2, rel=0.03)
    assert out["ray_step_factor"] == pytest.approx(1.3, rel=0.03)
    assert out["train_contention"] == pytest.approx(1.4)  # the pair slowed 1.6x is outvoted
    assert len(out["train_contention_by_pair"]) == 6 and out["train_contention_rel_mad"] == 0.0
    assert out["engine_contention_one"] == pytest.approx(1.5, rel=0.03)
    assert out["train_contention_one"] == pytest.approx(1.1)
    assert out["step_overhead_s"] == pytest.approx(0.002, rel=0.03)
    assert out["step_overhead_one_s"] == pytest.approx(0.001, rel=0.03)
    assert (out["pairs"], out["update_tokens"], out["steps_beside"]) == (6, 1600, 6 * 240)
    old = summary([pair_ratios(solo, peers, beside, 2.0, 2.8)], engines=2, batch=8, context=64, lengths=[1])
    assert "engine_contention_one" not in old and "train_contention_one" not in old  # not measured


def test_validate_slows_the_engines_of_a_run_on_ray_by_the_number_busy():
    # the driver's time a step: 0.25 s with one engine busy, 0.25 s (async run) or 0.5 s (contention
    # cycles) with both; an engine beside its busy peer steps 1.5x slower, alone at its own speed
    cluster = tiny_cluster(engines=1, step_table=(1.0, 2.0), kv_read_s_per_token=0.5, sync_s=5.0, engine_contention=2.0)
    meta = {"engines": 2, "placement": "disaggregated", "run": {"max_num_seqs": 16, "engines": 2}}
    terms = {"ray_round_s": 0.25, "ray_sync_s": 0.5, "ray_step_factor": 1.5}
    c = run_cluster(cluster, meta, terms).costs
    assert host_costs(c, 2, 2, training=False).step_table == (1.75, 3.25)
    assert host_costs(c, 2, 2, training=False).kv_read_s_per_token == 0.75 and c.train_fix == cluster.costs.train_fix
    assert host_costs(c, 1, 2, training=False).step_table == (1.25, 2.25)
    assert host_costs(c, 1, 2, training=False).kv_read_s_per_token == 0.5
    assert host_costs(c, 2, 2, training=True).step_table == (3.5, 6.5)  # x engine_contention
    c = run_cluster(cluster, meta, {**terms, "step_overhead_s": 0.5, "step_overhead_one_s": 0.25}).costs
    assert host_costs(c, 2, 2, training=False).step_table == (2.0, 3.5)
    assert host_costs(c, 1, 2, training=False).step_table == (1.25, 2.25)
    assert host_costs(c, 2, 3, training=False).step_table == (1.625, 2.875)  # halfway: x1.25 + 0.375


def test_profile_show_prints_the_update_form_and_the_shared_host():
    from sortedrl.calibration.show import render

    raw = {"sortedrl_profile": 1, "costs": {"engine_contention": 2.6, "train_contention": 1.38},
           "fit": {"train": {"mape": 0.05, "measurements": 30, "form": "micro_batches", "bare_updates": 12,
                             "runner_update_s": 0.35,
                             "rel_scale_by_form": {"padded": 0.2, "per_sequence": 0.08, "micro_batches": 0.03}},
                   "shared_host": {"engine_contention": 2.6, "train_contention": 1.38, "engines": 2,
                                   "pairs": 6, "engine_contention_rel_mad": 0.077,
                                   "train_contention_rel_mad": 0.1, "ray_step_factor": 1.3,
                                   "ray_step_factor_rel_mad": 0.04}}}
    text = "\n".join(render(raw, "p.json"))
    # columns as wide as their cells: the unit "x update beside rollout" ran into the source
    # column ("x update beside rollout measured") under the fixed 22-character unit column
    # (a factor to 3 decimals, as the shared-host lines below print it: docs/metrics.md)
    assert "  engine_contention  2.600  x step while training    measured\n" in text
    assert "  train_contention   1.380  x update beside rollout  measured\n" in text
    assert ("form kept: micro_batches (residual spread by form: padded 20.0%, per_sequence 8.0%, "
            "micro_batches 3.0%; 12 of the updates of chosen shapes)") in text
    assert "a runner update adds 0.35 s (log, checkpoint) to a bare one" in text
    assert ("shared host (2 engine actors + the trainer actor, 6 interleaved pairs): engine steps x2.600 "
            "(relative MAD 7.7%) while the trainer trains, updates x1.380 (relative MAD 10.0%) beside "
            "rollout") in text
    assert "an engine actor beside its peers, no trainer: x1.300 (relative MAD 4.0%) one engine alone" in text


def test_profile_show_says_a_contention_no_pair_measured_is_not_measured():
    """A pair whose update was too short for a whole engine round beside it has no engine
    ratio; with none, calibrate writes the neutral x1, and profile show must not call it a
    measurement."""
    from sortedrl.calibration.show import render

    shared = {"engine_contention": 1.0, "engine_contention_by_pair": [], "engine_contention_rel_mad": 0.0,
              "train_contention": 1.2, "train_contention_by_pair": [1.2, 1.2], "engines": 2, "pairs": 2,
              "ray_step_factor": 1.1, "ray_step_factor_by_pair": [1.1, 1.1]}
    text = "\n".join(render({"sortedrl_profile": 1, "costs": {}, "fit": {"shared_host": shared}}, "p.json"))
    assert ("engine steps x1 (not measured: no pair had a whole engine round beside the update) "
            "while the trainer trains, updates x1.200 (relative MAD 0.0%) beside rollout") in text


def test_validate_checks_the_ray_terms_of_a_profile(tmp_path):
    from sortedrl.errors import ConfigError
    from sortedrl.validate import _ray_terms

    path = tmp_path / "p.json"
    fit = {"runner": {"ray_round_s": 0.002, "ray_sync_s": 0.05},
           "shared_host": {"ray_step_factor": 1.1, "step_overhead_s": 0.0, "step_overhead_one_s": 0.001}}
    path.write_text(json.dumps({"fit": fit}))
    assert _ray_terms(path) == {"ray_round_s": 0.002, "ray_sync_s": 0.05, "ray_step_factor": 1.1,
                                "step_overhead_s": 0.0, "step_overhead_one_s": 0.001}  # a measured 0 is kept
    for key, bad, least in (("step_overhead_s", "x", "0"), ("step_overhead_one_s", -0.5, "0"),
                            ("ray_step_factor", 0.9, "1")):
        path.write_text(json.dumps({"fit": {**fit, "shared_host": {**fit["shared_host"], key: bad}}}))
        with pytest.raises(ConfigError, match=rf"p\.json: field 'fit\.shared_host\.{key}': expected a number >= {least}, got"):
            _ray_terms(path)
