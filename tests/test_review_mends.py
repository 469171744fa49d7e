"""What the final review of this stop's changes found, each pinned: a wild fitted drift crashed
trace fit's note (OverflowError); an async trial's export named a --prompts never given; a
--prompts equal to what a trial ran was warned of; the too-small-trace hint named a split preset
with no whole engine at tp > 1; a hand-edited trace_shape crashed export; an inherited hook was
located in sortedrl's own file; two length options on one column, which always imported, were
refused; an import whose every group was dropped hid its step-column hint."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import _smaller_cluster
from sortedrl.policies.returns import hook_at
from sortedrl.policies.sync import SyncPolicy
from sortedrl.sim.cluster import load_cluster, preset
from sortedrl.traces.io import read_trace

runner = CliRunner()


def test_a_wild_drift_is_noted_without_a_crash(tmp_path):
    rows = [json.dumps({"sortedrl_trace": 1, "max_response_len": 1 << 21, "group_size": 2, "source": "t"})]
    for g in range(16):
        for k in range(2):
            rows.append(json.dumps({"prompt_id": f"p{g}", "sample": k, "prompt_len": 10, "truncated": False,
                                    "response_len": (3 + k) if g % 2 == 0 else 2_000_000 + k, "step": g % 2}))
    (tmp_path / "t.jsonl").write_text("\n".join(rows) + "\n")
    r = runner.invoke(app, ["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    assert "(over x1,000,000 by step 60)" in r.stderr.splitlines()[-1]


def test_export_defaults_only_the_batch_a_policy_counts_in_prompts(tmp_path):
    small = ["--synthetic", "math-16k", "--prompts", "64", "--steps", "3", "--cluster", "h100-llama3.1-8b-2gpu"]
    out = tmp_path / "t"
    r = runner.invoke(app, ["tune", *small, "--policy", "async", "--policy", "sync", "--param", "async.batch=256",
                            "--param", "sync.rollout_batch=32", "--budget", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    trials = json.loads((out / "tune.json").read_text())["trials"]
    by = {(t["policy"], json.dumps(t["params"])): t["id"] for t in trials}
    async_trial, sync_trial = by[("async", '{"batch": 256}')], by[("sync", '{"rollout_batch": 32}')]
    got = json.loads(runner.invoke(app, ["export", "areal", str(out), "--trial", str(async_trial), "--json"]).stdout)
    assert got["overrides"]["train_dataset.batch_size"] == 32  # (256 samples / 8)
    assert not [c for c in got["caveats"] if "--prompts" in c]  # (it named a --prompts 64 never given)
    r = runner.invoke(app, ["export", "verl", str(out), "--trial", str(sync_trial), "--prompts", "32"])
    assert (r.exit_code, r.stderr) == (0, "")  # (32 is what it ran: it was warned of)
    r = runner.invoke(app, ["export", "verl", str(out), "--trial", str(sync_trial), "--prompts", "64"])
    assert r.stderr == (f"warning: --prompts 64: {out / 'tune.json'}: trial {sync_trial} ran 32 (prompts_per_step); "
                        "the export is of another run\n")


def test_a_hand_edited_trace_shape_is_one_error_line(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "h100-llama3.1-8b", "best": {"overall": 0}, "trials": [
        {"id": 0, "policy": "sync", "params": {}}], "trace_shape": {
        "group_size": 8, "prompts_per_step": 64, "steps": "x", "max_response_len": 16384}}))
    r = runner.invoke(app, ["export", "verl", str(path)])
    assert (r.exit_code, r.stderr) == (2, f"error: {path}: field 'trace_shape': expected group_size, "
                                          "prompts_per_step, steps, max_response_len integers >= 1, got an object\n")


def test_the_split_hint_names_a_preset_with_whole_engines():
    for name in ("h100-qwen3-8b-tp2-16gpu-disagg", "h100-llama3.1-8b-2gpu-disagg"):
        hint = _smaller_cluster(preset(name), 6)
        assert hint is not None and load_cluster(hint).engines >= 1, (name, hint)


def test_an_inherited_hook_is_not_located_in_sortedrl():
    class Sub(SyncPolicy):
        name = "sub"

        def on_start(self, view):
            return []

    assert hook_at(Sub(), "on_update_done") == ""
    assert hook_at(Sub(), "on_start") == f" (at {__file__}:{Sub.on_start.__code__.co_firstlineno})"


def test_one_column_for_both_lengths_imports_and_a_dropped_import_names_its_step_column(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("n,step,uid\n" + "".join(f"{5 + i},{i % 3},u{i}\n" for i in range(8)))
    r = runner.invoke(app, ["trace", "import", str(table), "--prompt-len-col", "n", "--response-len-col", "n",
                            "--group-size", "2", "--out", str(tmp_path / "a.jsonl")])
    assert r.exit_code == 0, r.output
    assert read_trace(tmp_path / "a.jsonl").prompt_len.tolist() == read_trace(tmp_path / "a.jsonl").response_len.tolist()
    r = runner.invoke(app, ["trace", "import", str(table), "--prompt-len-col", "n", "--response-len-col", "n",
                            "--group-size", "2", "--prompt-id-col", "uid", "--out", str(tmp_path / "b.jsonl")])
    assert (r.exit_code, r.stderr) == (2, f"error: {table}: no prompt id has 2 rows, the group size (--group-size); "
                                          "column 'step' was not read: give --step-col step?\n")
    assert not Path(tmp_path / "b.jsonl").exists()
