"""A re-run into a run directory: the knobs' order changes nothing, and a refusal names what
differs (an audit of commands chained together).

- `compare --set part.mode=partial --set on.max_span=3 --out CS` then the same with the two
  `--set` swapped was refused as "a run with other options", though it writes the same files byte
  for byte; so was `tune --param` (which searches in the order of the keys). The knobs match in
  any order now, unless one is given twice (the last wins, so the order counts).
  `--policy` keeps its order: compare lists its policies so, and tune its best per policy
  (`tune.json` differs), so swapped policies are still another run, said so.
- The refusal named no option: it says which now, the previous value then the new one.
- `simulate --trace nonexist.jsonl --out A`, A holding another run, reported the --out conflict;
  the missing trace is what is wrong, and is said first.
- `simulate --synthetic math16k --out A` (a typo of math-16k), A holding another run, was "a run
  with other options (trace: --synthetic math-16k then --trace math16k)": the unknown preset,
  and any bad shape option, is said first now, by simulate, compare and tune alike; and the
  refusal names this command's trace by the option given (--trace-model, not --trace).

Run: pytest tests/test_rerun_options.py
"""

from __future__ import annotations

import pytest
from cli_helpers import fittable_trace
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.run_marker import differences

runner = CliRunner()
BASE = ["--synthetic", "math-16k", "--prompts", "4", "--group-size", "2", "--steps", "2",
        "--cluster", "h100-llama3.1-8b-2gpu"]


def run(tmp_path, *args: str):
    return runner.invoke(app, [*args, "--out", str(tmp_path / "run")])


def refused(tmp_path, command: str, what: str) -> str:
    return (f"error: {tmp_path / 'run'} holds a `sortedrl {command}` run with other options ({what}); "
            "give another directory to keep both, or --force to replace it\n")


def test_compare_sets_in_another_order_are_the_same_run(tmp_path):
    args = ["compare", *BASE, "--policy", "part=sortedrl", "--policy", "on=sortedrl"]
    one, two = ["--set", "part.mode=partial"], ["--set", "on.max_span=3"]
    assert run(tmp_path, *args, *one, *two).exit_code == 0
    first = (tmp_path / "run" / "compare.json").read_bytes()
    r = run(tmp_path, *args, *two, *one)
    assert r.exit_code == 0, r.output
    assert f"note: replacing the previous `sortedrl compare` run in {tmp_path / 'run'}\n" in r.stderr
    assert (tmp_path / "run" / "compare.json").read_bytes() == first
    # the policies swapped: compare.json lists them in the other order, so another run
    r = run(tmp_path, *args[:-4], "--policy", "on=sortedrl", "--policy", "part=sortedrl", *one, *two)
    assert (r.exit_code, r.stderr) == (2, refused(
        tmp_path, "compare", "--policy: part=sortedrl on=sortedrl then on=sortedrl part=sortedrl"))


def test_a_knob_given_twice_keeps_its_order(tmp_path):
    args = ["simulate", *BASE, "--policy", "sortedrl"]
    assert run(tmp_path, *args, "--set", "max_span=2", "--set", "max_span=3").exit_code == 0
    r = run(tmp_path, *args, "--set", "max_span=3", "--set", "max_span=2")
    assert (r.exit_code, r.stderr) == (2, refused(
        tmp_path, "simulate", "--set: max_span=2 max_span=3 then max_span=3 max_span=2"))


def test_tune_params_in_another_order_are_the_same_run_and_policies_are_not(tmp_path):
    args = ["tune", *BASE, "--budget", "2", "--param", "sortedrl.max_span=1,2",
            "--param", "sortedrl.oversubscribe=1.2,2"]
    assert run(tmp_path, *args, "--policy", "sync", "--policy", "sortedrl").exit_code == 0
    first = (tmp_path / "run" / "tune.json").read_bytes()
    swapped = [*args[:-4], *args[-2:], *args[-4:-2]]
    r = run(tmp_path, *swapped, "--policy", "sync", "--policy", "sortedrl")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "run" / "tune.json").read_bytes() == first
    r = run(tmp_path, *args, "--policy", "sortedrl", "--policy", "sync")
    assert (r.exit_code, r.stderr) == (2, refused(tmp_path, "tune", "--policy: sync sortedrl then sortedrl sync"))


