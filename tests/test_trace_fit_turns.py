"""`trace fit` on a multi-turn (agentic) trace: the model carries the turns (tool calls per token,
each call's seconds and tool-output tokens), draws runs with the trace's tool load, round-trips,
and refuses bad turn fields; a single-turn trace fits exactly the model it always did."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces import read_trace, write_trace
from sortedrl.traces.fit import fit_trace
from sortedrl.traces.io import resolve_bundled
from sortedrl.traces.model import TraceModel, draw_lengths, draw_tool_load, generate, load_model
from sortedrl.traces.model_turns import TURN_FIELDS, draw_turns
from sortedrl.traces.synth import synthesize

AGENTIC = ("agentic-retool", "agentic-search", "agentic-swe")
TURNS = {"calls_per_token": 0.004, "max_turns": 6, "tool_median_s": 1.5, "tool_sigma": 0.8,
         "tool_max_s": 30.0, "tool_zero_share": 0.1, "obs_median": 40.0, "obs_sigma": 0.5,
         "obs_max": 100, "obs_zero_share": 0.2}
BASE = TraceModel(max_response_len=8192, group_size=8, prompts_per_step=64, mu0=6.5,
                  sigma_between=0.5, sigma_within=0.3, drift=0.01, runaway_share=0.02,
                  prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=2048,
                  pass_alpha=0.8, pass_beta=1.2, source="known", **TURNS)
NO_TURNS = dataclasses.replace(BASE, **dict.fromkeys(TURN_FIELDS))
# sha256 of the model JSON that main (77b7b62, before turns) fits on the bundled traces
MAIN_JSON_SHA256 = {
    "math-16k": "ba4ba9be95b931030b6e59e255c1dc71a4a744d86089f7dc9fcf7db213c03ab4",
    "logic-8k": "0fd6365cdbb6513663ae14b5f74b73bb2d8f628e06736702654c2feadb983a6f",
}


def run(args):
    return CliRunner().invoke(app, args)


def per_row(trace) -> tuple[np.ndarray, np.ndarray]:
    """Each trajectory's tool calls and tool seconds."""
    return (np.diff(trace.turn_offsets) - 1,
            np.add.reduceat(trace.turn_tool_s, trace.turn_offsets[:-1]))


def standard_error(values: np.ndarray, n: int) -> float:
    """Standard error of the mean per trajectory, from group totals (the groups are independent;
    a group's trajectories share a prompt, so they are not)."""
    totals = values.reshape(-1, n).sum(axis=1)
    return float(totals.std(ddof=1) / math.sqrt(totals.size) / n)


def check_turn_invariants(trace, model: TraceModel) -> None:
    offsets, gen = trace.turn_offsets, trace.turn_gen
    assert np.array_equal(np.add.reduceat(gen, offsets[:-1]), trace.response_len)
    assert gen.min() >= 1
    calls = np.diff(offsets) - 1
    assert calls.max() <= model.max_turns - 1
    last = offsets[1:] - 1
    assert not trace.turn_tool_s[last].any() and not trace.turn_tool_tokens[last].any()
    assert trace.turn_tool_s.min() >= 0 and trace.turn_tool_s.max() <= model.tool_max_s
    assert trace.turn_tool_tokens.min() >= 0 and trace.turn_tool_tokens.max() <= model.obs_max


@pytest.mark.parametrize("name", sorted(MAIN_JSON_SHA256))
def test_a_single_turn_trace_fits_the_model_it_always_did(name) -> None:
    path = resolve_bundled(Path(name))
    model = fit_trace(read_trace(path), source=path.name, where=str(path))
    body = model.to_json()
    assert hashlib.sha256(body.encode()).hexdigest() == MAIN_JSON_SHA256[name]
    assert not set(TURN_FIELDS) & set(json.loads(body))
    assert all(getattr(model, f) is None for f in TURN_FIELDS)


def test_a_trace_whose_turns_hold_no_call_fits_a_model_without_turns() -> None:
    plain = generate(NO_TURNS, steps=2, seed=4)
    rows = len(plain)
    one_turn = dataclasses.replace(plain, turn_offsets=np.arange(rows + 1),
                                   turn_gen=plain.response_len.copy(),
                                   turn_tool_s=np.zeros(rows), turn_tool_tokens=np.zeros(rows, np.int64))
    assert fit_trace(one_turn, source="t").to_json() == fit_trace(plain, source="t").to_json()


