"""GPU and model presets, MoE decode, and the update terms, against hand computations.

Every model number below is copied from the model's Hugging Face config.json (named per row);
the published totals are the model cards' parameter counts.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from cli_helpers import PRESET_GRAMMAR

from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import load_cluster, preset
from sortedrl.sim.cost import CostModel, all_to_all_s, busiest_shard, expected_experts
from sortedrl.sim.hardware import MODELS

# name: (layers, kv_heads, head_dim, published total params, source)
DENSE = {
    "qwen3-0.6b": (28, 8, 128, 0.6e9, "Qwen/Qwen3-0.6B: hidden 1024, 16 heads, ffn 3072, tied"),
    "qwen3-1.7b": (28, 8, 128, 1.7e9, "Qwen/Qwen3-1.7B: hidden 2048, 16 heads, ffn 6144, tied"),
    "qwen3-4b": (36, 8, 128, 4.0e9, "Qwen/Qwen3-4B: hidden 2560, 32 heads, ffn 9728, tied"),
    "qwen3-8b": (36, 8, 128, 8.2e9, "Qwen/Qwen3-8B: hidden 4096, 32 heads, ffn 12288"),
    "qwen3-14b": (40, 8, 128, 14.8e9, "Qwen/Qwen3-14B: hidden 5120, 40 heads, ffn 17408"),
    "qwen3-32b": (64, 8, 128, 32.8e9, "Qwen/Qwen3-32B: hidden 5120, 64 heads, ffn 25600"),
    "qwen2.5-7b": (28, 4, 128, 7.61e9, "Qwen/Qwen2.5-7B: hidden 3584, 28 heads, ffn 18944"),
    "qwen2.5-32b": (64, 8, 128, 32.8e9, "Qwen/Qwen2.5-32B: hidden 5120, 40 heads, ffn 27648"),
    "llama3.1-8b": (32, 8, 128, 8.03e9, "meta-llama/Llama-3.1-8B: hidden 4096, 32 heads, ffn 14336"),
    "llama3.1-70b": (80, 8, 128, 70.6e9, "meta-llama/Llama-3.1-70B: hidden 8192, 64 heads, ffn 28672"),
    "qwen3-30b-a3b": (48, 4, 128, 30.5e9, "Qwen/Qwen3-30B-A3B: 128 experts, 8 per token"),
}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_model_constants_match_the_configs(name):
    layers, kv_heads, head_dim, published, _ = DENSE[name]
    m = MODELS[name]
    assert m.kv_bytes_per_token == layers * kv_heads * head_dim * 2 * 2  # K and V, BF16
    assert m.params == pytest.approx(published, rel=0.02)
    assert m.weight_bytes == 2 * m.params


def test_llama_8b_by_hand():
    # attention 2·4096² + 2·4096·1024, MLP 3·4096·14336, 32 layers, untied 128256 x 4096 embeddings;
    # the model card's 8,030,261,248 adds the RMSNorm weights (65 x 4096)
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert MODELS["llama3.1-8b"].params == 32 * per_layer + 2 * 128256 * 4096 == 8_030_261_248 - 65 * 4096
    c = preset("h100-llama3.1-8b")  # KV capacity: 0.9 x 80 GB minus weights, over 128 KiB a token
    assert c.kv_budget == int((0.9 * 80e9 - 2 * 8_029_995_008) // 131072) == 426_788


def test_moe_active_parameters_by_hand():
    q = MODELS["qwen3-30b-a3b"]  # 48 layers; an expert is 3 x 2048 x 768
    assert q.expert_params == 3 * 2048 * 768
    assert q.params - q.active_params == 48 * (128 - 8) * 3 * 2048 * 768
    assert q.active_params == pytest.approx(3.3e9, rel=0.03)  # model card: 3.3B activated
    d = MODELS["deepseek-v3"]  # 58 MoE layers of 256 routed + 1 shared expert of 3 x 7168 x 2048
    assert d.params == pytest.approx(671e9, rel=0.005) and d.active_params == pytest.approx(37e9, rel=0.02)
    assert d.weight_bytes == d.params  # FP8 checkpoint
    assert d.kv_bytes_per_token == 61 * (512 + 64) * 2  # MLA: latent + rope key, BF16


def test_expected_experts_matches_monte_carlo():
    rng = random.Random(7)
    experts, k = 128, 8
    for batch in (1, 4, 16, 64):
        trials = 2000
        total = sum(len({e for _ in range(batch) for e in rng.sample(range(experts), k)})
                    for _ in range(trials))
        assert total / trials == pytest.approx(expected_experts(batch, experts, k), rel=0.02)
    assert busiest_shard(16, experts, k, 1) == expected_experts(16, experts, k)
    assert busiest_shard(16, experts, k, 8) > expected_experts(16, experts, k)  # the busiest shard paces


def test_moe_decode_gets_cheaper_per_token_with_batch():
    c = preset("h200-qwen3-30b-a3b").cost()
    per_token = [c.decode_step(b, 0) / b for b in (1, 8, 64, 256)]
    assert per_token == sorted(per_token, reverse=True)
    assert c.weight_read(1) < c.weight_read(256) < c.weight_read_s + 128 * c.expert_read * 1.0001
    dense = MODELS["qwen3-30b-a3b"]
    seq = 2 * dense.active_params / 989e12  # one sequence's decode FLOPs at peak: active params
    assert (c.step_s_per_seq, c.compute_s_per_seq) == (pytest.approx(0.9 * seq), pytest.approx((1 / 0.64 - 0.9) * seq))


def test_measured_decode_grows_with_batch_below_the_ridge():
    meas = preset("h100-llama3.1-8b").cost()  # the default decode model
    roof = dataclasses.replace(preset("h100-llama3.1-8b"), decode_model="roofline").cost()
    assert roof.decode_step(64, 0) == roof.decode_step(1, 0)  # the roofline is flat below the ridge
    assert meas.decode_step(64, 0) - meas.decode_step(1, 0) == pytest.approx(63 * 0.9 * 2 * 8_029_995_008 / 989e12)
    assert meas.step_fixed_s == pytest.approx(32 * (24e-6 + 14e-6))  # per layer: small ops and attention
    assert meas.weight_read_s == pytest.approx(MODELS["llama3.1-8b"].weight_bytes / (3.35e12 * 0.84))
    assert meas.kv_read_s_per_token == pytest.approx(131072 / (3.35e12 * 0.80))  # KV bytes a token: 32 layers x 8 heads x 128 x 2 x 2


def test_update_terms_by_hand():
    c = preset("h100-llama3.1-8b")
    p, flops = MODELS["llama3.1-8b"].params, 8 * 989e12 * 0.34
    cost = c.cost()
    passes = 3 + 1 + 1  # forward + backward, old log-probs, reference
    assert cost.train_per_token == pytest.approx(passes * 2 * p / flops)
    assert cost.train_per_pair == pytest.approx(passes * 4 * 32 * 4096 / flops)  # q·k and p·v, 32 layers
    assert cost.update([3, 5]) == pytest.approx(1.0 + 8 * cost.train_per_token + (6 + 15) * cost.train_per_pair)
    no_ref = dataclasses.replace(c, ref_model=False).cost()
    recompute = dataclasses.replace(c, recompute=True).cost()
    assert no_ref.train_per_token == pytest.approx(cost.train_per_token * 4 / 5)
    assert recompute.train_per_token == pytest.approx(cost.train_per_token * 6 / 5)


def test_training_throughput_within_10pct_of_torchtitan():
    # torchtitan docs/performance.md: Llama 3.1 8B, 8 x H100, FSDP, seq 8192: 5,762 tok/s/GPU eager,
    # 6,667 with torch.compile. Forward + backward only: no old-log-prob or reference forward.
    c = dataclasses.replace(preset("h100-llama3.1-8b"), extra_forwards=0, ref_model=False, train_fix=0.0).cost()
    per_gpu = 8192 / c.update([8192]) / 8
    assert per_gpu == pytest.approx(5762, rel=0.10) and per_gpu == pytest.approx(6667, rel=0.10)


def test_offload_and_cross_node_sync_by_hand():
    w = 2 * 8_029_995_008
    c = preset("h100-llama3.1-8b").cost()
    assert (c.offload_s, c.onload_s) == (pytest.approx(w / 64e9), pytest.approx(w / 64e9))  # PCIe 5 x16
    assert c.sync_s == pytest.approx(0.1 + w / 450e9)  # NVLink within the node
    assert preset("h100-llama3.1-8b-16gpu").cost().sync_s == pytest.approx(0.1 + w / (400e9 / 8 * 0.8))
    dis = preset("h100-llama3.1-8b-disagg").cost()
    assert dis.offload_s == dis.onload_s == 0.0


def test_trainer_memory_check_names_the_memory():
    p70 = MODELS["llama3.1-70b"].params
    strict = dataclasses.replace(preset("h100-llama3.1-70b"), gpus=8, trainer_offload="none")
    with pytest.raises(ConfigError) as e:
        strict.validate("c")
    assert f"need {16 * p70 / 1e9:,.0f} GB (16 bytes x 70.55B parameters)" in str(e.value)
    assert "field 'gpus'" in str(e.value) and "141 GB per GPU" in str(e.value)
    with pytest.raises(ConfigError, match="even with the Adam state offloaded to host memory, need 282 GB"):
        preset("h100-llama3.1-70b-tp2-2gpu")  # 4 bytes a parameter left on 2 GPUs
    assert preset("h100-llama3.1-70b").gpus == 16  # the default is the fewest GPUs that fit


def test_optimizer_offload_when_adam_state_does_not_fit():
    p8 = MODELS["llama3.1-8b"].params
    one = preset("h100-llama3.1-8b-2gpu-disagg")  # a 1-GPU trainer: 128 GB of state > 80 GB
    assert one.trainer_gpus == 1 and one.optimizer_offloaded and not preset("h100-llama3.1-8b").optimizer_offloaded
    assert one.train_state_bytes == 4 * p8  # BF16 weights and gradients stay
    # the FP32 master and Adam m, v (12 bytes a parameter) go out and back over PCIe 5 every update
    assert one.cost().train_fix == pytest.approx(1.0 + 2 * 12 * p8 / 64e9)
    with pytest.raises(ConfigError, match="field 'train_gpus'"):
        dataclasses.replace(one, trainer_offload="none").validate("c")


def test_unknown_preset_lists_gpus_and_models():
    with pytest.raises(ConfigError) as e:
        preset("v100-llama3.1-8b")
    assert "mi300x" in str(e.value) and "deepseek-v3" in str(e.value)


@pytest.mark.parametrize("name, part", [
    # it listed every GPU and model but not which part of the name it could not read
    ("h100-qwen3-0.6b-2gpu-16sq", "unknown suffix '-16sq'"),
    ("h100-qwen3-0.6b-16sq-2gpu", "unknown suffix '-16sq'"),
    ("h100-llama3.1-8b-\u0663gpu", "unknown suffix '-\u0663gpu'"),  # (Arabic-Indic 3: no count)
    ("h100-llama3.1-8b-", "unknown suffix '-'"),
    ("h100-llama3.1-8b-16gpu-tp2", "suffix '-tp2' out of order; in order: h100-llama3.1-8b-tp2-16gpu"),
    ("h100-llama3.1-8b-disagg-16gpu", "suffix '-16gpu' out of order; in order: h100-llama3.1-8b-16gpu-disagg"),
    ("h100-qwen3-8b-1024seq-16gpu-tp2", "suffix '-16gpu' out of order; in order: h100-qwen3-8b-tp2-16gpu-1024seq"),
    ("h100-llama3.1-8b-16gpu-32gpu", "suffix '-32gpu' repeated"),
    ("a100-llama3.1-8b", "unknown GPU 'a100'"),
    ("nope", "unknown GPU 'nope'"),
    ("h100", "no MODEL"),
    ("h100-qwen3-0.7b-16gpu", "unknown MODEL 'qwen3-0.7b'"),
    ("a100-80g-llama9-8b-tp2", "unknown MODEL 'llama9-8b'"),
])
def test_an_unknown_preset_names_the_part_it_could_not_read(name, part):
    with pytest.raises(ConfigError) as e:
        preset(name)
    assert str(e.value) == f"unknown cluster preset {name!r} ({part}): {PRESET_GRAMMAR}"


@pytest.mark.parametrize("field,value", [("net_gbps", -1.0), ("offload_s", -0.5), ("host_gbs", -2.0),
                                         ("onload_s", -1.0)])
def test_negative_fields_are_rejected(tmp_path, field, value):
    f = tmp_path / "c.json"
    f.write_text(f'{{"preset": "h100-llama3.1-8b", "{field}": {value}}}')
    with pytest.raises(ConfigError, match=f"field '{field}'"):
        load_cluster(str(f))


def test_moe_presets_by_hand():
    # Qwen3-30B-A3B config: hidden 2048, 48 layers, 32 heads and 4 KV heads of 128, 128 experts of
    # intermediate 768 (+ a 2048 x 128 router) per layer, vocab 151936, untied
    attn = 2 * 2048 * 32 * 128 + 2 * 2048 * 4 * 128
    qwen = 48 * (attn + 128 * 3 * 2048 * 768 + 2048 * 128) + 2 * 151936 * 2048
    assert MODELS["qwen3-30b-a3b"].params == qwen
    h200 = preset("h200-qwen3-30b-a3b")  # tp 1: 61 GB of weights fit twice in 0.9 x 141 GB
    assert h200.tp == 1 and h200.kv_budget == int((0.9 * 141e9 - 2 * qwen) // (48 * 4 * 128 * 4))
    # DeepSeek-V3 config: hidden 7168, 61 layers (3 dense, ffn 18432), 128 heads, q_lora_rank 1536,
    # kv_lora_rank 512, qk_nope 128 + rope 64, v 128, 256 routed + 1 shared expert of 2048, vocab 129280
    mla = (7168 * 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * (128 + 128)
           + 128 * 128 * 7168)
    moe = 257 * 3 * 7168 * 2048 + 7168 * 256
    dsv3 = 61 * mla + 58 * moe + 3 * 3 * 7168 * 18432 + 2 * 129280 * 7168
    assert MODELS["deepseek-v3"].params == dsv3
    c = preset("h200-deepseek-v3-tp8-128gpu")  # FP8: one byte a weight
    # MLA's latent is whole on each of the 8 GPUs (vLLM: one KV head, never split by tp): a GPU
    # holds 0.9 x 141 GB less its eighth of the weights, 70,272 bytes a token
    assert c.kv_budget == int((8 * 0.9 * 141e9 - dsv3) // (70272 * 8))
    assert c.kv_budget == int((0.9 * 141e9 - dsv3 / 8) // 70272)
    assert c.gpus == 128 and preset("h200-deepseek-v3").gpus == 128  # 16 bytes x 671B over 141 GB


@pytest.mark.parametrize("name", ["h200-qwen3-30b-a3b", "h200-deepseek-v3-tp8-128gpu"])
def test_moe_closed_form_equals_the_step_sum(name):
    for model in ("roofline", "measured"):
        c = dataclasses.replace(preset(name), decode_model=model, ep=8 if "deepseek" in name else 1).cost()
        for batch, kv0, steps in ((1, 0, 50), (7, 3000, 200), (256, 100_000, 300)):
            by_step = sum(c.decode_step(batch, kv0 + j * batch) for j in range(steps))
            assert c.decode_time(steps, batch, kv0) == pytest.approx(by_step, rel=1e-12)
            assert c.decode_steps_within(c.decode_time(steps, batch, kv0), batch, kv0) == steps


def test_a_vanishing_kv_term_beside_a_compute_term_is_compute_bound_throughout():
    # a fitted KV term of 1.4e-45 s/token (a float32 denormal, as in
    # tests/fixtures/cpu-profile.json) with a compute term: the step where memory would win is
    # ~1e45, and finding it stepped j by one from there forever (simulate hung; found by a fuzz
    # of profile files)
    c = CostModel(step_fixed_s=0.001, weight_read_s=0.0, kv_read_s_per_token=1.4e-45, compute_s_per_seq=2.0,
                  step_s_per_seq=0.0, prefill_s_per_token=0.0, prefill_s_per_pair=0.0,
                  train_per_token=0.0, train_fix=0.0, sync_s=0.0)
    for batch, kv0, steps in ((1, 0, 50), (32, 3000, 200)):
        by_step = sum(c.decode_step(batch, kv0 + j * batch) for j in range(steps))
        assert by_step == pytest.approx(steps * (0.001 + 2.0 * batch), rel=1e-12)
        assert c.decode_time(steps, batch, kv0) == pytest.approx(by_step, rel=1e-12)
        assert c.decode_steps_within(c.decode_time(steps, batch, kv0), batch, kv0) == steps


def test_negative_bandwidth_on_the_command_line_is_one_error_line(tmp_path):
    from typer.testing import CliRunner

    from sortedrl.cli import app

    f = tmp_path / "c.json"
    f.write_text('{"preset": "h100-llama3.1-8b", "net_gbps": -400}')
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "logic-8k", "--prompts", "8", "--policy", "sync",
                                 "--cluster", str(f), "--out", str(out)])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {f}: field 'net_gbps': must be a finite number > 0, got -400.0"]
    assert not out.exists()


@pytest.mark.parametrize("fields, message", [
    ('"preset": "h100-llama3.1-8b-1gpu-32seq", "gpus": 1099511627776',
     "{f}: field 'gpus': at most 1,048,576, got 1,099,511,627,776"),
    ('"preset": "h100-llama3.1-8b", "max_num_seqs": 1000000000000, '
     '"max_num_batched_tokens": 1000000000001',  # the lower bound visited every batch size
     "{f}: field 'max_num_seqs': at most 65,536, got 1,000,000,000,000"),
    ('"preset": "a100-80g-qwen3-30b-a3b", "offload_s": 1e308',
     "the simulated clock overflowed to infinity: a cost in the cluster (or a tool latency in the "
     "trace) is far too large"),
])
def test_a_cluster_past_any_real_one_is_one_error_line_not_a_hang(tmp_path, fields, message):
    # a fuzz of cluster files: 2**40 GPUs built an engine each; an offload of 1e308 s took the
    # clock to infinity, where every engine was due at once and catching up never ended
    from typer.testing import CliRunner

    from sortedrl.cli import app

    f = tmp_path / "c.json"
    f.write_text("{" + fields + "}")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "logic-8k", "--prompts", "8",
                                 "--group-size", "4", "--steps", "2", "--policy", "sync",
                                 "--cluster", str(f), "--out", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.strip().splitlines() == ["error: " + message.format(f=f)]


@pytest.mark.parametrize("field, value, message", [
    # -10 extra forwards made the update's time negative: "ValueError: Negative delay"
    ("extra_forwards", -10, "must be >= 0, got -10"),
    ("extra_forwards", 10**30, "at most 2,147,483,647, got 1" + "0" * 30),
    ("kv_budget_tokens", -5, "must be >= 0, got -5"),  # (was taken as 0: derived from HBM)
    ("kv_budget_tokens", 10**400, "at most 9,223,372,036,854,775,807, got 10000000000000000000... "
                                  "(401 characters)"),  # (OverflowError: int too large for a float)
    ("max_num_batched_tokens", 0, "must be >= 1, got 0"),
    ("train_gpus", -1, "must be >= 0, got -1"),
])
def test_a_cluster_count_out_of_range_is_one_error_line(tmp_path, field, value, message):
    from typer.testing import CliRunner

    from sortedrl.cli import app

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"preset": "h100-llama3.1-8b-1gpu-16seq", field: value}))
    for args in (["simulate", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "4",
                  "--steps", "2", "--policy", "sync", "--out", str(tmp_path / "out")],
                 ["export", "verl", "sync"]):
        r = CliRunner().invoke(app, [*args, "--cluster", str(f)])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.stderr.strip().splitlines() == [f"error: {f}: field '{field}': {message}"]
    assert not (tmp_path / "out").exists()


def test_busiest_expert_shard_against_monte_carlo():
    # 256 experts, 8 per token, 8 expert-parallel shards of 32: the step reads as many experts on
    # every shard as the busiest one touched. The normal approximation is within 7% (worst at B=1).
    rng = random.Random(1)
    experts, k, shards = 256, 8, 8
    for batch in (1, 4, 16, 64):
        trials, total = 1000, 0
        for _ in range(trials):
            per = [0] * shards
            for e in {e for _ in range(batch) for e in rng.sample(range(experts), k)}:
                per[e * shards // experts] += 1
            total += max(per) * shards
        assert busiest_shard(batch, experts, k, shards) == pytest.approx(total / trials, rel=0.07)


def test_expert_parallel_all_to_all_by_hand():
    # DeepSeek-V3: 58 MoE layers, hidden 7168, 8 experts a token; the dispatch in the FP8 checkpoint's
    # 1 byte a value, the combine in BF16's 2; each of the ep GPUs holds 1/ep of the step's tokens
    base = preset("h200-deepseek-v3-tp8-128gpu")
    one = dataclasses.replace(base, ep=1)
    assert one.all_to_all_per_token_s == 0.0 and preset("h100-llama3.1-8b").all_to_all_per_token_s == 0.0
    # ep 8 within a node: 7/8 of the expert copies cross NVLink (H200: 450 GB/s a direction, at 0.8)
    node = dataclasses.replace(base, ep=8)
    per_token = 58 * (7 / 8) * 8 * 7168 * (1 + 2) / (450e9 * 0.8) / 8
    assert node.all_to_all_per_token_s == pytest.approx(per_token, rel=1e-12)
    assert node.cost().step_s_per_seq - one.cost().step_s_per_seq == pytest.approx(per_token, rel=1e-9)  # every decode step
    assert node.cost().prefill_s_per_token - one.cost().prefill_s_per_token == pytest.approx(per_token, rel=1e-9)  # every prefilled token
    # ep 16 over two nodes of 8: 8/16 cross the network (400 Gb/s at 0.8), slower than NVLink's 7/16
    two = dataclasses.replace(base, tp=16, ep=16)
    assert two.all_to_all_per_token_s == pytest.approx(58 * (8 / 16) * 8 * 7168 * 3 / (50e9 * 0.8) / 16, rel=1e-12)


# DeepEP V1's low-latency (decode) kernels, deepseek-ai/DeepEP docs/legacy.md: H800 with one CX7
# 400 Gb/s NIC each, 128 tokens a GPU, hidden 7168, top-8 experts, FP8 dispatch (a 4-byte scale a
# 128 values), BF16 combine: (dispatch, combine) latency by EP size, s
DEEPEP_LOW_LATENCY = {8: (77e-6, 114e-6), 16: (118e-6, 195e-6), 32: (155e-6, 273e-6), 64: (173e-6, 314e-6),
                      128: (192e-6, 369e-6), 256: (194e-6, 360e-6)}


def test_all_to_all_against_deepep_low_latency_kernels():
    """Across nodes within 10% (EP 16-256), except EP 16's dispatch: at ~4 MB a GPU it is under-
    predicted by 20%, as are both directions within one node (EP 8: -46%, -30%), where DeepEP
    reaches 86-111 GB/s of NVLink's 160: a fixed latency per transfer the bandwidth model lacks."""
    nvlink, net = 200e9 * 0.8, 50e9 * 0.8  # H800 NVLink 400 GB/s both ways; 400 Gb/s NIC
    for ep, (dispatch, combine) in DEEPEP_LOW_LATENCY.items():
        d = all_to_all_s(128, 8, 7168, 1 + 4 / 128, ep, 8, nvlink, net)
        c = all_to_all_s(128, 8, 7168, 2, ep, 8, nvlink, net)
        if ep >= 16:
            assert c == pytest.approx(combine, rel=0.10), ep
        if ep >= 32:
            assert d == pytest.approx(dispatch, rel=0.10), ep
        else:
            assert d < 0.85 * dispatch, ep
    assert all_to_all_s(128, 8, 7168, 2, 8, 8, nvlink, net) < 0.75 * DEEPEP_LOW_LATENCY[8][1]


