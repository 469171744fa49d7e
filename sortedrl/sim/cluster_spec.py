"""The :class:`Cluster`: one cluster's GPUs, model, placement and engine settings, what follows
from them, and their checks.

From the GPU and model specs (sim/hardware.py) and the measured efficiencies (docs/calibration.md)
a Cluster derives the :class:`~sortedrl.sim.cost.CostModel` (decode, prefill, training, weight
sync, offload) and the KV-token budget of each engine; :meth:`Cluster.validate` refuses a field
out of range and a cluster that cannot run (weights that leave no KV cache, a trainer that cannot
hold its state). Split out of :mod:`sortedrl.sim.cluster`, which turns a preset name or a cluster
file into a Cluster and re-exports everything here, so ``from sortedrl.sim.cluster import
Cluster`` stays the one import a caller needs.

Placement ``colocated`` means the same GPUs alternate between rollout and training (verl's hybrid
engine): ``gpus / tp`` engines, and the trainer uses all ``gpus``. ``disaggregated`` splits them
into a trainer pool of ``train_gpus`` (default a quarter, AReaL's 75/25 split) and a rollout pool
of the rest, which generate at the same time (needed by ``async`` and ``one_step_off``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.limits import INT32_MAX, INT64_MAX, MAX_GPUS, MAX_NUM_SEQS, short_repr
from sortedrl.sim.cost import CostModel, all_to_all_s
from sortedrl.sim.hardware import GPUS, MODELS, Model

TRAIN_STATE_BYTES = 16  # per parameter: BF16 weights and gradients, FP32 master weights, Adam m and v
OFFLOADED_STATE_BYTES = 4  # per parameter left on the GPU when the FP32 master and Adam m, v live on the host
TRAINER_OFFLOADS = ("auto", "none", "optimizer")
NET_EFF = 0.8  # share of a link's rate an NCCL weight broadcast reaches (bus bandwidth; verl #116: 0.79)
# decode_model "measured" (the default): fitted to vidur's per-operator profiles and two whole-step
# measurements (docs/calibration.md, bench/preset_errors.py): weight read at 0.84 of peak bandwidth,
# KV read at 0.80; per layer 24 us of norms, RoPE, activation and adds plus 14 us of attention kernel;
# each running sequence adds 0.9 of its 2·P FLOPs at peak; large batches reach MFU 0.64; no host time
# (vLLM V1 schedules the next step while the GPU runs this one)
MEASURED = dict(mbu=0.84, mbu_kv=0.80, mfu=0.64, step_fixed_s=0.0, ops_layer_s=24e-6, attn_layer_s=14e-6,
                seq_share=0.9)
DECODE_MODELS = ("roofline", "measured")
# Expert parallelism: the dispatch sends activations in the checkpoint's precision (FP8 for an FP8
# model) and the combine returns them in BF16 (DeepSeek-V3 report, sec. 3.3.2; DeepEP's settings)
COMBINE_BYTES = 2
# what Cluster.validate accepts: the placements (module docstring) and each integer field's range
PLACEMENTS = ("colocated", "disaggregated")
COUNT_RANGES = (  # (integer field, least, most)
    ("tp", 1, INT64_MAX), ("gpus", 1, MAX_GPUS), ("max_num_seqs", 1, MAX_NUM_SEQS),
    ("gpus_per_node", 1, INT64_MAX), ("ep", 1, INT64_MAX), ("tool_pool", 1, INT64_MAX),
    ("max_num_batched_tokens", 1, INT64_MAX), ("train_gpus", 0, MAX_GPUS),
    ("extra_forwards", 0, INT32_MAX), ("kv_budget_tokens", 0, INT64_MAX))


@dataclass(frozen=True)
class Cluster:
    """Everything the simulator needs to know about the hardware, with help text per field."""

    name: str = field(metadata={"help": "preset name or a label for a custom cluster"})
    gpu: str = field(default="h100", metadata={"help": "GPU type: " + ", ".join(GPUS)})
    model: str = field(default="llama3.1-8b", metadata={"help": "model: " + ", ".join(MODELS)})
    tp: int = field(default=1, metadata={"help": "tensor-parallel degree of one rollout engine"})
    gpus: int = field(default=8, metadata={"help": "GPUs in the cluster"})
    placement: str = field(default="colocated", metadata={"help": "colocated (rollout and training alternate on the same GPUs) or disaggregated (separate pools)"})
    train_gpus: int = field(default=0, metadata={"help": "disaggregated: GPUs of the trainer pool (0: a quarter of the GPUs); the rest run rollout"})
    max_num_seqs: int = field(default=256, metadata={"help": "max running sequences per engine (vLLM max_num_seqs)"})
    chunked_prefill: bool = field(default=False, metadata={"help": "prefill in chunks inside decode steps, as vLLM V1 (the presets turn it on); false: an admission stalls the engine"})
    prefix_caching: bool = field(default=True, metadata={"help": "an engine prefills a GRPO group's shared prompt once and holds its KV once while any member runs there (vLLM V1 prefix caching)"})
    max_num_batched_tokens: int = field(default=8192, metadata={"help": "tokens per engine step with chunked prefill (vLLM max_num_batched_tokens)"})
    gpu_mem_util: float = field(default=0.9, metadata={"help": "share of HBM given to weights + KV cache"})
    kv_budget_tokens: int = field(default=0, metadata={"help": "KV tokens per engine; 0 derives it from HBM, weights and KV size"})
    kv_watermark: float = field(default=0.01, metadata={"help": "share of the KV budget kept free when admitting"})
    decode_model: str = field(default="measured", metadata={"help": "measured (per-sequence and per-layer terms, fitted to published measurements: docs/calibration.md) or roofline (step_fixed_s + max(weights + KV read, compute), with the mbu, mfu and step_fixed_s fields)"})
    mbu: float = field(default=0.75, metadata={"help": "memory-bandwidth utilisation of decode (decode_model roofline only)"})
    mfu: float = field(default=0.5, metadata={"help": "FLOP utilisation of decode (decode_model roofline only)"})
    mfu_prefill: float = field(default=0.55, metadata={"help": "FLOP utilisation of prefill"})
    mfu_train: float = field(default=0.34, metadata={"help": "FLOP utilisation of training (attention FLOPs counted)"})
    step_fixed_s: float = field(default=0.002, metadata={"help": "fixed cost per decode step or prefill (decode_model roofline only), s"})
    ep: int = field(default=1, metadata={"help": "MoE: expert-parallel shards of one engine (1: experts split by tensor parallelism)"})
    extra_forwards: int = field(default=1, metadata={"help": "forward passes per update besides forward+backward and the reference (old log-probs: 1)"})
    ref_model: bool = field(default=True, metadata={"help": "one reference-model forward per update (a KL term)"})
    recompute: bool = field(default=False, metadata={"help": "activation recompute: one more forward per update"})
    train_fix: float = field(default=1.0, metadata={"help": "fixed time per update, s"})
    sync_fix: float = field(default=0.1, metadata={"help": "fixed time per weight sync on top of bytes / bandwidth, s"})
    gpus_per_node: int = field(default=8, metadata={"help": "GPUs per node (NVLink domain); beyond it weights sync over the network"})
    net_gbps: float = field(default=400.0, metadata={"help": "inter-node bandwidth per GPU, Gb/s"})
    host_gbs: float = field(default=0.0, metadata={"help": "GPU-host bandwidth, GB/s (0: the GPU's PCIe x16 link)"})
    sleep: bool = field(default=True, metadata={"help": "colocated: engines offload their weights around each update (vLLM sleep/wake)"})
    offload_s: float = field(default=0.0, metadata={"help": "colocated: seconds to offload an engine (0: weight bytes per GPU / host bandwidth; the KV cache is discarded)"})
    trainer_offload: str = field(default="auto", metadata={"help": "none: the trainer holds weights, gradients and Adam state on its GPUs; optimizer: FP32 master and Adam state live in host memory and move in and out each update (verl optimizer_offload); auto: optimizer only when they do not fit"})
    onload_s: float = field(default=0.0, metadata={"help": "colocated: seconds to reload an engine (0: weight bytes / host bandwidth)"})
    tool_pool: int = field(default=128, metadata={"help": "multi-turn traces: sandboxes that run tool calls at once; more calls queue first come first served (verl's SandboxFusion for ReTool: 128 workers)"})
    tool_holds_slot: bool = field(default=False, metadata={"help": "multi-turn traces: a trajectory keeps its engine slot and its KV through each tool call, as a synchronous agent loop that blocks a batch slot (the call's output alone is prefilled on return); false: the slot is freed and the context stays only in the evictable prefix cache (verl's agent loop, one request per turn)"})
    costs: CostModel | None = field(default=None, metadata={"help": "explicit cost terms (a calibrated profile); replaces the roofline"})
    # not a cluster file's field: the file it was read from, as given, for its errors (:attr:`where`)
    source: str = field(default="", compare=False, repr=False)

    # -- derived ----------------------------------------------------------------------------

    @property
    def trainer_gpus(self) -> int:
        if self.placement == "colocated":
            return self.gpus
        return self.train_gpus or max(1, self.gpus // 4)

    @property
    def rollout_gpus(self) -> int:
        return self.gpus if self.placement == "colocated" else self.gpus - self.trainer_gpus

    @property
    def engines(self) -> int:
        return self.rollout_gpus // self.tp

    @property
    def kv_budget(self) -> int:
        if self.kv_budget_tokens > 0:
            return self.kv_budget_tokens
        g, m = GPUS[self.gpu], MODELS[self.model]
        free = self.tp * g.hbm_bytes * self.gpu_mem_util - m.weight_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes in an engine, all its GPUs together: the model's KV
        (:attr:`Model.kv_bytes_per_token`) times the copies vLLM keeps. Attention runs tensor-
        parallel over ``tp / ep`` GPUs (with ``ep`` > 1 it is data-parallel over the shards,
        each holding its own sequences); vLLM splits the KV heads over them, one head at least a
        GPU, so past the model's KV heads each GPU holds a copy (``get_num_kv_heads``:
        ``max(1, kv_heads // tp)``), and MLA's latent is not split at all: it is one head, whole
        on every attention GPU ("When using MLA during decode it becomes MQA")."""
        m = MODELS[self.model]
        ranks = self.tp // self.ep
        if m.kv_lora_rank:
            return m.kv_bytes_per_token * ranks
        per_head = m.kv_bytes_per_token // m.kv_heads
        return per_head * ranks * max(1, m.kv_heads // ranks)

    @property
    def kv_admit_budget(self) -> int:
        """KV tokens an engine may fill when admitting (the budget minus the watermark)."""
        return int(self.kv_budget * (1.0 - self.kv_watermark))

    def cost(self) -> CostModel:
        if self.costs is not None:
            return self.costs
        g, m = GPUS[self.gpu], MODELS[self.model]
        bw, fl = self.tp * g.mem_bw, self.tp * g.flops
        d = MEASURED if self.decode_model == "measured" else dict(
            mbu=self.mbu, mbu_kv=self.mbu, mfu=self.mfu, step_fixed_s=self.step_fixed_s, ops_layer_s=0.0,
            attn_layer_s=0.0, seq_share=0.0)
        active = m.active_params
        dense_bytes = m.weight_bytes - m.moe_layers * m.experts * m.expert_bytes
        seq_flops = 2.0 * active / fl  # one sequence's decode FLOPs at peak
        a2a = self.all_to_all_per_token_s
        return CostModel(
            step_fixed_s=d["step_fixed_s"] + m.n_layers * (d["ops_layer_s"] + d["attn_layer_s"]),
            weight_read_s=dense_bytes / (bw * d["mbu"]),
            kv_read_s_per_token=self.kv_bytes_per_token / (bw * d["mbu_kv"]),  # every copy is read
            compute_s_per_seq=(1.0 / d["mfu"] - d["seq_share"]) * seq_flops,
            step_s_per_seq=d["seq_share"] * seq_flops + a2a,
            prefill_s_per_token=2.0 * active / (fl * self.mfu_prefill) + a2a,
            prefill_s_per_pair=m.attn_flops_per_pair / (fl * self.mfu_prefill),
            expert_read=m.moe_layers * m.expert_bytes / (bw * d["mbu"]),
            experts=m.experts, experts_per_token=m.experts_per_token, expert_shards=self.ep,
            **self._update_costs(m),
        )

    def _update_costs(self, m: Model) -> dict:
        """Training, sync and offload terms: see docs/calibration.md for each."""
        g = GPUS[self.gpu]
        passes = 3 + self.extra_forwards + int(self.ref_model) + int(self.recompute)  # in forwards
        train_flops = self.trainer_gpus * g.flops * self.mfu_train
        host = self.host_gbs * 1e9 or g.host_bw
        offload = onload = 0.0
        if self.placement == "colocated" and self.sleep:
            # vLLM sleep level 1: weights go to pinned host memory and come back; the KV cache
            # is discarded, not copied (a resumed partial response prefills again)
            per_gpu_weights = m.weight_bytes / self.tp
            offload = self.offload_s or per_gpu_weights / host
            onload = self.onload_s or per_gpu_weights / host
        return dict(
            train_per_token=passes * 2.0 * m.active_params / train_flops,
            train_per_pair=passes * m.attn_flops_per_pair / train_flops,
            train_fix=self.train_fix + self.optimizer_move_s,
            sync_s=self.sync_fix + m.weight_bytes / self.sync_bandwidth,
            offload_s=offload, onload_s=onload,
        )

    @property
    def all_to_all_per_token_s(self) -> float:
        """Expert parallelism's dispatch + combine per token of a step (decode or prefill), summed
        over the MoE layers, s: the ``ep`` shards of an engine hold a share 1/ep of the step's
        tokens each and exchange them all at once (:func:`all_to_all_s`), over NVLink within a node
        and the network across nodes, at NCCL's share ``NET_EFF`` of each link; not overlapped
        with compute. 0 without expert parallelism."""
        m = MODELS[self.model]
        if self.ep <= 1 or not m.experts:
            return 0.0
        nvlink, net = GPUS[self.gpu].link_bw * NET_EFF, self.net_gbps * 1e9 / 8 * NET_EFF
        per_rank = sum(all_to_all_s(1.0 / self.ep, m.experts_per_token, m.d_model, b, self.ep,
                                    self.gpus_per_node, nvlink, net) for b in (m.dtype_bytes, COMBINE_BYTES))
        return m.moe_layers * per_rank

    @property
    def sync_bandwidth(self) -> float:
        """Bytes/s of a weight sync: NVLink within a node, at its full rate when the trainer
        hands its weights to engines in its own processes (colocated) and at NCCL's share of it
        when it broadcasts them to other processes (disaggregated); the network when the trainer
        and the engines (or one engine) span nodes, where the gathered weights cross one GPU's NIC."""
        one_node = self.gpus <= self.gpus_per_node and self.tp <= self.gpus_per_node
        if one_node:
            return GPUS[self.gpu].link_bw * (NET_EFF if self.placement == "disaggregated" else 1.0)
        return self.net_gbps * 1e9 / 8 * NET_EFF

    @property
    def optimizer_move_s(self) -> float:
        """With the optimizer offloaded: each trainer GPU moves its shard of the FP32 master and
        Adam state (12 bytes a parameter) in and out over its host link, every update."""
        if not self.optimizer_offloaded:
            return 0.0
        host = self.host_gbs * 1e9 or GPUS[self.gpu].host_bw
        moved = (TRAIN_STATE_BYTES - OFFLOADED_STATE_BYTES) * MODELS[self.model].params / self.trainer_gpus
        return 2.0 * moved / host

    @property
    def optimizer_offloaded(self) -> bool:
        full = TRAIN_STATE_BYTES * MODELS[self.model].params / self.trainer_gpus
        return self.trainer_offload == "optimizer" or (
            self.trainer_offload == "auto" and full > GPUS[self.gpu].hbm_bytes)

    @property
    def train_state_bytes(self) -> float:
        """Per trainer GPU: weights + gradients (+ Adam state unless offloaded), FSDP-sharded."""
        per_param = OFFLOADED_STATE_BYTES if self.optimizer_offloaded else TRAIN_STATE_BYTES
        return per_param * MODELS[self.model].params / self.trainer_gpus

    @property
    def where(self) -> str:
        """How an error names the cluster: the file it was read from, as given (``cl6.json``,
        not its name ``cl6``), else its name (a preset's)."""
        return self.source or self.name

    def fields(self) -> dict:
        """Every field (``costs`` when explicit), from which
        :func:`~sortedrl.sim.cluster.cluster_from_dict` rebuilds it."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "source"}
        return d if self.costs is not None else {k: v for k, v in d.items() if k != "costs"}

    # -- checks -----------------------------------------------------------------------------

    def validate(self, where: str = "cluster", labels: dict[str, str] | None = None) -> Cluster:
        """Itself, checked; ``labels``: fields a file spelled otherwise (t_fix: written_labels)."""
        if self.gpu not in GPUS:
            raise ConfigError(f"{where}: field 'gpu': unknown GPU {self.gpu!r} (known: {', '.join(GPUS)})")
        if self.model not in MODELS:
            raise ConfigError(f"{where}: field 'model': unknown model {self.model!r} (known: {', '.join(MODELS)})")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"{where}: field 'placement': unknown placement {self.placement!r} "
                              f"(known: {', '.join(PLACEMENTS)})")
        self._check_counts(where)
        if self.chunked_prefill and self.max_num_batched_tokens <= self.max_num_seqs:
            raise ConfigError(f"{where}: field 'max_num_batched_tokens': must be > max_num_seqs "
                              f"({self.max_num_seqs}), got {self.max_num_batched_tokens}")
        if self.rollout_gpus < self.tp and self.placement == "colocated":  # (it blamed train_gpus,
            raise ConfigError(f"{where}: field 'tp': an engine of tp={self.tp} needs {self.tp} GPUs, "
                              f"and the cluster has {self.gpus}")  # which no colocated cluster uses)
        if self.rollout_gpus < self.tp and not self.train_gpus:  # (the default trainer: not the user's)
            many = self.gpus > 1
            raise ConfigError(f"{where}: field 'gpus': {self.gpus} GPU{'s' if many else ''} leave{'' if many else 's'} "
                              f"no rollout engine of tp={self.tp} beside the trainer's {self.trainer_gpus} (a "
                              f"quarter of the GPUs, at least 1, where train_gpus is not given)")
        if self.rollout_gpus < self.tp:
            raise ConfigError(f"{where}: field 'train_gpus': {self.trainer_gpus} trainer GPUs of {self.gpus} "
                              f"leave no rollout engine of tp={self.tp}")
        if self.rollout_gpus % self.tp:
            raise ConfigError(f"{where}: field 'gpus': {self.rollout_gpus} rollout GPUs do not split into "
                              f"tp={self.tp} engines")
        self._check_heads(where)
        if self.decode_model not in DECODE_MODELS:
            raise ConfigError(f"{where}: field 'decode_model': unknown {self.decode_model!r} "
                              f"(known: {', '.join(DECODE_MODELS)})")
        for name in ("gpu_mem_util", "mbu", "mfu", "mfu_prefill", "mfu_train"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ConfigError(f"{where}: field '{name}': must be in (0, 1], got {v}")
        if not 0.0 <= self.kv_watermark < 1.0:
            raise ConfigError(f"{where}: field 'kv_watermark': must be in [0, 1), got {self.kv_watermark}")
        for name in ("step_fixed_s", "train_fix", "sync_fix", "host_gbs", "offload_s", "onload_s"):
            if not 0 <= getattr(self, name) < math.inf:  # (NaN fails it too)
                raise ConfigError(f"{where}: field {(labels or {}).get(name, repr(name))}: must be a "
                                  f"finite number >= 0, got {getattr(self, name)}")
        if not 0 < self.net_gbps < math.inf:
            raise ConfigError(f"{where}: field 'net_gbps': must be a finite number > 0, got "
                              f"{self.net_gbps}")
        self._check_ep(where)
        if self.trainer_offload not in TRAINER_OFFLOADS:
            raise ConfigError(f"{where}: field 'trainer_offload': unknown {self.trainer_offload!r} "
                              f"(known: {', '.join(TRAINER_OFFLOADS)})")
        if self.costs is None and self.train_state_bytes > GPUS[self.gpu].hbm_bytes:
            self._trainer_does_not_fit(where)
        if self.kv_budget <= 0:
            m = MODELS[self.model]
            raise ConfigError(
                f"{where}: impossible cluster: {m.name} weights ({m.weight_bytes / 1e9:.1f} GB) leave no KV cache "
                f"on tp={self.tp} x {GPUS[self.gpu].hbm_bytes / 1e9:.0f} GB at gpu_mem_util={self.gpu_mem_util}"
            )
        return self

    def _check_counts(self, where: str) -> None:
        """Each integer field within its range (a count past a float overflowed the costs)."""
        for name, least, most in COUNT_RANGES:
            v = getattr(self, name)
            if v < least:
                raise ConfigError(f"{where}: field '{name}': must be >= {least}, got {v}")
            if v > most:
                got = f"{v:,}" if v <= 2**64 else short_repr(v)
                raise ConfigError(f"{where}: field '{name}': at most {most:,}, got {got}")

    def _trainer_does_not_fit(self, where: str) -> None:
        m, g = MODELS[self.model], GPUS[self.gpu]
        name = "gpus" if self.placement == "colocated" else "train_gpus"
        what = ("weights + gradients, even with the Adam state offloaded to host memory,"
                if self.optimizer_offloaded else "weights + gradients + Adam state")
        per_param = OFFLOADED_STATE_BYTES if self.optimizer_offloaded else TRAIN_STATE_BYTES
        raise ConfigError(
            f"{where}: field '{name}': the trainer cannot hold {m.name}: {what} need "
            f"{per_param * m.params / 1e9:,.0f} GB ({per_param} bytes x {m.params / 1e9:.2f}B parameters), "
            f"{self.train_state_bytes / 1e9:.0f} GB per GPU sharded over {self.trainer_gpus} trainer GPUs, "
            f"more than an {self.gpu}'s {g.hbm_bytes / 1e9:.0f} GB")

    def _check_heads(self, where: str) -> None:
        """vLLM splits the attention heads over the attention's tensor-parallel GPUs (``tp //
        ep``: with expert parallelism the rest run attention data-parallel): it refuses a size
        that does not divide them, and KV heads it can neither split nor replicate evenly."""
        m = MODELS[self.model]

        def splits(t: int) -> bool:
            return m.n_heads % t == 0 and (m.kv_heads % t == 0 if m.kv_heads >= t else t % m.kv_heads == 0)

        attention = self.tp // self.ep if self.ep > 1 and self.tp % self.ep == 0 else self.tp
        if splits(attention):
            return
        fits = ", ".join(str(t) for t in range(1, m.n_heads + 1) if splits(t))
        of = f"the attention's tp // ep = {attention}" if attention != self.tp else f"tp={self.tp}"
        raise ConfigError(f"{where}: field 'tp': {of} does not split {m.name}'s {m.n_heads} attention heads "
                          f"({m.kv_heads} KV heads) evenly, which vLLM requires; tp {fits} do")

    def _check_ep(self, where: str) -> None:
        experts = MODELS[self.model].experts
        if self.ep > 1 and (self.tp % self.ep or not experts or experts % self.ep):
            raise ConfigError(f"{where}: field 'ep': {self.ep} expert-parallel shards must divide tp={self.tp} "
                              f"and the model's {experts} experts")

    def check_fits(self, longest_sequence: int, where: str = "cluster", what: str = "") -> None:
        """Raise unless one engine can hold the longest sequence (prompt + response) alone;
        ``what`` says where that sequence comes from (the trace, its cap)."""
        admit, need = self.kv_admit_budget, longest_sequence + 1  # (a step writes a token first)
        if need > admit:  # each clause said where it decides (a budget of N did not hold N tokens)
            less = f" ({self.kv_budget:,} less its kv_watermark of {self.kv_watermark * 100:g}%)" if need <= self.kv_budget else ""
            more = " and the one its next step writes" if longest_sequence <= admit else ""
            raise ConfigError(f"{where}: impossible cluster: the KV budget of {admit:,} tokens per engine{less} "
                              f"cannot hold one sequence of {longest_sequence:,} tokens{more}{what}")

    def check_trace_fits(self, trace) -> None:
        """:meth:`check_fits` for ``trace``'s longest prompt plus its generation cap, naming both;
        or, of a multi-turn trace, its longest trajectory's context when that is longer (the tool
        outputs stay in the context: a recorded trajectory may need more than prompt + cap)."""
        prompt = int(trace.prompt_len.max())
        cap = trace.meta.max_response_len
        need, what = prompt + cap, (f" (trace {trace.name}: its longest prompt, {prompt:,} tokens, plus its "
                                    f"max_response_len, {cap:,}; a smaller cap or a cluster with more KV "
                                    "cache fits it)")
        if trace.turn_offsets is not None:
            from sortedrl.traces.turns import trajectory_tokens

            gen, tool = trajectory_tokens(trace)
            context = trace.prompt_len + gen + tool
            i = int(np.argmax(context))
            if int(context[i]) > need:
                g, k = int(gen[i]), int(tool[i])
                need, what = int(context[i]), (
                    f" (trace {trace.name}: its longest trajectory, prompt {trace.prompt_id[i]} sample "
                    f"{trace.sample[i]}: a prompt of {int(trace.prompt_len[i]):,} tokens, {g:,} generated and "
                    f"{k:,} of tool outputs; a cluster with more KV cache fits it)")
        self.check_fits(need, self.where, what)
