"""Bad input files and options that two reviews of the readers found: each is one ``error:``
line and exit 2, with nothing written, never a traceback, a hang or an allocation without
bound (before: a replay of a billion engine steps, a 30M-value grid, RecursionError, ...).

Run: pytest tests/test_bad_inputs.py
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).resolve().parent / "fixtures"
SMALL = ["--synthetic", "logic-8k", "--prompts", "8", "--group-size", "2", "--steps", "2"]
DEEP = "[" * 100_000 + "]" * 100_000
LATIN1_CLUSTER = b'{"preset": "h100-llama3.1-8b-1gpu-16seq", "name": "caf\xe9"}'
runner = CliRunner()


def _bench(tmp: Path, change) -> Path:
    raw = json.loads((FIX / "vllm_bench" / "c2-r0.json").read_text())
    change(raw)
    path = tmp / "b.json"
    path.write_text(json.dumps(raw))
    return path


def _write(path: Path, content: str | bytes) -> str:
    """Write an input file (and its directory); its path, for the command line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


def _calibrate(path: Path) -> list[str]:
    return ["calibrate", "--from-vllm-bench", str(path), "--cluster", "h100-llama3.1-8b",
            "--out", "p.json"]


def _totals(raw: dict) -> None:
    for key in list(raw):
        if key.endswith(("_lens", "ttfts", "itls", "times", "errors")):
            del raw[key]
    raw.update(completed=1e12, total_input_tokens=10, total_output_tokens=1e12)


def _long_totals(raw: dict) -> None:
    _totals(raw)
    raw.update(completed=10, total_output_tokens=10 * 2**21)


