"""Importers of agentic rollout logs that record turns: AReaL's session tracer and NeMo-Gym's
per-turn metrics (docs/traces.md). Dumps are written here in each framework's own layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces import read_trace
from sortedrl.traces.importers import import_framework

runner = CliRunner()


# -- AReaL -------------------------------------------------------------------------------------


def _session(task, session, generate, toolcall=(), status="accepted", **extra):
    phases = {"generate": [{"start_ts": s, "end_ts": e} for s, e in generate],
              "reward": [{"start_ts": 99.0, "end_ts": 99.5}]}
    if toolcall:
        phases["toolcall"] = [{"start_ts": s, "end_ts": e} for s, e in toolcall]
    return {"task_id": task, "session_id": session, "rank": 0, "status": status,
            "submit_ts": 0.0, "finalized_ts": 100.0, "total_s": 100.0, "phases": phases, **extra}


def _areal(tmp_path, sessions) -> Path:
    d = tmp_path / "session_tracer"
    d.mkdir(exist_ok=True)
    (d / "sessions-r0.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return d


# two sessions of task 7: session 0 generates 0-2 s, calls tools 2.5-3.5 and 3-4 s (in parallel:
# 1.5 s covered), generates again 5-6 s, then one more call after its last turn (left out);
# session 1 generates once. A third session failed and is skipped.
SESSIONS = [
    _session(7, 0, [(5.0, 6.0), (0.0, 2.0)], [(2.5, 3.5), (3.0, 4.0), (6.5, 7.0)],
             turn_tokens=[40, 9], turn_tool_tokens=[12], prompt_tokens=30),
    _session(7, 1, [(0.0, 3.0)], turn_tokens=[55], prompt_tokens=30),
    _session(8, 2, [(0.0, 1.0)], status="failed"),
]


def test_areal_sessions_give_turns_and_tool_seconds(tmp_path) -> None:
    trace, report = import_framework("areal", _areal(tmp_path, SESSIONS))
    assert (report.rows, report.groups, report.group_size) == (2, 1, 2)
    assert trace.response_len.tolist() == [49, 55] and trace.prompt_len.tolist() == [30, 30]
    assert trace.turns_per_row().tolist() == [2, 1]
    assert trace.turn_gen.tolist() == [40, 9, 55]
    assert trace.turn_tool_s.tolist() == [1.5, 0.0, 0.0]
    assert trace.turn_tool_tokens.tolist() == [12, 0, 0]
    assert report.notes == ("skipped 1 AReaL sessions not accepted or rejected (pending, failed "
                            "or dropped)", "AReaL's sessions carry no training step: all are step 0",
                            "left out 1 AReaL tool calls that did not start between two turns "
                            "(before the first, after the last, or during a generate phase)")


def test_areal_without_token_counts_needs_a_decode_rate(tmp_path) -> None:
    bare = [{k: v for k, v in s.items() if k not in ("turn_tokens", "turn_tool_tokens",
                                                       "prompt_tokens")} for s in SESSIONS[:2]]
    path = _areal(tmp_path, bare)
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", str(path), "--from", "areal", "--out", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.splitlines() == [
        f"error: {path / 'sessions-r0.jsonl'}: line 1: AReaL's session tracer logs no token "
        "counts: add a field 'turn_tokens' (generated tokens per generate phase) to its session "
        "record, or give --decode-tps to estimate them from the generate seconds"]
    r = runner.invoke(app, ["trace", "import", str(path), "--from", "areal", "--decode-tps", "20",
                            "--prompt-len", "64", "--out", str(out)])
    assert r.exit_code == 0, r.output
    t = read_trace(out)
    assert t.turn_gen.tolist() == [40, 20, 60]  # 2 s, 1 s, 3 s at 20 tok/s
    assert (t.prompt_len == 64).all() and t.turn_tool_tokens.tolist() == [0, 0, 0]
    assert "round(generate seconds x 20 tok/s) (--decode-tps)" in r.stderr
    assert "2 sessions get prompt_len 64 (--prompt-len)" in r.stderr
    assert "1 multi-turn sessions' tool calls append 0 tokens" in r.stderr


@pytest.mark.parametrize("bad, message", [
    (dict(phases={"generate": [{"start_ts": 3.0, "end_ts": 1.0}]}),
     "field 'phases.generate[0]': ends at 1.0 before it starts at 3.0 (a negative duration)"),
    (dict(phases={"generate": [{"start_ts": 0.0, "end_ts": 1.0}, {"start_ts": 2.0, "end_ts": 3.0}],
                  "toolcall": [{"start_ts": 1.5}]}),
     "field 'phases.toolcall[0].end_ts': expected a time in seconds, got None"),
    (dict(phases={"generate": [{"start_ts": float("nan"), "end_ts": 1.0}]}),  # was accepted
     "field 'phases.generate[0].start_ts': expected a time in seconds, got nan"),
    (dict(phases={"generate": [{"start_ts": 0.0, "end_ts": 1.0}, {"start_ts": 2.0, "end_ts": 3.0}],
                  "toolcall": [{"start_ts": 1.0, "end_ts": float("inf")}]}),
     "field 'phases.toolcall[0].end_ts': expected a time in seconds, got inf"),
    (dict(turn_tokens=[5, -1]), "turn 2: field 'turn_tokens': -1 is below 1"),
    (dict(turn_tokens=[5]), "field 'turn_tokens': expected a list of 2 counts (one per generate "
                            "phase), got [5]"),
    (dict(turn_tool_tokens=[-3]), "call 1: field 'turn_tool_tokens': -3 is below 0"),
])
def test_areal_bad_sessions_are_one_line_naming_file_line_field(tmp_path, bad, message) -> None:
    session = {**SESSIONS[0], **bad}
    path = _areal(tmp_path, [SESSIONS[1], session])
    with pytest.raises(TraceError) as e:
        import_framework("areal", path)
    assert str(e.value) == f"{path / 'sessions-r0.jsonl'}: line 2: {message}"


# -- NeMo-Gym ----------------------------------------------------------------------------------


def _t(s: float) -> str:
    return f"2026-01-01T00:00:{s:06.3f}+00:00"


def _rollout(calls, actions, resolved=True, **extra) -> dict:
    """``calls``: (start, end, prompt_tokens, completion_tokens); ``actions``: (start, end)."""
    return {"resolved": resolved, **extra, "per_turn_metrics": {
        "response_latencies": [{"model": "m", "latency": e - s, "response_id": f"r{k}",
                                "timestamp": _t(e)} for k, (s, e, _, _) in enumerate(calls)],
        "token_usages": [{"model": "m", "prompt_tokens": p, "completion_tokens": c,
                          "response_id": f"r{k}"} for k, (_, _, p, c) in enumerate(calls)],
        "action_execution_latencies": [
            {"observation_type": "run", "observation_id": str(k), "latency": e - s,
             "timestamp": _t(e), "start_timestamp": _t(s)} for k, (s, e) in enumerate(actions)]}}


def _gym(tmp_path, rollouts) -> Path:
    root = tmp_path / "results"
    for k, (instance, r) in enumerate(rollouts):
        d = root / f"{instance}_17000000{k}_ab{k}"
        d.mkdir(parents=True)
        (d / "nemo_gym_metrics.json").write_text(json.dumps(r))
    return root


# rollout A: 3 LLM calls; 2 actions after call 1 (4-6 and 5-8 s: 4 s covered), 1 after call 2
# (12-13 s) and one after the last call (left out). The context grows 100 -> 180 -> 250:
# 80 - 30 = 50 and 70 - 20 = 50 tool-output tokens. Rollout B: one call.
A = _rollout([(0, 3, 100, 30), (9, 11, 180, 20), (14, 15, 250, 7)],
             [(4, 6), (5, 8), (12, 13), (16, 17)])
B = _rollout([(0, 2, 100, 44)], [], resolved=False)


def test_nemo_gym_per_turn_metrics_give_turns(tmp_path) -> None:
    trace, report = import_framework("nemo-gym", _gym(tmp_path, [("django__1", A), ("django__1", B)]))
    assert (report.rows, report.groups, report.group_size, report.files) == (2, 1, 2, 2)
    assert trace.response_len.tolist() == [57, 44] and trace.prompt_len.tolist() == [100, 100]
    assert trace.turn_gen.tolist() == [30, 20, 7, 44]
    assert trace.turn_tool_s.tolist() == [4.0, 1.0, 0.0, 0.0]
    assert trace.turn_tool_tokens.tolist() == [50, 50, 0, 0]
    assert trace.reward.tolist() == [1.0, 0.0]
    assert report.notes == ("left out 1 NeMo-Gym actions that did not start between two LLM "
                            "calls (before the first, after the last, or during a call): no turn "
                            "waits for them", "NeMo-Gym rollouts carry no step: 1 step(s) "
                            "found from their times (a step is a stretch in which some rollout "
                            "was running; NeMo-RL trains between steps)")


def test_nemo_gym_condensed_history_appends_nothing(tmp_path) -> None:
    shrunk = _rollout([(0, 3, 100, 30), (9, 11, 90, 20)], [(4, 6)], step=3)
    trace, report = import_framework("nemo-gym", _gym(tmp_path, [("x", shrunk)]))
    assert trace.turn_tool_tokens.tolist() == [0, 0] and trace.step.tolist() == [3]
    assert report.notes[0].startswith("1 NeMo-Gym tool calls were followed by a shorter context")


def test_nemo_gym_bad_rollouts_are_one_line(tmp_path) -> None:
    bad = json.loads(json.dumps(A))
    bad["per_turn_metrics"]["action_execution_latencies"][1]["latency"] = -1.0
    path = _gym(tmp_path, [("x", bad)])
    f = next(path.rglob("nemo_gym_metrics.json"))
    with pytest.raises(TraceError) as e:
        import_framework("nemo-gym", path)
    assert str(e.value) == (f"{f}: field 'per_turn_metrics.action_execution_latencies[1].latency':"
                            " -1.0 is negative")
    missing = json.loads(json.dumps(A))
    del missing["per_turn_metrics"]["token_usages"][2]
    f.write_text(json.dumps(missing))
    with pytest.raises(TraceError) as e:
        import_framework("nemo-gym", path)
    assert str(e.value) == (f"{f}: field 'per_turn_metrics.token_usages': no entry for "
                            "response_id 'r2' (LLM call 3)")
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", str(path), "--from", "nemo-gym", "--out", str(out)])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and not out.exists()
    assert len(r.stderr.splitlines()) == 1


def test_areal_decode_rate_past_int32_is_one_line(tmp_path) -> None:
    bare = [{k: v for k, v in s.items() if k != "turn_tokens"} for s in SESSIONS[:2]]
    path = _areal(tmp_path, bare)
    for rate in ("1e10", "1e300"):
        with pytest.raises(TraceError) as e:
            import_framework("areal", path, decode_tps=float(rate))
        assert str(e.value).startswith(f"{path / 'sessions-r0.jsonl'}: line 1: --decode-tps "
                                       f"{float(rate):g} x the generate seconds gives ")
        assert str(e.value).endswith("past 2,147,483,647; give the decode rate in tokens per second")


def test_areal_only_options_are_refused_for_other_sources(tmp_path) -> None:
    path = _gym(tmp_path, [("x", A)])
    out = tmp_path / "t.jsonl"
    for flag, value in (("--decode-tps", "5"), ("--prompt-len", "7")):
        r = runner.invoke(app, ["trace", "import", str(path), "--from", "nemo-gym", flag, value,
                                "--out", str(out)])
        assert r.exit_code == 2 and not out.exists()
        assert r.stderr.splitlines() == [f"error: {flag}: only for --from areal (it stands in for "
                                         "the token counts AReaL does not log); remove it"]


def test_nemo_gym_calls_with_equal_times_keep_their_logged_order(tmp_path) -> None:
    tie = _rollout([(0, 3, 100, 30), (0, 3, 100, 20)], [])
    trace, _ = import_framework("nemo-gym", _gym(tmp_path, [("x", tie)]))
    assert trace.turn_gen.tolist() == [30, 20]


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["response_latencies"][1].pop("response_id"),
     "field 'per_turn_metrics.response_latencies[1].response_id': expected a string or an "
     "integer, got None"),
    (lambda m: m["token_usages"][0].update(response_id=["r0"]),
     "field 'per_turn_metrics.token_usages[0].response_id': expected a string or an integer, "
     "got ['r0']"),
    (lambda m: m["token_usages"][2].update(response_id="r1"),
     "field 'per_turn_metrics.token_usages[2].response_id': 'r1' appears twice"),
])
def test_nemo_gym_response_ids_pair_calls_with_usages(tmp_path, edit, message) -> None:
    bad = json.loads(json.dumps(A))
    edit(bad["per_turn_metrics"])
    path = _gym(tmp_path, [("x", bad)])
    with pytest.raises(TraceError) as e:
        import_framework("nemo-gym", path)
    assert str(e.value) == f"{next(path.rglob('nemo_gym_metrics.json'))}: {message}"
