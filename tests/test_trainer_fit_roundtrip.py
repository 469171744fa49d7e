"""Round trip: a run simulated on a preset, logged as verl logs it, fitted back by
``calibrate --from-metrics``, and moved to the disaggregated split (``cluster_split.split_costs``).

The audit's run (colocated h100-llama3.1-8b-2gpu): the update time has an attention-pair term
(Σ L(L+1)/2 a step) that verl's metrics cannot give (it logs the lengths' mean, max and min),
so the fit put ``train_fix`` at its bound 0 (1.0 -> 1.8e-9 s) and ``train_per_token`` 10% high
(1.194e-4 -> 1.314e-4) at a 1.3% update MAPE, and said nothing of it. On the split,
``split_costs`` scaled a ``sync_s`` that holds the onload (0.412 s a sync, the truth 0.1446 s)
and kept the fitted ``train_fix`` 0 at 0 (the truth 4.011 s: the optimizer state offloaded to
host memory on the one-GPU trainer).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from sortedrl.calibration.build import build_profile
from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.show import render
from sortedrl.cluster_split import TRAINER_TERMS, split_costs
from sortedrl.compare import cluster_for
from sortedrl.sim.cluster import Cluster, load_cluster, preset
from sortedrl.sim.cost import CostModel
from sortedrl.sim.profile import write_profile

PRESET = "h100-llama3.1-8b-2gpu"  # colocated, sleep on; its split's 1-GPU trainer offloads the optimizer
DISAGG = ("disaggregated",)


def _split(name: str, costs: CostModel) -> tuple[CostModel, CostModel]:
    """(the given costs on the split, the split preset's own costs)."""
    cluster = dataclasses.replace(preset(name), costs=costs)
    split = cluster_for(DISAGG, preset(name))
    return split_costs(cluster, split), split.cost()


def _verl_jsonl(path: Path, costs: CostModel, steps: int = 8, samples: int = 256) -> Path:
    """verl's file logger for a colocated run priced by ``costs``: the update time (one update a
    step) with its attention pairs, the unpadded tokens, and ``timing_s/update_weights`` = sync +
    the rollout's onload (engine_workers.py update_weights resumes the rollout first)."""
    rng = np.random.default_rng(0)
    lines = []
    for step in range(1, steps + 1):
        lengths = [int(x) for x in rng.integers(200, 200 + 800 * step, samples)]
        t = costs.update(lengths)
        lines.append({"step": step, "data": {
            "timing_s/update_actor": 0.8 * t, "timing_s/old_log_prob": 0.15 * t, "timing_s/ref": 0.05 * t,
            "perf/total_num_tokens": float(sum(lengths)),
            "response_length/mean": float(np.mean(lengths)) - 100.0, "prompt_length/mean": 100.0,
            "timing_s/update_weights": costs.sync_s + costs.onload_s}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# -- split_costs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [PRESET, "h100-llama3.1-8b", "h100-qwen3-0.6b-4gpu-16seq"])
def test_the_presets_own_costs_map_to_the_split_presets_exactly(name):
    got, want = _split(name, preset(name).cost())
    for term in TRAINER_TERMS:
        assert getattr(got, term) == getattr(want, term), term


def test_a_fitted_train_fix_of_0_gets_the_offloads_move():
    # a ratio kept 0 at 0; the split's 1-GPU trainer moves the optimizer state every update
    base = preset(PRESET)
    move = cluster_for(DISAGG, base).optimizer_move_s
    assert base.optimizer_move_s == 0 and move == pytest.approx(3.011248128)
    got, want = _split(PRESET, dataclasses.replace(base.cost(), train_fix=0.0))
    assert got.train_fix == pytest.approx(move, rel=1e-12)
    assert want.train_fix == pytest.approx(base.train_fix + move, rel=1e-12)
    # a measured 2 s gains the move, not a factor 4.01
    got, _ = _split(PRESET, dataclasses.replace(base.cost(), train_fix=2.0))
    assert got.train_fix == pytest.approx(2.0 + move, rel=1e-12)


def test_a_sync_that_holds_the_onload_loses_it_on_the_split():
    # verl's colocated update_weights: sync_s = sync + onload, onload_s 0 (the audit: 0.412 s a
    # sync on the split, 0.1446 s true)
    own = preset(PRESET).cost()
    folded = dataclasses.replace(own, sync_s=own.sync_s + own.onload_s, onload_s=0.0)
    got, want = _split(PRESET, folded)
    assert got.sync_s == pytest.approx(want.sync_s, rel=1e-12)
    assert want.sync_s == pytest.approx(0.14461108337777778)
    # measured twice the preset's sync + onload: twice the split's sync
    got, _ = _split(PRESET, dataclasses.replace(folded, sync_s=2 * folded.sync_s))
    assert got.sync_s == pytest.approx(2 * want.sync_s, rel=1e-12)
    # costs that price no sleep at all (offload and onload 0) keep their sync as a sync
    bare = dataclasses.replace(own, offload_s=0.0, onload_s=0.0)
    assert _split(PRESET, bare)[0].sync_s == pytest.approx(want.sync_s, rel=1e-12)


# -- the metrics fit, end to end ------------------------------------------------------------------


def _profile(tmp_path: Path, costs: CostModel, cluster: str = PRESET) -> tuple[dict, Path]:
    metrics = _verl_jsonl(tmp_path / "m.jsonl", costs)
    prof = build_profile([], metrics, cluster)
    out = tmp_path / "p.json"
    write_profile(out, prof)
    return prof, out


def test_the_pairs_go_into_the_per_token_term_and_the_profile_says_so(tmp_path):
    own = preset(PRESET).cost()
    assert own.train_per_pair > 0
    prof, out = _profile(tmp_path, own)
    tr = prof["fit"]["trainer"]
    fix, per_token = (tr["terms"][k]["value"] for k in ("train_fix", "train_per_token"))
    assert fix < 1e-6 and per_token > 1.05 * own.train_per_token  # the pairs took the fixed time
    assert tr["update_mape_pct"] < 5  # and nothing in the fit's error shows it
    pair = (f"train_per_pair 0 (the base's {own.train_per_pair:.3g} s/attention pair): the metrics give no "
            "per-sample lengths, so the attention pairs are fitted into train_per_token")
    bound = next(n for n in tr["notes"] if n.startswith("train_fix "))
    assert bound.endswith(" s is at its bound 0: the fixed time per update is not separable from these "
                          "metrics; the attention pairs (not in the metrics, so fitted into train_per_token) "
                          "or a constant share of the per-token time took it, and train_per_token holds it "
                          "(high by that share)")
    assert pair in tr["notes"]
    shown = render(json.loads(out.read_text()), str(out))
    assert f"  {pair}" in shown and f"  {bound}" in shown


def test_the_fitted_profile_on_the_split(tmp_path):
    # the round trip's sync and fixed time on the split: the truth's, not 0.412 s and 0 s
    own = preset(PRESET).cost()
    _, out = _profile(tmp_path, own)
    fitted = load_cluster(str(out))
    assert fitted.cost().onload_s == 0 and fitted.cost().sync_s == pytest.approx(own.sync_s + own.onload_s)
    on_split = cluster_for(DISAGG, fitted).cost()
    truth = cluster_for(DISAGG, preset(PRESET)).cost()
    assert on_split.sync_s == pytest.approx(truth.sync_s, rel=1e-9)
    assert on_split.train_fix == pytest.approx(truth.train_fix - own.train_fix, abs=1e-6)  # the move alone


def test_without_pairs_the_fit_recovers_train_fix_and_notes_nothing(tmp_path):
    own = dataclasses.replace(preset(PRESET).cost(), train_per_pair=0.0)
    from sortedrl.calibration.metrics_read import read_metrics

    fit = fit_metrics(read_metrics(_verl_jsonl(tmp_path / "m.jsonl", own)), "m.jsonl")
    assert fit["terms"]["train_fix"]["value"] == pytest.approx(own.train_fix, rel=1e-6)
    assert fit["terms"]["train_per_token"]["value"] == pytest.approx(own.train_per_token, rel=1e-9)
    assert not any(n.startswith("train_fix ") for n in fit.get("notes", []))


def test_a_base_without_pairs_notes_no_pair_term(tmp_path):
    own = dataclasses.replace(preset(PRESET).cost(), train_per_pair=0.0)
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"preset": PRESET, "costs": {k: (list(v) if isinstance(v, tuple) else v)
                                                              for k, v in dataclasses.asdict(own).items()}}))
    prof, _ = _profile(tmp_path, own, str(cluster))
    assert not any(n.startswith("train_per_pair ") for n in prof["fit"]["trainer"].get("notes", []))


def test_cluster_type_is_kept():
    # split_costs returns costs for the split cluster's shape (engine terms kept)
    got, want = _split(PRESET, preset(PRESET).cost())
    assert isinstance(got, CostModel) and (got.step_fixed_s, got.weight_read_s) == (
        preset(PRESET).cost().step_fixed_s, preset(PRESET).cost().weight_read_s)
    assert isinstance(cluster_for(DISAGG, preset(PRESET)), Cluster)
