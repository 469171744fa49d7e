"""GPU and model spec tables: the public numbers every cluster preset is derived from.

A GPU is its memory, bandwidths and dense BF16 FLOP/s from the vendor's datasheet; a model is its
Hugging Face ``config.json`` (layers, widths, heads, experts), from which the parameter count,
the active parameters per token, the weight bytes and the KV bytes per token are computed, never
typed in. Each entry carries its source, which ``sortedrl clusters`` prints and
docs/calibration.md cites. Deliberately simple: norms and biases are left out of the parameter
count (under 0.1%), and FP8 checkpoints count one byte per parameter with no scale tensors.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bytes: float
    mem_bw: float  # bytes/s
    flops: float  # dense BF16 FLOP/s
    link_bw: float  # bytes/s, one direction, to the other GPUs of the node (NVLink / xGMI)
    host_bw: float  # bytes/s, one direction, to host memory (PCIe x16)
    source: str


@dataclass(frozen=True)
class Model:
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # intermediate size of a dense MLP layer
    vocab: int
    tied: bool  # input embedding and LM head share one matrix
    source: str
    experts: int = 0  # routed experts per MoE layer (0: dense model)
    experts_per_token: int = 0
    moe_ffn: int = 0  # intermediate size of one expert
    shared_experts: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model
    # multi-head latent attention (DeepSeek-V3): ranks of the compressed q and kv
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0  # decoupled RoPE part of each q/k head
    v_head_dim: int = 0
    dtype_bytes: int = 2  # bytes per weight of the released checkpoint (BF16: 2, FP8: 1)

    # -- parameters ----------------------------------------------------------------------------

    @property
    def attn_params(self) -> int:
        """Weights of one attention block."""
        d, h = self.d_model, self.n_heads
        if self.kv_lora_rank:  # MLA: q = W_qb W_qa x, kv latent + rope key, up-projections
            qk = self.head_dim + self.rope_dim
            return (d * self.q_lora_rank + self.q_lora_rank * h * qk
                    + d * (self.kv_lora_rank + self.rope_dim)
                    + self.kv_lora_rank * h * (self.head_dim + self.v_head_dim) + h * self.v_head_dim * d)
        return d * h * self.head_dim * 2 + d * self.kv_heads * self.head_dim * 2

    @property
    def expert_params(self) -> int:
        """Weights of one expert (gate, up and down projections)."""
        return 3 * self.d_model * self.moe_ffn

    @property
    def moe_layers(self) -> int:
        return self.n_layers - self.dense_layers if self.experts else 0

    @property
    def embed_params(self) -> int:
        return self.vocab * self.d_model * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        dense_mlp = 3 * self.d_model * self.ffn
        moe_mlp = (self.experts + self.shared_experts) * self.expert_params + self.d_model * self.experts
        mlp = self.moe_layers * moe_mlp + (self.n_layers - self.moe_layers) * dense_mlp
        return self.n_layers * self.attn_params + mlp + self.embed_params

    @property
    def active_params(self) -> int:
        """Parameters one token computes with: the routed experts it chooses, not all of them."""
        idle = self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params
        return self.params - idle

    @property
    def weight_bytes(self) -> float:
        return float(self.dtype_bytes * self.params)

    @property
    def expert_bytes(self) -> float:
        """Bytes of one routed expert in one MoE layer."""
        return float(self.dtype_bytes * self.expert_params)

    # -- attention -----------------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token in BF16: K and V of every KV head, or MLA's latent + rope key."""
        if self.kv_lora_rank:
            return self.n_layers * (self.kv_lora_rank + self.rope_dim) * 2
        return self.n_layers * self.kv_heads * self.head_dim * 2 * 2

    @property
    def attn_flops_per_pair(self) -> int:
        """Forward FLOPs of one causal (query, key) pair over all layers: q·k and p·v per head."""
        qk = self.head_dim + self.rope_dim
        v = self.v_head_dim or self.head_dim
        return 2 * self.n_layers * self.n_heads * (qk + v)


# -- GPUs ------------------------------------------------------------------------------------------

_PCIE4, _PCIE5 = 32e9, 64e9  # x16, one direction
GPUS = {g.name: g for g in (
    GPU("a100-80g", 80e9, 2.039e12, 312e12, 300e9, _PCIE4,
        "NVIDIA A100 datasheet (SXM4 80GB): 2,039 GB/s, 312 TFLOPS BF16, NVLink 600 GB/s"),
    GPU("h100", 80e9, 3.35e12, 989e12, 450e9, _PCIE5,
        "NVIDIA H100 datasheet (SXM5): 80 GB HBM3, 3.35 TB/s, 989 TFLOPS BF16, NVLink 900 GB/s"),
    GPU("h800", 80e9, 3.35e12, 989e12, 200e9, _PCIE5,
        "NVIDIA H800 SXM5 (H100 silicon, NVLink cut to 400 GB/s; DeepSeek-V3 report sec. 3.2)"),
    GPU("h20", 96e9, 4.0e12, 148e12, 450e9, _PCIE5,
        "NVIDIA H20 product brief: 96 GB HBM3, 4.0 TB/s, 148 TFLOPS BF16, NVLink 900 GB/s"),
    GPU("h200", 141e9, 4.8e12, 989e12, 450e9, _PCIE5,
        "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 989 TFLOPS BF16, NVLink 900 GB/s"),
    GPU("b200", 180e9, 8.0e12, 2.25e15, 900e9, _PCIE5,
        "NVIDIA HGX/DGX B200 datasheet: 180 GB HBM3e, 8 TB/s, 2.25 PFLOPS dense BF16, NVLink 1.8 TB/s"),
    GPU("mi300x", 192e9, 5.3e12, 1307e12, 448e9, _PCIE5,
        "AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 1,307 TFLOPS BF16, xGMI 896 GB/s"),
)}

# -- models (numbers from each model's config.json on Hugging Face) --------------------------------

MODELS = {m.name: m for m in (
    Model("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, True, "Qwen/Qwen3-0.6B config.json"),
    Model("qwen3-1.7b", 28, 2048, 16, 8, 128, 6144, 151936, True, "Qwen/Qwen3-1.7B config.json"),
    Model("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936, True, "Qwen/Qwen3-4B config.json"),
    Model("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, False, "Qwen/Qwen3-8B config.json"),
    Model("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, False, "Qwen/Qwen3-14B config.json"),
    Model("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, False, "Qwen/Qwen3-32B config.json"),
    Model("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, False, "Qwen/Qwen2.5-7B config.json"),
    Model("qwen2.5-32b", 64, 5120, 40, 8, 128, 27648, 152064, False, "Qwen/Qwen2.5-32B config.json"),
    Model("llama3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, False, "meta-llama/Llama-3.1-8B config.json"),
    Model("llama3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, False, "meta-llama/Llama-3.1-70B config.json"),
    Model("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936, False, "Qwen/Qwen3-30B-A3B config.json",
          experts=128, experts_per_token=8, moe_ffn=768),
    Model("deepseek-v3", 61, 7168, 128, 128, 128, 18432, 129280, False,
          "deepseek-ai/DeepSeek-V3 config.json (FP8 weights, MTP module not counted)",
          experts=256, experts_per_token=8, moe_ffn=2048, shared_experts=1, dense_layers=3,
          q_lora_rank=1536, kv_lora_rank=512, rope_dim=64, v_head_dim=128, dtype_bytes=1),
)}
