"""The costs a GPU preset leaves out are said beside its results (sortedrl/unmodelled.py)."""

from __future__ import annotations

import dataclasses

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.sim.cluster import preset
from sortedrl.unmodelled import unmodelled_notes
from tests.conftest import costs


def test_a_tensor_parallel_engine_hears_of_its_all_reduces():
    (note,) = unmodelled_notes(preset("h100-qwen3-8b-tp8-8gpu"))
    # Qwen3-8B: 36 layers, 2 all-reduces each; 20-40 µs each among 8 H100s
    assert note == ("note: h100-qwen3-8b-tp8-8gpu: an engine's 8 tensor-parallel GPUs are costed without their "
                    "all-reduces (72 a decode step, 2 a layer; NCCL's took 20-40 µs each on 8 H100s in Vidur's "
                    "measurements: 1.4-2.9 ms a step, beside a modelled step of 2.1 ms at batch 1), so a higher "
                    "tp looks faster than it is (docs/calibration.md)")
    assert "7-30 µs each on 2 H100s" in unmodelled_notes(preset("h100-qwen3-8b-tp2-2gpu"))[0]


def test_an_moe_trainer_and_a_trainer_across_nodes_are_said():
    notes = unmodelled_notes(preset("h100-qwen3-30b-a3b-tp2-16gpu"))
    assert [n.split(": ")[2][:40] for n in notes] == [
        "an engine's 2 tensor-parallel GPUs are c", "the trainer's update is costed as FSDP o",
        "the trainer's 16 GPUs span 2 nodes of 8,"]
    assert "the model's 3.4B active parameters (of 30.5B)" in notes[1]


def test_nothing_is_said_of_one_node_of_dense_single_gpu_engines_or_of_measured_costs():
    assert unmodelled_notes(preset("h100-llama3.1-8b")) == []
    tp8 = preset("h100-qwen3-8b-tp8-16gpu")
    assert unmodelled_notes(dataclasses.replace(tp8, costs=costs())) == []  # a profile's or file's own costs


def test_simulate_prints_them_with_the_cluster_notes(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "64", "--steps", "2", "--policy", "sync",
                "--cluster", "h100-qwen3-8b-tp8-8gpu", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    assert [line[:60] for line in r.stderr.splitlines() if "tensor-parallel" in line] == [
        "note: h100-qwen3-8b-tp8-8gpu: an engine's 8 tensor-parallel "]


def test_the_notes_are_of_the_clusters_the_runs_used():
    # async and one_step_off run on the 12 + 4 split of 16 GPUs: their trainer spans no node, and
    # compare said "the trainer's 16 GPUs span 2 nodes"; sync with them trains on all 16
    from sortedrl.compare import used_clusters

    cl = preset("h100-qwen3-8b-tp2-16gpu")
    split = used_clusters(["async", "one_step_off"], cl)
    assert [c.name for c in split] == ["h100-qwen3-8b-tp2-16gpu-disagg"]
    assert [n.split(": ")[2][:30] for n in unmodelled_notes(*split)] == ["an engine's 2 tensor-parallel "]
    both = used_clusters(["sync", "async"], cl)
    assert [n.split(": ")[2][:30] for n in unmodelled_notes(*both)] == [
        "an engine's 2 tensor-parallel ", "the trainer's 16 GPUs span 2 n"]  # (the engines' note once)


def test_an_engine_wider_than_a_node_says_so():
    note = unmodelled_notes(preset("h100-deepseek-v3"))[0]
    assert "; its 32 GPUs span nodes of 8, where an all-reduce takes longer still)" in note


def test_expert_parallel_attention_all_reduces_only_among_its_own_gpus():
    # with ep > 1 attention is data-parallel over the shards (tp / ep GPUs each) and an MoE layer
    # exchanges its tokens by all-to-all, which is modelled: ep = tp leaves no all-reduce to say
    base = preset("h100-qwen3-30b-a3b-tp4-4gpu")
    assert not [n for n in unmodelled_notes(dataclasses.replace(base, ep=4)) if "tensor-parallel" in n]
    (note,) = [n for n in unmodelled_notes(dataclasses.replace(base, ep=2)) if "tensor-parallel" in n]
    # Qwen3-30B-A3B: 48 layers, every one MoE: one all-reduce a layer, after attention, between 2 GPUs
    assert "an engine's 2 tensor-parallel GPUs (of 4, ep 2) are costed without their all-reduces (48 a " \
           "decode step, after attention, and after a dense layer's MLP; NCCL's took 7-30 µs each on 2 H100s" in note