CASES = {
    "a request of a billion output tokens (the replay stepped through each)": (
        lambda t: _calibrate(_bench(t, lambda r: r["output_lens"].__setitem__(0, 10**9))),
        "field 'output_lens': entry 0: expected a token count from 0 to 1,048,576, got 1000000000"),
    "10^12 requests from totals (a list of each)": (
        lambda t: _calibrate(_bench(t, _totals)),
        "field 'completed': expected a request count from 1 to 1,048,576, got 1000000000000.0"),
    "totals of 2M output tokens a request": (
        lambda t: _calibrate(_bench(t, _long_totals)),
        "field 'total_output_tokens': 2.09715e+07 tokens for 10 requests, more than 1,048,576 a "
        "request"),
    "a request rate past a float": (
        lambda t: _calibrate(_bench(t, lambda r: r.update(request_rate=10**400))),
        "field 'request_rate': expected a rate > 0 or \"inf\", got 10000000000000000000..."),
    "a cluster file nested 100,000 deep": (
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--cluster",
                   _write(t / "c.json", DEEP), "--out", "o"],
        "c.json: line 1: not valid JSON (nested too deeply)"),
    "a trace nested 100,000 deep": (
        lambda t: ["trace", "stats", _write(t / "t.jsonl", DEEP + "\n")],
        "t.jsonl: line 1: bad JSON: nested too deeply"),
    "a cluster range of 30M values": (
        lambda t: ["tune", *SMALL, "--policy", "sync", "--param", "cluster.gpus=1:30000000",
                   "--out", "o"],
        "--param 'cluster.gpus=1:30000000': 30,000,000 values; a cluster range holds at most "
        "65,536"),
    "a tune budget of 10^8 trials": (
        lambda t: ["tune", *SMALL, "--policy", "sortedrl", "--param",
                   "sortedrl.update_batch=1:100000000", "--budget", "100000000", "--out", "o"],
        "--budget 100,000,000: at most 100,000 trials"),
    "a synthetic dataset of 10^23 prompts": (
        lambda t: ["trace", "synth", "logic-8k", "--out", "s.jsonl", "--dataset-size",
                   "99999999999999999999999"],
        "--dataset-size must be at most 16,777,216"),
    "30M forecast seeds": (
        lambda t: ["forecast", "--trace", str(FIX / "run-sync" / "trace.jsonl"), "--policy",
                   "sync", "--seeds", "30000000"],
        "--seeds must be from 1 to 1,000, got 30000000"),
    "a knob of 1e308 (int(inf) in the policy)": (
        lambda t: ["simulate", *SMALL, "--policy", "partial", "--set", "over_sample=1e308",
                   "--out", "o"],
        "--set over_sample=1e308: expected a number of at most 1e+09"),
    "an integer knob past 32 bits": (
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--set", "rollout_batch=" + "9" * 30,
                   "--out", "o"],
        "expected an integer of at most 2,147,483,647"),
    # past Python's 4,300-digit int(): "expected an integer", and the 5,000 digits in the line
    "an integer knob of 5,000 digits": (
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--set", "rollout_batch=" + "9" * 5000,
                   "--out", "o"],
        "--set rollout_batch=99999999999999999999... (5,000 characters): expected an integer of "
        "at most 2,147,483,647"),
    "a knob value with a stray underscore": (  # (no "at most": it is no integer at all)
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--set", "rollout_batch=1_", "--out", "o"],
        "--set rollout_batch=1_: expected an integer"),
    "a long knob value that is no integer": (
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--set", "rollout_batch=" + "x" * 100,
                   "--out", "o"],
        "--set rollout_batch=xxxxxxxxxxxxxxxxxxxx... (100 characters): expected an integer"),
    "a generation cap of 10^30": (
        lambda t: ["trace", "import", str(FIX / "splitwise_conv_head.csv"), "--prompt-len-col",
                   "num_prefill_tokens", "--response-len-col", "num_decode_tokens",
                   "--max-response-len", "1" + "0" * 30, "--out", "i.jsonl"],
        "max_response_len must be at most 2,147,483,647"),
    "a W&B drift export that is a directory": (
        lambda t: ["trace", "fit", str(FIX / "run-sync" / "trace.jsonl"), "--out", "m.json",
                   "--drift-from", str(t)],
        "cannot read it (Is a directory)"),
    # (it said "no step column 'step'; found: {"step": 1, ...", the JSON read as CSV cells)
    "a metrics JSONL given as the W&B drift export": (
        lambda t: ["trace", "fit", str(FIX / "run-sync" / "trace.jsonl"), "--out", "m.json",
                   "--drift-from", str(FIX / "metrics" / "verl_metrics.jsonl"), "--step-column", "step"],
        "verl_metrics.jsonl: JSON, not a CSV: --drift-from reads a W&B \"Export CSV\" of the response "
        "length (a metrics JSONL goes to `calibrate --from-metrics`)"),
    "a TRL table that is not UTF-8": (
        lambda t: ["trace", "import", str(Path(_write(t / "trl" / "c.json", b"\xff\xfd{")).parent),
                   "--from", "trl", "--out", "i.jsonl"],
        "c.json: not UTF-8 text (byte 0)"),
    "a TRL table in UTF-16": (
        lambda t: ["trace", "import", str(Path(_write(t / "trl" / "c.json", '{"a": 1}'.encode("utf-16"))).parent),
                   "--from", "trl", "--out", "i.jsonl"],
        "c.json: UTF-16 text (its byte-order mark), not UTF-8: save it as UTF-8"),
    # Latin-1 JSON (a UnicodeDecodeError traceback from every command taking --cluster)
    "a cluster file that is not UTF-8": (
        lambda t: ["simulate", *SMALL, "--policy", "sync", "--cluster",
                   _write(t / "c.json", LATIN1_CLUSTER), "--out", "o"],
        "c.json: not UTF-8 text (byte 54)"),
    "a profile that is not UTF-8": (
        lambda t: ["profile", "show", _write(t / "p.json", b'{"sortedrl_profile": "caf\xe9"}')],
        "p.json: not UTF-8 text (byte 25)"),
    "a trace model that is not UTF-8": (
        lambda t: ["simulate", "--trace", _write(t / "m.json", b'{"sortedrl_trace_model": "\xe9"}'),
                   "--policy", "sync", "--out", "o"],
        "m.json: not UTF-8 text (byte 26)"),
    "a tune.json that is not UTF-8": (
        lambda t: ["export", "verl", _write(t / "tune.json", b'{"trials": "caf\xe9"}')],
        "tune.json: not UTF-8 text (byte 15)"),
    "a compare.json that is not UTF-8": (
        lambda t: ["report", str(Path(_write(t / "c" / "compare.json", b'["caf\xe9"]')).parent),
                   "--out", "r.html"],
        "compare.json: not UTF-8 text (byte 5)"),
    "compare --steps with a trace file (ignored before)": (
        lambda t: ["compare", "--trace", str(FIX / "run-sync" / "trace.jsonl"), "--policy", "sync",
                   "--steps", "2", "--out", "o"],
        "error: --steps: not with a trace file ("),
    "tune --prompts and --group-size with a trace file (ignored before)": (
        lambda t: ["tune", "--trace", str(FIX / "run-sync" / "trace.jsonl"), "--policy", "sync",
                   "--prompts", "-1", "--group-size", "0", "--out", "o"],
        "error: --prompts and --group-size: not with a trace file ("),
    "forecast --prompts with a trace file (ignored before)": (
        lambda t: ["forecast", "--trace", str(FIX / "run-sync" / "trace.jsonl"), "--policy",
                   "sync", "--prompts", "4"],
        f"error: --prompts needs a trace model: {FIX / 'run-sync' / 'trace.jsonl'} is a trace, not a trace "
        "model (`sortedrl trace fit` makes one of it); a trace has its own prompts per step"),
    "forecast --seeds with a trace file (ignored before)": (
        lambda t: ["forecast", "--trace", "math-16k", "--policy", "sync", "--seeds", "5"],
        "error: --seeds needs a trace model: math-16k.jsonl is a trace, not a trace model (`sortedrl "
        "trace fit` makes one of it); a trace is simulated once, as it is"),
    "forecast --trace-model given a trace": (
        lambda t: ["forecast", "--trace-model", "math-16k", "--policy", "sync", "--steps", "4"],
        "error: --steps needs a trace model: math-16k.jsonl is a trace, not a trace model (`sortedrl "
        "trace fit` makes one of it); a trace has its own steps"),
    "forecast --cluster given twice (two identical rows before)": (
        lambda t: ["forecast", "--trace", "math-16k", "--policy", "sync", "--cluster", "h100-llama3.1-8b",
                   "--cluster", "h100-llama3.1-8b"],
        "error: --cluster h100-llama3.1-8b is given twice"),
    **{f"{command[0]} --seed -1 with a trace model (a NumPy traceback before)": (
        lambda t, command=command: [*command, "--trace-model", _model(t), "--seed", "-1"],
        "error: --seed must be >= 0, got -1")
       for command in (["simulate", "--policy", "sync"], ["compare", "--policy", "sync"],
                       ["tune", "--policy", "sync", "--budget", "1"], ["forecast", "--policy", "sync", "--steps", "2"])},
    "a tune.json whose base cluster is a number": (
        lambda t: ["export", "verl", _write(t / "tune.json", json.dumps({
            "cluster": 5, "best": {"overall": 0},
            "trials": [{"id": 0, "policy": "sync", "params": {}}]}))],
        "tune.json: field 'cluster': expected a cluster name, got 5"),
}


