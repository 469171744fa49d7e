"""Print the GPU presets' errors against the public measurements (docs/calibration.md's tables).

Each row: what was measured, by whom, the measured figure, what the preset predicts, the error.
The vidur figures are medians over repeats, read from microsoft/vidur (MIT): the linear layers of
one transformer layer (every op of data/profiling/compute/{gpu}/{model}/mlp.csv but the
embedding, at HEAD 7d47513) and the decode attention kernel (data/profiling/a100/attention.csv at
acb95f6, Llama-2-70B at TP 2: 32 query and 4 KV heads a GPU). A decode layer is the two summed
(Llama-2-70B at TP 2 on an A100, the model and split of the attention profile).

Run: PYTHONPATH=. python bench/preset_errors.py
"""

from __future__ import annotations

import dataclasses

from sortedrl.sim.cluster import MEASURED, NET_EFF, preset
from sortedrl.sim.cost import all_to_all_s
from sortedrl.sim.hardware import GPUS


def layer_params(d: int, heads: int, kv_heads: int, ffn: int, head_dim: int = 128) -> int:
    """Linear-layer parameters of one Llama-style layer (q, k, v, o and a gated MLP)."""
    return 2 * d * heads * head_dim + 2 * d * kv_heads * head_dim + 3 * d * ffn


# tokens in the batch -> us per layer (sum of the layer's linear, norm, rope, activation, add ops)
VIDUR_LINEAR = {
    "h100 Llama-2-7B": (GPUS["h100"], 1, layer_params(4096, 32, 32, 11008),
                        {1: 175, 8: 172, 32: 181, 64: 183, 128: 199, 256: 286, 512: 375, 1024: 657}),
    "a100 Llama-3-8B": (GPUS["a100-80g"], 1, layer_params(4096, 32, 8, 14336),
                        {1: 303, 8: 312, 32: 341, 64: 351, 128: 412, 256: 609, 512: 1082, 1024: 2348}),
    "a100 Llama-2-70B tp2": (GPUS["a100-80g"], 2, layer_params(8192, 64, 8, 28672),
                             {1: 563, 8: 574, 32: 605, 64: 628, 128: 773, 256: 1128, 512: 2130, 1024: 4370}),
}
# (batch, context per sequence) -> us per layer of the decode attention kernel, A100, 4 KV heads a GPU
VIDUR_ATTN = {(1, 512): 17, (1, 4032): 18, (8, 512): 24, (8, 2048): 46, (32, 512): 37, (32, 2048): 108,
              (64, 512): 72, (64, 2048): 219, (64, 4032): 407, (128, 512): 114, (128, 2048): 349,
              (128, 4032): 667}
ATTN_KV_BYTES = 4 * 128 * 2 * 2  # 4 KV heads x 128 dims x (K, V) x 2 bytes, a token a layer


def err(pred: float, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+.0f}%"


def linear_model(gpu, tp: int, params: int, batch: int) -> tuple[float, float]:
    """(roofline, measured model) time of one layer's linear part, us."""
    bw, flops, read = tp * gpu.mem_bw, tp * gpu.flops, 2 * params
    roof = max(read / (bw * 0.75), 2 * params * batch / (flops * 0.5))
    seq = 2 * params / flops
    share = MEASURED["seq_share"]
    fit = (MEASURED["ops_layer_s"] + share * seq * batch
           + max(read / (bw * MEASURED["mbu"]), (1 / MEASURED["mfu"] - share) * seq * batch))
    return roof * 1e6, fit * 1e6


def attention_model(batch: int, ctx: int) -> tuple[float, float]:
    """(roofline, measured model) time of the A100 decode attention kernel, us."""
    byts, bw = batch * ctx * ATTN_KV_BYTES, GPUS["a100-80g"].mem_bw
    return byts / (bw * 0.75) * 1e6, (MEASURED["attn_layer_s"] + byts / (bw * MEASURED["mbu_kv"])) * 1e6


def linear_rows() -> None:
    print("decode linear layers, us per layer: measured | roofline | measured model")
    for name, (gpu, tp, params, points) in VIDUR_LINEAR.items():
        for batch, meas in points.items():
            roof, fit = linear_model(gpu, tp, params, batch)
            print(f"  {name} B={batch}: {meas} | {roof:.0f} ({err(roof, meas)}) | {fit:.0f} ({err(fit, meas)})")


def layer_rows() -> None:
    print("decode layer (linear + attention kernel), A100 Llama-2-70B tp2, us: measured | roofline | measured model")
    gpu, tp, params, linear = VIDUR_LINEAR["a100 Llama-2-70B tp2"]
    for (batch, ctx), attn in VIDUR_ATTN.items():
        lin_roof, lin_fit = linear_model(gpu, tp, params, batch)
        att_roof, att_fit = attention_model(batch, ctx)
        meas, roof, fit = linear[batch] + attn, lin_roof + att_roof, lin_fit + att_fit
        print(f"  B={batch} S={ctx}: {meas} | {roof:.0f} ({err(roof, meas)}) | {fit:.0f} ({err(fit, meas)})")


