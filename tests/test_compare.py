"""``sortedrl compare``: every policy side by side on bundled and imported traces.

Run: pytest tests/test_compare.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.metrics import CONTRACT_KEYS
from sortedrl.policies.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "sortedrl" / "traces" / "data"
FIXTURE = ROOT / "tests" / "fixtures" / "splitwise_conv_head.csv"
ALL = [a for name in BUILTIN for a in ("--policy", name)]
runner = CliRunner()


def compare(*args):
    return runner.invoke(app, ["compare", *args])


@pytest.mark.parametrize("trace", ["logic-8k.jsonl", "math-16k.jsonl"])
def test_all_policies_on_the_bundled_traces(tmp_path, trace):
    out = tmp_path / "cmp"
    r = compare("--trace", str(DATA / trace), *ALL, "--cluster", "h100-llama3.1-8b-2gpu",
                "--out", str(out))
    assert r.exit_code == 0, r.output
    summaries = json.loads((out / "compare.json").read_text())
    assert [s["label"] for s in summaries] == list(BUILTIN)
    for s in summaries:
        assert set(CONTRACT_KEYS) <= set(s)
        assert s["samples_trained"] == s["samples_total"]
        run_summary = json.loads((out / s["label"] / "summary.json").read_text())
        assert run_summary == {k: v for k, v in s.items() if k != "label"}
        assert (out / s["label"] / "timeline.npz").exists()
    by = {s["label"]: s for s in summaries}
    assert by["async"]["cluster"] == by["one_step_off"]["cluster"] == "h100-llama3.1-8b-2gpu-disagg"
    assert by["sync"]["cluster"] == "h100-llama3.1-8b-2gpu"
    assert by["oracle_sorted"]["oracle"] is True and not by["sortedrl"]["oracle"]
    for key in ("makespan", "bubble", "useful", "stale"):  # the headline columns (issue 15)
        assert key in r.stdout
    assert "\noracle_sorted *" in r.stdout  # the row marks the oracle
    assert "upper reference" in r.stdout


def test_all_policies_on_an_imported_public_table(tmp_path):
    imported = tmp_path / "conv.jsonl"
    r = runner.invoke(app, ["trace", "import", str(FIXTURE), "--prompt-len-col", "num_prefill_tokens",
                            "--response-len-col", "num_decode_tokens", "--group-size", "4",
                            "--out", str(imported)])
    assert r.exit_code == 0, r.output
    r = compare("--trace", str(imported), *ALL, "--cluster", "h100-llama3.1-8b-2gpu-8seq",
                "--out", str(tmp_path / "c"), "--json")
    assert r.exit_code == 0, r.output
    summaries = json.loads(r.stdout)
    assert len(summaries) == len(BUILTIN)
    assert all(s["samples_total"] == s["samples_trained"] == 48 for s in summaries)
    assert {s["trace"] for s in summaries} == {"conv.jsonl"}


def test_labels_and_scoped_knobs(tmp_path):
    r = compare("--synthetic", "logic-8k", "--prompts", "64", "--group-size", "2",
                "--policy", "on=sortedrl", "--policy", "part=sortedrl", "--set", "part.mode=partial",
                "--set", "on.update_batch=32", "--out", str(tmp_path / "x"), "--json")
    assert r.exit_code == 0, r.output
    on, part = json.loads(r.stdout)
    assert (on["label"], on["params"]["mode"], on["params"]["update_batch"]) == ("on", "on_policy", 32)
    assert (part["label"], part["params"]["mode"]) == ("part", "partial")


def test_workers_write_the_same_run_directory_byte_for_byte(tmp_path):
    """--workers N simulates the policies in N processes: the same files, the same table."""
    runs = {}
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}"
        r = compare("--trace", str(DATA / "logic-8k.jsonl"), *ALL, "--cluster", "h100-llama3.1-8b-2gpu",
                    "--out", str(out), "--workers", workers)
        assert r.exit_code == 0, r.output
        files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        runs[workers] = files, r.stdout.replace(str(out), "OUT")
    assert runs["1"] == runs["3"]
    # compare.json, the run marker (.sortedrl-run), and a summary and a timeline a policy
    assert len(runs["1"][0]) == 2 + 2 * len(BUILTIN)


@pytest.mark.parametrize("args, message", [
    (["--policy", "sync", "--set", "minibatches=2"], "--set 'minibatches=2': compare needs LABEL.key=value"),
    (["--policy", "sync", "--set", "nope.minibatches=2"], "no policy labelled 'nope'"),
    (["--policy", "sync", "--policy", "sync"], "label 'sync' is used twice"),
    (["--policy", "sync", "--policy", "bogus"], "unknown policy 'bogus'"),
    (["--policy", "sync", "--set", "sync.minibatches=0"], "minibatches must be >= 1"),
    (["--policy", "sync", "--workers", "0"], "--workers 0: must be >= 1"),
    # (both were accepted: A/ and a/ are one directory on a case-insensitive file system)
    (["--policy", "A=sync", "--policy", "a=sortedrl"], "labels 'A' and 'a' differ only in case"),
])
def test_compare_errors(tmp_path, args, message):
    out = tmp_path / "o"
    r = compare("--trace", str(DATA / "logic-8k.jsonl"), *args, "--out", str(out))
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not out.exists()


def test_one_policy_is_one_policy(tmp_path):
    r = compare("--trace", str(DATA / "logic-8k.jsonl"), "--policy", "sync", "--out", str(tmp_path / "o"))
    assert r.exit_code == 0 and r.stdout.startswith("1 policy on logic-8k.jsonl"), r.stdout  # was "1 policies"


def test_a_label_with_a_dot_takes_its_knobs(tmp_path):
    """`--set a.b.minibatches=2` said "no policy labelled 'a'": a label may hold a dot."""
    r = compare("--trace", str(DATA / "logic-8k.jsonl"), "--policy", "a.b=sync", "--policy", "a=sync",
                "--set", "a.b.minibatches=2", "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    runs = {x["label"]: x for x in json.loads(r.stdout)}
    assert (runs["a.b"]["params"]["minibatches"], runs["a"]["params"]["minibatches"]) == (2, 1)
    assert (runs["a.b"]["updates"], runs["a"]["updates"]) == (2, 1)


USER_POLICY = """
from sortedrl.policies.sync import SyncPolicy