def test_turns_are_drawn_after_everything_else() -> None:
    """Lengths, prompt lengths and rewards are those of the model without turns, for a seed;
    draw_lengths and draw_tool_load are generate's values, and the draw is deterministic."""
    with_turns = generate(BASE, steps=3, seed=7, prompts=40)
    without = generate(NO_TURNS, steps=3, seed=7, prompts=40)
    assert with_turns.has_turns and not without.has_turns
    assert dataclasses.replace(with_turns, **dict.fromkeys(
        ("turn_offsets", "turn_gen", "turn_tool_s", "turn_tool_tokens"))) == without
    assert generate(BASE, steps=3, seed=7, prompts=40) == with_turns
    assert np.array_equal(draw_lengths(BASE, 3, seed=7, prompts=40), with_turns.response_len)
    calls, seconds, tokens = draw_tool_load(BASE, 3, seed=7, prompts=40)
    call = np.ones(with_turns.turn_gen.size, dtype=bool)
    call[with_turns.turn_offsets[1:] - 1] = False
    assert np.array_equal(calls, np.diff(with_turns.turn_offsets) - 1)
    assert np.array_equal(seconds, with_turns.turn_tool_s[call])
    assert np.array_equal(tokens, with_turns.turn_tool_tokens[call])
    check_turn_invariants(with_turns, BASE)


def test_a_drawn_trace_with_turns_is_a_valid_trace(tmp_path) -> None:
    trace = generate(BASE, steps=2, seed=1, prompts=16)
    write_trace(trace, tmp_path / "t.jsonl")  # read back through every check of turns.py
    assert read_trace(tmp_path / "t.jsonl") == trace


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=50),
       rate=st.floats(0.0, 1.0), max_turns=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_the_split_into_turns_keeps_every_length(lengths, rate, max_turns, seed) -> None:
    model = dataclasses.replace(BASE, calls_per_token=rate, max_turns=max_turns)
    response = np.array(lengths, dtype=np.int64)
    turns = draw_turns(model, np.random.default_rng(seed), response)
    offsets, gen = turns["turn_offsets"], turns["turn_gen"]
    assert np.array_equal(np.add.reduceat(gen, offsets[:-1]), response) and gen.min() >= 1
    calls = np.diff(offsets) - 1
    assert (calls <= np.minimum(max_turns - 1, response - 1)).all()


@pytest.mark.parametrize("preset", AGENTIC)
def test_a_model_of_an_agentic_trace_draws_its_tool_load(preset) -> None:
    """The model's draw (10 times the trace's prompts) has the trace's mean tool calls and tool
    seconds per trajectory within 4 standard errors of the trace's mean. Why that bound: the
    calls per token are solved so that the model's mean calls equal the trace's (up to the noise
    of that draw, 20 times the trace), and the call seconds' lognormal is fitted to the trace's
    calls, so the model's mean differs from the trace's by the fit's error, about one standard
    error of the trace's own mean (measured over 6 seeds a preset: at most 1.9), plus the noise of
    a draw 10 times larger (a third of that); the law of large numbers makes both shrink as one
    over the square root of the trajectories."""
    source = synthesize(preset, steps=2, seed=0)
    n = source.meta.group_size
    model = fit_trace(source)
    assert model.max_turns == int(np.diff(source.turn_offsets).max())
    calls, seconds = per_row(source)
    assert model.fit["calls_data"] == pytest.approx(calls.mean(), rel=1e-12)
    assert model.fit["tool_s_data"] == pytest.approx(seconds.mean(), rel=1e-12)
    drawn = generate(model, steps=2, seed=1, prompts=10 * model.prompts_per_step)
    check_turn_invariants(drawn, model)
    drawn_calls, drawn_seconds = per_row(drawn)
    assert abs(drawn_calls.mean() - calls.mean()) <= 4 * standard_error(calls, n)
    assert abs(drawn_seconds.mean() - seconds.mean()) <= 4 * standard_error(seconds, n)
    # the fit's own comparison says the same
    assert abs(model.fit["calls_model"] - calls.mean()) <= 4 * standard_error(calls, n)
    assert abs(model.fit["tool_s_model"] - seconds.mean()) <= 4 * standard_error(seconds, n)


