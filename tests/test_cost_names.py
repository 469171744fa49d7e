"""The cost terms' old names (t_fix, a0, a1, ... : ``LEGACY_NAMES`` in sortedrl/sim/cost.py) are
still read from users' profiles and cluster files, as the new names; a file holding both names of
one term is one error naming both keys.

- a profile written with the old names (the CPU fixture, renamed back) loads to the same cost
  model, field for field, simulates to the same summary and reads (``profile show``'s loader) as
  the new-name file;
- a cluster file with old ``costs`` keys and the old ``t_fix`` field loads to the same cluster;
- both names of one term: one ``error:`` line, exit 2, nothing written;
- a bad value under an old name (``"a0": -1``, a cluster file's ``"t_fix": "x"``): one ``error:``
  line naming the key as the file spells it, and its new name (``'costs.a0' (now weight_read_s)``);
- ``sortedrl profile show`` of an old-name profile prints the new names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from itertools import takewhile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.calibration.show import load_profile
from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import load_cluster
from sortedrl.sim.cost import LEGACY_NAMES, LEGACY_STEP_FIT_NAMES, CostModel

FIX = Path(__file__).parent / "fixtures"
PROFILE = FIX / "cpu-profile.json"
TRACE = FIX / "run-sync" / "trace.jsonl"
OLD = {new: old for old, new in LEGACY_NAMES.items()}
OLD_STEP_FIT = {new: old for old, new in LEGACY_STEP_FIT_NAMES.items()}  # admit_s_per_request: "pr"
runner = CliRunner()


def old_names(raw: dict, names: dict[str, str] = OLD) -> dict:
    return {names.get(k, k): v for k, v in raw.items()}


def old_profile(tmp_path: Path) -> Path:
    """The CPU profile as written before the terms were renamed, under the fixture's own name
    (a profile's cluster is named after its file)."""
    raw = json.loads(PROFILE.read_text())
    raw["costs"] = old_names(raw["costs"])
    raw["fit"]["steps"] = old_names(raw["fit"]["steps"], OLD_STEP_FIT)
    assert {"t_fix", "a1", "p0", "f0"} <= set(raw["costs"]) and {"a1", "pn", "pr"} <= set(raw["fit"]["steps"])
    path = tmp_path / "old" / PROFILE.name
    path.parent.mkdir()
    path.write_text(json.dumps(raw, indent=2))
    return path


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def assert_refused(tmp_path, command: str, path, message: str) -> None:
    """``simulate --cluster PATH`` or ``profile show PATH`` refuses the file with one line,
    exit 2, no traceback, and writes nothing."""
    before = snapshot(tmp_path)
    args = (["simulate", "--trace", str(TRACE), "--policy", "sync", "--cluster", str(path), "--out", "o"]
            if command == "simulate" else ["profile", "show", str(path)])
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stderr == f"error: {path}: {message}\n" and r.stdout == ""
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    assert snapshot(tmp_path) == before  # nothing written


def test_an_old_name_profile_loads_and_simulates_as_the_new_one(tmp_path):
    old = old_profile(tmp_path)
    new_cost, old_cost = load_cluster(str(PROFILE)).cost(), load_cluster(str(old)).cost()
    for f in dataclasses.fields(CostModel):
        assert getattr(old_cost, f.name) == getattr(new_cost, f.name), f.name
    assert old_cost == new_cost and load_cluster(str(old)) == load_cluster(str(PROFILE))
    summaries = []
    for path, out in ((PROFILE, tmp_path / "new-run"), (old, tmp_path / "old-run")):
        r = runner.invoke(app, ["simulate", "--trace", str(TRACE), "--policy", "sync", "--cluster", str(path),
                                "--out", str(out), "--json"])
        assert r.exit_code == 0, r.output
        summaries.append(json.loads(r.stdout))
    assert summaries[0] == summaries[1] and summaries[0]["samples_trained"] == 128
    # every section a reader takes (costs, fit.steps with its "pr") comes back under the new names
    assert load_profile(old) == json.loads(PROFILE.read_text())


def test_an_old_name_cluster_file_loads_as_the_new_one(tmp_path):
    costs = {"step_fixed_s": 0.002, "weight_read_s": 0.01, "kv_read_s_per_token": 1e-7, "compute_s_per_seq": 1e-4,
             "step_s_per_seq": 2e-5, "prefill_s_per_token": 3e-5, "prefill_s_per_pair": 1e-10,
             "admit_s_per_request": 1e-4, "admit_step_s": 5e-4, "policy_event_s": 2e-5,
             "train_per_token": 1e-6, "train_fix": 1.0, "sync_s": 0.5}
    new = {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": costs}
    old = {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": old_names(costs)}
    assert set(old["costs"]) == {*LEGACY_NAMES, "train_per_token", "train_fix", "sync_s"}
    for d, raw in (("new", new), ("old", old)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "mine.json").write_text(json.dumps(raw))
    got, want = load_cluster(str(tmp_path / "old" / "mine.json")), load_cluster(str(tmp_path / "new" / "mine.json"))
    assert got == want and got.cost() == CostModel(**costs)
    # beside costs, the cluster-level t_fix (as step_fixed_s) priced nothing: refused, by its name
    new |= {"decode_model": "roofline", "step_fixed_s": 0.003}
    old |= {"decode_model": "roofline", "t_fix": 0.003}
    for d, raw, named in (("new", new, "'step_fixed_s'"), ("old", old, "'t_fix' (now step_fixed_s)")):
        path = tmp_path / d / "mine.json"
        path.write_text(json.dumps(raw))
        with pytest.raises(ConfigError) as err:
            load_cluster(str(path))
        assert str(err.value).startswith(f"{path}: fields 'decode_model' and {named} beside 'costs': the costs "
                                         "give every term, so nothing reads them; remove them")
    # without costs the cluster-level t_fix prices the roofline's steps, as step_fixed_s does
    for raw in (new, old):
        raw.pop("costs")
    (tmp_path / "old" / "mine.json").write_text(json.dumps(old))
    (tmp_path / "new" / "mine.json").write_text(json.dumps(new))
    got, want = load_cluster(str(tmp_path / "old" / "mine.json")), load_cluster(str(tmp_path / "new" / "mine.json"))
    assert got == want and got.cost() == want.cost() and got.cost().step_fixed_s == want.cost().step_fixed_s


def _both_in_costs(raw: dict) -> None:
    raw["costs"]["a1"] = raw["costs"]["kv_read_s_per_token"]


def _both_in_steps(raw: dict) -> None:
    raw["fit"]["steps"]["pr"] = raw["fit"]["steps"]["admit_s_per_request"]


CLUSTER_FILE = {"preset": "h100-llama3.1-8b-1gpu-16seq", "step_fixed_s": 0.002}


@pytest.mark.parametrize("command, make, message", [
    ("simulate", lambda: {**CLUSTER_FILE, "t_fix": 0.002},
     "fields 't_fix' and 'step_fixed_s' are the old and the new name of one term; give one of them"),
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": {
        "t_fix": 0.002, "a0": 0.01, "a1": 1e-7, "kv_read_s_per_token": 1e-7, "c1": 0.0, "p1": 0.0, "p2": 0.0,
        "train_per_token": 1e-6, "train_fix": 1.0, "sync_s": 0.5}},
     "field 'costs': keys 'a1' and 'kv_read_s_per_token' are the old and the new name of one term; "
     "give one of them"),
    ("simulate", _both_in_costs,
     "field 'costs': keys 'a1' and 'kv_read_s_per_token' are the old and the new name of one term; "
     "give one of them"),
    ("profile show", _both_in_costs,
     "field 'costs': keys 'a1' and 'kv_read_s_per_token' are the old and the new name of one term; "
     "give one of them"),
    ("profile show", _both_in_steps,
     "field 'fit.steps': keys 'pr' and 'admit_s_per_request' are the old and the new name of one term; "
     "give one of them"),
])
def test_both_names_of_a_term_are_one_error_and_nothing_is_written(tmp_path, monkeypatch, command, make, message):
    monkeypatch.chdir(tmp_path)
    if make in (_both_in_costs, _both_in_steps):  # a profile: the CPU fixture with one term twice
        raw = json.loads(PROFILE.read_text())
        make(raw)
    else:  # a cluster file
        raw = make()
    path = tmp_path / "both.json"
    path.write_text(json.dumps(raw))
    assert_refused(tmp_path, command, path, message)


