"""Print the GPU presets' errors against the public measurements (docs/calibration.md's tables).

Each row: what was measured, by whom, the measured figure, what the preset predicts, the error.
The vidur figures are medians over repeats, read from microsoft/vidur (MIT): the linear layers of
one transformer layer (every op of data/profiling/compute/{gpu}/{model}/mlp.csv but the
embedding, TP 1, at HEAD 7d47513) and the decode attention kernel
(data/profiling/a100/attention.csv at acb95f6, Llama-2-70B at TP 2: 32 query and 4 KV heads a GPU).

Run: PYTHONPATH=. python bench/preset_errors.py
"""

from __future__ import annotations

import dataclasses

from sortedrl.sim.cluster import MEASURED, preset
from sortedrl.sim.hardware import GPUS, MODELS

# tokens in the batch -> us per layer (sum of the layer's linear, norm, rope, activation, add ops)
VIDUR_LINEAR = {
    "h100 Llama-2-7B": (GPUS["h100"], 4 * 4096 * 4096 + 3 * 4096 * 11008,
                        {1: 175, 8: 172, 32: 181, 64: 183, 128: 199, 256: 286, 512: 375, 1024: 657}),
    "a100 Llama-3-8B": (GPUS["a100-80g"], 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336,
                        {1: 303, 8: 312, 32: 341, 64: 351, 128: 412, 256: 609, 512: 1083, 1024: 2348}),
}
# (batch, context per sequence) -> us per layer of the decode attention kernel, A100
VIDUR_ATTN = {(1, 512): 17, (8, 2048): 46, (32, 2048): 108, (64, 2048): 219, (128, 512): 114, (128, 2048): 349}


def err(pred: float, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+.0f}%"


def linear_rows() -> None:
    print("decode linear layers, us per layer: measured | roofline | measured model")
    for name, (gpu, params, points) in VIDUR_LINEAR.items():
        seq = 2 * params / gpu.flops * 1e6
        for batch, meas in points.items():
            roof = max(2 * params / (gpu.mem_bw * 0.75), 2 * params * batch / (gpu.flops * 0.5)) * 1e6
            read = 2 * params / (gpu.mem_bw * MEASURED["mbu"]) * 1e6
            fit = seq * batch + max(read, (1 / MEASURED["mfu"] - 1) * seq * batch)
            print(f"  {name} B={batch}: {meas} | {roof:.0f} ({err(roof, meas)}) | {fit:.0f} ({err(fit, meas)})")


def attention_rows() -> None:
    print("decode attention kernel, us per layer (A100, 2 KiB KV a token a layer): measured | old | measured model")
    bw = GPUS["a100-80g"].mem_bw
    for (batch, ctx), meas in VIDUR_ATTN.items():
        byts = batch * ctx * 4 * 128 * 2 * 2
        old = byts / (bw * 0.75) * 1e6
        fit = MEASURED["attn_layer_s"] * 1e6 + byts / (bw * MEASURED["mbu_kv"]) * 1e6
        print(f"  B={batch} S={ctx}: {meas} | {old:.0f} ({err(old, meas)}) | {fit:.0f} ({err(fit, meas)})")


def end_to_end_rows() -> None:
    # johnmusgrave.com vLLM sweep: Llama-3.1-8B BF16, one request on an A100-40GB: about 75 tok/s
    a100_40 = dataclasses.replace(GPUS["a100-80g"], name="a100-40g", hbm_bytes=40e9, mem_bw=1.555e12)
    GPUS["a100-40g"] = a100_40
    try:
        for label, model in (("roofline", "roofline"), ("measured", "measured")):
            c = dataclasses.replace(preset("a100-80g-llama3.1-8b"), gpu="a100-40g", decode_model=model).cost()
            step = c.decode_step(1, 512)
            print(f"  A100-40GB Llama-3.1-8B batch 1 ({label}): 13.3 ms measured, {step * 1e3:.1f} ms "
                  f"({err(step, 1 / 75)})")
    finally:
        del GPUS["a100-40g"]


def update_rows() -> None:
    c = dataclasses.replace(preset("h100-llama3.1-8b"), extra_forwards=0, ref_model=False, train_fix=0.0).cost()
    per_gpu = 8192 / c.update([8192]) / 8
    print(f"training, Llama-3.1-8B 8xH100 FSDP seq 8192: {per_gpu:,.0f} tok/s/GPU predicted; torchtitan "
          f"5,762 eager ({err(per_gpu, 5762)}), 6,667 compiled ({err(per_gpu, 6667)})")


def sync_rows() -> None:
    # verl PR #116: 8 x L20 (PCIe 4, no NVLink), 7B-class (Qwen2.5-7B's 15.2 GB) FSDP -> vLLM TP4
    w7 = MODELS["qwen2.5-7b"].weight_bytes
    l20 = 0.1 + w7 / 32e9
    print(f"sync, verl #116 L20 7B in-process: 0.570 s measured, {l20:.3f} s ({err(l20, 0.570)}); "
          f"across processes 0.701 s ({err(l20, 0.701)})")
    # huggingface/trl PR #7131: Qwen3-32B on H200, 16 trainer + 16 rollout GPUs (two nodes and more)
    c = preset("h200-qwen3-32b-32gpu-disagg")
    s = c.cost().sync_s
    print(f"sync, TRL #7131 Qwen3-32B H200 16+16 GPUs: 2.3 s measured, {s:.2f} s ({err(s, 2.3)})")
    s8 = preset("h20-qwen2.5-7b").cost().sync_s
    print(f"sync, verl checkpoint engine H20 7B: 0.02 s measured, {s8:.3f} s ({err(s8, 0.02)})")


if __name__ == "__main__":
    linear_rows()
    attention_rows()
    print("decode step, end to end:")
    end_to_end_rows()
    update_rows()
    sync_rows()
