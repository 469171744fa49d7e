"""Bad input to ``calibrate --from-vllm-bench / --from-metrics`` and ``profile show``: one
``error:`` line naming the file and field, exit 2, no RuntimeWarning, no profile written.

- an earlier profile given as ``--cluster`` whose ``fit``, ``sources`` or ``measured_terms`` was
  edited by hand (each was a traceback);
- benchmark times no run can have: a time to first token of 0 (numpy warnings, then an error
  naming the output), a duration of 1e-300 s (an SVD traceback) or 1e308 s, gaps or send times
  of 1e308 s (the replay hung), and one file given several times (it passed the rule of a file
  a fitted term);
- a profile with a NaN or negative cost (``profile show`` printed it);
- ``--out`` not a .json file (``--cluster`` reads no other).
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.calibration.bench_file import read_bench
from sortedrl.calibration.replay import replay
from sortedrl.calibration.vllm_bench import engine_costs
from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import preset

FIX = Path(__file__).resolve().parent / "fixtures"
BENCH, METRICS = FIX / "vllm_bench", FIX / "metrics" / "verl_metrics.jsonl"
PRESET = "h100-llama3.1-8b-1gpu-32seq"
runner = CliRunner()


def invoke(args: list[str]):
    """Run the CLI; a RuntimeWarning (numpy's overflow or divide) fails the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = runner.invoke(app, args)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    return r


def refused(args: list[str], out: Path) -> str:
    r = invoke(args)
    assert r.exit_code == 2 and not out.exists(), r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: ") and "Traceback" not in r.output
    return r.output.strip()


def calibrate_bench(tmp_path: Path, files: list, cluster: str = PRESET) -> str:
    out = tmp_path / "p.json"
    return refused(["calibrate", "--from-vllm-bench", *map(str, files), "--cluster", cluster,
                    "--out", str(out)], out)


def bench(tmp_path: Path, edit, name: str = "b.json", source: str = "c4-r0.json") -> Path:
    raw = json.loads((BENCH / source).read_text())
    edit(raw)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


# -- 1. an earlier profile as --cluster ----------------------------------------------------------------


@pytest.fixture
def metrics_profile(tmp_path) -> dict:
    out = tmp_path / "base.json"
    r = invoke(["calibrate", "--from-metrics", str(METRICS), "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


@pytest.mark.parametrize(("edit", "message"), [
    ({"fit": "trainer"}, "field 'fit': expected an object, got 'trainer'"),
    ({"fit": [1, 2]}, "field 'fit': expected an object, got [1, 2]"),
    ({"sources": 3}, "field 'sources': expected a list of strings, got 3"),
    ({"sources": None}, "field 'sources': expected a list of strings, got None"),
    ({"measured_terms": 5}, "field 'measured_terms': expected a list of strings, got 5"),
    ({"measured_terms": ["step_fixed_s", 3]},
     "field 'measured_terms': expected a list of strings, got ['step_fixed_s', 3]"),
    ({"measured_terms": [["step_fixed_s"]]},
     "field 'measured_terms': expected a list of strings, got [['step_fixed_s']]"),
    ({"measured_terms": ["step_fixed_s", "bogus"]}, "field 'measured_terms': not a cost term: 'bogus'"),
    ({"fit": {"engine": {"files": [{}]}}}, "field 'fit.engine.files[0].path': expected a file name, got None"),
    ({"fit": {"engine": "x"}}, "field 'fit.engine': expected an object, got 'x'"),
    ({"fit": {"trainer": 5}}, "field 'fit.trainer': expected an object, got 5"),
])
def test_a_hand_edited_base_profile_is_one_error_line_before_any_fit(tmp_path, metrics_profile, edit, message):
    base = tmp_path / "edited.json"
    base.write_text(json.dumps({**metrics_profile, **edit}))
    out = tmp_path / "p.json"
    for inputs in (["--from-metrics", str(METRICS)], ["--from-vllm-bench", str(BENCH / "c4-r0.json")]):
        got = refused(["calibrate", *inputs, "--cluster", str(base), "--out", str(out)], out)
        assert got == f"error: {base}: {message}"
    assert refused(["profile", "show", str(base)], out) == f"error: {base}: {message}"  # checked alike


@pytest.mark.parametrize("key", ["host_s", "host_stderr_s"])
@pytest.mark.parametrize("value", ["x", -1.0, float("inf"), True])
def test_a_hand_edited_host_work_is_refused_not_hidden(tmp_path, key, value):
    """`profile show` left out the host-work line when host_s was not a number, without a word."""
    base = tmp_path / "base.json"
    r = invoke(["calibrate", "--from-vllm-bench", str(BENCH / "c4-r0.json"), "--cluster", PRESET, "--out", str(base)])
    assert r.exit_code == 0, r.output
    raw = json.loads(base.read_text())
    raw["fit"]["engine"][key] = value
    base.write_text(json.dumps(raw, allow_nan=True))
    assert refused(["profile", "show", str(base)], tmp_path / "none") == (
        f"error: {base}: field 'fit.engine' is not as `sortedrl calibrate` writes it (ValueError: {key} "
        f"{value!r}: expected seconds >= 0)")


def test_a_kept_engine_record_without_its_optional_lists_still_summarises(tmp_path):
    """A record kept from the base profile is summarised as `profile show` reads it (it was a
    KeyError after the profile was written)."""
    base = tmp_path / "base.json"
    r = invoke(["calibrate", "--from-vllm-bench", str(BENCH / "c4-r0.json"), "--cluster", PRESET,
                "--out", str(base)])
    assert r.exit_code == 0, r.output
    raw = json.loads(base.read_text())
    del raw["fit"]["engine"]["unidentified"], raw["fit"]["engine"]["uncertain"]
    base.write_text(json.dumps(raw))
    out = tmp_path / "p.json"
    r = invoke(["calibrate", "--from-metrics", str(METRICS), "--cluster", str(base), "--out", str(out)])
    assert r.exit_code == 0, r.output
    error = raw["fit"]["engine"]["files"][0]["error_pct"]
    assert r.output.splitlines()[:2] == [
        f"wrote {out}", f"  engine terms from 1 benchmark file(s); duration error: c4-r0.json {error:+.1f}%"]
    assert json.loads(out.read_text())["sources"] == [str(BENCH / "c4-r0.json"), str(METRICS)]


# -- 2. benchmark files --------------------------------------------------------------------------------


def one_token_at_once(raw: dict) -> None:
    raw["ttfts"][0], raw["output_lens"][0], raw["itls"][0] = 0.0, 1, []


@pytest.mark.parametrize(("edit", "message"), [
    (one_token_at_once,
     "field 'ttfts': entry 0: expected seconds >= 1e-09 (a first token takes an engine step), got 0.0"),
    (lambda r: r["ttfts"].__setitem__(5, 1e-300),
     "field 'ttfts': entry 5: expected seconds >= 1e-09 (a first token takes an engine step), got 1e-300"),
    (lambda r: r.update(duration=1e-300),
     "field 'duration': 1e-300 s is shorter than the 72 engine step(s) of its longest request (each at "
     "least 1e-09 s)"),
    (lambda r: r.update(duration=1e308),
     "field 'duration': 1e+308 s is over 1e+07 s (116 days), longer than any benchmark"),
    (lambda r: r["itls"][0].__setitem__(slice(0, 2), [1e308, 1e308]),
     "entry 0 of 'start_times', 'ttfts', 'itls': the request ends inf s into the run, after its "
     "'duration' of 1.62769 s"),
    (lambda r: r["start_times"].__setitem__(1, 1e308),
     "entry 1 of 'start_times', 'ttfts', 'itls': the request ends 1e+308 s into the run, after its "
     "'duration' of 1.62769 s"),
    (lambda r: r.update(request_rate=10.0, start_times=[*r["start_times"][:3], 1e308, *r["start_times"][4:]]),
     "entry 3 of 'start_times', 'ttfts', 'itls': the request ends 1e+308 s into the run, after its "
     "'duration' of 1.62769 s"),
    (lambda r: [r.pop(k) for k in ("start_times", "queue_times")] and r["itls"].__setitem__(2, [])
     or r["ttfts"].__setitem__(2, 5.0),
     "entry 2 of 'ttfts', 'itls': the request ends 5 s into the run, after its 'duration' of 1.62769 s"),
])
def test_times_no_run_can_have_are_refused_naming_the_field_and_request(tmp_path, edit, message):
    path = bench(tmp_path, edit)
    assert calibrate_bench(tmp_path, [path]) == f"error: {path}: {message}"


@pytest.mark.parametrize(("edit", "message"), [
    # output_lens null was a TypeError traceback; the others dropped the latencies without a word
    # and fitted the file from its totals (a review of the readers, 6 Dec 2026)
    (lambda r: r.update(output_lens=None), "field 'output_lens': expected a list (saved with --save-detailed?)"),
    (lambda r: r.pop("output_lens"), "field 'output_lens': expected a list (saved with --save-detailed?)"),
    (lambda r: r.pop("input_lens"), "field 'input_lens': expected a list (saved with --save-detailed?)"),
    (lambda r: r.update(ttfts=None), "field 'itls' without 'ttfts': the per-token fit needs both (saved "
                                     "with --save-detailed?)"),
    (lambda r: r.pop("itls"), "field 'ttfts' without 'itls': the per-token fit needs both (saved with "
                              "--save-detailed?)"),
    (lambda r: r.pop("input_lens") and r.pop("output_lens"),
     "field 'ttfts' without 'input_lens' and 'output_lens': a request's latencies need its lengths "
     "(saved with --save-detailed?)"),
])
def test_latencies_without_their_lengths_or_partner_are_refused_not_dropped(tmp_path, edit, message):
    path = bench(tmp_path, edit)
    assert calibrate_bench(tmp_path, [path]) == f"error: {path}: {message}"


def test_a_summary_shorter_than_its_longest_request_is_refused(tmp_path):
    def summary(raw: dict) -> None:
        for key in ("input_lens", "output_lens", "ttfts", "itls", "start_times", "queue_times", "errors"):
            raw.pop(key)
        raw["duration"] = 1e-300

    files = [bench(tmp_path, summary, f"s{c}.json", f"c{c}-r0.json") for c in (2, 4, 8, 16)]
    files.append(bench(tmp_path, summary, "s4b.json", "c4-r1.json"))
    total, n = (json.loads((BENCH / "c2-r0.json").read_text())[k] for k in ("total_output_tokens", "completed"))
    assert calibrate_bench(tmp_path, files) == (
        f"error: {files[0]}: field 'duration': 1e-300 s is shorter than the {math.ceil(total / n)} engine "
        "step(s) of its longest request (each at least 1e-09 s)")


def test_a_request_may_end_within_one_percent_past_the_duration(tmp_path):
    """Rounding in the saved times: up to END_SLACK (1%) past the duration is read, more is not."""
    raw = json.loads((BENCH / "c4-r0.json").read_text())
    t0 = min(raw["start_times"])
    ends = [s - t0 + t + sum(g) for s, t, g in zip(raw["start_times"], raw["ttfts"], raw["itls"], strict=True)]
    last = int(np.argmax(ends))
    assert read_bench(bench(tmp_path, lambda r: r.update(duration=ends[last] / 1.009))).detailed
    path = bench(tmp_path, lambda r: r.update(duration=ends[last] / 1.02))
    with pytest.raises(ConfigError) as e:
        read_bench(path)
    assert str(e.value) == (f"{path}: entry {last} of 'start_times', 'ttfts', 'itls': the request ends "
                            f"{ends[last]:g} s into the run, after its 'duration' of {ends[last] / 1.02:g} s")


def test_the_replay_refuses_a_step_past_any_clock_instead_of_looping():
    run = read_bench(BENCH / "c2-r0.json")
    base = preset(PRESET).cost()
    for step_fixed_s, host, step, at in ((1e308, 0.0, 1, "inf"), (math.nan, 0.0, 0, "nan"), (1e-3, 1e308, 1, "inf")):
        costs = engine_costs({"step_fixed_s": step_fixed_s, "step_s_per_seq": 0.0, "kv_read_s_per_token": 0.0,
                              "prefill_s_per_token": 0.0, "admit_s_per_request": 0.0}, base)
        with pytest.raises(ConfigError) as e:
            replay(run, costs, host, 32)
        assert str(e.value) == (f"{run.path}: the replay's step {step} ends at {at} s, past any real time: "
                                "the cost terms or the host work are not usable")
    with pytest.raises(ConfigError) as e:
        replay(run, base, math.nan, 32)
    assert str(e.value) == f"{run.path}: host work per request of nan s: expected a finite number >= 0"


def test_a_benchmark_file_given_twice_is_refused(tmp_path):
    same = BENCH / "c4-r0.json"
    assert calibrate_bench(tmp_path, [same] * 5) == (
        f"error: {same}: benchmark file given twice; give each file once")
    other = BENCH / ".." / "vllm_bench" / "c4-r0.json"
    assert calibrate_bench(tmp_path, [same, BENCH / "c8-r0.json", other]) == (
        f"error: {other}: benchmark file given twice (the same file as {same}); give each file once")
    copy = tmp_path / "copy.json"
    shutil.copyfile(same, copy)
    assert calibrate_bench(tmp_path, [same, copy]) == (
        f"error: {copy}: the same content as {same}: a benchmark file given twice; give each file once")


def test_five_copies_of_a_duration_only_file_do_not_make_five_files(tmp_path):
    """Without latencies a fit needs a file a term; copies passed that rule."""
    def duration_only(raw: dict) -> None:
        raw["ttfts"] = raw["itls"] = None

    files = [bench(tmp_path, duration_only, f"d{i}.json") for i in range(5)]
    assert calibrate_bench(tmp_path, files) == (
        f"error: {files[1]}: the same content as {files[0]}: a benchmark file given twice; give each file once")


# -- 3. NaN or negative costs ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [(math.nan, "nan"), (-1.0, "-1.0"), (math.inf, "inf")])
def test_a_profile_with_a_nan_or_negative_cost_is_refused_by_show_and_by_calibrate(
        tmp_path, metrics_profile, value, shown):
    raw = json.loads(json.dumps(metrics_profile))
    raw["costs"]["step_s_per_seq"] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))  # (NaN and Infinity as Python writes them; json reads them)
    r = invoke(["profile", "show", str(bad)])
    assert r.exit_code == 2 and r.output == f"error: {bad}: field 'costs.step_s_per_seq': expected a finite number >= 0, got {shown}\n"
    out = tmp_path / "p.json"
    assert refused(["calibrate", "--from-metrics", str(METRICS), "--cluster", str(bad), "--out", str(out)], out) == (
        f"error: {bad}: field 'costs.step_s_per_seq': expected a finite number >= 0, got {shown}")


# -- 4. --out ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["p.txt", "p.JSON", "p"])
def test_out_must_be_a_json_file_and_is_checked_before_any_input(tmp_path, name):
    out = tmp_path / name
    model = str(tmp_path / "no-model")  # (--model and --rescale: refused before the model is read)
    for inputs in (["--from-vllm-bench", str(tmp_path / "missing.json"), "--cluster", PRESET],
                   ["--from-metrics", str(METRICS), "--cluster", PRESET],
                   ["--model", model], ["--model", model, "--rescale", str(tmp_path / "old.json")]):
        assert refused(["calibrate", *inputs, "--out", str(out)], out) == (
            f"error: --out {out}: a profile is a .json file (--cluster reads no other)")


def test_a_fit_that_cluster_would_refuse_is_not_written(tmp_path):
    """Summaries lasting a nanosecond a step fit step_fixed_s = 0; --cluster refuses that profile (a
    decode step takes time), so calibrate says so instead of writing it."""
    def nanoseconds(raw: dict) -> None:
        for key in ("input_lens", "output_lens", "ttfts", "itls", "start_times", "queue_times", "errors"):
            raw.pop(key)
        raw["duration"] = math.ceil(raw["total_output_tokens"] / raw["completed"]) * 1e-9

    files = [bench(tmp_path, nanoseconds, f"s{c}-{r}.json", f"c{c}-r{r}.json") for c in (2, 4, 8, 16) for r in (0, 1)]
    assert calibrate_bench(tmp_path, files) == (
        "error: the fitted profile (not written): field 'costs': step_fixed_s + weight_read_s must be at least 1e-09 s "
        "(a decode step takes time), got 0")
