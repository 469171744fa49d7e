"""OpenRLHF's colocated ``timing/broadcast`` holds the rollout's onload.

OpenRLHF at 3c3be6234e0c (2026-08-13; the same since timing/broadcast is logged, 4908e6ee,
2026-03-19): ``ppo_trainer.py`` ``train_step`` times ``self.broadcast_to_vllm()`` as
``timing/broadcast`` (lines 245-248, 258), and ``broadcast_to_vllm`` with ``--vllm.enable_sleep``
(colocated only: ``train_ppo_ray.py`` 663-665) first calls
``batch_vllm_engine_call(self.vllm_engines, "wake_up", tags=["weights"])`` (line 314): vLLM's
weights come back from host memory inside the timer, the simulator's ``onload_s``. The KV cache's
wake-up and the sleep are in ``timing/generation`` (``samples_generator.py`` 106-120). The
sync was fitted with the onload in it and the simulator added its own onload again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster, preset

runner = CliRunner()
PRESET = "h100-llama3.1-8b"  # colocated (sleep), 8 GPUs
SAMPLES, SYNC = 128, 2.0


def _jsonl(path: Path) -> Path:
    """One line a step as OpenRLHF's loggers name the keys (logging_utils.py log_train:
    ``train/<key>`` and ``train/global_step``); the synchronous trainer's status (ppo_trainer.py
    train_step and fit: timing/step_total the sum of its timing/* phases)."""
    lines = []
    for step in range(1, 11):
        tokens = 200_000 + 37_000 * ((7 * step) % 11)
        s = {"total_length": tokens / SAMPLES, "response_length": tokens / SAMPLES - 250.0,
             "timing/generation": 50.0 + step, "timing/make_experience": 1.5 + 5e-6 * tokens,
             "timing/ppo_train": 4.5 + 2.5e-5 * tokens, "timing/broadcast": SYNC}
        s["timing/step_total"] = sum(v for k, v in s.items() if k.startswith("timing/"))
        lines.append({"step": step, **{f"train/{k}": v for k, v in {**s, "global_step": step}.items()}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _calibrate(tmp_path: Path, cluster: str) -> tuple[Path, list[str]]:
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(_jsonl(tmp_path / "m.jsonl")), "--cluster", cluster,
                            "--samples-per-step", str(SAMPLES), "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.output.splitlines()


def _show(path: Path) -> list[str]:
    r = runner.invoke(app, ["profile", "show", str(path)])
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def test_colocated_broadcast_holds_the_onload(tmp_path):
    # the old profile kept the preset's onload beside a sync fitted with the weights' wake-up in it
    out, lines = _calibrate(tmp_path, PRESET)
    base = preset(PRESET).cost()
    assert base.onload_s > 0
    cost = load_cluster(str(out)).cost()
    assert (cost.sync_s, cost.onload_s) == (pytest.approx(SYNC), 0.0)
    assert cost.offload_s == base.offload_s  # the sleep after generation is not in it
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert tr["columns"]["sync"] == "train/timing/broadcast" and "sync_upper_bound" not in tr
    assert "onload_s" in tr["fixed_by_model"]
    note = (f"onload_s 0 (the base's {base.onload_s:.4g} s): OpenRLHF's colocated train/timing/broadcast wakes "
            "the rollout's weights up (vLLM sleep mode, wake_up of the weights) before the sync")
    pair = (f"train_per_pair 0 (the base's {base.train_per_pair:.3g} s/attention pair): the metrics give no "
            "per-sample lengths, so the attention pairs are fitted into train_per_token")
    assert tr["notes"] == [pair, note]
    shown = _show(out)
    assert f"  {note}" in shown and f"  {note}" in lines
    assert next(x for x in shown if x.startswith("  onload_s ")).endswith(
        "0: the fitted sync (OpenRLHF's colocated broadcast) holds it")


def test_a_disaggregated_cluster_keeps_its_onload(tmp_path):
    # no vLLM sleep without colocate_all (train_ppo_ray.py 663-665): the broadcast is the sync alone
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"preset": PRESET, "placement": "disaggregated", "train_gpus": 4}))
    out, _ = _calibrate(tmp_path, str(cluster))
    tr = json.loads(out.read_text())["fit"]["trainer"]
    assert "onload_s" not in tr["fixed_by_model"]
    assert [n for n in tr.get("notes", []) if not n.startswith("train_per_pair 0 ")] == []
    assert load_cluster(str(out)).cost().sync_s == pytest.approx(SYNC)
