"""Bad inputs of the framework importers, the metrics reader and the trace model: each is one
``error:`` line naming the file and the row or field, exit 2, nothing written, no traceback and
no warning; and the W&B exports that were refused by mistake (a byte-order mark, a run name
holding " - ") read as the clean fixture does.

Run: pytest tests/test_bad_inputs_importers.py
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.sim.cluster import load_cluster
from sortedrl.traces.importers import import_framework
from sortedrl.traces.model import TraceModel, generate, load_model

FIX = Path(__file__).resolve().parent / "fixtures"
METRICS = FIX / "metrics"
runner = CliRunner()


def _one_error(args: list[str]) -> str:
    """The single stderr line of a command that must fail with exit 2, warning-free."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output[-2000:]
    assert [str(w.message) for w in caught] == []
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- slime: a .pt that is no torch.save file ----------------------------------------------------


def test_a_truncated_torch_save_file_is_named_by_torchs_first_sentence(tmp_path):
    torch = pytest.importorskip("torch")  # (the line was cut at 160 characters, mid-sentence)
    whole = tmp_path / "whole.pt"
    torch.save({"samples": [{"tokens": [1, 2]}]}, whole)
    bad = tmp_path / "a.pt"
    bad.write_bytes(whole.read_bytes()[:300])
    line = _one_error(["trace", "import", str(bad), "--from", "slime", "--out", str(tmp_path / "t.jsonl")])
    assert line == (f"error: {bad}: not a torch.save file: PytorchStreamReader failed reading zip "
                    "archive: failed finding central directory.")


@pytest.mark.parametrize("content, why", [
    # a text file renamed .pt: the safe unpickler's KeyError / IndexError were tracebacks
    (b"hello\n", "corrupt pickle stream (KeyError: 101)"),
    (b"step,reward\n1,0.5\n", "corrupt pickle stream (IndexError: pop from empty list)"),
    (b"\x80\x02X", "corrupt pickle stream (struct.error: unpack requires a buffer of 4 bytes)"),
    # a bad opcode was "refused: loading it needs pickled code": there is no code in it
    (b"\x00" * 10, "corrupt pickle stream (Unsupported operand 0)"),
    # torch printed a UserWarning ("Detected pickle protocol 53") above the error line
    (b"\x80\x35", "EOFError"),
])
def test_a_pt_file_that_is_not_a_torch_save_is_one_error_line(tmp_path, content, why):
    pytest.importorskip("torch")
    bad = tmp_path / "a.pt"
    bad.write_bytes(content)
    out = tmp_path / "t.jsonl"
    line = _one_error(["trace", "import", str(bad), "--from", "slime", "--out", str(out)])
    assert line == f"error: {bad}: not a torch.save file: {why}"
    assert not out.exists()


# -- calibrate --from-metrics: JSON lines whose metrics are text or bools -----------------------


def _jsonl(tmp: Path, key: str, value: object) -> Path:
    recs = [json.loads(x) for x in (METRICS / "verl_metrics.jsonl").read_text().splitlines()]
    recs[2]["data"][key] = value
    path = tmp / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize("key, value, shown", [
    ("timing_s/update_actor", "9.5", "'9.5'"),  # the step was dropped: a fit on 7 of 8 steps
    ("perf/total_num_tokens", True, "True"),  # a bool is an int to Python: also dropped
    ("timing_s/update_weights", [1.2], "[1.2]"),
])
def test_a_metric_the_fit_reads_that_is_not_a_number_is_one_error_line(tmp_path, key, value,
                                                                        shown):
    path = _jsonl(tmp_path, key, value)
    out = tmp_path / "p.json"
    line = _one_error(["calibrate", "--from-metrics", str(path), "--cluster", "h100-llama3.1-8b",
                       "--out", str(out)])
    assert line == f"error: {path}: line 3: metric {key!r}: expected a number, got {shown}"
    assert not out.exists()


