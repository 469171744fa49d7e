"""The built-in policies' knob checks name the one offending knob and the value given (they named
two or three knobs at once: ``rollout_batch and max_span must be >= 0``), and refuse a knob that
another makes a no-op: ``partial keep_partial=false max_span=2`` was accepted and did nothing.
On the CLI each is one ``error:`` line, exit 2, no traceback, nothing written. ``sortedrl``'s
``max_span`` in ``on_policy`` mode is also a no-op, but is accepted (its default is 2, and one
knob set serves both modes): this checks that it is indeed one.

Run: pytest tests/test_policy_knob_errors.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.policies.partial import PartialParams
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.traces.io import BUNDLED, read_trace
from tests.conftest import make_trace, tiny_cluster

LOGIC = str(Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data" / "logic-8k.jsonl")
NO_EFFECT = ("max_span=2 has no effect with keep_partial=false (no partial response is kept to "
             "age); drop one")


def one_error(tmp_path, *args: str) -> str:
    """The one error line of a command writing into tmp_path/out (exit 2, nothing on stdout,
    no traceback, nothing written)."""
    out = tmp_path / "out"
    r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert not out.exists()
    return r.stderr.rstrip("\n")


@pytest.mark.parametrize("policy, sets, message", [
    ("partial", ["rollout_batch=-1"], "rollout_batch must be >= 0, got -1"),
    ("partial", ["max_span=-3"], "max_span must be >= 0, got -3"),
    ("async", ["eta=-1"], "eta must be >= 0, got -1"),
    ("async", ["batch=-8"], "batch must be >= 0, got -8"),
    ("async", ["max_concurrent=-2"], "max_concurrent must be >= 0, got -2"),
    ("async", ["max_concurrent=-2", "eta=-1"], "eta must be >= 0, got -1"),  # the first, as declared
    ("oracle_sorted", ["rollout_batch=-4"], "rollout_batch must be >= 0, got -4"),
    ("oracle_sorted", ["update_batch=-5"], "update_batch must be >= 0, got -5"),
    ("sortedrl", ["group_prompts=-6"], "group_prompts must be >= 0, got -6"),
    ("sortedrl", ["update_batch=-7"], "update_batch must be >= 0, got -7"),
    ("sortedrl", ["max_span=-1"], "max_span must be >= 0, got -1"),
    ("tail_batch", ["rollout_batch=-9"], "rollout_batch must be >= 0, got -9"),
    ("tail_batch", ["responses=-1"], "responses must be >= 0, got -1"),
    ("partial", ["keep_partial=false", "max_span=2"], NO_EFFECT),
    ("partial", ["max_span=2", "keep_partial=false"], NO_EFFECT),  # (either order)
    ("partial", ["keep_partial=false", "max_span=-1"], "max_span must be >= 0, got -1"),
])
def test_simulate_names_the_one_knob_and_its_value(tmp_path, policy, sets, message):
    args = [a for s in sets for a in ("--set", s)]
    line = one_error(tmp_path, "simulate", "--trace", LOGIC, "--policy", policy, *args)
    assert line == f"error: --set: policy {policy}: {message}"


def test_compare_refuses_max_span_without_keep_partial(tmp_path):
    line = one_error(tmp_path, "compare", "--trace", LOGIC, "--policy", "sync", "--policy",
                     "p=partial", "--set", "p.keep_partial=false", "--set", "p.max_span=2")
    assert line == f"error: --set: policy partial: {NO_EFFECT}"


def test_partial_params_accept_max_span_only_with_keep_partial():
    with pytest.raises(ValueError) as e:
        PartialParams(keep_partial=False, max_span=1)
    assert str(e.value) == ("max_span=1 has no effect with keep_partial=false (no partial "
                            "response is kept to age); drop one")
    assert PartialParams(keep_partial=False, max_span=0).max_span == 0
    assert PartialParams(keep_partial=True, max_span=2).max_span == 2


def test_sortedrl_on_policy_accepts_max_span_and_it_changes_nothing():
    trace = make_trace([3, 40, 7, 25, 12, 60, 5, 30], group_size=2)
    cluster = tiny_cluster(engines=2, max_num_seqs=2)

    def run(sets):
        r = simulate(trace, make_policy("sortedrl", sets, trace), cluster)
        s = dict(r.summary)
        s.pop("params")
        return s, r.timeline.spans, r.timeline.trains

    base = ["mode=on_policy", "update_batch=2", "group_prompts=2"]
    runs = [run(base + [f"max_span={m}"]) for m in (0, 1, 2, 5)]
    assert all(r == runs[0] for r in runs[1:])
    assert runs[0][0]["staleness_max"] == 0 and runs[0][0]["samples_trained"] == 8


@pytest.mark.parametrize("policy, knob, value, unit, total", [
    ("sync", "rollout_batch", 257, "prompts", 256), ("partial", "rollout_batch", 1000, "prompts", 256),
    ("one_step_off", "rollout_batch", 257, "prompts", 256), ("tail_batch", "rollout_batch", 300, "prompts", 256),
    ("async", "batch", 2049, "samples", 2048), ("sortedrl", "update_batch", 100000, "samples", 2048),
    ("oracle_sorted", "update_batch", 4096, "samples", 2048)])
def test_a_batch_beyond_the_trace_is_refused_naming_the_knob(policy, knob, value, unit, total):
    """A batch knob above all the trace holds (math-16k: 256 prompts x 8) would train every
    sample in one update: refused, where it ran without a word; the trace's size itself runs."""
    trace = read_trace(BUNDLED / "math-16k.jsonl")
    with pytest.raises(ConfigError) as e:
        make_policy(policy, [f"{knob}={value}"], trace)
    assert str(e.value) == (f"policy {policy}: {knob} {value:,} is more {unit} than the trace holds "
                            f"({total:,}), so one update would train all of them")
    assert getattr(make_policy(policy, [f"{knob}={total}"], trace).params, knob) == total
