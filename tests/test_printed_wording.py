"""Lines a tester read as wrong, each asserted as it now reads: a count of 1 before a plural
("has 1 samples", "1 steps"), a share under 1% printed as 0%, a seed with thousands separators
(a seed is an id), "trial 7 makes 2, trial 4 4", a compare ``--set LABEL.key`` error that
dropped the label, and a mistyped policy or knob (``sortd``, ``mdoe``) with no close name offered. (Tune's knobs line keeps its floats whole, ``oversubscribe=2.862732009962201``:
a reader copies them into ``--set``, and a rounded one is another run; tests/test_tune_text.py.)

Run: pytest tests/test_printed_wording.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import slots_warning, updates_note
from sortedrl.sim.cluster import load_cluster
from sortedrl.tables import cell
from sortedrl.traces.io import write_trace
from tests.conftest import make_trace
from tests.test_tune_clash import TINY

runner = CliRunner()


@pytest.fixture()
def one(tmp_path):
    """A trace of one sample on a 4-slot cluster."""
    trace = tmp_path / "t.jsonl"
    write_trace(make_trace([3]), trace)
    cluster = tmp_path / "tiny.json"
    cluster.write_text(json.dumps(TINY))
    return ["--trace", str(trace), "--cluster", str(cluster)]


def test_trace_synth_of_one_says_one_sample_prompt_and_step(tmp_path):
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "synth", "math-16k", "--prompts", "1", "--group-size", "1",
                            "--steps", "1", "--out", str(out)])
    assert (r.exit_code, r.stdout) == (0, f"wrote {out}: 1 sample, 1 prompt x 1 per step, 1 step\n")


@pytest.mark.parametrize(("samples", "share", "hint"), [
    (1, "1 sample, filling <1%", "2gpu-1seq"), (5, "5 samples, filling <1%", "2gpu-4seq"),
    (6, "6 samples, filling 1%", "2gpu-4seq"), (128, "128 samples, filling 25%", "1gpu")])
def test_a_step_under_1_percent_of_the_slots_is_not_0_percent(samples, share, hint):
    line = slots_warning("t.jsonl", samples, load_cluster("h100-llama3.1-8b-2gpu"), "more --prompts")
    assert line == (f"warning: a step of t.jsonl has {share} of the 512 decode slots of "
                    "h100-llama3.1-8b-2gpu (2 engines x 256): every policy will mostly idle; try "
                    f"--cluster h100-llama3.1-8b-{hint} or more --prompts")


def test_compare_of_one_sample_says_so_in_its_title_and_warning(tmp_path, one):
    r = runner.invoke(app, ["compare", *one, "--policy", "sync", "--policy", "tail_batch",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == "2 policies on t.jsonl (1 sample), cluster tiny"
    assert r.stderr.splitlines() == [
        "warning: a step of t.jsonl has 1 sample, filling 25% of the 4 decode slots of tiny (1 engine x "
        "4): every policy will mostly idle; try a smaller --cluster or a trace with more prompts per step",
        "warning: t.jsonl has 1 step, so no policy gets past its warm-up step to a steady state; use a "
        "trace of several steps"]


def test_a_seed_is_printed_without_separators():
    assert (cell(99_999_999_999, "seed"), cell(99_999_999_999, "updates")) == ("99999999999", "99,999,999,999")


def test_the_updates_note_says_updates_of_each_side():
    rest = "; fewer updates mean larger batches, a different training run, not only a faster one"
    assert updates_note([("trial 4", 4), ("trial 7", 2)]) == (
        "updates differ: trial 7 makes 2 updates, trial 4 makes 4" + rest)
    assert updates_note([("a", 1), ("b", 3)]) == "updates differ: a makes 1 update, b makes 3" + rest


@pytest.mark.parametrize(("sets", "line"), [
    ("sortedrl.minibatches=2", "--set sortedrl.minibatches: unknown parameter for policy sortedrl (known: "
                               "group_prompts, oversubscribe, update_batch, harvest, mode, max_span, filter_groups)"),
    ("sortedrl.oversubscribe=abc", "--set sortedrl.oversubscribe=abc: expected a number"),
])
def test_compare_names_a_bad_knob_with_its_label(tmp_path, one, sets, line):
    out = tmp_path / "o"
    r = runner.invoke(app, ["compare", *one, "--policy", "sortedrl", "--policy", "sync", "--set", sets,
                            "--out", str(out)])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {line}\n")
    assert not out.exists()


def test_forecast_names_a_bad_knob_with_its_label():
    r = runner.invoke(app, ["forecast", "--trace", "math-16k", "--policy", "a=sync", "--set", "a.nope=1"])
    assert (r.exit_code, r.stderr) == (2, "error: --set a.nope: unknown parameter for policy sync (known: "
                                          "rollout_batch, minibatches, filter_groups)\n")


POLICIES = ("(known: sync, sortedrl, partial, tail_batch, async, one_step_off, oracle_sorted; or "
            "module:Class for your own)")
KNOBS = "(known: group_prompts, oversubscribe, update_batch, harvest, mode, max_span, filter_groups)"


@pytest.mark.parametrize(("args", "line"), [
    # a mistyped policy or knob got the list alone; a close one is now named (nothing close: no guess)
    (["simulate", "--policy", "sortd"], f"unknown policy 'sortd': did you mean sortedrl? {POLICIES}"),
    (["simulate", "--policy", "nope"], f"unknown policy 'nope' {POLICIES}"),
    (["simulate", "--policy", "sortedrl", "--set", "mdoe=partial"],
     f"--set mdoe: unknown parameter for policy sortedrl: did you mean mode? {KNOBS}"),
    (["simulate", "--policy", "sortedrl", "--set", "sortedrl.mdoe=partial"],  # (simulate takes POLICY.key too)
     f"--set sortedrl.mdoe: unknown parameter for policy sortedrl: did you mean sortedrl.mode? {KNOBS}"),
    (["simulate", "--policy", "sortedrl", "--set", "mdoe=partial"],
     f"--set mdoe: unknown parameter for policy sortedrl: did you mean mode? {KNOBS}"),
    (["compare", "--policy", "sync", "--policy", "sortedrl", "--set", "sortedrl.mdoe=partial"],
     f"--set sortedrl.mdoe: unknown parameter for policy sortedrl: did you mean sortedrl.mode? {KNOBS}"),
    (["tune", "--policy", "sortedrl", "--param", "sortedrl.mdoe=sync,partial"],
     f"--param 'sortedrl.mdoe=sync,partial': unknown parameter for policy sortedrl: did you mean "
     f"sortedrl.mode? {KNOBS}"),
])
def test_a_mistyped_policy_or_knob_names_the_close_one(tmp_path, args, line):
    out = tmp_path / "o"
    r = runner.invoke(app, [*args, "--synthetic", "logic-8k", "--out", str(out)])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {line}\n")
    assert not out.exists()


def test_the_slots_of_an_engine_whose_kv_cache_holds_fewer_sequences_are_those_it_holds():
    # verl's settings (max_num_seqs 1,024, gpu_mem_util 0.5) on 16 H100s: the KV cache holds 87
    # sequences of 1,820 tokens an engine; 4,096 samples fill them, and were told they filled 25%
    # of 16,384 slots and to try a smaller cluster (sized by max_num_seqs: 16seq engines)
    import dataclasses

    from sortedrl.compare import slots_warning
    from sortedrl.sim.cluster import preset

    cl = dataclasses.replace(preset("h100-qwen3-8b-16gpu"), max_num_seqs=1024, gpu_mem_util=0.5)
    assert cl.kv_admit_budget // 1820 == 87
    assert slots_warning("t", 4096, cl, "more --prompts", False, 1820) is None
    assert slots_warning("t", 128, cl, "more --prompts", False, 1820) == (
        "warning: a step of t has 128 samples, filling 9% of the 1,392 decode slots of h100-qwen3-8b-16gpu "
        "(16 engines x 87: the KV cache holds 87 sequences of the trace's mean 1,820 tokens, under "
        "max_num_seqs 1,024): every policy will mostly idle; try --cluster h100-qwen3-8b-2gpu or more "
        "--prompts")  # (2 engines of 87: 174 slots, which 128 samples fill half of)
    assert "(16 engines x 1024)" in slots_warning("t", 128, cl, "more --prompts")  # (no lengths: the slots)


@pytest.mark.parametrize("given, said", [
    ("--bogus", "No such option: --bogus; see"),  # (it offered --out: click matched the dashes too)
    ("--trac", "No such option: --trac (Possible options: --trace); see"),  # (and --force, --trace-model)
    ("--polcy", "No such option: --polcy (Possible options: --policy); see"),
])
def test_an_unknown_option_is_offered_the_options_named_like_it(given, said):
    from sortedrl.cli_common import close_options

    r = CliRunner().invoke(app, ["simulate", given, "x"])
    assert r.exit_code == 2 and said in r.stderr
    assert close_options("--bogus", ["--out", "--force"]) == []


def test_a_synthetic_trace_at_another_cap_is_the_same_draws_cut_there(tmp_path):
    # a 32k cap (RL runs of reasoning models use 16k to 64k) needed an edited trace model
    import numpy as np

    from sortedrl.traces.synth import synthesize

    base = synthesize("math-16k", prompts=16, steps=2, seed=4)
    wide = synthesize("math-16k", prompts=16, steps=2, seed=4, max_response_len=32768)
    assert (base.meta.max_response_len, wide.meta.max_response_len) == (16384, 32768)
    below = base.response_len < 16384
    assert np.array_equal(wide.response_len[below], base.response_len[below])
    assert (wide.response_len[~below] >= 16384).all() and (wide.response_len <= 32768).all()
    assert wide.meta.source.endswith(" max_response_len=32768") and "max_response_len" not in base.meta.source
    out = tmp_path / "t.jsonl"
    r = CliRunner().invoke(app, ["trace", "synth", "agentic-retool", "--max-response-len", "0", "--out", str(out)])
    assert (r.exit_code, r.stderr, out.exists()) == (2, "error: --max-response-len must be >= 1, got 0\n", False)