def _model(t: Path) -> str:
    """A trace model fitted on the bundled math-16k trace, in ``t``."""
    r = runner.invoke(app, ["trace", "fit", "math-16k", "--out", str(t / "model.json")])
    assert r.exit_code == 0, r.output
    return str(t / "model.json")


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_error_line_and_writes_nothing(tmp_path, monkeypatch, case):
    make, message = CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    args = make(inputs)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert list(work.iterdir()) == []


def _metrics(tmp: Path, value: float) -> Path:
    lines = (FIX / "metrics" / "verl_metrics.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for rec in recs:
        for key in rec["data"]:
            if key.startswith("timing_s/"):  # every part of an update (and the sync)
                rec["data"][key] = value
    path = tmp / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize("value, message", [
    (0.0, "the update at step 1 took 0 s: a step that logs an update time must have trained"),
    # (a NaN MAPE was written; one zero step among others made it inf, written as Infinity)
    (-3.0, "timing_s/update_actor at step 1: -3 is not from 0 to 1e+15"),  # a negative MAPE
])
def test_metrics_the_fit_cannot_use_are_one_error_line(tmp_path, value, message):
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(_metrics(tmp_path, value)),
                            "--cluster", "h100-llama3.1-8b", "--out", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'm.jsonl'}: {message}"], r.output
    assert not (tmp_path / "p.json").exists()


def _npz_run(tmp: Path, change) -> Path:
    run = tmp / "run"
    r = runner.invoke(app, ["simulate", *SMALL, "--policy", "sync", "--out", str(run)])
    assert r.exit_code == 0, r.output
    arrays = dict(np.load(run / "timeline.npz"))
    change(arrays)
    (run / "summary.json").unlink()
    np.savez(run / "timeline.npz", **arrays)
    return run