def test_other_keys_that_are_not_numbers_and_unlogged_metrics_are_skipped(tmp_path):
    clean = read_metrics(METRICS / "verl_metrics.jsonl")
    path = _jsonl(tmp_path, "actor/note", "warm-up")
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs[2]["data"]["timing_s/gen"] = False  # a role-less key: ignored
    recs[4]["data"]["timing_s/update_weights"] = None  # null: not logged at this step
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    metrics = read_metrics(path)
    assert "actor/note" not in metrics and metrics["timing_s/gen"] == {
        s: v for s, v in clean["timing_s/gen"].items() if s != 3}
    assert metrics["timing_s/update_weights"] == {
        s: v for s, v in clean["timing_s/update_weights"].items() if s != 5}
    assert metrics["timing_s/update_actor"] == clean["timing_s/update_actor"]


# -- W&B export CSV: a byte-order mark, a run name holding " - " --------------------------------


def test_a_csv_or_jsonl_with_a_byte_order_mark_reads_as_without(tmp_path):
    # "no 'Step' column (columns found: \ufeff"Step", ...)"
    for name in ("wandb_openrlhf.csv", "verl_metrics.jsonl"):
        bom = tmp_path / name
        bom.write_bytes(b"\xef\xbb\xbf" + (METRICS / name).read_bytes())
        assert read_metrics(bom) == read_metrics(METRICS / name)
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(tmp_path / "wandb_openrlhf.csv"),
                            "--cluster", "h100-llama3.1-8b", "--samples-per-step", "256",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    cost = load_cluster(str(out)).cost()
    assert (cost.train_fix, cost.train_per_token, cost.sync_s) == pytest.approx((6.0, 2.0e-5, 0.85),
                                                                              rel=1e-9)


def test_a_run_name_holding_a_dash_keeps_its_metric_names(tmp_path):
    # "qwen - grpo - timing/ppo_train" was metric "grpo - timing/ppo_train": no update time
    text = (METRICS / "wandb_openrlhf.csv").read_text()
    dashed = tmp_path / "m.csv"
    dashed.write_text(text.replace("openrlhf-qwen2.5-7b-grpo", "qwen - grpo - run 3"))
    metrics = read_metrics(dashed)
    assert metrics == read_metrics(METRICS / "wandb_openrlhf.csv")
    assert sorted(metrics) == ["prompt_length/mean", "response_length/mean", "timing/broadcast",
                               "timing/ppo_train"]  # __MIN/__MAX buckets still ignored
    fit = fit_metrics(metrics, str(dashed), samples_per_step=256)
    assert fit["columns"]["update"] == ["timing/ppo_train"] and fit["steps"] == 5
    two = tmp_path / "two.csv"
    two.write_text('"Step","a - b - timing/ppo_train","a - c - timing/ppo_train"\n1,2,3\n')
    line = _one_error(["calibrate", "--from-metrics", str(two), "--cluster", "h100-llama3.1-8b",
                       "--out", str(tmp_path / "p.json")])
    assert line == f"error: {two}: 2 runs in this W&B export (a - b, a - c): choose one with --run"


# -- loss masks: an entry that is not 0 or 1 --------------------------------------------------


