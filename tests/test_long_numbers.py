"""A JSON integer of more than 4,300 digits (Python refuses to convert it, and ``json.loads``
lets that ValueError through) is one error line naming the file and line, in every reader of
JSON files, never a traceback (found by a review of the readers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.jsonio import loads

FIX = Path(__file__).resolve().parent / "fixtures"
BIG = "9" * 5000
runner = CliRunner()


def test_loads_names_the_line_of_a_number_too_long():
    with pytest.raises(json.JSONDecodeError) as e:
        loads('{"a": 1,\n "b": ' + BIG + "}")
    assert (e.value.msg, e.value.lineno, e.value.colno) == ("an integer of more than 4,300 digits", 2, 7)
    assert loads('{"a": [1, 2.5]}') == {"a": [1, 2.5]}


def _trace(tmp: Path) -> list[str]:
    path = tmp / "t.jsonl"
    path.write_text('{"sortedrl_trace": 1, "max_response_len": 64, "group_size": 2}\n'
                    '{"prompt_id": "p", "sample": 0, "prompt_len": 8, "response_len": ' + BIG + "}\n")
    return ["trace", "stats", str(path)], f"{path}: line 2: bad JSON: an integer of more than 4,300 digits"


def _cluster(tmp: Path) -> list[str]:
    path = tmp / "c.json"
    path.write_text('{"preset": "h100-llama3.1-8b", "gpus": ' + BIG + "}")
    return (["simulate", "--synthetic", "logic-8k", "--prompts", "4", "--policy", "sync",
             "--cluster", str(path), "--out", str(tmp / "out")],
            f"{path}: line 1: not valid JSON (an integer of more than 4,300 digits)")


def _model(tmp: Path) -> list[str]:
    path = tmp / "m.json"
    path.write_text('{"sortedrl_trace_model": 1, "fit": {"prompts_per_step": ' + BIG + "}}")
    return (["simulate", "--trace-model", str(path), "--steps", "1", "--policy", "sync",
             "--out", str(tmp / "out")],
            f"{path}: not a trace model (bad JSON: an integer of more than 4,300 digits: line 1")


def _bench(tmp: Path) -> list[str]:
    raw = json.loads((FIX / "vllm_bench" / "c2-r0.json").read_text())
    path = tmp / "b.json"
    path.write_text(json.dumps(raw).replace('"duration": ', '"duration": ' + BIG + ", \"x\": ", 1))
    return (["calibrate", "--from-vllm-bench", str(path), "--cluster", "h100-llama3.1-8b",
             "--out", str(tmp / "p.json")],
            f"{path}: not valid JSON (an integer of more than 4,300 digits: line 1")


@pytest.mark.parametrize("case", [_trace, _cluster, _model, _bench])
def test_a_number_too_long_is_one_error_line(tmp_path, case):
    args, message = case(tmp_path)
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.json").exists()


def _trace_header(tmp: Path) -> list[str]:
    path = tmp / "t.jsonl"
    path.write_text('{"sortedrl_trace": 1, "max_response_len": 1' + "0" * 400 + ', "group_size": 2}\n'
                    '{"prompt_id": "p", "sample": 0, "prompt_len": 8, "response_len": 5}\n')
    return ["trace", "stats", str(path)], (f"{path}: line 1: metadata 'max_response_len' must be "
                                           "below 2**63, got an integer of 401 digits")


def _bench_lens(tmp: Path) -> list[str]:
    raw = json.loads((FIX / "vllm_bench" / "c2-r0.json").read_text())
    raw["input_lens"][3] = 10**400
    path = tmp / "b.json"
    path.write_text(json.dumps(raw))
    return (["calibrate", "--from-vllm-bench", str(path), "--cluster", "h100-llama3.1-8b",
             "--out", str(tmp / "p.json")],
            f"{path}: field 'input_lens': entry 3: expected a token count from 0 to 16,777,216, "
            "got 10000000000000000000... (401 characters)")


def _profile_cost(tmp: Path) -> list[str]:
    raw = json.loads((FIX / "cpu-profile.json").read_text())
    raw["costs"]["step_fixed_s"] = 10**400  # (float() of it raised OverflowError)
    path = tmp / "p.json"
    path.write_text(json.dumps(raw))
    return (["profile", "show", str(path)],
            f"{path}: field 'costs.step_fixed_s': expected a finite number >= 0, got "
            "10000000000000000000... (401 characters)")


def _cluster_number(tmp: Path) -> list[str]:
    path = tmp / "c.json"
    path.write_text('{"preset": "h100-llama3.1-8b", "mbu": 1' + "0" * 400 + "}")
    return (["simulate", "--synthetic", "logic-8k", "--prompts", "4", "--policy", "sync",
             "--cluster", str(path), "--out", str(tmp / "out")],
            f"{path}: field 'mbu': expected a finite number, got 10000000000000000000... (401 characters)")


def _metrics(tmp: Path) -> list[str]:
    path = tmp / "m.jsonl"
    lines = (FIX / "metrics" / "verl_metrics.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["data"]["timing_s/update_actor"] = 10**400
    path.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    return (["calibrate", "--from-metrics", str(path), "--cluster", "h100-llama3.1-8b",
             "--out", str(tmp / "p.json")], None)


@pytest.mark.parametrize("case", [_trace_header, _bench_lens, _profile_cost, _cluster_number])
def test_a_number_past_a_float_is_one_error_line(tmp_path, case):
    args, message = case(tmp_path)
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip().splitlines() == [f"error: {message}"]


def test_a_metric_past_a_float_counts_as_not_logged(tmp_path):
    """As a NaN or inf cell does: the fit goes on with the steps that log it."""
    args, _ = _metrics(tmp_path)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert (tmp_path / "p.json").exists()