def _labels(a: dict) -> None:
    a["span.end.labels"] = np.array([f"l{k}" for k in range(300)])
    a["span.end"] = np.full(a["span.end"].shape, 299, dtype=np.uint16)


def _offsets(a: dict) -> None:
    a["train.samples.offsets"] = np.array([0, 2**64 - 1, a["train.samples.values"].size],
                                          dtype=np.uint64)


def _no_gpus(a: dict) -> None:
    meta = json.loads(a["meta"].tobytes())
    a["meta"] = np.frombuffer(json.dumps({**meta, "gpus": 0}).encode(), dtype=np.uint8)


@pytest.mark.parametrize("change, message", [
    (_labels, "array 'span.end.labels' has 300 labels; a column holds at most 256"),
    (_offsets, "array 'train.samples.offsets' has a value past int64 "  # wrapped: accepted
               "(-9223372036854775808..9223372036854775807)"),
    # the summary divided by 0 GPUs: ZeroDivisionError
    (_no_gpus, "array 'meta': field 'gpus': expected an integer >= 1 and at most 1,048,576, "
               "got 0"),
])
def test_a_crafted_columnar_timeline_is_one_error_line(tmp_path, change, message):
    run = _npz_run(tmp_path, change)
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [f"error: {run / 'timeline.npz'}: {message}"]
    assert not (tmp_path / "p.html").exists()


def test_an_npz_member_whose_header_claims_a_terabyte_is_one_error_line(tmp_path):
    # numpy allocated the claimed shape before reading: "error: out of memory", no file named
    run = _npz_run(tmp_path, lambda a: None)
    path = run / "timeline.npz"
    members = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            members[info.filename] = z.read(info)
    data = io.BytesIO(members["span.t.npy"])
    np.lib.format.read_magic(data)
    np.lib.format.read_array_header_1_0(data)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (10**12,)})
    members["span.t.npy"] = header.getvalue() + data.read()
    with zipfile.ZipFile(path, "w") as z:
        for name, body in members.items():
            z.writestr(name, body)
    held = len(members["span.t.npy"]) - len(header.getvalue())
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        f"error: {path}: array 'span.t': its header claims shape (1000000000000,) "
        f"(8,000,000,000,000 bytes), more than the {held:,} bytes the file holds for it"]
    assert not (tmp_path / "p.html").exists()


def test_a_jsonl_timeline_of_no_gpus_is_one_error_line(tmp_path):
    run = tmp_path / "run"
    r = runner.invoke(app, ["simulate", *SMALL, "--policy", "sync", "--timeline", "jsonl",
                            "--out", str(run)])
    assert r.exit_code == 0, r.output
    (run / "summary.json").unlink()
    path = run / "timeline.jsonl"
    head, rest = path.read_text().split("\n", 1)
    path.write_text(json.dumps({**json.loads(head), "gpus": 0}) + "\n" + rest)
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        f"error: {path}: line 1: meta record's field 'gpus': expected an integer >= 1 and at most "
        "1,048,576, got 0"]
    assert not (tmp_path / "p.html").exists()


def test_a_slime_dump_that_is_empty_is_one_error_line(tmp_path):
    pytest.importorskip("torch")
    dump = tmp_path / "slime"
    dump.mkdir()
    (dump / "rollout_data_0.pt").write_bytes(b"")
    r = runner.invoke(app, ["trace", "import", str(dump), "--from", "slime", "--out",
                            str(tmp_path / "t.jsonl")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {dump / 'rollout_data_0.pt'}: not a "
                                                   "torch.save file"), lines


def test_tune_starts_no_more_workers_than_trials(monkeypatch, tmp_path):
    """--workers 40 for 2 trials forked 40 processes (Linux forks a pool's workers at once)."""
    import sortedrl.tune.executors as executors

    sizes = []
    real = executors.ProcessPoolExecutor

    def pool(*args, max_workers=None, **kwargs):
        sizes.append(max_workers)
        return real(*args, max_workers=max_workers, **kwargs)

    monkeypatch.setattr(executors, "ProcessPoolExecutor", pool)
    r = runner.invoke(app, ["tune", *SMALL, "--policy", "sync", "--param", "cluster.gpus=8,16",
                            "--workers", "40", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert sizes == [2]
