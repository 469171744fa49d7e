"""`trace fit`: the fitted length model recovers known parameters, round-trips as JSON, drives
N-step runs through --trace-model, reads drift from a W&B export, and refuses bad models."""

from __future__ import annotations

import dataclasses
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
from sortedrl.traces import write_trace
from sortedrl.traces.fit import drift_from_wandb, fit_trace, ks_statistic
from sortedrl.traces.model import TraceModel, generate, load_model

BASE = TraceModel(max_response_len=8192, group_size=8, prompts_per_step=256, mu0=6.5,
                  sigma_between=0.5, sigma_within=0.3, drift=0.01, runaway_share=0.02,
                  prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=2048,
                  pass_alpha=0.8, pass_beta=1.2, source="known")


@settings(max_examples=25, deadline=None)
@given(mu0=st.floats(5.0, 7.5), sigma_between=st.floats(0.2, 0.8),
       sigma_within=st.floats(0.1, 0.5), drift=st.floats(-0.02, 0.03),
       runaway=st.floats(0.0, 0.05), mean_pass=st.floats(0.2, 0.8),
       concentration=st.floats(1.0, 6.0), seed=st.integers(0, 2**16))
def test_fit_recovers_known_parameters(mu0, sigma_between, sigma_within, drift, runaway,
                                       mean_pass, concentration, seed) -> None:
    """8 steps x 256 prompts x 8 samples; each tolerance is about 4.5 standard errors of its
    estimator at this size (the group mean's variance is sigma_between**2 + sigma_within**2 / 8)."""
    known = dataclasses.replace(BASE, mu0=mu0, sigma_between=sigma_between,
                                sigma_within=sigma_within, drift=drift, runaway_share=runaway,
                                pass_alpha=mean_pass * concentration,
                                pass_beta=(1 - mean_pass) * concentration)
    fitted = fit_trace(generate(known, steps=8, seed=seed))
    group_var = sigma_between**2 + sigma_within**2 / 8
    steps = np.arange(8)
    spread = 256 * ((steps - steps.mean()) ** 2).sum()  # sum of squared step deviations
    se_drift = np.sqrt(group_var / spread)
    se_mu0 = np.sqrt(group_var / 2048 + steps.mean() ** 2 * se_drift**2)
    assert abs(fitted.mu0 - mu0) < 4.5 * se_mu0 + 0.01  # + rounding lengths to whole tokens
    assert abs(fitted.drift - drift) < 4.5 * se_drift
    se_between = group_var * np.sqrt(2 / 2048) / (2 * sigma_between)  # delta method
    assert abs(fitted.sigma_between - sigma_between) < 4.5 * se_between
    assert abs(fitted.sigma_within - sigma_within) < 0.03
    assert abs(fitted.runaway_share - runaway) < 0.01
    fitted_mean = fitted.pass_alpha / (fitted.pass_alpha + fitted.pass_beta)
    assert abs(fitted_mean - mean_pass) < 0.04
    assert abs(1 / (fitted.pass_alpha + fitted.pass_beta + 1) - 1 / (concentration + 1)) < 0.08
    assert fitted.fit["ks"] < 0.05  # the model reproduces the data's length distribution


def test_ks_statistic_exact() -> None:
    assert ks_statistic(np.array([1, 2, 3, 4]), np.array([1, 2, 3, 4])) == 0.0
    assert ks_statistic(np.array([1, 2]), np.array([3, 4])) == 1.0
    assert ks_statistic(np.array([1, 2, 3, 4]), np.array([3, 4, 5, 6])) == 0.5


def run(args):
    return CliRunner().invoke(app, args)


