"""`trace fit --drift-from`: the length model's drifts from W&B exports laid out as verl, TRL and
slime log them, recovered from data made by the model itself.

What upstream logs (the CSVs below mimic it):

* verl, ``verl/trainer/ppo/metric_utils.py`` (``compute_data_metrics``): ``response_length/mean``
  is the mean over every response, those cut at the cap included; ``response_length/clip_ratio``
  is ``mean(response_length == max_response_length)``, the whole share at the cap. verl's
  ``Tracking`` logs with ``step=``, so the export's ``Step`` is the training step.
* TRL, ``trl/trainer/grpo_trainer.py``: ``completions/mean_length`` (every completion),
  ``completions/max_length``, ``completions/clipped_ratio`` (the share that ended without EOS: at
  the cap). HF transformers' ``WandbCallback``
  (``src/transformers/integrations/integration_utils.py``) renames them ``train/<key>``
  (``rewrite_logs``), defines the x-axis ``train/global_step`` (``define_metric("*",
  step_metric="train/global_step", step_sync=True)``) and calls ``wandb.log`` without ``step=``:
  W&B's ``_step`` counts log calls, and an export's first column is ``train/global_step``.
* slime, ``slime/utils/wandb_utils.py`` (``_init_wandb_common``): ``define_metric("rollout/*",
  step_metric="rollout/step")``; ``rollout/response_len/mean``, ``rollout/response_len/max`` and
  ``rollout/truncated_ratio`` are logged without ``step=``, so the x-axis is ``rollout/step``.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import ndtr
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces import write_trace
from sortedrl.traces.fit import drift_from_wandb
from sortedrl.traces.model import TraceModel, generate
from sortedrl.traces.wandb_drift import read_wandb_drift

CAP = 8192
# the audit's run (/tmp/audit60/drift.py): mean length 1.5k tokens growing 0.4% a step to a cap of 8k
TRUTH = TraceModel(max_response_len=CAP, group_size=8, prompts_per_step=64, mu0=math.log(1500),
                   sigma_between=0.6, sigma_within=0.5, drift=0.004, runaway_share=0.01,
                   prompt_median=200.0, prompt_sigma=0.3, prompt_min=20, prompt_max=1000)
GROWING = dataclasses.replace(TRUTH, runaway_drift=0.0005)

VERL = ("Step", "response_length/mean", "response_length/max", "response_length/clip_ratio")
TRL = ("train/global_step", "train/completions/mean_length", "train/completions/max_length",
       "train/completions/clipped_ratio")
SLIME = ("rollout/step", "rollout/response_len/mean", "rollout/response_len/max",
         "rollout/truncated_ratio")


def run(args):
    return CliRunner().invoke(app, args)


def expected(model: TraceModel, step: int) -> tuple[float, float]:
    """(mean length, share at the cap) at ``step``, by numerical integration over the normal of
    log length: a draw rounds to the cap from cap - 0.5, runaways are at the cap."""
    mu, s = model.mu0 + model.drift * step, math.hypot(model.sigma_between, model.sigma_within)
    runaway = model.runaway_share + model.runaway_drift * step
    edge = (math.log(CAP - 0.5) - mu) / s
    below = quad(lambda x: math.exp(mu + s * x - x * x / 2) / math.sqrt(2 * math.pi),
                 -np.inf, edge, epsabs=0, epsrel=1e-13, limit=200)[0]
    at_cap = 1 - float(ndtr(edge))
    return (runaway * CAP + (1 - runaway) * (below + CAP * at_cap),
            runaway + (1 - runaway) * at_cap)


def per_step(trace) -> list[tuple[int, float, float, float]]:
    """(step, mean, max, clip ratio) of a drawn trace, as verl computes them from a batch."""
    out = []
    for s in np.unique(trace.step):
        r = trace.response_len[trace.step == s]
        out.append((int(s), float(r.mean()), float(r.max()), float(np.mean(r == CAP))))
    return out


def export(path, layout, rows, run_name="grpo-7", clip=True, maximum=True, extra=True):
    """A W&B export CSV: the x-axis first, then ``<run> - <metric>`` columns; in TRL's layout
    W&B's ``_step`` (two log calls a step) and a row of the end-of-training summary log, where
    the length cells are empty; ``__MIN``/``__MAX`` of the mean (a grouped export's group min
    and max, here off by 10%) are left unread."""
    x, mean, mx, ratio = layout
    head = [x] + ([f"{run_name} - _step"] if x == "train/global_step" else [])
    head += [f"{run_name} - {mean}"]
    head += [f"{run_name} - {mean}__MIN", f"{run_name} - {mean}__MAX"] if extra else []
    head += ([f"{run_name} - {mx}"] if maximum else []) + ([f"{run_name} - {ratio}"] if clip else [])
    lines = [",".join(f'"{h}"' for h in head)]
    for step, m, top, c in rows:
        cells = [str(step)] + ([str(2 * step + 1)] if x == "train/global_step" else [])
        cells += [repr(m)] + ([repr(0.9 * m), repr(1.1 * m)] if extra else [])
        cells += ([repr(top)] if maximum else []) + ([repr(c)] if clip else [])
        lines.append(",".join(cells))
    if x == "train/global_step":
        lines.append(",".join([str(rows[-1][0]), str(2 * rows[-1][0] + 2)] + [""] * (len(head) - 2)))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_exact_expectations_give_back_drift_and_runaway_drift(tmp_path) -> None:
    # the mean includes the responses cut at the cap and the clip ratio is the whole share at
    # it: the old fit took the slopes of log(mean) and of the clip ratio (0.00313 and 0.00077
    # on the audit's run, whose truth is 0.004 and 0)
    rows = [(s, *expected(GROWING, s)) for s in range(0, 300, 5)]
    csv = export(tmp_path / "verl.csv", VERL, [(s, m, float(CAP), c) for s, m, c in rows])
    fields = drift_from_wandb(csv, GROWING)
    assert fields["drift"] == pytest.approx(0.004, abs=1e-8)
    assert fields["runaway_drift"] == pytest.approx(0.0005, abs=1e-8)
    assert fields["max_drift"] == pytest.approx(0.0, abs=1e-15)  # the max sits at the cap
    old = np.polyfit([r[0] for r in rows], [math.log(r[1]) for r in rows], 1)[0]
    assert old < 0.0035  # what the slope of log(mean) said


def test_without_a_clip_column_the_mean_alone_gives_the_drift(tmp_path) -> None:
    rows = [(s, *expected(TRUTH, s)) for s in range(0, 300, 5)]
    csv = export(tmp_path / "verl.csv", VERL, [(s, m, float(CAP), c) for s, m, c in rows],
                 clip=False, maximum=False)
    result = read_wandb_drift(csv, TRUTH)
    assert result.fields == {"drift": pytest.approx(0.004, abs=1e-8)}
    assert result.notes == [
        f"note: {csv}: no column '<run> - response_length/clip_ratio': drift solved from the "
        "mean alone with the runaway share held at the trace's 0.01; runaway_drift not set",
        f"note: {csv}: no column '<run> - response_length/max': max_drift not set"]


def test_the_audit_run_through_the_models_own_generator(tmp_path) -> None:
    # 300 steps of 64 prompts x 8 drawn by the model (the audit's seed): over 20 seeds the fit's
    # drift has sd 6.7e-5 and a bias of +4e-5 (a batch of 512 responses is a noisy mean, and the
    # solve bends it; the bias falls as 1/batch: none left at 1024 prompts), runaway_drift sd
    # 2.6e-5, bias -2.8e-5. Tolerances: bias + 3 sd.
    steps = 300
    csv = export(tmp_path / "verl.csv", VERL, per_step(generate(TRUTH, steps, seed=1)))
    fields = drift_from_wandb(csv, TRUTH)
    assert fields["drift"] == pytest.approx(0.004, abs=2.5e-4)  # the old fit: 0.00313
    assert fields["runaway_drift"] == pytest.approx(0.0, abs=1.2e-4)  # the old fit: 0.00077
    truth, fitted = (generate(m, steps, seed=2) for m in (TRUTH, dataclasses.replace(TRUTH, **fields)))
    last = truth.step >= steps - 20
    share = np.mean(truth.truncated[last])
    assert share == pytest.approx(0.242, abs=0.0005)
    assert np.mean(fitted.truncated[last]) == pytest.approx(share, abs=0.01)  # the old fit: 0.350
    mean = truth.response_len[last].mean()
    assert fitted.response_len[last].mean() == pytest.approx(mean, rel=0.01)  # old: 5138 vs 4994


def test_a_growing_runaway_share_through_the_generator(tmp_path) -> None:
    # 150 steps of 512 prompts x 8: over 12 seeds drift has sd 7.0e-5 and runaway_drift sd
    # 1.4e-5 (biases under 1.2e-5 and 4e-6); tolerances 4 sd
    csv = export(tmp_path / "verl.csv", VERL,
                 per_step(generate(GROWING, 150, seed=0, prompts=512)))
    fields = drift_from_wandb(csv, GROWING)
    assert fields["drift"] == pytest.approx(0.004, abs=2.8e-4)
    assert fields["runaway_drift"] == pytest.approx(0.0005, abs=5.6e-5)


@pytest.fixture(scope="module")
def drawn():
    return per_step(generate(GROWING, 40, seed=4, prompts=128))


@pytest.mark.parametrize("layout", [TRL, SLIME], ids=["trl", "slime"])
def test_trl_and_slime_exports_read_as_verl(tmp_path, drawn, layout) -> None:
    # TRL's export once failed "no 'Step' column"; with --metric train/completions/mean_length
    # it ran but dropped the max and clip-ratio columns (runaway_drift 0 under a rising ratio)
    verl = read_wandb_drift(export(tmp_path / "verl.csv", VERL, drawn), GROWING)
    other = read_wandb_drift(export(tmp_path / "x.csv", layout, drawn), GROWING, metric=layout[1])
    assert other.fields == verl.fields and set(verl.fields) == {"drift", "runaway_drift",
                                                                 "max_drift"}
    assert other.notes == [] and other.step_column == layout[0]


def test_cli_reads_a_trl_export_with_its_step_axis(tmp_path, drawn) -> None:
    write_trace(generate(GROWING, 2, seed=0, prompts=128), tmp_path / "t.jsonl")
    models = {}
    for name, layout in (("verl", VERL), ("trl", TRL), ("slime", SLIME)):
        csv = export(tmp_path / f"{name}.csv", layout, drawn)
        r = run(["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / f"{name}.json"),
                 "--drift-from", str(csv), "--metric", layout[1], "--json"])
        assert r.exit_code == 0 and r.stderr == "", r.output
        models[name] = json.loads(r.stdout)
    assert models["trl"] == models["verl"] == models["slime"]
    assert models["trl"]["runaway_drift"] > 0  # the clip ratio rises: read, not dropped


def test_a_trl_export_without_its_clip_column_says_so(tmp_path, drawn) -> None:
    csv = export(tmp_path / "trl.csv", TRL, drawn, clip=False, maximum=False)
    write_trace(generate(GROWING, 2, seed=0, prompts=128), tmp_path / "t.jsonl")
    r = run(["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m.json"),
             "--drift-from", str(csv), "--metric", "train/completions/mean_length", "--json"])
    assert r.exit_code == 0, r.output
    share = f"{json.loads(r.stdout)['runaway_share']:.4g}"
    assert r.stderr == (
        f"note: {csv}: no column '<run> - train/completions/clipped_ratio': drift solved from "
        f"the mean alone with the runaway share held at the trace's {share}; runaway_drift not "
        f"set\nnote: {csv}: no column '<run> - train/completions/max_length': max_drift not set\n")
    assert json.loads(r.stdout)["runaway_drift"] == 0.0 and json.loads(r.stdout)["max_drift"] == 0.0


def test_a_metric_of_no_known_framework_says_so(tmp_path, drawn) -> None:
    layout = ("Step", "custom/len_mean", "custom/len_max", "custom/clip")
    result = read_wandb_drift(export(tmp_path / "c.csv", layout, drawn), GROWING,
                              metric="custom/len_mean")
    assert set(result.fields) == {"drift"}
    assert result.notes == [
        f"note: {tmp_path / 'c.csv'}: 'custom/len_mean' is no metric of verl, TRL or slime, so its "
        "max and clip-ratio columns are unknown: drift solved from the mean alone with the runaway "
        "share held at the trace's 0.01; runaway_drift and max_drift not set"]


def test_step_of_a_trl_export_is_a_note(tmp_path, drawn) -> None:
    layout = ("Step",) + TRL[1:]
    result = read_wandb_drift(export(tmp_path / "s.csv", layout, drawn), GROWING, metric=TRL[1])
    assert set(result.fields) == {"drift", "runaway_drift", "max_drift"}  # once silently drift only
    assert result.notes == [
        f"note: {tmp_path / 's.csv'}: steps read from 'Step', W&B's _step; TRL and slime log "
        "without step=, so there it counts log calls, not training steps: export against "
        "train/global_step (TRL) or rollout/step (slime)"]


TRL_METRIC = ["--metric", TRL[1]]


@pytest.mark.parametrize(("header", "args", "message"), [
    ('"grpo - _step","grpo - train/completions/mean_length"', TRL_METRIC,
     "the only step column is '_step', and W&B's _step counts wandb.log calls, not training "
     "steps (TRL and slime log without step=): export against train/global_step (TRL) or "
     "rollout/step (slime), or name the column with --step-column"),
    ('"train/global_step","grpo - train/completions/mean_length"',
     [*TRL_METRIC, "--step-column", "_step"],
     "--step-column _step: W&B's _step counts wandb.log calls, not training steps (TRL and "
     "slime log without step=); name the training step's column"),
    ('"epoch","grpo - train/completions/mean_length"', TRL_METRIC,
     "no step column (train/global_step, rollout/step, Step, or one named with --step-column); "
     "found: epoch, grpo - train/completions/mean_length"),
    ('"train/global_step","grpo - train/completions/mean_length"', [],
     "no length column '<run> - response_length/mean'; found: train/global_step, grpo - "
     "train/completions/mean_length (pass --metric train/completions/mean_length for its column)"),
])
def test_a_step_or_length_column_it_cannot_use_is_one_error_line(tmp_path, header, args,
                                                                   message) -> None:
    csv = tmp_path / "w.csv"
    csv.write_text(f"{header}\n0,1000\n1,1010\n")
    write_trace(generate(TRUTH, 1, seed=0, prompts=64), tmp_path / "t.jsonl")
    r = run(["trace", "fit", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "m.json"),
             "--drift-from", str(csv), *args])
    assert r.exit_code == 2 and "Traceback" not in r.output and not (tmp_path / "m.json").exists()
    assert r.stderr == f"error: {csv}: {message}\n"


def test_step_column_names_a_custom_axis(tmp_path, drawn) -> None:
    layout = ("trainer/step",) + VERL[1:]
    csv = export(tmp_path / "c.csv", layout, drawn)
    verl = read_wandb_drift(export(tmp_path / "verl.csv", VERL, drawn), GROWING)
    named = read_wandb_drift(csv, GROWING, step_column="trainer/step")
    assert named.fields == verl.fields and named.step_column == "trainer/step"


@pytest.mark.parametrize(("row", "message"), [
    ("3,9000,8192,0.5", "line 2: column 'r - response_length/mean': 9000 is above the trace's cap "
     "of 8192 (the W&B run and the trace must share max_response_len)"),
    ("3,4000,8192,0.5", "line 2: columns 'r - response_length/mean' and 'r - "
     "response_length/clip_ratio': a mean of 4000 with a share 0.5 at the cap of 8192 leaves "
     "-192 for the responses below it, not a length under the cap"),
    ("3,4000,8192,1.5", "line 2: column 'r - response_length/clip_ratio': 1.5 is not a share "
     "from 0 to 1"),
    ("3,4000,9000,0.1", "line 2: column 'r - response_length/max': 9000 is above the trace's cap "
     "of 8192 (the W&B run and the trace must share max_response_len)"),
])
def test_lengths_the_cap_cannot_hold_are_an_error(tmp_path, row, message) -> None:
    csv = tmp_path / "w.csv"
    csv.write_text('"Step","r - response_length/mean","r - response_length/max",'
                   f'"r - response_length/clip_ratio"\n{row}\n4,4000,8192,0.1\n')
    with pytest.raises(TraceError) as e:
        drift_from_wandb(csv, TRUTH)
    assert str(e.value) == f"{csv}: {message}"


def test_a_step_all_at_the_cap_is_left_out_with_a_note(tmp_path, drawn) -> None:
    rows = [(s, *expected(GROWING, s)) for s in range(0, 300, 5)]
    full = [(s, m, float(CAP), c) for s, m, c in rows] + [(300, float(CAP), float(CAP), 1.0)]
    result = read_wandb_drift(export(tmp_path / "w.csv", VERL, full), GROWING)
    assert result.fields["drift"] == pytest.approx(0.004, abs=1e-8)
    assert result.notes == [f"note: {tmp_path / 'w.csv'}: 1 step(s) with every response at the "
                            "cap (clip ratio 1) say nothing of the length below it: left out"]
