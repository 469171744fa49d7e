"""A profile fitted on a base cluster (``calibrate --from-metrics/--from-vllm-bench --cluster
BASE``) keeps every setting of that base but its costs, and ``--cluster PROFILE.json`` rebuilds
it: a profile whose costs are the base's simulates as the base does. Profiles kept only the
base's shape: a preset's chunked prefill came back off and its KV watermark 0 (+1.3 s of rollout
every step on h100-llama3.1-8b-2gpu-disagg, +0.27% makespan), and a cluster file's
prefix_caching false, max_num_batched_tokens 2048 and sleep false came back true, 8192 and true
(makespan -1.2%)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.calibration.build import _base_profile, _costs_json
from sortedrl.cli import app
from sortedrl.sim.cluster import Cluster, load_cluster, preset
from sortedrl.sim.profile import CLUSTER_FIELDS, SHAPE, profile_cluster, write_profile

FIX = Path(__file__).parent / "fixtures" / "metrics"
PRESETS = ["h100-llama3.1-8b-2gpu-disagg", "h100-llama3.1-8b-2gpu"]
runner = CliRunner()


def _same_profile(spec: str, out: Path) -> Cluster:
    """The profile ``calibrate`` would write on ``spec`` had the fit changed no term."""
    base = load_cluster(spec)
    raw = _base_profile(spec, base)
    raw["costs"] = _costs_json(base.cost())
    write_profile(out, raw)
    return base


def _as_profile(base: Cluster, name: str) -> Cluster:
    """The base as a profile holds it: its KV budget explicit, its costs explicit."""
    return dataclasses.replace(base, name=name, kv_budget_tokens=base.kv_budget, costs=base.cost())


def _makespan(tmp_path: Path, cluster: str, label: str) -> float:
    out = tmp_path / label
    r = runner.invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--cluster", cluster,
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text())["makespan_s"]


def _calibrate(tmp_path: Path, base: str, out: Path) -> None:
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(FIX / "verl_metrics.jsonl"),
                            "--cluster", base, "--out", str(out)])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name", PRESETS)
def test_a_profile_of_the_presets_costs_is_the_preset(tmp_path, name):
    p = tmp_path / "p.json"
    base = _same_profile(name, p)
    assert base.chunked_prefill and base.kv_watermark == 0.01  # what a profile lost
    cl = load_cluster(str(p))
    assert cl == _as_profile(base, "p")  # every field, the costs as well
    assert _makespan(tmp_path, str(p), "profile") == _makespan(tmp_path, name, "preset")


@pytest.mark.parametrize("name", PRESETS)
def test_calibrate_from_metrics_keeps_the_presets_settings(tmp_path, name):
    p = tmp_path / "p.json"
    _calibrate(tmp_path, name, p)
    raw = json.loads(p.read_text())
    assert set(raw["cluster"]) == {"preset", *CLUSTER_FIELDS}
    cl = profile_cluster(raw, "p", "p")
    assert cl.costs != preset(name).cost()  # the trainer terms were fitted
    assert dataclasses.replace(cl, costs=None) == dataclasses.replace(_as_profile(preset(name), "p"), costs=None)


def test_a_cluster_files_engine_settings_are_kept_and_carried_over(tmp_path):
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps({"preset": "h100-llama3.1-8b-2gpu", "prefix_caching": False,
                                  "max_num_batched_tokens": 2048, "sleep": False}))
    same = tmp_path / "same.json"
    base = _same_profile(str(custom), same)
    assert load_cluster(str(same)) == _as_profile(base, "same")
    assert _makespan(tmp_path, str(same), "profile") == _makespan(tmp_path, str(custom), "file")
    p, again = tmp_path / "p.json", tmp_path / "again.json"
    _calibrate(tmp_path, str(custom), p)
    _calibrate(tmp_path, str(p), again)  # an earlier profile as the base: extended, settings and all
    for path in (p, again):
        cl = load_cluster(str(path))
        assert (cl.prefix_caching, cl.max_num_batched_tokens, cl.sleep) == (False, 2048, False)
        assert (cl.chunked_prefill, cl.kv_watermark) == (True, 0.01)
    assert json.loads(again.read_text())["cluster"] == json.loads(p.read_text())["cluster"]


def test_a_profile_written_before_reads_as_before(tmp_path):
    p = tmp_path / "p.json"
    base = _same_profile("h100-llama3.1-8b-2gpu-disagg", p)
    raw = json.loads(p.read_text())
    raw["cluster"] = {k: raw["cluster"][k] for k in ("preset", *SHAPE)}  # all that was kept
    old = tmp_path / "old.json"
    old.write_text(json.dumps(raw))
    # as profile_cluster built it: the shape, the engine_config, kv_watermark 0, the rest defaults
    assert load_cluster(str(old)) == Cluster(
        name="old", gpu="h100", model="llama3.1-8b", gpus=2, tp=1, placement="disaggregated", train_gpus=0,
        max_num_seqs=256, kv_budget_tokens=base.kv_budget, kv_watermark=0.0, costs=base.cost())
    # measured by `calibrate --model`: no cluster object, one engine on one device, no watermark
    del raw["cluster"]
    raw["engine_config"] = {"max_num_seqs": 8, "kv_budget_tokens": 10_000}
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(raw))
    assert load_cluster(str(cpu)) == Cluster(name="cpu", gpus=1, tp=1, placement="colocated", max_num_seqs=8,
                                             kv_budget_tokens=10_000, kv_watermark=0.0, costs=base.cost())


def test_a_whole_number_for_a_float_setting_reads(tmp_path):
    p = tmp_path / "p.json"
    _same_profile("h100-llama3.1-8b-2gpu", p)
    raw = json.loads(p.read_text())
    raw["cluster"].update(kv_watermark=0, net_gbps=200)
    p.write_text(json.dumps(raw))
    cl = load_cluster(str(p))
    assert (cl.kv_watermark, cl.net_gbps) == (0.0, 200.0) and type(cl.net_gbps) is float


@pytest.mark.parametrize(("key", "value", "want"), [
    ("chunked_prefill", "yes", "bool"), ("prefix_caching", 0, "bool"), ("sleep", None, "bool"),
    ("max_num_batched_tokens", 2048.0, "int"), ("tool_pool", True, "int"),
    ("kv_watermark", "0.01", "float"), ("net_gbps", False, "float"),
    ("trainer_offload", 1, "str"), ("decode_model", ["measured"], "str")])
def test_a_bad_type_in_a_kept_setting_is_one_error_line(tmp_path, key, value, want):
    p = tmp_path / "p.json"
    _same_profile("h100-llama3.1-8b-2gpu", p)
    raw = json.loads(p.read_text())
    raw["cluster"][key] = value
    p.write_text(json.dumps(raw))
    r = runner.invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--cluster", str(p),
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [f"error: {p}: field 'cluster.{key}': expected {want}, got {value!r}"]