class MySync(SyncPolicy):
    name = "my_sync"
"""


def test_a_user_policy_is_labelled_by_its_class(tmp_path, monkeypatch):
    """``--policy module:Class`` without a label: the class names its run directory (a colon
    cannot name a directory); a label still overrides it."""
    (tmp_path / "my_policies.py").write_text(USER_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "cmp"
    r = compare("--trace", str(DATA / "logic-8k.jsonl"), "--policy", "sync", "--policy", "my_policies:MySync",
                "--policy", "mine=my_policies:MySync", "--out", str(out))
    assert r.exit_code == 0, r.output
    summaries = json.loads((out / "compare.json").read_text())
    assert [s["label"] for s in summaries] == ["sync", "MySync", "mine"]
    assert {s["policy"] for s in summaries[1:]} == {"my_sync"}
    assert (out / "MySync" / "summary.json").exists() and (out / "mine" / "summary.json").exists()


@pytest.mark.parametrize("policy", ["async", "one_step_off"])
def test_explicit_costs_move_to_the_split_as_the_presets_do(tmp_path, policy):
    # A cluster file whose costs are the preset's own: a policy that needs separate GPUs runs on
    # the split of both the same way (the file's trainer and sync terms were kept as measured on
    # all GPUs: async trained twice as fast on its 1-GPU trainer, 424.0 s against 532.6 s).
    import dataclasses

    from sortedrl.compare import cluster_for
    from sortedrl.sim.cluster import load_cluster, preset
    name = "h100-llama3.1-8b-2gpu"
    own = dataclasses.asdict(preset(name).cost())
    path = tmp_path / "explicit.json"
    path.write_text(json.dumps({"preset": name, "costs": own}))
    placements = ("disaggregated",)
    by_file = cluster_for(placements, load_cluster(str(path))).cost()
    by_preset = cluster_for(placements, preset(name)).cost()
    for term in ("train_fix", "train_per_token", "train_per_pair", "sync_s"):
        assert getattr(by_file, term) == pytest.approx(getattr(by_preset, term), rel=1e-12)
    assert by_file.train_per_token == pytest.approx(2 * preset(name).cost().train_per_token)
    assert (by_file.step_fixed_s, by_file.weight_read_s, by_file.step_s_per_seq) == (
        by_preset.step_fixed_s, by_preset.weight_read_s, by_preset.step_s_per_seq)
    runs = {}
    for label, cluster in (("file", str(path)), ("preset", name)):
        r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "32", "--steps", "2",
                                "--policy", policy, "--cluster", cluster, "--json",
                                "--out", str(tmp_path / label)])
        assert r.exit_code == 0, r.output
        runs[label] = json.loads(r.stdout[r.stdout.index("{"):])
        scaled = "the given trainer and sync terms are scaled to the split as the preset's are"
        assert (scaled in r.output) == (label == "file")
    assert runs["file"]["makespan_s"] == pytest.approx(runs["preset"]["makespan_s"], rel=1e-9)
