"""A trace whose steps hold different numbers of prompts (a real dump after dynamic-sampling
filtering: steps of 64, 60, 64, 64). Every policy takes batches of the first step's prompts, so
a batch then holds prompts of two steps: that was silent, and the steps were counted as
``num_groups // prompts_per_step`` (steps of 64, 8 and 32 prompts printed "has 1 step"). Now
the steps are the trace's distinct steps, and a warning names the sizes and what to do.

Run: pytest tests/test_unequal_steps.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import fit_warnings
from sortedrl.traces.io import write_trace
from tests.conftest import make_trace, tiny_cluster
from tests.test_tune_clash import TINY  # (a 4-slot cluster file with round-number costs)

runner = CliRunner()


def _trace(sizes: list[int], group_size: int = 1):
    """Steps 0, 1, ... of ``sizes`` prompts each, ``group_size`` samples a prompt."""
    steps = [s for s, n in enumerate(sizes) for _ in range(n * group_size)]
    lengths = [3 + i % 5 for i in range(len(steps))]
    return make_trace(lengths, group_size=group_size, steps=steps, max_len=10)


def _warning(name: str, low: int, high: int, first: int) -> str:
    return (f"warning: the steps of {name} hold {low} to {high} prompts, but every policy takes batches "
            f"of the first step's {first}, so a batch can hold prompts of two steps (a batch knob sets "
            "another fixed size): use a trace whose steps hold equal numbers of prompts to keep them apart")


def test_the_steps_are_the_distinct_steps_not_the_groups_over_the_first_step():
    trace = _trace([64, 8, 32], group_size=2)
    assert (trace.prompts_per_step, trace.num_groups, trace.num_steps) == (64, 104, 3)
    assert trace.step_prompts().tolist() == [64, 8, 32]
    plain = make_trace([3, 4, 5])  # (no step column: one step of every group)
    assert (plain.num_steps, plain.step_prompts().tolist()) == (1, [3])


def test_unequal_steps_warn_and_are_not_called_one_step():
    # was: "has 1 step" (104 groups // 64), and nothing about the batches crossing steps
    assert fit_warnings(_trace([4, 1, 2]), tiny_cluster(), False) == [_warning("test", 1, 4, 4)]


def test_equal_steps_say_nothing_and_one_step_still_warns():
    assert fit_warnings(_trace([4, 4, 4]), tiny_cluster(), False) == []
    assert fit_warnings(_trace([4]), tiny_cluster(), False) == [
        "warning: test has 1 step, so no policy gets past its warm-up step to a steady state; use a "
        "trace of several steps"]


@pytest.fixture()
def filtered(tmp_path):
    """A filtered dump's shape, small: steps of 4, 3, 4 and 4 prompts, on a 4-slot cluster."""
    trace = tmp_path / "f.jsonl"
    write_trace(_trace([4, 3, 4, 4]), trace)
    cluster = tmp_path / "tiny.json"
    cluster.write_text(json.dumps(TINY))
    return ["--trace", str(trace), "--cluster", str(cluster)]


@pytest.mark.parametrize("command", [
    ["simulate", "--policy", "sync"],
    ["compare", "--policy", "sync", "--policy", "tail_batch"],
    ["tune", "--policy", "sync", "--param", "sync.minibatches=1", "--budget", "1"],
])
def test_simulate_compare_and_tune_warn_of_unequal_steps(tmp_path, filtered, command):
    r = runner.invoke(app, [*command, *filtered, "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert r.stderr == _warning("f.jsonl", 3, 4, 4) + "\n"


def test_tune_records_the_distinct_steps(tmp_path, filtered):
    out = tmp_path / "o"
    r = runner.invoke(app, ["tune", "--policy", "sync", "--budget", "1", *filtered, "--out", str(out)])
    assert r.exit_code == 0, r.output
    shape = json.loads((out / "tune.json").read_text())["trace_shape"]
    assert shape == {"group_size": 1, "prompts_per_step": 4, "steps": 4, "max_response_len": 10}