def test_the_refusal_names_each_option_that_differs(tmp_path):
    args = ["simulate", *BASE, "--policy", "sync"]
    assert run(tmp_path, *args, "--seed", "1").exit_code == 0
    r = run(tmp_path, *args, "--seed", "2", "--regen", "same")
    assert (r.exit_code, r.stderr) == (2, refused(tmp_path, "simulate", "--regen: resample then same; --seed: 1 then 2"))


def test_a_missing_trace_is_said_before_the_out_it_would_replace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(tmp_path, "simulate", *BASE, "--policy", "sync").exit_code == 0
    for command in (["simulate", "--policy", "partial"], ["compare", "--policy", "sync"],
                    ["tune", "--policy", "sync"]):
        r = run(tmp_path, *command, "--trace", "nonexist.jsonl", "--cluster", "h100-llama3.1-8b-2gpu")
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", "error: nonexist.jsonl: no such file\n")


def test_the_refusal_names_the_option_as_given_and_not_one_without_effect(tmp_path, monkeypatch):
    """``--synthetic logic-8k`` then ``--synthetic math-16k`` was "(--trace: logic-8k then
    math-16k)"; a trace file's run after a synthetic one named ``--steps: 2 then 4``, the
    default of an option a trace file refuses (it has no effect on it), and then "--trace:
    math-16k then t.jsonl", as if the first had been a --trace too."""
    monkeypatch.chdir(tmp_path)
    args = ["simulate", "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]
    assert run(tmp_path, *args, *BASE[:8]).exit_code == 0
    r = run(tmp_path, *args, "--synthetic", "logic-8k", *BASE[2:8])
    assert (r.exit_code, r.stderr) == (2, refused(tmp_path, "simulate", "--synthetic: math-16k then logic-8k"))
    from sortedrl.traces import synthesize, write_trace

    write_trace(synthesize("math-16k", prompts=4, group_size=2, steps=2, seed=0), tmp_path / "t.jsonl")
    r = run(tmp_path, *args, "--trace", "t.jsonl")
    assert (r.exit_code, r.stderr) == (2, refused(tmp_path, "simulate", f"trace: --synthetic math-16k then --trace {tmp_path / 't.jsonl'}"))


PRESETS = "logic-8k, math-16k, agentic-retool, agentic-search, agentic-swe"


@pytest.mark.parametrize("command", [["simulate", "--policy", "partial"], ["compare", "--policy", "sync"],
                                     ["tune", "--policy", "sync"]])
def test_an_unknown_preset_or_shape_is_said_before_the_out_it_would_replace(tmp_path, command):
    assert run(tmp_path, "simulate", *BASE, "--policy", "sync").exit_code == 0
    cluster = ["--cluster", "h100-llama3.1-8b-2gpu"]
    r = run(tmp_path, *command, "--synthetic", "math16k", *cluster)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: unknown preset 'math16k'; known presets: {PRESETS}\n")
    r = run(tmp_path, *command, "--synthetic", "math-16k", "--prompts", "0", *cluster)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", "error: --prompts must be >= 1, got 0\n")
    r = run(tmp_path, *command, *cluster)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", "error: give exactly one of --trace FILE or --synthetic PRESET\n")


def test_the_refusal_names_a_trace_model_as_given(tmp_path):
    assert run(tmp_path, "simulate", *BASE, "--policy", "sync").exit_code == 0
    model = tmp_path / "m.json"
    assert runner.invoke(app, ["trace", "fit", str(fittable_trace(tmp_path / "t.jsonl")), "--out", str(model)]).exit_code == 0
    r = run(tmp_path, "simulate", "--trace-model", str(model), "--policy", "sync", *BASE[2:4], *BASE[6:])
    assert (r.exit_code, r.stderr) == (2, refused(tmp_path, "simulate", f"trace: --synthetic math-16k then --trace-model {model}"))


def test_differences_name_this_commands_trace_by_its_option():
    previous = {"command": "simulate", "source": "math-16k", "steps": 4}
    assert differences(previous, {**previous, "source": "math16k"}, {"source": "--synthetic"}) == (
        "--synthetic: math-16k then math16k")
    assert differences(previous, {**previous, "source": "/t/m.json"}, {"source": "--trace-model"}) == (
        "trace: --synthetic math-16k then --trace-model /t/m.json")
