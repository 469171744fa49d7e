"""A cluster whose trainer state does not fit its GPUs is simulated with the optimizer offloaded
to host memory (``trainer_offload`` auto): the commands now say so, with the cost per update
(a 70B model on 4 H100s was simulated without a word on the trainer's memory)."""

from __future__ import annotations

import dataclasses

from sortedrl.compare import fit_warnings, offload_note
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