def test_one_step_trace_becomes_an_n_step_run(tmp_path) -> None:
    one_step = generate(BASE, steps=1, seed=3)
    write_trace(one_step, tmp_path / "one.jsonl")
    r = run(["trace", "fit", str(tmp_path / "one.jsonl"), "--out", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    assert "goodness of fit: KS statistic" in r.output
    model = load_model(tmp_path / "m.json")
    assert model.drift == 0.0 and model.prompts_per_step == 256  # one step: no drift to see
    long = generate(model, steps=5, seed=1)
    assert long.step.max() == 4 and len(long) == 5 * 256 * 8
    assert abs(np.median(long.response_len) / np.median(one_step.response_len) - 1) < 0.05
    # --trace-model MODEL.json --steps N wherever a trace is accepted
    r = run(["simulate", "--trace-model", str(tmp_path / "m.json"), "--steps", "2",
             "--policy", "sync", "--prompts", "8", "--out", str(tmp_path / "run"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_total"] == 2 * 8 * 8


@pytest.mark.parametrize("args, line", [
    # the group size is the model's (--group-size was ignored); --prompts 0 and --steps 0 ran the
    # model's prompts and one step, and --prompts -5 was a ValueError traceback
    (["--group-size", "2"], "error: --group-size: not with a trace model ({m} has its own group "
                            "size); it shapes a --synthetic trace"),
    (["--prompts", "0"], "error: --prompts must be >= 1, got 0"),
    (["--prompts", "-5"], "error: --prompts must be >= 1, got -5"),
    (["--steps", "0"], "error: --steps must be >= 1, got 0"),
])
def test_a_trace_models_run_refuses_what_it_cannot_use(tmp_path, args, line) -> None:
    model = tmp_path / "m.json"
    model.write_text(BASE.to_json())
    for command in ("simulate", "compare"):
        r = run([command, "--trace-model", str(model), "--policy", "sync", *args,
                 "--out", str(tmp_path / "run")])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.stderr == line.format(m=model) + "\n"
        assert not (tmp_path / "run").exists()


# --drift-from solves each step for the log-mean and runaway share under the model's cap and
# spread (tests/test_trace_drift_upstream.py). With no lognormal mass near the cap two cases are
# exact by hand: a cap far above every length and no runaway share (the log-mean moves as
# log(mean)), and a spread of zero (the lengths below the cap are exp(mu_t) itself, the rest at
# the cap runaways, so mu_t = log((mean - clip * cap) / (1 - clip)) and the runaway share is the
# clip ratio). Before, drift was the slope of log(mean) and runaway_drift that of the clip ratio
# whatever the cap: these tests asserted that, which holds only in such cases.
FAR_CAP = dataclasses.replace(BASE, max_response_len=2**31 - 1, runaway_share=0.0)
NO_SPREAD = dataclasses.replace(BASE, sigma_between=0.0, sigma_within=0.0)


def test_drift_from_wandb_export(tmp_path) -> None:
    csv = tmp_path / "wandb.csv"
    lines = ['"Step","my-run-7 - response_length/mean","my-run-7 - response_length/mean__MIN",'
             '"my-run-7 - response_length/mean__MAX","my-run-7 - response_length/clip_ratio"']
    steps = np.arange(0, 50, 10)
    means, clips = 1000 * np.exp(0.002 * steps), 0.01 + 0.0001 * steps
    for step, mean, clip in zip(steps, means, clips, strict=True):
        lines.append(f"{step},{float(mean)!r},{mean / 2},{mean * 2},{float(clip)!r}")
    csv.write_text("\n".join(lines) + "\n")
    drifts = drift_from_wandb(csv, NO_SPREAD)
    below = np.log((means - clips * BASE.max_response_len) / (1 - clips))
    assert drifts["drift"] == pytest.approx(np.polyfit(steps, below, 1)[0], rel=1e-9)
    assert drifts["runaway_drift"] == pytest.approx(0.0001, rel=1e-9)
    assert "max_drift" not in drifts
    trace = generate(BASE, steps=1, seed=0)
    write_trace(trace, tmp_path / "t.jsonl")
    r = run(["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m.json"),
             "--drift-from", str(csv), "--json"])
    assert r.exit_code == 0, r.output
    # the CLI solves the steps under the model fitted to the trace (cap 8192, its spread and share)
    fitted = drift_from_wandb(csv, fit_trace(trace, source="t.jsonl"))
    assert json.loads(r.stdout)["drift"] == fitted["drift"]
    assert json.loads(r.stdout)["runaway_drift"] == fitted["runaway_drift"]


def test_wandb_export_without_length_column(tmp_path) -> None:
    csv = tmp_path / "wandb.csv"
    csv.write_text('"Step","run - actor/entropy"\n1,0.5\n2,0.4\n')
    write_trace(generate(BASE, steps=1, seed=0), tmp_path / "t.jsonl")
    out = tmp_path / "m.json"
    r = run(["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(out), "--drift-from", str(csv)])
    assert r.exit_code == 2 and not out.exists()
    assert r.output == (f"error: {csv}: no length column '<run> - response_length/mean'; "
                        f"found: Step, run - actor/entropy\n")


def test_model_with_negative_spread_is_refused(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(dataclasses.replace(BASE, sigma_within=-0.1).to_json())
    with pytest.raises(TraceError, match="field 'sigma_within': -0.1 is negative"):
        load_model(bad)
    r = run(["simulate", "--trace-model", str(bad), "--steps", "2", "--policy", "sync",
             "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_an_integer_where_a_float_goes_is_read_as_a_float(tmp_path):
    # a runaway_drift of 2**63 (a Python int) overflowed numpy's C long: an OverflowError traceback
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**json.loads(BASE.to_json()), "runaway_drift": 2**63, "mu0": 6}))
    model = load_model(path)
    assert model.runaway_drift == 2.0**63 and model.mu0 == 6.0 and type(model.mu0) is float
    trace = generate(model, steps=2, seed=0, prompts=4)
    assert trace.truncated[trace.step == 0].mean() < 1 and trace.truncated[trace.step == 1].all()


@pytest.mark.parametrize("field, value, message", [
    ("mu0", None, "field 'mu0': None is not a finite number"),
    ("source", 2, "field 'source': 2 is not a string"),
    ("fit", 1e9, "field 'fit': 1000000000.0 is not an object"),
    ("drift", 10**400, "field 'drift': 1" + "0" * 400 + " is not a finite number"),
    ("prompts_per_step", 2**30, "1,073,741,824 prompts x 8 samples x 2 steps = "
                                "17,179,869,184 samples: a run holds at most 2,147,483,647"),
    ("prompts_per_step", 2**63, "field 'prompts_per_step': 9,223,372,036,854,775,808 must be "
                                "below 2**31"),
    ("prompt_min", 10**30, "field 'prompt_min': 1,000,000,000,000,000,000,000,000,000,000 must be "
                           "below 2**31"),  # an int32 OverflowError traceback before
])
def test_model_with_a_field_of_the_wrong_kind_is_one_error_line(tmp_path, field, value, message):
    # a fuzz of trace-model files: each was a TypeError (or OverflowError) traceback
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(BASE.to_json()), field: value}))
    r = run(["simulate", "--trace-model", str(bad), "--steps", "2", "--policy", "sync",
             "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert r.output.startswith("error: ") and message in r.output
    assert not (tmp_path / "run").exists()


def test_fit_never_overwrites_its_input(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(generate(BASE, steps=1, seed=0), trace)
    before = trace.read_bytes()
    r = run(["trace", "fit", str(trace), "--out", str(tmp_path / "t.jsonl")])
    assert r.exit_code == 2 and trace.read_bytes() == before


def test_fit_of_an_imported_dump(tmp_path) -> None:
    from sortedrl.traces.importers import import_framework

    trace, _ = import_framework("slime", Path(__file__).parent / "fixtures" / "frameworks"
                                / "slime_rollout")
    model = fit_trace(trace)
    assert model.group_size == 4 and model.max_response_len == 12 and model.prompts_per_step == 4
    assert model.runaway_share > 0  # 8 of 32 samples stopped at the cap of 12


def test_a_non_finite_wandb_cell_is_not_logged_and_a_non_finite_step_is_an_error(tmp_path):
    # trace fit wrote "drift": NaN for a cell of inf, a model its own simulate then refused
    csv = tmp_path / "w.csv"
    csv.write_text('"Step","r - response_length/mean"\n1,900\n2,inf\n3,nan\n4,1000\n')
    assert drift_from_wandb(csv, FAR_CAP)["drift"] == pytest.approx(math.log(1000 / 900) / 3,
                                                                    rel=1e-12)
    csv.write_text('"Step","r - response_length/mean"\n1,900\nnan,950\n3,1000\n')
    with pytest.raises(TraceError,
                       match=r"w.csv: line 3: column 'Step': 'nan' is not a finite number$"):
        drift_from_wandb(csv, FAR_CAP)
    csv.write_text('"Step","r - response_length/mean"\n1,900\nx,950\n3,1000\n')
    with pytest.raises(TraceError) as e:  # it blamed the length column's '950'
        drift_from_wandb(csv, FAR_CAP)
    assert str(e.value) == f"{csv}: line 3: column 'Step': 'x' is not a number"