def attention_rows() -> None:
    print("decode attention kernel alone (diagnostic), us per layer: measured | roofline | measured model")
    for (batch, ctx), meas in VIDUR_ATTN.items():
        roof, fit = attention_model(batch, ctx)
        print(f"  B={batch} S={ctx}: {meas} | {roof:.0f} ({err(roof, meas)}) | {fit:.0f} ({err(fit, meas)})")


def end_to_end_rows() -> None:
    print("decode step, end to end, batch 1, Llama-3.1-8B: measured | roofline | measured model")
    # johnmusgrave.com vLLM 0.23 sweep: one request on an A100-40GB, about 75 tok/s (1,024-token prompts)
    # yobitelcomm InferenceBench: vLLM 0.21 on an H100-80GB-HBM3, TPOT p50 6.48 ms at concurrency 1
    GPUS["a100-40g"] = dataclasses.replace(GPUS["a100-80g"], name="a100-40g", hbm_bytes=40e9, mem_bw=1.555e12)
    try:
        for gpu, base, ms, ctx in (("a100-40g", "a100-80g", 1000 / 75, 1088), ("h100", "h100", 6.48, 512)):
            got = [dataclasses.replace(preset(f"{base}-llama3.1-8b"), gpu=gpu, decode_model=m).cost()
                   .decode_step(1, ctx) * 1e3 for m in ("roofline", "measured")]
            print(f"  {gpu}: {ms:.2f} ms | {got[0]:.2f} ms ({err(got[0], ms)}) | {got[1]:.2f} ms ({err(got[1], ms)})")
    finally:
        del GPUS["a100-40g"]


def update_rows() -> None:
    c = dataclasses.replace(preset("h100-llama3.1-8b"), extra_forwards=0, ref_model=False, train_fix=0.0).cost()
    per_gpu = 8192 / c.update([8192]) / 8
    print(f"training, Llama-3.1-8B 8xH100 FSDP seq 8192: {per_gpu:,.0f} tok/s/GPU predicted; torchtitan "
          f"5,762 eager ({err(per_gpu, 5762)}), 6,667 compiled ({err(per_gpu, 6667)})")


def sync_rows() -> None:
    # verl PR #116: 8 x L20 (PCIe 4 x16, no NVLink), 7B-class (Qwen2.5-7B's 15.2 GB) FSDP -> vLLM
    # TP4, in the trainer's processes (colocated) and over NCCL to other processes (disaggregated)
    GPUS["l20"] = dataclasses.replace(GPUS["h100"], name="l20", hbm_bytes=48e9, link_bw=32e9)
    try:
        for placement, meas, how in (("colocated", 0.570, "in-process"), ("disaggregated", 0.701, "across processes")):
            c = dataclasses.replace(preset("h100-qwen2.5-7b-tp4"), gpu="l20", placement=placement, train_gpus=4)
            s = c.cost().sync_s
            print(f"sync, verl #116 L20 7B {how}: {meas:.3f} s measured, {s:.3f} s ({err(s, meas)})")
    finally:
        del GPUS["l20"]
    # huggingface/trl PR #7131: Qwen3-32B on H200, 16 trainer + 16 rollout GPUs (two nodes and more)
    s = preset("h200-qwen3-32b-32gpu-disagg").cost().sync_s
    print(f"sync, TRL #7131 Qwen3-32B H200 16+16 GPUs: 2.3 s measured, {s:.2f} s ({err(s, 2.3)})")
    s8 = preset("h20-qwen2.5-7b").cost().sync_s
    print(f"sync, verl checkpoint engine H20 7B: 0.02 s measured, {s8:.3f} s ({err(s8, 0.02)})")


# deepseek-ai/DeepEP docs/legacy.md (V1 low-latency kernels): H800, one CX7 400 Gb/s NIC a GPU, 128
# tokens a GPU, hidden 7168, top-8, FP8 dispatch (a 4-byte scale a 128 values), BF16 combine;
# EP size -> (dispatch, combine) latency, us
DEEPEP_LOW_LATENCY = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369), 256: (194, 360)}


def all_to_all_rows() -> None:
    nvlink, net = GPUS["h800"].link_bw * NET_EFF, 400e9 / 8 * NET_EFF
    for ep, (dispatch, combine) in DEEPEP_LOW_LATENCY.items():
        d = 1e6 * all_to_all_s(128, 8, 7168, 1 + 4 / 128, ep, 8, nvlink, net)
        c = 1e6 * all_to_all_s(128, 8, 7168, 2, ep, 8, nvlink, net)
        print(f"all-to-all, DeepEP low-latency EP{ep}: dispatch {dispatch} us measured, {d:.0f} us "
              f"({err(d, dispatch)}); combine {combine} us, {c:.0f} us ({err(c, combine)})")


if __name__ == "__main__":
    linear_rows()
    layer_rows()
    attention_rows()
    end_to_end_rows()
    update_rows()
    sync_rows()
    all_to_all_rows()