def test_zero_second_calls_and_empty_outputs_are_kept_as_shares() -> None:
    source = synthesize("agentic-retool", steps=1, seed=2)
    call = np.ones(source.turn_gen.size, dtype=bool)
    call[source.turn_offsets[1:] - 1] = False
    index = np.flatnonzero(call)
    tool_s, tokens = source.turn_tool_s.copy(), source.turn_tool_tokens.copy()
    tool_s[index[::3]] = 0.0  # a third of the calls take no time
    tokens[index[::4]] = 0  # a quarter output nothing
    model = fit_trace(dataclasses.replace(source, turn_tool_s=tool_s, turn_tool_tokens=tokens))
    assert model.tool_zero_share == pytest.approx(index[::3].size / index.size, rel=1e-12)
    assert model.obs_zero_share == pytest.approx(index[::4].size / index.size, rel=1e-12)
    drawn = generate(model, steps=4, seed=0)
    calls = np.ones(drawn.turn_gen.size, dtype=bool)
    calls[drawn.turn_offsets[1:] - 1] = False
    count = int(calls.sum())
    for share, values in ((model.tool_zero_share, drawn.turn_tool_s[calls]),
                          (model.obs_zero_share, drawn.turn_tool_tokens[calls])):
        # binomial: 5 standard deviations of the share of zeros among the drawn calls
        assert abs(np.mean(values == 0) - share) <= 5 * math.sqrt(share * (1 - share) / count)


