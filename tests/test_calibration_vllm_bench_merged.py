"""``calibrate --from-vllm-bench`` on files whose stream merged tokens into one chunk: a server
under load sends two or more tokens in one SSE chunk (vLLM merges the outputs its API server has
not taken yet), and the client records one gap per chunk. The files here are copies of a committed
recording (tests/fixtures/vllm_bench/long) with adjacent itls entries merged (gaps j and j+1 become
one gap, their sum), which is exactly what the server's coalescing gives the client."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sortedrl.calibration.bench_concurrency import engine_steps
from sortedrl.calibration.bench_file import read_bench
from sortedrl.calibration.vllm_bench import fit_bench
from sortedrl.cli import app
from sortedrl.sim.cluster import preset
from tests.test_calibration_vllm_bench import (
    LEVELS,
    LONG,
    PRESET,
    REPEATS,
    median_error,
    run_bad,
    runner,
)


def merged_copy(tmp_path, name: str, merges: dict[int, list[int]], src: Path = LONG / "c4-r0.json") -> Path:
    """``src`` with, for request i, gaps j and j+1 merged for each j in ``merges[i]`` (applied from
    the last j back, so each j indexes the original gaps)."""
    raw = json.loads(src.read_text())
    for i, js in merges.items():
        gaps = raw["itls"][i]
        for j in sorted(js, reverse=True):
            gaps[j:j + 2] = [gaps[j] + gaps[j + 1]]
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_tokens_in_merged_chunks_are_counted_per_request(tmp_path):
    run = read_bench(merged_copy(tmp_path, "m.json", {0: [3], 5: [2, 10], 7: [0]}))
    merged = run.merged_tokens
    assert merged[[0, 5, 7]].tolist() == [1, 2, 1] and merged.sum() == 4
    original = read_bench(LONG / "c4-r0.json")
    assert [g.sum() for g in run.itls] == pytest.approx([g.sum() for g in original.itls], rel=1e-12)


def test_more_gaps_than_tokens_is_an_error(tmp_path):
    raw = json.loads((LONG / "c4-r0.json").read_text())
    raw["itls"][3].append(0.002)
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(raw))
    n = raw["output_lens"][3]
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: field 'itls': entry 3: {n} gaps for {n} output tokens (one gap per streamed chunk "
        f"after the first: at most {n - 1})")


def test_requests_with_merged_chunks_give_only_their_end_to_end_time(tmp_path):
    """Which of a request's chunks merged, and how many, does not change the fit: its first chunk
    and its gaps are set aside, its end-to-end time (its last chunk ends with its last step) and
    its lengths still count."""
    some = merged_copy(tmp_path, "a.json", {i: [3] for i in range(0, 128, 4)})
    other = merged_copy(tmp_path, "b.json", {i: [0, 5, 9] for i in range(0, 128, 4)})
    fits = [fit_bench([read_bench(p)], preset(PRESET)) for p in (some, other)]
    assert [f["files"][0]["merged_requests"] for f in fits] == [32, 32]
    assert [f["files"][0]["merged_tokens"] for f in fits] == [32, 96]
    assert {k: t["value"] for k, t in fits[0]["terms"].items()} == \
        pytest.approx({k: t["value"] for k, t in fits[1]["terms"].items()}, rel=1e-9)
    assert fits[0]["host_s"] == pytest.approx(fits[1]["host_s"], rel=1e-9)
    whole = fit_bench([read_bench(LONG / "c4-r0.json")], preset(PRESET))
    assert whole["files"][0]["merged_requests"] == whole["files"][0]["merged_tokens"] == 0
    assert whole["terms"]["step_s_per_seq"]["value"] != fits[0]["terms"]["step_s_per_seq"]["value"]  # its rows were set aside


def test_the_step_count_counts_a_merged_request_whole_or_not_at_all(tmp_path):
    """The chain of requests the count follows starts with the first request to get a token: merged
    there, it counts all its tokens (the same count); with every request merged, no request can be
    joined mid-way and the count is not readable (None, n/a in the profile)."""
    original = read_bench(LONG / "c4-r0.json")
    first = int(np.argmin(original.start_times + original.ttfts))
    head = read_bench(merged_copy(tmp_path, "head.json", {first: [1, 4]}))
    assert head.merged_tokens.sum() == 2 and engine_steps(head) == engine_steps(original) == 1650
    every = merged_copy(tmp_path, "every.json", {i: [0] for i in range(128)})
    assert engine_steps(read_bench(every)) is None
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", str(every), "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert ("  every.json: 128 of 128 requests streamed 128 token(s) in a chunk with an earlier one: only "
            "their end-to-end time fitted, not their time to first token or gaps; steps not readable off "
            "the tokens") in r.output.splitlines()  # calibrate's own summary says it too
    shown = runner.invoke(app, ["profile", "show", str(out)])
    assert shown.exit_code == 0
    assert ("    128 of 128 requests streamed 128 token(s) in a chunk with an earlier one: only their "
            "end-to-end time fitted, not their time to first token or gaps; steps not readable off the "
            "tokens") in shown.output.splitlines()
    assert "every.json" in shown.output and " n/a" in shown.output


def test_files_whose_every_request_merged_chunks_still_predict_every_level_within_5_percent(tmp_path):
    """Every request of two levels' files with five merged chunks: only the durations and the
    end-to-end times are fitted, and the profile predicts every level's median duration (on the
    unmerged files) within 5% (the unmerged fit: within 1.5%)."""
    runs = []
    for c in (4, 16):
        for k in range(REPEATS):
            src = LONG / f"c{c}-r{k}.json"
            n = len(json.loads(src.read_text())["itls"])
            merges = {i: [0, 2, 4, 6, 8] for i in range(n)}
            runs.append(read_bench(merged_copy(tmp_path, f"c{c}-r{k}.json", merges, src)))
    assert all((r.merged_tokens == 5).all() for r in runs)  # every recorded request has >= 24 tokens
    fit = fit_bench(runs, preset(PRESET))
    errors = {c: median_error(fit, c) for c in LEVELS}
    assert all(abs(e) < 0.05 for e in errors.values()), errors