def test_profile_show_of_an_old_name_profile_prints_the_new_names(tmp_path):
    old = old_profile(tmp_path)
    shown = {}
    for path in (PROFILE, old):
        r = runner.invoke(app, ["profile", "show", str(path)])
        assert r.exit_code == 0, r.output
        shown[path] = r.output.splitlines()
    # the same lines but the header's path
    assert shown[old][0] == f"profile {old} (format 1)" and shown[old][1:] == shown[PROFILE][1:]
    rows = takewhile(bool, shown[old][shown[old].index("cost terms:") + 2:])  # (after the column heads)
    terms = [line.split()[0] for line in rows]
    assert terms[:8] == ["step_fixed_s", "step_s_per_seq", "weight_read_s", "compute_s_per_seq",
                         "kv_read_s_per_token", "prefill_s_per_token", "prefill_s_per_pair", "admit_step_s"]
    assert {"admit_s_per_request", "policy_event_s"} <= set(terms) and not set(terms) & set(LEGACY_NAMES)
    assert ("  kv_read_s_per_token                   0  s/KV token/step        measured: at its bound 0 "
            "(fitted 1.401e-45)") in shown[old]


COSTS = {"step_fixed_s": 0.002, "weight_read_s": 0.01, "kv_read_s_per_token": 1e-7, "compute_s_per_seq": 1e-4,
         "step_s_per_seq": 2e-5, "prefill_s_per_token": 3e-5, "prefill_s_per_pair": 1e-10,
         "admit_s_per_request": 1e-4, "admit_step_s": 5e-4, "policy_event_s": 2e-5,
         "train_per_token": 1e-6, "train_fix": 1.0, "sync_s": 0.5}