def simulated(tmp_path, *source) -> dict:
    cluster = tmp_path / "pool4.json"
    cluster.write_text('{"preset": "h100-llama3.1-8b", "tool_pool": 4}')
    r = run(["simulate", *source, "--policy", "sync", "--cluster", str(cluster), "--json",
             "--out", str(tmp_path / "run"), "--force"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_fitted_model_of_retool_forecasts_its_tool_time(tmp_path) -> None:
    """The reproduction: with 4 sandboxes the run is tool-bound, so its wall follows the tool
    seconds. Before turns were fitted, the model's run had no tool time (no tool_s in its summary,
    the figure of a run without turns; wall 0.15 h against 0.69 h). Now the model's 2-step run (2,048 trajectories, as the trace) has the
    trace's tool seconds and wall within 4 * sqrt(2) standard errors of the trace's total tool
    seconds (two independent samples of the same size; measured: +5.3%)."""
    source = synthesize("agentic-retool", steps=2, seed=0)
    write_trace(source, tmp_path / "retool.jsonl")
    model = fit_trace(source, source="retool.jsonl")
    (tmp_path / "m.json").write_text(model.to_json())
    (tmp_path / "before.json").write_text(dataclasses.replace(
        model, **dict.fromkeys(TURN_FIELDS)).to_json())
    trace_run = simulated(tmp_path, "--trace", str(tmp_path / "retool.jsonl"))
    model_run = simulated(tmp_path, "--trace-model", str(tmp_path / "m.json"), "--steps", "2")
    before = simulated(tmp_path, "--trace-model", str(tmp_path / "before.json"), "--steps", "2")
    _, seconds = per_row(source)
    tolerance = 4 * math.sqrt(2) * standard_error(seconds, source.meta.group_size) / seconds.mean()
    assert 0.05 < tolerance < 0.25  # (about 17% at this size)
    assert "tool_s" not in before and before["makespan_s"] < 0.3 * trace_run["makespan_s"]
    assert abs(model_run["tool_s"] / trace_run["tool_s"] - 1) <= tolerance
    assert abs(model_run["makespan_s"] / trace_run["makespan_s"] - 1) <= tolerance


def test_trace_fit_prints_the_turn_fields_with_units_and_the_tool_load(tmp_path) -> None:
    write_trace(synthesize("agentic-search", steps=1, seed=0), tmp_path / "s.jsonl")
    r = run(["trace", "fit", str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    for name, unit in (("calls_per_token", "calls per token"), ("tool_median_s", "s"),
                       ("obs_sigma", "log-tokens"), ("mu0", "log-tokens"),
                       ("drift", "log-tokens per step"), ("obs_max", "tok"), ("pass_alpha", "Beta shape")):
        assert any(line.split("│")[1:2] == [f" {name} ".ljust(len(line.split("│")[1]))]
                   and line.split("│")[3].strip() == unit for line in lines if "│" in line), name
    row = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]]
           for line in lines if line.count("│") == 5}
    assert row["truncated share"][2] == "share of samples" and row["p50"][2] == "tok"
    assert row["tool calls"][2] == "calls per trajectory" and row["tool time"][2] == "s per trajectory"
    assert row["tool output"][2] == "tok per trajectory" and row["mean"][2] == "tok"
    fit = load_model(tmp_path / "m.json").fit
    assert row["tool calls"][:2] == [f"{fit['calls_data']:,.3f}", f"{fit['calls_model']:,.3f}"]


def test_a_fitted_model_with_turns_round_trips(tmp_path) -> None:
    path = tmp_path / "m.json"
    path.write_text(BASE.to_json())
    assert load_model(path) == BASE
    fitted = fit_trace(synthesize("agentic-swe", steps=1, seed=0), source="swe")
    path.write_text(fitted.to_json())
    again = load_model(path)
    assert again == fitted and again.fit == fitted.fit and again.to_json() == fitted.to_json()


@pytest.mark.parametrize("field, value, message", [
    ("calls_per_token", -0.1, "field 'calls_per_token': -0.1 is outside 0 to 1"),
    ("calls_per_token", 2, "field 'calls_per_token': 2 is outside 0 to 1"),
    ("calls_per_token", "x", "field 'calls_per_token': 'x' is not a finite number"),
    ("tool_median_s", 10**400, "field 'tool_median_s': 1" + "0" * 400 + " is not a finite"),
    ("tool_median_s", 0, "field 'tool_median_s': 0 must be above 0"),
    ("tool_sigma", -1, "field 'tool_sigma': -1 is outside 0 to 50"),
    ("tool_sigma", 51, "field 'tool_sigma': 51 is outside 0 to 50"),
    ("tool_max_s", -1, "field 'tool_max_s': -1 is outside 0 to 1e+09 s"),
    ("tool_max_s", 2e9, "field 'tool_max_s': 2e+09 is outside 0 to 1e+09 s"),
    ("tool_zero_share", 1.5, "field 'tool_zero_share': 1.5 is outside 0 to 1"),
    ("obs_median", -3, "field 'obs_median': -3 must be above 0"),
    ("obs_sigma", 1e3, "field 'obs_sigma': 1000 is outside 0 to 50"),
    ("obs_zero_share", -0.5, "field 'obs_zero_share': -0.5 is outside 0 to 1"),
    ("max_turns", 0, "field 'max_turns': 0 must be a positive integer"),
    ("max_turns", 2.5, "field 'max_turns': 2.5 must be a positive integer"),
    ("max_turns", True, "field 'max_turns': True must be a positive integer"),
    ("max_turns", 2**40, "field 'max_turns': 1,099,511,627,776 must be below 2**31"),
    ("obs_max", -1, "field 'obs_max': -1 must be a non-negative integer"),
    ("obs_max", None, "field 'obs_max' is missing (a model with turns needs all of "
                      "calls_per_token, max_turns,"),
    ("tool_sigma", "drop", "field 'tool_sigma' is missing"),
])
def test_a_bad_turn_field_is_one_error_line(tmp_path, field, value, message) -> None:
    body = json.loads(BASE.to_json())
    if value == "drop":
        del body[field]
    else:
        body[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(body))
    with pytest.raises(TraceError, match="^" + str(bad).replace("\\", "\\\\") + ": "):
        load_model(bad)
    r = run(["simulate", "--trace-model", str(bad), "--steps", "2", "--policy", "sync",
             "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"error: {bad}: ") and message in r.output, r.output
    assert not (tmp_path / "run").exists()


def test_only_some_turn_fields_name_the_first_missing(tmp_path) -> None:
    body = {k: v for k, v in json.loads(BASE.to_json()).items()
            if k not in TURN_FIELDS or k == "tool_sigma"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(body))
    with pytest.raises(TraceError, match="field 'calls_per_token' is missing"):
        load_model(bad)


def test_the_goodness_figures_are_those_of_a_generated_trace() -> None:
    from sortedrl.traces.fit import model_prompts

    source = synthesize("agentic-search", steps=2, seed=3)
    model = fit_trace(source)
    steps, prompts = model_prompts(source)  # (no cut: 10,240 calls drawn)
    drawn = generate(model, steps, seed=0, prompts=prompts)
    calls, seconds = per_row(drawn)
    assert model.fit["tool_model_samples"] == len(drawn) == model.fit["model_samples"]
    assert model.fit["calls_model"] == calls.mean()
    assert model.fit["tool_s_model"] == pytest.approx(seconds.mean(), rel=1e-12)
    assert model.fit["tool_tokens_model"] == drawn.turn_tool_tokens.sum() / len(drawn)