def _nemo_rl(tmp: Path, mask: list) -> Path:
    rows = [{"input_lengths": 5, "token_ids": [1, 2, 3, 4, 5], "token_loss_mask": mask},
            {"input_lengths": 5, "token_ids": [1, 2, 3, 4, 5], "token_loss_mask": [0, 0, 1, 1, 1]}]
    dump = tmp / "dump"
    dump.mkdir(exist_ok=True)
    (dump / "train_data_step1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dump


@pytest.mark.parametrize("mask, entry", [
    ([0, "x", 1, 1, 1], "entry 1 is 'x'"),  # before the first 1: was read as prompt
    ([0, 2, 1, 1, 1], "entry 1 is 2"),
    ([None, 0, 1, 1, 1], "entry 0 is None"),
    ([0, 0, 1, 1.0, 1], "entry 3 is 1.0"),  # a float, as everywhere else
])
def test_a_nemo_rl_mask_entry_that_is_not_0_or_1_is_one_error_line(tmp_path, mask, entry):
    dump = _nemo_rl(tmp_path, mask + [0, "padding past input_lengths is not read"])
    out = tmp_path / "t.jsonl"
    line = _one_error(["trace", "import", str(dump), "--from", "nemo-rl", "--out", str(out)])
    assert line == (f"error: {dump / 'train_data_step1.jsonl'}: line 1: field 'token_loss_mask': "
                    f"{entry}, not 0 or 1")
    assert not out.exists()


def test_a_bool_mask_reads_as_0_and_1(tmp_path):
    ints, _ = import_framework("nemo-rl", _nemo_rl(tmp_path, [0, 1, 1, 0, 1]))
    bools, _ = import_framework("nemo-rl", _nemo_rl(tmp_path, [False, True, True, False, True]))
    assert bools == ints and ints.response_len.tolist() == [3, 3]


def test_a_slime_mask_with_no_0_is_checked_too(tmp_path):
    torch = pytest.importorskip("torch")
    sample = {"group_index": 0, "index": 0, "tokens": [1, 5, 6, 7, 7], "response_length": 2,
              "reward": 1.0, "status": "completed", "loss_mask": [1, "x"]}  # was one turn
    torch.save({"rollout_id": 0, "samples": [sample]}, tmp_path / "0.pt")
    with pytest.raises(TraceError) as e:
        import_framework("slime", tmp_path / "0.pt")
    assert str(e.value) == (f"{tmp_path / '0.pt'}: sample 0: field 'loss_mask': entry 1 is 'x', "
                            "not 0 or 1")


# -- trace model: spreads past any length ------------------------------------------------------

BASE = TraceModel(max_response_len=8192, group_size=8, prompts_per_step=16, mu0=6.5,
                  sigma_between=0.5, sigma_within=0.3, drift=0.01, runaway_share=0.02,
                  prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=2048)


@pytest.mark.parametrize("field, value, message", [
    # overflow in multiply / exp (RuntimeWarnings), NaN lengths cast to int64
    ("prompt_sigma", 1e308, "field 'prompt_sigma': 1e+308 is above 50"),
    ("sigma_between", 1e308, "field 'sigma_between': 1e+308 is above 50"),
    ("sigma_within", 50.5, "field 'sigma_within': 50.5 is above 50"),
    ("prompt_median", 1e308, "field 'prompt_median': 1e+308 must be below 2**31"),
])
def test_a_model_spread_past_any_length_is_one_error_line(tmp_path, field, value, message):
    bad = tmp_path / "m.json"
    bad.write_text(dataclasses.replace(BASE, **{field: value}).to_json())
    run = tmp_path / "run"
    line = _one_error(["simulate", "--trace-model", str(bad), "--steps", "2", "--policy", "sync",
                       "--out", str(run)])
    if field == "prompt_median":
        assert line == f"error: {bad}: {message}"
    else:
        assert line == (f"error: {bad}: {message} (a spread of log lengths; e**50 is 5.2e+21 "
                        "times the median)")
    assert not run.exists()


def test_the_largest_spread_and_a_drift_past_float_range_draw_without_warnings(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(dataclasses.replace(BASE, sigma_between=50.0, sigma_within=50.0,
                                        prompt_sigma=50.0, prompt_median=2.0**31 - 1,
                                        drift=1e308, runaway_drift=-1e308).to_json())
    model = load_model(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in multiply" included
        trace = generate(model, steps=4, seed=0)
    later = trace.step > 0
    assert trace.response_len[later].tolist() == [8192] * int(later.sum())  # drift: at the cap
    assert (trace.prompt_len.min(), trace.prompt_len.max()) == (16, 2048)  # clipped, no NaN
