"""``calibrate --from-vllm-bench`` on files as vLLM's client writes them in its other modes
(helper 205 read its source, vllm/benchmarks/serve.py and lib/endpoint_request_func.py):
``--backend openai-chat``, whose role chunk the client counts as the first token;
``--ramp-up-strategy``, whose rate says "inf" while its sends follow the ramp;
``--append-result``, which appends each run as a line to a ``.json`` file; and the older
``benchmark_serving.py``, which saves no ``start_times``. Each was refused or misread."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_calibration_vllm_bench import PRESET, TRUE, lengths, run_bad, synthetic

from sortedrl.calibration.bench_concurrency import engine_steps, most_running
from sortedrl.calibration.bench_file import BenchRun, read_bench, read_bench_runs
from sortedrl.calibration.replay import replay
from sortedrl.calibration.vllm_bench import engine_costs, fit_bench
from sortedrl.sim.cluster import preset

ROLE_GAP_S = 5e-5  # the role chunk comes just before the first token's, from the same engine output


def terms(fit: dict) -> dict:
    return {k: v["value"] for k, v in fit["terms"].items()}


def as_chat(path, name: str, role_gap: float = ROLE_GAP_S):
    """The same run as the chat client records it: its ``ttft`` the role chunk's, one gap more."""
    raw = json.loads(path.read_text())
    raw["backend"] = raw["endpoint_type"] = "openai-chat"
    raw["ttfts"] = [t - role_gap for t in raw["ttfts"]]
    raw["itls"] = [[role_gap, *g] for g in raw["itls"]]
    out = path.with_name(name)
    out.write_text(json.dumps(raw))
    return out


def two_levels(tmp_path) -> list:
    files = []
    for c in (3, 9):
        ins, outs = lengths(c, 30)
        files.append(synthetic(tmp_path, f"c{c}.json", ins, outs, c))
    return files


def test_a_chat_run_fits_as_its_completions_twin(tmp_path):
    """Read as before, every chat file was refused (`36 gaps for 36 output tokens`)."""
    files = two_levels(tmp_path)
    chats = [as_chat(p, f"chat-{p.name}") for p in files]
    cl = preset(PRESET)
    fit = fit_bench([read_bench(p) for p in chats], cl)
    assert terms(fit) == pytest.approx(TRUE, rel=1e-6)
    assert terms(fit) == pytest.approx(terms(fit_bench([read_bench(p) for p in files], cl)), rel=1e-9)
    run, twin = read_bench(chats[0]), read_bench(files[0])
    assert run.ttfts == pytest.approx(twin.ttfts, abs=1e-12)
    assert [len(g) for g in run.itls] == [len(g) for g in twin.itls]


def test_a_chat_run_whose_every_request_has_a_merged_chunk_still_has_its_role_chunk_folded(tmp_path):
    """Review: folded only where some request had as many gaps as tokens, a run whose every
    request also had two tokens in one chunk kept the role chunk's time as its first token's."""
    path = two_levels(tmp_path)[0]
    raw = json.loads(path.read_text())
    raw["itls"] = [[g[0] + g[1], *g[2:]] if len(g) > 1 else [] for g in raw["itls"]]  # (a merged pair each)
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps(raw))
    twin = read_bench(merged)
    run = read_bench(as_chat(merged, "chat-merged.json"))
    assert run.ttfts == pytest.approx(twin.ttfts, abs=1e-12)
    assert [len(g) for g in run.itls] == [len(g) for g in twin.itls]
    assert np.concatenate(run.itls) == pytest.approx(np.concatenate(twin.itls), abs=1e-12)
    assert run.merged_tokens.tolist() == twin.merged_tokens.tolist()


def test_a_chat_run_with_more_gaps_than_chunks_can_have_is_refused(tmp_path):
    path = as_chat(two_levels(tmp_path)[0], "chat.json")
    raw = json.loads(path.read_text())
    raw["itls"][0] = [ROLE_GAP_S, *raw["itls"][0]]
    path.write_text(json.dumps(raw))
    n = raw["output_lens"][0]
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: field 'itls': entry 0: {n + 1} gaps for {n} output tokens (one gap per "
        f"streamed chunk after the role's chunk: at most {n})")


def test_a_completions_run_with_as_many_gaps_as_tokens_is_still_refused(tmp_path):
    path = as_chat(two_levels(tmp_path)[0], "not-chat.json")
    raw = json.loads(path.read_text())
    raw["backend"] = raw["endpoint_type"] = "vllm"
    path.write_text(json.dumps(raw))
    n = raw["output_lens"][0]
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: field 'itls': entry 0: {n} gaps for {n} output tokens (one gap per "
        f"streamed chunk after the first: at most {n - 1})")


