"""What a GPU preset's cost model leaves out, said beside the results it would move.

The presets cost an engine's decode step from its weight and KV reads and its compute, and an
update from its FLOPs (docs/calibration.md). Three costs of real clusters are not in them, and
each favours a layout: tensor parallelism's all-reduces (a higher ``tp`` looks nearly free), an
MoE trainer's expert parallelism (an MoE update is costed as a dense model of its active
parameters) and a trainer's traffic across nodes (an update's time halves with twice the GPUs).
A user choosing between such layouts should hear it where the numbers are printed, so
``simulate``, ``compare``, ``tune`` and ``forecast`` print these notes for the clusters their
runs used (the given one, or the disaggregated split a policy runs on). A calibrated profile or
a cluster file's own ``costs`` measured them, so nothing is said there.
"""

from __future__ import annotations

from sortedrl.sim.cluster import Cluster
from sortedrl.sim.hardware import MODELS

# NCCL all-reduces of a decode step's sizes (2 KB to 1 MB) on H100s over NVLink, medians of
# Vidur's profiles (data/profiling/network/h100_pair_nvlink and h100_dgx/all_reduce.csv): 7-30 µs
# between 2 GPUs, 20-40 µs among 8
ALL_REDUCE_S = {2: (7e-6, 30e-6), 8: (20e-6, 40e-6)}


def unmodelled_notes(*clusters: Cluster) -> list[str]:
    """The notes for the preset-derived clusters a command's runs used (none for one with its
    own costs: ``cluster_for`` gives each policy's, the given one or its disaggregated split),
    each once: the split's engines and model are the given cluster's, its trainer its own."""
    out, said = [], set()
    for c in clusters:
        if c.costs is not None:
            continue
        for key, note in (((c.gpu, c.model, c.tp), _tensor_parallel(c)), (c.model, _moe_trainer(c)),
                          ((c.trainer_gpus, c.gpus_per_node), _trainer_nodes(c))):
            if note and key not in said:
                said.add(key)
                out.append(note)
    return out


def _tensor_parallel(cluster: Cluster) -> str | None:
    """With expert parallelism (``ep`` > 1) attention is data-parallel over the shards, each of
    ``tp / ep`` GPUs, and an MoE layer exchanges its tokens by all-to-all (modelled): the
    all-reduces left are those of attention and of the dense layers' MLPs among ``tp / ep``."""
    ranks = cluster.tp // cluster.ep
    if ranks <= 1:
        return None
    m = MODELS[cluster.model]
    low, high = ALL_REDUCE_S[2 if ranks == 2 else 8]  # (4 and 16 or more GPUs: the 8 GPUs' figures)
    # after attention and after the MLP, in every layer; with ep > 1 not after an MoE layer
    calls = 2 * m.n_layers - (m.moe_layers if cluster.ep > 1 else 0)
    c = cluster.cost()
    step = c.fixed(1) + max(c.weight_read(1), c.compute_s_per_seq)
    which = f"{ranks} tensor-parallel GPUs" + (f" (of {cluster.tp}, ep {cluster.ep})" if cluster.ep > 1 else "")
    layer = "2 a layer" if cluster.ep == 1 else "after attention, and after a dense layer's MLP"
    return (f"note: {cluster.name}: an engine's {which} are costed without their all-reduces ({calls} a "
            f"decode step, {layer}; NCCL's took {low * 1e6:.0f}-{high * 1e6:.0f} "
            f"µs each on {2 if ranks == 2 else 8} H100s in Vidur's measurements: "
            f"{calls * low * 1e3:.1f}-{calls * high * 1e3:.1f} ms a step, beside a modelled step of "
            f"{step * 1e3:.1f} ms at batch 1{_across(cluster)}), so a higher tp looks faster than it is "
            "(docs/calibration.md)")


def _across(cluster: Cluster) -> str:
    """An engine wider than a node all-reduces over the network too, which the figures leave out."""
    if cluster.tp <= cluster.gpus_per_node:
        return ""
    return f"; its {cluster.tp} GPUs span nodes of {cluster.gpus_per_node}, where an all-reduce takes longer still"


def _moe_trainer(cluster: Cluster) -> str | None:
    m = MODELS[cluster.model]
    if not m.experts:
        return None
    return (f"note: {cluster.name}: the trainer's update is costed as FSDP on the model's "
            f"{m.active_params / 1e9:,.1f}B active parameters (of {m.params / 1e9:,.1f}B): expert "
            "parallelism's all-to-all and the lower MFU MoE training reaches are not modelled, so an "
            "update is faster here than on real GPUs (docs/calibration.md)")


def _trainer_nodes(cluster: Cluster) -> str | None:
    nodes = -(-cluster.trainer_gpus // cluster.gpus_per_node)
    if nodes <= 1:
        return None
    return (f"note: {cluster.name}: the trainer's {cluster.trainer_gpus:,} GPUs span {nodes:,} nodes of "
            f"{cluster.gpus_per_node:,}, and FSDP's all-gathers and gradient reduce-scatters across them "
            "are not modelled (an update is costed by its FLOPs alone, so its time halves with twice the "
            "GPUs) (docs/calibration.md)")