def test_kv_copies_follow_vllms_split_of_kv_heads():
    """vLLM's ``get_num_kv_heads``: ``max(1, kv_heads // tp)`` heads a GPU, and 1 for MLA: past
    the model's KV heads each GPU holds a copy, and MLA's latent is on every GPU whole. The
    DeepSeek-V3 presets counted the latent split over 32 GPUs: 23.2M KV tokens an engine where
    vLLM holds 0.73M, and a 32 x too small KV read (a review, 6 Dec 2026)."""
    dsv3, qwen = MODELS["deepseek-v3"], MODELS["qwen3-30b-a3b"]
    h100 = preset("h100-deepseek-v3")  # tp 32, one engine
    assert h100.tp == 32 and h100.kv_bytes_per_token == 32 * 70272
    assert h100.kv_budget == int((0.9 * 80e9 - dsv3.weight_bytes / 32) // 70272) == 726_184
    assert h100.cost().kv_read_s_per_token == pytest.approx(70272 / (3.35e12 * 0.80))  # one GPU's read
    # ep 8 of tp 8: attention data-parallel over the shards, each with its own sequences
    shards = dataclasses.replace(preset("h200-deepseek-v3-tp8-128gpu"), ep=8)
    assert shards.kv_bytes_per_token == 70272
    # Qwen3-30B-A3B has 4 KV heads: tp 2 splits them, tp 8 holds each on two GPUs
    assert preset("h100-qwen3-30b-a3b-tp2").kv_bytes_per_token == qwen.kv_bytes_per_token
    tp8 = preset("h100-qwen3-30b-a3b-tp8")
    assert tp8.kv_bytes_per_token == 2 * qwen.kv_bytes_per_token == 2 * 48 * 4 * 128 * 4
    assert tp8.kv_budget == int((8 * 0.9 * 80e9 - qwen.weight_bytes) // (2 * qwen.kv_bytes_per_token))
    # a dense model with as many KV heads as GPUs or more: no copy (Llama-3.1-70B, 8 heads, tp 4)
    assert preset("h100-llama3.1-70b").kv_bytes_per_token == MODELS["llama3.1-70b"].kv_bytes_per_token