def _old_cluster_file(**changes) -> dict:
    """A cluster file with old-name costs, ``changes`` made to them."""
    return {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": {**old_names(COSTS), **changes}}


def _old_name_profile(section: str, **changes) -> dict:
    """The CPU profile with old-name costs, ``changes`` made to its ``section`` object."""
    raw = json.loads(PROFILE.read_text())
    raw["costs"] = old_names(raw["costs"])
    raw.setdefault(section, {}).update(changes)
    return raw


def _new_name_profile(**changes) -> dict:
    """The CPU profile as calibrate writes it now, ``changes`` made to its ``cluster`` object."""
    raw = json.loads(PROFILE.read_text())
    raw.setdefault("cluster", {}).update(changes)
    return raw


# a bad value under an old name: the error names the key as the file spells it, and the new name
@pytest.mark.parametrize("command, make, message", [
    ("simulate", lambda: _old_cluster_file(a0=-1),
     "field 'costs.a0' (now weight_read_s): expected a finite number >= 0, got -1"),
    ("simulate", lambda: _old_cluster_file(t_fix="x"),
     "field 'costs.t_fix' (now step_fixed_s): expected a finite number >= 0, got 'x'"),
    ("simulate", lambda: _old_cluster_file(t_fix=0, a0=0),
     "field 'costs': t_fix (now step_fixed_s) + a0 (now weight_read_s) must be at least 1e-09 s "
     "(a decode step takes time), got 0"),
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "t_fix": "x"},
     "field 't_fix' (now step_fixed_s): expected float, got 'x'"),
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "t_fix": -1},
     "field 't_fix' (now step_fixed_s): must be a finite number >= 0, got -1.0"),
    ("simulate", lambda: _old_name_profile("costs", a0=-1),
     "field 'costs.a0' (now weight_read_s): expected a finite number >= 0, got -1"),
    ("profile show", lambda: _old_name_profile("costs", a0=-1),
     "field 'costs.a0' (now weight_read_s): expected a finite number >= 0, got -1"),
    ("simulate", lambda: _old_name_profile("costs", p2=True),
     "field 'costs.p2' (now prefill_s_per_pair): expected a finite number >= 0, got True"),
    ("profile show", lambda: _old_name_profile("costs", t_fix="x"),
     "field 'costs.t_fix' (now step_fixed_s): expected a finite number >= 0, got 'x'"),
    ("simulate", lambda: _old_name_profile("cluster", t_fix="x"),
     "field 'cluster.t_fix' (now step_fixed_s): expected float, got 'x'"),
    ("simulate", lambda: _old_name_profile("cluster", t_fix=-1),
     "field 'cluster.t_fix' (now step_fixed_s): must be a finite number >= 0, got -1.0"),
    # profile show checks the cluster object as --cluster does (it showed these without error)
    ("profile show", lambda: _old_name_profile("cluster", t_fix="x"),
     "field 'cluster.t_fix' (now step_fixed_s): expected float, got 'x'"),
    ("profile show", lambda: _old_name_profile("cluster", t_fix=-1),
     "field 'cluster.t_fix' (now step_fixed_s): must be a finite number >= 0, got -1.0"),
    # the same values under the new names: named as they were
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": {**COSTS, "weight_read_s": -1}},
     "field 'costs.weight_read_s': expected a finite number >= 0, got -1"),
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "step_fixed_s": -1},
     "field 'step_fixed_s': must be a finite number >= 0, got -1.0"),
    # a profile's cluster object: named with its 'cluster.' (it was 'step_fixed_s', as if at the top)
    *[(command, lambda: _new_name_profile(step_fixed_s=-1),
       "field 'cluster.step_fixed_s': must be a finite number >= 0, got -1.0") for command in ("simulate", "profile show")],
    *[(command, lambda: _new_name_profile(step_fixed_s="x"),
       "field 'cluster.step_fixed_s': expected float, got 'x'") for command in ("simulate", "profile show")],
    *[(command, lambda: _new_name_profile(train_fix=-2),
       "field 'cluster.train_fix': must be a finite number >= 0, got -2.0") for command in ("simulate", "profile show")],
    ("simulate", lambda: {"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": {**COSTS, "step_fixed_s": 0,
                                                                            "weight_read_s": 0}},
     "field 'costs': step_fixed_s + weight_read_s must be at least 1e-09 s (a decode step takes time), got 0"),
])
def test_a_bad_value_under_an_old_name_is_named_as_written(tmp_path, monkeypatch, command, make, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(make()))
    assert_refused(tmp_path, command, path, message)
