"""A cluster file's field that its decode model does not read is refused, not ignored.

`mbu`, `mfu` and `step_fixed_s` price a decode step only under `"decode_model": "roofline"`
(Cluster.cost); the presets' `measured` model has its own fitted terms. A file that set
`"mbu": 0.01` on a preset simulated exactly as one with `"mbu": 1` did (an audit, cliout41).

Run: pytest tests/test_cluster_fields_used.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster

runner = CliRunner()
SIM = ["simulate", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "2", "--steps", "1",
       "--policy", "sync", "--json"]
PRESET = "h100-llama3.1-8b-2gpu"


def cluster_file(tmp_path, **fields) -> str:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"preset": PRESET, **fields}))
    return str(path)


@pytest.mark.parametrize("fields, named, them", [
    ({"mbu": 0.01}, "field 'mbu'", "it"),
    ({"mfu": 0.2, "step_fixed_s": 0.1}, "fields 'mfu' and 'step_fixed_s'", "them"),
    ({"mbu": 0.5, "mfu": 0.2, "t_fix": 0.1}, "fields 'mbu', 'mfu' and 't_fix' (now step_fixed_s)", "them"),
    ({"mbu": 0.5, "decode_model": "measured"}, "field 'mbu'", "it"),
])
def test_a_roofline_field_without_the_roofline_is_refused(tmp_path, monkeypatch, fields, named, them):
    monkeypatch.chdir(tmp_path)
    path = cluster_file(tmp_path, **fields)
    r = runner.invoke(app, [*SIM, "--cluster", path])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (f"error: {path}: {named}: only decode_model 'roofline' uses {them}, and this "
                        "cluster's is 'measured' (its own fitted terms: docs/calibration.md, Decode step); "
                        f"add \"decode_model\": \"roofline\" or remove {them}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # nothing written


def test_under_the_roofline_mbu_prices_the_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    makespans = []
    for mbu in (1.0, 0.01):
        path = cluster_file(tmp_path, decode_model="roofline", mbu=mbu)
        r = runner.invoke(app, [*SIM, "--cluster", path, "--out", f"run{mbu}"])
        assert r.exit_code == 0, r.output
        makespans.append(json.loads(r.stdout)["makespan_s"])
    assert makespans[1] > 2 * makespans[0]  # weight reads at 1% of the bandwidth


def test_a_value_check_comes_first_and_recorded_fields_still_load(tmp_path):
    """A bad value is named as before; tune.json's record of every field (used or not) is not a
    file the user wrote, and loads as it did."""
    from sortedrl.sim.cluster import cluster_from_dict

    with pytest.raises(Exception, match=r"field 'mbu': must be in \(0, 1\], got 2.0"):
        load_cluster(cluster_file(tmp_path, mbu=2.0))
    fields = load_cluster(PRESET).fields()
    assert {"mbu", "mfu", "step_fixed_s"} <= set(fields) and fields["decode_model"] == "measured"
    assert cluster_from_dict(dict(fields), "tune.json", PRESET).mbu == fields["mbu"]


COSTS = {"step_fixed_s": 0.002, "weight_read_s": 0.01, "kv_read_s_per_token": 1e-7, "compute_s_per_seq": 1e-4,
         "prefill_s_per_token": 3e-5, "prefill_s_per_pair": 1e-10, "train_per_token": 1e-6,
         "train_fix": 1.0, "sync_s": 0.5}


@pytest.mark.parametrize("fields, named, them", [
    ({"decode_model": "roofline", "mbu": 0.3}, "fields 'decode_model' and 'mbu'", "them"),
    ({"mfu_train": 0.1}, "field 'mfu_train'", "it"),
    ({"recompute": True, "ref_model": False, "extra_forwards": 0, "mfu_prefill": 0.2},
     "fields 'mfu_prefill', 'extra_forwards', 'ref_model' and 'recompute'", "them"),
])
def test_a_cost_deriving_field_beside_explicit_costs_is_refused(tmp_path, monkeypatch, fields, named, them):
    """Explicit costs give every term: a field that only derives terms priced nothing beside
    them (an `mbu` of 0.3 next to a preset's own costs gave the same makespan to the digit)."""
    monkeypatch.chdir(tmp_path)
    path = cluster_file(tmp_path, costs=COSTS, **fields)
    r = runner.invoke(app, [*SIM, "--cluster", path])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (f"error: {path}: {named} beside 'costs': the costs give every term, so nothing "
                        f"reads {them}; remove {them}, or remove 'costs' to derive the terms from the "
                        "preset and these fields\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # nothing written
    # the fields the costs do not replace still load beside them (engine shape, KV, the split's link)
    path = cluster_file(tmp_path, costs=COSTS, max_num_seqs=32, sync_fix=0.2, gpu_mem_util=0.8)
    cluster = load_cluster(path)
    assert (cluster.max_num_seqs, cluster.sync_fix, cluster.cost().sync_s) == (32, 0.2, 0.5)
