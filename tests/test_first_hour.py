"""The first hour of a new user (issue 15): tables that fit the terminal without cutting a value,
auto knobs shown as used, one placement rule in simulate, compare and tune, fit warnings.

Run: pytest tests/test_first_hour.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.policies.registry import BUILTIN

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "sortedrl" / "traces" / "data"
SYNTH = ["--synthetic", "logic-8k", "--prompts", "64", "--group-size", "8", "--steps", "3"]
TWO = ["--cluster", "h100-llama3.1-8b-2gpu"]
ALL = [a for name in BUILTIN for a in ("--policy", name)]
runner = CliRunner()


def invoke(*args, columns: int = 80):
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def seven(tmp_path_factory):
    """compare of the 7 built-in policies at COLUMNS=80, and the summaries it wrote."""
    out = tmp_path_factory.mktemp("seven") / "cmp"
    r = invoke("compare", *SYNTH, *TWO, *ALL, "--out", str(out))
    assert r.exit_code == 0, r.output
    return r, json.loads((out / "compare.json").read_text())


def test_compare_of_seven_policies_fits_80_columns_and_cuts_no_headline_value(seven, tmp_path):
    r, summaries = seven
    lines = r.stdout.splitlines()[:-1]  # the last line names the output directory
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    titles = lines[1].split()
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in BUILTIN}
    assert list(rows) == list(BUILTIN)  # policies as rows, in the order given
    # every summary counts learnable tokens, so they have their column and rank "vs"
    assert all("learnable_tokens_per_s" in s for s in summaries)
    rank = "learnable_tokens_per_s"
    assert titles == ["policy", "makespan", "useful", "learnable", "vs", "bubble", "stale", "GPUs"], titles
    for s in summaries:
        cells = [c for c in rows[s["label"]].split() if c != "*"]
        if cells[-1] == "shared":
            cells[-2:] = [" ".join(cells[-2:])]
        expected = {"policy": s["label"], "makespan": f"{s['makespan_s']:,.1f}",
                    "useful": f"{s['tokens_per_s']:,.0f}",
                    "learnable": f"{s['learnable_tokens_per_s']:,.0f}",
                    "vs": f"{s[rank] / summaries[0][rank]:.2f}x", "bubble": f"{100 * s['bubble_ratio']:.1f}",
                    "stale": f"{s['staleness_mean']:.2f}/{s['staleness_max']}",
                    "GPUs": "1+1" if s["cluster"].endswith("-disagg") else "2 shared"}
        assert cells == [expected[t] for t in titles], (s["label"], cells)
    hidden = [line for line in lines if line.startswith("hidden to fit 80 columns: ")]
    assert hidden == ["hidden to fit 80 columns: wasted %, updates count (--wide shows them)"]
    assert lines[-1] == "columns are defined in docs/metrics.md; --json prints every field"
    wide = invoke("compare", *SYNTH, *TWO, *ALL, "--out", str(tmp_path / "w"), columns=120)
    assert wide.exit_code == 0, wide.output
    assert "hidden to fit" not in wide.stdout and "updates" in wide.stdout.splitlines()[1]


def test_wide_prints_every_field_uncut(tmp_path):
    r = invoke("compare", *SYNTH, *TWO, "--policy", "sync", "--policy", "on=sortedrl", "--wide",
               "--out", str(tmp_path / "w"))
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines() if line.split()}
    summaries = json.loads((tmp_path / "w" / "compare.json").read_text())
    assert rows["updates"][:2] == [str(s["updates"]) for s in summaries]
    # the text fields follow the table, one line per policy, so that the numbers' columns are
    # as wide as the numbers (the knobs' row made every column ~80 characters wide)
    text = " ".join(r.stdout.split())
    assert ("sync: policy sync; trace logic-8k; cluster h100-llama3.1-8b-2gpu; "
            "regen resample; params rollout_batch=") in text
    assert "on: policy sortedrl; trace " in text and "update_batch=384 (auto)," in text
    table = r.stdout.split("\nsync: ")[0].splitlines()
    assert max(map(len, table[1:])) < 80, table


def test_auto_knobs_are_shown_as_used(seven):
    r, summaries = seven
    by = {s["label"]: s for s in summaries}
    # 2 engines x 256 slots; 64 prompts per step of 8 responses, 3 steps: the window is half the
    # 1,536-sample loading group (all 192 prompts: fewer than 4 steps), 1.5 x the slots; an
    # update is a quarter of the group
    assert by["sortedrl"]["auto_params"] == {"group_prompts": 192, "oversubscribe": 1.5,
                                             "update_batch": 384}
    assert by["sync"]["auto_params"] == {"rollout_batch": 64}
    assert by["async"]["auto_params"] == {"batch": 512, "max_concurrent": 256}  # 1 rollout engine
    assert by["oracle_sorted"]["auto_params"] == {"rollout_batch": 256, "update_batch": 512}
    for s in summaries:  # every knob whose help says "0: ..." and was left at 0 is resolved
        cls = BUILTIN[s["label"]]
        auto = {f.name for f in dataclasses.fields(cls.Params)
                if any(w in f.metadata.get("help", "") for w in ("(0:", "; 0 takes"))
                and "unbounded" not in f.metadata["help"]}
        assert set(s["auto_params"]) == auto, s["label"]
    text = " ".join(r.stdout.split())
    assert ("sortedrl: group_prompts=192 (auto), oversubscribe=1.5 (auto), update_batch=384 (auto),"
            in text)


def test_an_explicit_knob_is_not_auto(tmp_path):
    r = invoke("simulate", *SYNTH, *TWO, "--policy", "sortedrl", "--set", "update_batch=32",
               "--out", str(tmp_path / "s"), "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["auto_params"] == {"group_prompts": 192, "oversubscribe": 1.5}
    assert s["params"]["update_batch"] == 32


def test_one_placement_rule_in_simulate_compare_and_tune(seven, tmp_path):
    _, summaries = seven
    by = {s["label"]: s for s in summaries}
    r = invoke("simulate", *SYNTH, *TWO, "--policy", "async", "--out", str(tmp_path / "a"), "--json")
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)
    assert sim["cluster"] == by["async"]["cluster"] == "h100-llama3.1-8b-2gpu-disagg"
    assert sim["makespan_s"] == by["async"]["makespan_s"]
    note = ("note: async needs separate rollout and training GPUs, so it runs on the disaggregated split "
            "of the same 2 GPUs: 1 roll out, 1 train (h100-llama3.1-8b-2gpu-disagg)")
    assert note in r.stderr.splitlines()
    t = invoke("tune", *SYNTH, *TWO, "--policy", "async", "--budget", "1", "--out", str(tmp_path / "t"))
    assert t.exit_code == 0, t.output
    assert note in t.stderr.splitlines()
    trial = json.loads((tmp_path / "t" / "tune.json").read_text())["trials"][0]
    assert trial["summary"]["makespan_s"] == sim["makespan_s"]
    assert max(len(line) for line in t.stdout.splitlines()[:-1]) <= 80
    assert any(line.split()[:2] == ["async", "0"] and line.endswith("1+1") for line in t.stdout.splitlines())


def test_compare_states_which_gpus_rolled_out_and_which_trained(seven):
    text = " ".join(seven[0].stdout.split())
    assert ("async, one_step_off need separate GPUs, so they ran on the disaggregated split of the same 2 "
            "GPUs (1 roll out, 1 train: h100-llama3.1-8b-2gpu-disagg)") in text


def test_a_trace_too_small_for_the_cluster_is_warned(tmp_path):
    r = invoke("simulate", "--trace", str(DATA / "logic-8k.jsonl"), "--policy", "sync",
               "--out", str(tmp_path / "s"), "--json")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "warning: a step of logic-8k.jsonl has 512 samples, filling 25% of the 2,048 decode slots of "
        "h100-llama3.1-8b (8 engines x 256): every policy will mostly idle; try --cluster "
        "h100-llama3.1-8b-4gpu or a trace with more prompts per step",
        "warning: logic-8k.jsonl has 1 step, so no policy gets past its warm-up step to a steady state; "
        "use a trace of several steps"]
    r = invoke("simulate", *SYNTH, *TWO, "--policy", "sync", "--out", str(tmp_path / "t"), "--json")
    assert r.exit_code == 0 and r.stderr == ""
    # a policy that runs on the split counts the split's slots (it said 2,048 slots, 8 engines)
    r = invoke("simulate", "--trace", str(DATA / "logic-8k.jsonl"), "--policy", "async",
               "--out", str(tmp_path / "a"), "--json")
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        "warning: a step of logic-8k.jsonl has 512 samples, filling 33% of the 1,536 decode slots of "
        "h100-llama3.1-8b-disagg (6 engines x 256): every policy will mostly idle; try --cluster "
        "h100-llama3.1-8b-4gpu-disagg or a trace with more prompts per step")
    # on 2 GPUs split 1+1 the hint was 1 GPU, which a policy that needs a split refuses
    r = invoke("simulate", "--synthetic", "math-16k", "--prompts", "4", "--steps", "2", "--cluster",
               "h100-llama3.1-8b-2gpu", "--policy", "async", "--out", str(tmp_path / "a2"), "--json")
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0].endswith("try --cluster h100-llama3.1-8b-2gpu-64seq-disagg or more --prompts")


ONE_GPU_NOTE = (  # (its trainer needs the optimizer offloaded: test_ux46_offload_note)
    "note: on h100-llama3.1-8b-1gpu the trainer's weights, gradients and Adam state need 128 GB"
    ' a GPU (sharded over 1 trainer GPU of 80 GB), so the FP32 master weights and Adam state li'
    "ve in host memory and move in and out every update (+3.0 s an update, as verl's optimizer "
    'offload); more GPUs keep them on the GPUs')

def test_on_one_gpu_the_warning_names_a_preset_with_fewer_sequences(tmp_path):
    """On a 1-GPU preset the warning said "try a smaller --cluster" (there is none) and "1 engines"."""
    r = invoke("simulate", "--synthetic", "math-16k", "--prompts", "4", "--steps", "2", "--cluster",
               "h100-llama3.1-8b-1gpu", "--policy", "sync", "--out", str(tmp_path / "s"), "--json")
    assert r.exit_code == 0
    assert r.stderr.splitlines() == [
        "warning: a step of math-16k has 32 samples, filling 12% of the 256 decode slots of "
        "h100-llama3.1-8b-1gpu (1 engine x 256): every policy will mostly idle; try --cluster "
        "h100-llama3.1-8b-1gpu-64seq or more --prompts", ONE_GPU_NOTE]
    r = invoke("simulate", "--synthetic", "math-16k", "--prompts", "4", "--steps", "2", "--cluster",
               "h100-llama3.1-8b-1gpu-64seq", "--policy", "sync", "--out", str(tmp_path / "t"), "--json")
    assert r.exit_code == 0 and r.stderr == ONE_GPU_NOTE.replace("-1gpu ", "-1gpu-64seq ") + "\n"
    r = invoke("simulate", "--synthetic", "math-16k", "--prompts", "4", "--steps", "2", "--cluster",
               "h100-llama3.1-8b-2gpu-disagg", "--policy", "async", "--out", str(tmp_path / "u"), "--json")
    assert r.exit_code == 0 and "try --cluster h100-llama3.1-8b-2gpu-64seq-disagg or" in r.stderr


def test_simulate_summary_fits_and_ends_with_the_metrics_line(tmp_path):
    r = invoke("simulate", *SYNTH, *TWO, "--policy", "sortedrl", "--out", str(tmp_path / "s"))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(map(len, lines[:-1])) <= 80
    assert lines[-2] == "columns are defined in docs/metrics.md; --json prints every field"
    assert "update_batch=384 (auto)" in " ".join(r.stdout.split())


def test_progress_names_each_phase_with_the_right_totals(tmp_path, monkeypatch):
    import sortedrl.cli as cli
    from sortedrl.progress import Phases

    seen: list[tuple[str, int | None]] = []

    class Recording(Phases):
        def phase(self, label, total=None):
            seen.append((label, total))
            return super().phase(label, total)

        def close(self):
            task = self.bar.tasks[1]  # the simulating phase
            seen.append(("simulated", int(task.completed)))
            super().close()

    monkeypatch.setattr(cli, "Phases", Recording)
    out = tmp_path / "s"
    r = invoke("simulate", *SYNTH, *TWO, "--policy", "sync", "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    # (the count's unit, "samples generated", is the bar's own column: see test_progress_display)
    assert seen == [("reading logic-8k", None), ("simulating sync", 1536),
                    (f"writing {out}/summary.json (1 of 2 files)", None),
                    (f"writing {out}/timeline.npz (2 of 2 files)", None), ("simulated", 1536)]


@pytest.mark.parametrize("command", [["simulate"], ["compare"], ["tune"], ["trace", "synth"]])
def test_help_shows_every_synthetic_default(command):
    r = invoke(*command, "--help", columns=200)
    assert r.exit_code == 0
    text = " ".join(r.stdout.replace("│", " ").split())
    for option, default in (("--prompts", "128"), ("--group-size", "8"), ("--steps", "4")):
        line = text[text.index(option):][:160]
        assert f"default: {default}" in line or f"default: the preset's, {default}" in line, line


def test_readme_shows_the_preset_grammar_and_links_only_files_in_the_repository():
    import re

    readme = (ROOT / "README.md").read_text()
    assert "{gpu}-{model}[-tpN][-Ngpu][-Nseq][-disagg]" in readme
    for word in ("`train_gpus`", "`--prompts` (default 128", "`--group-size` (default 8)", "`--steps` (default 4"):
        assert word in readme, word
    linked = set(re.findall(r"`((?:docs|tests|bench|sortedrl)/[\w./-]+\.(?:md|py|jsonl))", readme))
    assert linked and all((ROOT / p).exists() for p in linked), sorted(p for p in linked if not (ROOT / p).exists())
    assert "ARCHITECTURE.md" not in readme
    assert " --cluster h100-llama3.1-8b-2gpu" in readme.split("## The CLI")[1].split("sortedrl compare")[1][:120]


def test_tune_prints_the_best_per_policy_and_the_front_within_80_columns(tmp_path):
    r = invoke("tune", "--synthetic", "logic-8k", "--prompts", "64", "--group-size", "4", *TWO,
               "--policy", "sync", "--policy", "sortedrl", "--policy", "async",
               "--param", "sortedrl.mode=on_policy,partial", "--max-staleness", "1", "--budget", "8",
               "--out", str(tmp_path / "t"))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()[:-1]
    assert max(map(len, lines)) <= 80
    d = json.loads((tmp_path / "t" / "tune.json").read_text())
    best = sorted((d["trials"][i] for i in d["best"]["per_policy"].values() if i is not None),
                  key=lambda t: (-t["summary"]["learnable_tokens_per_s"], t["id"]))
    rows = [line.split()[:2] for line in lines if line.split()[:1] in (["sync"], ["sortedrl"], ["async"])]
    assert rows[: len(best)] == [[t["policy"], str(t["id"])] for t in best]  # best first, no 'pareto' tags
    assert d["best"]["per_policy"]["async"] is None and "no feasible trial for: async" in lines
    assert lines[-1] == "columns are defined in docs/metrics.md; --json prints every field"


def test_an_auto_loading_group_reports_the_prompts_it_loads(tmp_path):
    # 4 x 64 prompts per step is 256, but the trace holds 192: the loading group is all 192, and
    # the knobs said group_prompts=256 (auto); an explicit 256 runs the same schedule
    runs = {}
    for name, sets in (("auto", []), ("given", ["--set", "group_prompts=256"])):
        r = invoke("simulate", *SYNTH, *TWO, "--policy", "sortedrl", *sets, "--out", str(tmp_path / name), "--json")
        assert r.exit_code == 0, r.output
        runs[name] = json.loads(r.stdout)
    assert runs["auto"]["auto_params"]["group_prompts"] == 192 and runs["given"]["params"]["group_prompts"] == 256
    for s in runs.values():
        del s["params"], s["auto_params"]
    assert runs["auto"] == runs["given"]


def test_the_readme_shows_the_table_make_demo_prints(tmp_path):
    # the Makefile's demo compare, at COLUMNS=80 (the README says so): its table, line for line
    readme = (ROOT / "README.md").read_text()
    shown = readme.split("The table it prints (at `COLUMNS=80`):\n\n```\n")[1].split("```")[0]
    policies = [a for p in "sync sortedrl partial tail_batch async one_step_off oracle_sorted".split()
                for a in ("--policy", p)]
    r = invoke("compare", "--trace", str(ROOT / "sortedrl/traces/data/math-16k.jsonl"), *policies,
               "--cluster", "h100-llama3.1-8b-2gpu", "--out", str(tmp_path / "demo"))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[:11] == shown.splitlines()


@pytest.mark.parametrize("command", [["simulate", "--out"], ["tune", "--budget", "2", "--out"]])
def test_a_trace_no_engine_can_hold_names_the_trace_its_prompt_and_cap(tmp_path, command):
    """The error named the cluster and a bare 2000010, not the trace or where the number came
    from (the longest prompt plus the trace's cap, not any one row)."""
    trace = tmp_path / "big.jsonl"
    trace.write_text('{"sortedrl_trace": 1, "max_response_len": 2000000, "group_size": 1, "source": "t"}\n'
                     '{"prompt_id": "a", "sample": 0, "prompt_len": 12, "response_len": 50, "truncated": false}\n')
    r = invoke(command[0], "--trace", str(trace), "--policy", "sync", "--cluster", "h100-qwen3-0.6b-1gpu-32seq",
               *command[1:], str(tmp_path / "out"))
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "error: h100-qwen3-0.6b-1gpu-32seq: impossible cluster: the KV budget of 611,223 tokens per engine "
        "cannot hold one sequence of 2,000,012 tokens (trace big.jsonl: its longest prompt, 12 tokens, "
        "plus its max_response_len, 2,000,000; a smaller cap or a cluster with more KV cache fits it)"]
    assert not (tmp_path / "out").exists()
