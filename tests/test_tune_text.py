"""`tune`'s text for a reader: the split note describes the clusters the trials ran on, the
skipped line appears only when a trial was skipped, and knob values are printed whole.

With `--param cluster.gpus=8,16,32,64` stderr said one_step_off "runs on the disaggregated split
of the same 8 GPUs: 6 roll out, 2 train" (its best trial ran 48+16 on 64 GPUs), and the plan said
"0 trials skipped" when none was. Knobs are printed as tune.json has them: a reader copies them
into `--set`, and a rounded 3.97 there was another run (a loading group of 2,033 prompts where the
tuned trial had 2,034). So a sampled float is short in both, the trial running the value printed
(`oversubscribe=3.972`, 4 significant digits of its range, not `3.972428078763187`).
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster
from sortedrl.tune.commands import split_note

runner = CliRunner()
BASE = ["--synthetic", "logic-8k", "--prompts", "64", "--group-size", "4", "--steps", "2",
        "--cluster", "h100-llama3.1-8b-8gpu"]


def test_tuned_cluster_shape_split_note_and_no_empty_skipped_line(tmp_path):
    r = runner.invoke(app, ["tune", *BASE, "--policy", "one_step_off", "--policy", "sortedrl",
                            "--param", "cluster.gpus=8,16,32,64", "--param", "sortedrl.oversubscribe=1:4",
                            "--budget", "12", "--out", str(tmp_path / "t")], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert ("note: one_step_off needs separate rollout and training GPUs, so each of its trials on a "
            "colocated shape runs on the disaggregated split of that trial's GPUs (roll out + train): "
            "6+2 of 8, 12+4 of 16, 24+8 of 32, 48+16 of 64") in r.stderr.splitlines()
    assert "split of the same" not in r.stderr
    assert "skipped" not in r.stdout
    result = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert "skipped" not in result or result["skipped"] == []
    text = " ".join(r.stdout.split())
    shown = [t for t in result["trials"] if f"trial {t['id']} sortedrl:" in text]
    assert shown and all(round(t["params"]["oversubscribe"], 3) == t["params"]["oversubscribe"] for t in shown)
    for t in shown:  # the text has each knob as tune.json has it, so --set reruns the trial
        assert f"oversubscribe={t['params']['oversubscribe']!r}," in text


def test_split_note_without_a_tuned_shape_names_the_given_cluster():
    cl = load_cluster("h100-llama3.1-8b-8gpu")
    trials = [{"policy": "one_step_off", "params": {}}]
    assert split_note("one_step_off", trials, cl) == (
        "note: one_step_off needs separate rollout and training GPUs, so it runs on the disaggregated "
        "split of the same 8 GPUs: 6 roll out, 2 train (h100-llama3.1-8b-8gpu-disagg)")
    assert split_note("sync", [{"policy": "sync", "params": {"cluster.gpus": 16}}], cl) is None
