"""A cluster whose trainer state does not fit its GPUs is simulated with the optimizer offloaded
to host memory (``trainer_offload`` auto): the commands now say so, with the cost per update
(a 70B model on 4 H100s was simulated without a word on the trainer's memory)."""

from __future__ import annotations

import dataclasses

from sortedrl.compare import cluster_for, fit_warnings, offload_note
from sortedrl.sim.cluster import preset
from sortedrl.traces.synth import synthesize

NOTE = ("note: on h100-llama3.1-70b-tp4-4gpu the trainer's weights, gradients and Adam state need 282 GB "
        "a GPU (sharded over 4 trainer GPUs of 80 GB), so the FP32 master weights and Adam state live in "
        "host memory and move in and out every update (+6.6 s an update, as verl's optimizer offload); "
        "more GPUs keep them on the GPUs")


def test_a_trainer_that_does_not_fit_its_gpus_is_noted_with_its_cost():
    small = preset("h100-llama3.1-70b-tp4-4gpu")
    assert small.optimizer_offloaded and offload_note(small) == NOTE
    # 70.55e9 parameters x 12 bytes (master, Adam m and v) / 4 GPUs, out and in at 64 GB/s (PCIe)
    assert round(small.optimizer_move_s, 1) == 6.6
    trace = synthesize("math-16k", prompts=64, group_size=8, steps=4, seed=0)
    assert NOTE in fit_warnings(trace, small, synthetic=True)


def test_no_note_where_it_fits_or_the_user_chose():
    assert offload_note(preset("h100-llama3.1-70b")) is None  # 16 GPUs: 70 GB a GPU fits
    assert offload_note(preset("h100-llama3.1-8b-2gpu")) is None
    chosen = dataclasses.replace(preset("h100-llama3.1-70b-tp4-4gpu"), trainer_offload="optimizer")
    assert offload_note(chosen) is None  # (the user asked for it)


def test_compare_notes_the_split_a_disaggregated_policy_trains_on(tmp_path):
    """On 8 H100s a 14B model's trainer fits (16 bytes x 14.8e9 / 8 GPUs); on the 6+2 split that
    one_step_off runs on, its 2 trainer GPUs need the optimizer offloaded, and compare says so."""
    from typer.testing import CliRunner

    from sortedrl.cli import app

    assert offload_note(preset("h100-qwen3-14b")) is None
    r = CliRunner().invoke(app, ["compare", "--trace", "math-16k", "--policy", "sync", "--policy", "one_step_off",
                                 "--cluster", "h100-qwen3-14b", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    split = cluster_for(("disaggregated",), preset("h100-qwen3-14b"))
    assert (split.rollout_gpus, split.trainer_gpus) == (6, 2)
    assert offload_note(split) in r.stderr.splitlines()