def ramp_file(tmp_path, name: str, c: int | None, **changes):
    """A linear ramp of sends (what ``--ramp-up-strategy linear`` does), saved as vLLM's client
    saves it: ``request_rate`` "inf", the ramp's keys, the sends in ``start_times``."""
    cl = preset(PRESET)
    ins, outs = lengths(7 if c is None else c, 40)
    rps = np.linspace(5.0, 200.0, len(ins))
    arrivals = np.concatenate([[0.0], np.cumsum(1.0 / rps[:-1])])
    run = BenchRun("x", 1.0, np.asarray(ins), np.asarray(outs), c or len(ins), arrivals, None, None,
                   None, None, False)
    rep = replay(run, engine_costs(TRUE, cl.cost()), 0.002, cl.max_num_seqs)
    raw = {"backend": "vllm", "request_rate": "inf", "max_concurrency": c, "duration": rep.duration_s,
           "ramp_up_strategy": "linear", "ramp_up_start_rps": 5, "ramp_up_end_rps": 200,
           "input_lens": ins, "output_lens": outs, "ttfts": (rep.first_token_s - rep.sent_s).tolist(),
           "itls": [[e - f] for e, f in zip(rep.end_s, rep.first_token_s, strict=True)],  # (as the finite-rate test)
           "start_times": (7.0 + rep.sent_s).tolist(), "queue_times": (rep.sent_s - arrivals).tolist()}
    raw.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path, arrivals


def test_a_ramp_up_is_replayed_from_its_sends_as_a_finite_rate_is(tmp_path):
    """Read as all sent at once (its rate is "inf"), a linear ramp fitted -63.5%, replayed as a
    closed loop its sends never were."""
    (a, arrivals), (b, _) = ramp_file(tmp_path, "ramp4.json", 4), ramp_file(tmp_path, "ramp12.json", 12)
    runs = [read_bench(a), read_bench(b)]
    assert runs[0].arrivals == pytest.approx(arrivals, abs=1e-9)
    fit = fit_bench(runs, preset(PRESET))
    # (a finite rate's fit alternates with its replay, and stops near the truth: step_fixed_s
    # within 0.01% here, the admission's term within 4%; the durations within 0.1%)
    assert terms(fit)["step_fixed_s"] == pytest.approx(TRUE["step_fixed_s"], rel=1e-3)
    assert all(abs(f["error_pct"]) < 0.1 for f in fit["files"])
    rated = [ramp_file(tmp_path, f"rate{c}.json", c, request_rate=50.0, ramp_up_strategy=None)[0] for c in (4, 12)]
    assert terms(fit_bench([read_bench(p) for p in rated], preset(PRESET))) == terms(fit)  # (as a finite rate is)


def test_a_ramp_up_without_send_times_cannot_be_replayed(tmp_path):
    path, _ = ramp_file(tmp_path, "ramp.json", None, start_times=None, queue_times=None)
    assert read_bench(ramp_file(tmp_path, "open.json", None)[0]).concurrency == 40  # (no closed loop read off its sends)
    assert run_bad(tmp_path, [path]) == (
        f"error: {path}: field 'start_times': needed to replay a ramp-up (ramp_up_strategy) (save "
        "with --save-detailed, or benchmark without --ramp-up-strategy)")


def test_runs_appended_to_a_json_file_are_read_a_line_each(tmp_path):
    """``--append-result`` writes a newline and the next run's JSON into the same ``.json``
    file: it was refused (`not valid JSON (Extra data ...)`)."""
    files = two_levels(tmp_path)
    appended = tmp_path / "appended.json"
    appended.write_text("\n".join(p.read_text() for p in files))
    runs = read_bench_runs(appended)
    assert [r.path for r, _ in runs] == [f"{appended}:1", f"{appended}:2"]
    assert [line for _, line in runs] == [p.read_bytes() for p in files]
    cl = preset(PRESET)
    assert terms(fit_bench([r for r, _ in runs], cl)) == pytest.approx(
        terms(fit_bench([read_bench(p) for p in files], cl)), rel=1e-12)


def test_a_bad_run_appended_names_its_line_and_a_bad_single_run_is_said_as_before(tmp_path):
    files = two_levels(tmp_path)
    raw = json.loads(files[1].read_text())
    raw["duration"] = -1
    appended = tmp_path / "appended.json"
    appended.write_text(files[0].read_text() + "\n" + json.dumps(raw) + "\n")
    assert run_bad(tmp_path, [appended]) == f"error: {appended}:2: field 'duration': must be > 0 s, got -1.0"
    single = tmp_path / "single.json"
    single.write_text(json.dumps(raw, indent=2))  # (many lines, one object)
    assert run_bad(tmp_path, [single]) == f"error: {single}: field 'duration': must be > 0 s, got -1.0"
    broken = tmp_path / "broken.json"
    broken.write_text(files[0].read_text() + "\n{")
    assert run_bad(tmp_path, [broken]).startswith(f"error: {broken}:2: not valid JSON (")


def test_the_older_clients_file_has_its_closed_loop_sends_read_off_its_latencies(tmp_path):
    """``benchmark_serving.py`` saves no ``start_times``: taken as all sent at 0, a closed loop
    of 4 seemed to run 48 requests at once in a ninth of its engine steps (a false warning)."""
    ins, outs = lengths(4, 40)
    path = synthetic(tmp_path, "c4.json", ins, outs, 4)
    raw = json.loads(path.read_text())
    sent = np.asarray(raw.pop("start_times"))
    old = tmp_path / "old.json"
    old.write_text(json.dumps(raw))
    run, twin = read_bench(old), read_bench(path)
    assert run.start_times is None
    assert run.sends == pytest.approx(sent - sent.min(), abs=1e-9)
    assert engine_steps(run) == engine_steps(twin)
    assert most_running(run.sends, run.ttfts, run.itls) == most_running(twin.sends, twin.ttfts, twin.itls) == 4
