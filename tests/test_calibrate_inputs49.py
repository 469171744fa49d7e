"""calibrate's inputs as a user brings them (a fresh-eyes walk, stop 49): a compressed or
array-shaped metrics file, an empty one, --samples-per-step where it is not used, and a bundled
trace given to --trace."""

from __future__ import annotations

import bz2
import json
import lzma
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
HERE = Path(__file__).parent / "fixtures"
METRICS = HERE / "metrics" / "verl_metrics.jsonl"
PRESET = "h100-qwen2.5-7b"


def calibrate(tmp_path, *args):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", *args, "--cluster", PRESET, "--out", str(out)])
    return r, out


@pytest.mark.parametrize("name, pack, kind", [("m.jsonl.bz2", bz2.compress, "bzip2"),
                                               ("m.jsonl.xz", lzma.compress, "xz")])
def test_a_compressed_metrics_file_is_named_so(tmp_path, name, pack, kind):
    f = tmp_path / name
    f.write_bytes(pack(METRICS.read_bytes()))
    r, out = calibrate(tmp_path, "--from-metrics", str(f))
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: {kind}-compressed: decompress it first\n")
    assert not out.exists()


def test_a_compressed_trace_or_bench_file_is_named_so_too(tmp_path):
    f = tmp_path / "t.jsonl.bz2"
    f.write_bytes(bz2.compress(b'{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 9}\n'))
    r = runner.invoke(app, ["trace", "stats", str(f)])
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: bzip2-compressed: decompress it first (a trace is JSONL, "
                                          "CSV or Parquet)\n")
    r, out = calibrate(tmp_path, "--from-vllm-bench", str(f))
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: bzip2-compressed: decompress it first\n")


def test_a_json_array_of_steps_says_how_to_make_it_json_lines(tmp_path):
    f = tmp_path / "steps.json"
    f.write_text(json.dumps([json.loads(line) for line in METRICS.read_text().splitlines()], indent=2))
    r, out = calibrate(tmp_path, "--from-metrics", str(f))
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: a JSON array, not JSON lines (one object a step on each "
                                          f"line): convert it with jq -c '.[]' {f} > steps.jsonl\n")
    assert not out.exists()


def test_an_empty_metrics_file_is_said_to_be_empty(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text("\n")
    r, out = calibrate(tmp_path, "--from-metrics", str(f))
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: empty file\n")


def test_samples_per_step_is_refused_or_said_unused(tmp_path):
    bench = HERE / "vllm_bench" / "c8-r0.json"
    r, out = calibrate(tmp_path, "--from-vllm-bench", str(bench), "--samples-per-step", "5")
    assert (r.exit_code, r.stderr) == (2, "error: --samples-per-step: only with --from-metrics (the samples an "
                                          "update trained)\n")
    assert not out.exists()
    r, out = calibrate(tmp_path, "--from-metrics", str(METRICS), "--samples-per-step", "256")
    assert r.exit_code == 0, r.output
    assert "  --samples-per-step 256: not used: the tokens a step trained are logged (perf/total_num_tokens)\n" \
        in r.stdout
    with_it = json.loads(out.read_text())["costs"]
    r, out = calibrate(tmp_path, "--from-metrics", str(METRICS), "--force")
    assert json.loads(out.read_text())["costs"] == with_it  # (not used: the same fit)


def test_a_bundled_trace_name_is_read_by_calibrate_trace(tmp_path, monkeypatch):
    """--trace math-16k reaches the bundled trace, as every other --trace does (it is not
    this run's trace, so the fit then refuses it, naming it as read)."""
    monkeypatch.chdir(tmp_path)
    r, out = calibrate(tmp_path, "--from-metrics", str(METRICS), "--trace", "math-16k")
    assert r.exit_code == 2 and r.stderr.startswith("error: --trace ") and "math-16k.jsonl: 3 of the 8 metrics " \
        "rows match the trace's steps" in r.stderr, r.stderr


def test_a_renamed_tensorboard_file_is_told_how_it_is_recognised(tmp_path):
    f = tmp_path / "run1.tfevents"
    f.write_bytes((HERE / "metrics" / "tensorboard" / "verl" / "events.out.tfevents.fixture").read_bytes())
    r, out = calibrate(tmp_path, "--from-metrics", str(f))
    assert r.exit_code == 2 and r.stderr.endswith(
        " (a TensorBoard event file is told by its name, events.out.tfevents.*: give it that name, or its "
        "log directory)\n") and r.stderr.startswith(f"error: {f}: binary data"), r.stderr


def test_profile_show_names_the_kind_of_file_it_got_and_a_cluster_files_name(tmp_path):
    cluster = tmp_path / "myc.json"
    cluster.write_text(json.dumps({"preset": PRESET, "gpus": 4}))
    r = runner.invoke(app, ["profile", "show", str(cluster)])
    assert (r.exit_code, r.stderr) == (2, f"error: {cluster}: is a cluster file, not a profile (no "
                                          "'sortedrl_profile' field; make one with `sortedrl calibrate`)\n")
    prof = tmp_path / "q.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(METRICS), "--cluster", str(cluster), "--out", str(prof)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["profile", "show", str(prof)])
    assert r.exit_code == 0, r.output
    assert "  cluster: myc (a cluster file or profile of that name): 4 x h100, tp 1, colocated;" in r.stdout
    r, out = calibrate(tmp_path, "--from-metrics", str(METRICS))
    r = runner.invoke(app, ["profile", "show", str(out)])
    assert f"  cluster: preset {PRESET}: 8 x h100, tp 1, colocated;" in r.stdout


@pytest.mark.parametrize("gap, shown", [(-0.5, "-0.5"), (float("nan"), "nan"), ("x", "'x'")])
def test_a_bad_inter_token_gap_is_named_with_its_value(tmp_path, gap, shown):
    raw = json.loads((HERE / "vllm_bench" / "c8-r0.json").read_text())
    raw["itls"][2] = [0.01, gap] + raw["itls"][2][2:]
    f = tmp_path / "b.json"
    f.write_text(json.dumps(raw))
    r, out = calibrate(tmp_path, "--from-vllm-bench", str(f))
    assert (r.exit_code, r.stderr) == (2, f"error: {f}: field 'itls': entry 2: gap 1: expected seconds >= 0, "
                                          f"got {shown}\n")


def test_samples_per_step_is_refused_with_the_cpu_calibration_too(tmp_path):
    out = tmp_path / "p.json"
    for more in ([], ["--model", str(tmp_path)]):
        r = runner.invoke(app, ["calibrate", "--samples-per-step", "4", *more, "--out", str(out)])
        assert (r.exit_code, r.stderr) == (2, "error: --samples-per-step: only with --from-metrics (the samples "
                                              "an update trained)\n")
    assert not out.exists()
