"""The NeMo-RL, NeMo-Gym and AReaL importers against dumps in the exact shape their frameworks
write (an audit compared each importer with the upstream code that writes the dump; each case
here failed before its fix). The upstream file that writes each layout is cited at its helper.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces.importers import import_framework

runner = CliRunner()


def _one_error(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


# -- NeMo-RL: train_data_step{N}.jsonl ---------------------------------------------------------


def _nemo_rl_log_data() -> dict:
    """NeMo-RL grpo.py's ``log_data`` for one step: every field a batch list (``.tolist()``).
    One prompt [1, 5, 6, 7], four responses of 6, 8, 4 and 10 tokens (end token 2), padded to
    the batch's width with 0."""
    prompt, pad = [1, 5, 6, 7], 0
    gens = [[9] * 5 + [2], [9] * 7 + [2], [9] * 3 + [2], [9] * 9 + [2]]
    width = max(len(prompt) + len(g) for g in gens)
    rest = [width - len(prompt) - len(g) for g in gens]
    return {
        "content": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]] * 4,
        "rewards": [1.0, 0.0, 1.0, 0.0],
        "input_lengths": [len(prompt) + len(g) for g in gens],
        "token_ids": [prompt + g + [pad] * r for g, r in zip(gens, rest, strict=True)],
        "token_loss_mask": [[0] * len(prompt) + [1] * len(g) + [0] * r
                            for g, r in zip(gens, rest, strict=True)],
        "sample_loss_mask": [1.0] * 4,
        "advantages": [[0.0] * width] * 4,
        "generation_logprobs": [[0.0] * width] * 4,
        "prev_logprobs": [[0.0] * width] * 4,
    }


def _nemo_rl_dump(tmp_path: Path, sliced: bool = True) -> Path:
    """As nemo_rl/utils/logger.py ``log_batched_dict_as_jsonl`` writes it: one line per slice of
    ``make_microbatch_iterator(1)`` (BatchedDataDict.slice: ``data[k][i:i + 1]``, a one-element
    list), plus its ``idx``. ``sliced=False``: the same values as plain per-sample values."""
    log_data = _nemo_rl_log_data()
    d = tmp_path / "logs"
    d.mkdir(parents=True)
    lines = []
    for i in range(4):
        sample = {k: v[i:i + 1] if sliced else v[i] for k, v in log_data.items()}
        lines.append(json.dumps({**sample, "idx": i}, default=str) + "\n")
    (d / "train_data_step1.jsonl").write_text("".join(lines))
    return d


def test_nemo_rl_reads_its_one_element_list_per_field(tmp_path) -> None:
    """Every real dump was refused: field 'input_lengths': [10] is not an integer."""
    trace, report = import_framework("nemo-rl", _nemo_rl_dump(tmp_path))
    assert (report.rows, report.groups, report.group_size, report.steps) == (4, 1, 4, 1)
    assert trace.response_len.tolist() == [6, 8, 4, 10]
    assert trace.prompt_len.tolist() == [4, 4, 4, 4]
    assert trace.reward.tolist() == [1.0, 0.0, 1.0, 0.0]
    assert trace.step.tolist() == [1, 1, 1, 1]


def test_nemo_rl_plain_values_read_the_same(tmp_path) -> None:
    sliced, _ = import_framework("nemo-rl", _nemo_rl_dump(tmp_path / "a"))
    plain, _ = import_framework("nemo-rl", _nemo_rl_dump(tmp_path / "b", sliced=False))
    assert plain == sliced


@pytest.mark.parametrize("field, value, message", [
    ("input_lengths", [10, 12], "field 'input_lengths': a list of 2 entries; a line holds one "
                                "sample (NeMo-RL writes a one-element list, or give a plain value)"),
    ("rewards", [], "field 'rewards': a list of 0 entries; a line holds one sample (NeMo-RL "
                    "writes a one-element list, or give a plain value)"),
    ("token_ids", [[1, 5, 6, 7, 9, 2], [1, 5]], "field 'token_ids': a list of 2 token lists; a "
                                                "line holds one sample (NeMo-RL writes a "
                                                "one-element list)"),
])
def test_nemo_rl_a_list_of_another_length_is_one_error_line(tmp_path, field, value,
                                                            message) -> None:
    d = _nemo_rl_dump(tmp_path)
    f = d / "train_data_step1.jsonl"
    lines = f.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    f.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    out = tmp_path / "t.jsonl"
    line = _one_error(["trace", "import", str(d), "--from", "nemo-rl", "--out", str(out)])
    assert line == f"error: {f}: line 1: {message}"
    assert not out.exists()


# -- NeMo-Gym: swebench_results_{run_session_id}/<instance>_<ts_ms>_<hash>/nemo_gym_metrics.json


T0 = datetime(2026, 8, 1, tzinfo=UTC)


def _iso(t: datetime, s: float) -> str:
    return (t + timedelta(seconds=s)).isoformat()


def _metrics(t: datetime, k: int, resolved: bool | None = True) -> dict:
    """A rollout's metrics as responses_api_agents/swe_agents/app.py leaves them: SWEBenchMetrics
    (~274) written through ``update_and_read_metrics`` (~2297), which drops None values; no
    ``instance_id``, no ``step``. Two LLM calls (0-5 s and 8-12 s), one action 5.5-7.5 s, the
    evaluation 13.5-17.5 s. Response k: 100 + k and 50 tokens; the context grows 1000 -> 1300."""
    m = {"ray_queue_time": 0.4, "openhands_run_time": 13.0,
         "generation_start_timestamp": _iso(t, 0), "generation_apptainer_spinup_time": 1.5,
         "patch_exists": True, "final_eval_time": 4.0,
         "evaluation_start_timestamp": _iso(t, 13.5),
         "per_turn_metrics": {
             "response_latencies": [
                 {"model": "m", "latency": 5.0, "response_id": "r1", "timestamp": _iso(t, 5)},
                 {"model": "m", "latency": 4.0, "response_id": "r2", "timestamp": _iso(t, 12)}],
             "token_usages": [
                 {"model": "m", "prompt_tokens": 1000, "completion_tokens": 100 + k,
                  "response_id": "r1"},
                 {"model": "m", "prompt_tokens": 1300, "completion_tokens": 50,
                  "response_id": "r2"}],
             "action_execution_latencies": [
                 {"observation_type": "run", "latency": 2.0, "timestamp": _iso(t, 7.5)}]}}
    if resolved is not None:
        m["resolved"] = resolved
    return m


# the agent failed (app.py ~2690-2711): no per_turn_metrics; the run then sets resolved False
# (~3784); the None fields were dropped on writing
FAILED = {"ray_queue_time": 0.3, "openhands_run_time": 30.0, "patch_exists": False,
          "agent_timed_out": False, "resolved": False}
# the same failure as SWEBenchMetrics.model_dump() gives it, None fields kept
FAILED_DUMP = {"resolved": None, "patch_exists": False, "agent_error_kind": None,
               "ray_queue_time": 0.3, "openhands_run_time": 30.0,
               "evaluation_start_timestamp": None, "per_turn_metrics": None}


def _gym(tmp_path: Path, rollouts: list[tuple[str, datetime, dict]]) -> Path:
    """One server run's directory: ``swebench_results_{run_session_id}`` (app.py ~2903), a
    rollout in ``{instance_id}_{int(time.time() * 1000)}_{uuid4()[:8]}`` (~3538)."""
    base = tmp_path / "swebench_results_1785542400000_abcd1234"
    for j, (instance, t, metrics) in enumerate(rollouts):
        d = base / f"{instance}_{int(t.timestamp() * 1000) + j}_{j:08x}"
        d.mkdir(parents=True)
        if "generation_start_timestamp" not in metrics:  # set before any failure (app.py ~2673)
            metrics = {**metrics, "generation_start_timestamp": _iso(t, 0)}
        (d / "nemo_gym_metrics.json").write_text(json.dumps(metrics))
    return base


A, B, C, D, E = ("astropy__astropy-12907", "django__django-11099", "sympy__sympy-20590",
                 "flask__flask-4045", "requests__requests-2317")


def test_nemo_gym_an_instance_in_two_steps_is_two_groups(tmp_path) -> None:
    """A in step 1 and (another epoch) step 2, B in step 1 only, 4 rollouts each: this was
    "1 groups x 8" (A's 8 in one group, B dropped)."""
    later = T0 + timedelta(minutes=10)  # after the first step's rollouts and its training
    rollouts = ([(A, T0 + timedelta(seconds=k * 0.5), _metrics(T0, k)) for k in range(4)]
                + [(B, T0 + timedelta(seconds=k * 0.5), _metrics(T0, k)) for k in range(4)]
                + [(A, later + timedelta(seconds=k), _metrics(later, k)) for k in range(4)])
    trace, report = import_framework("nemo-gym", _gym(tmp_path, rollouts))
    assert (report.rows, report.groups, report.group_size, report.steps) == (12, 3, 4, 2)
    assert (report.dropped_groups, report.dropped_rows) == (0, 0)
    assert trace.step.tolist() == [0] * 8 + [1] * 4
    ids = trace.prompt_id.tolist()
    assert ids[0] == ids[8] != ids[4]  # A keeps its id in both steps
    assert trace.response_len.tolist() == [150, 151, 152, 153] * 3
    assert trace.turn_gen.tolist()[:4] == [100, 50, 101, 50]
    assert trace.turn_tool_s.tolist()[:2] == [2.0, 0.0]
    assert trace.turn_tool_tokens.tolist()[:4] == [200, 0, 199, 0]
    assert trace.reward.tolist() == [1.0] * 12
    assert report.notes == ("NeMo-Gym rollouts carry no step: 2 step(s) found from their times "
                            "(a step is a stretch in which some rollout was running; NeMo-RL "
                            "trains between steps)",)


def test_nemo_gym_more_than_a_group_in_one_step_is_split_in_start_order(tmp_path) -> None:
    """Two groups of A overlapping in time (an asynchronous run): one group of 8 was kept and
    B, C dropped; now A is two groups of 4, the first four starts in the first."""
    rollouts = ([(A, T0 + timedelta(seconds=k), _metrics(T0 + timedelta(seconds=k), k))
                 for k in range(8)]
                + [(X, T0, _metrics(T0, k)) for X in (B, C) for k in range(4)])
    trace, report = import_framework("nemo-gym", _gym(tmp_path, rollouts))
    assert (report.rows, report.groups, report.group_size, report.steps) == (16, 4, 4, 1)
    assert len(set(trace.prompt_id.tolist())) == 4
    first_a = trace.prompt_id.tolist().index(trace.prompt_id[0])
    assert trace.response_len.tolist()[first_a:first_a + 4] == [150, 151, 152, 153]
    assert report.notes[0] == ("1 NeMo-Gym instances had more than 4 rollouts (the group size: "
                               "the most common count per instance and step) within one step, "
                               "their runs overlapping (an asynchronous run, or an instance "
                               "twice in a batch): split into groups of 4 in start order")


def test_nemo_gym_a_step_on_some_rollouts_only_is_one_error_line(tmp_path) -> None:
    path = _gym(tmp_path, [(A, T0, {**_metrics(T0, 0), "step": 3}), (A, T0, _metrics(T0, 1))])
    files = sorted(path.rglob("nemo_gym_metrics.json"))
    out = tmp_path / "t.jsonl"
    line = _one_error(["trace", "import", str(path), "--from", "nemo-gym", "--out", str(out)])
    assert line == (f"error: {files[1]}: field 'step': missing, though {files[0]} has one (give "
                    "every rollout a step, or none: steps then come from time)")


def test_nemo_gym_a_failed_rollout_with_no_time_is_counted_in_the_note(tmp_path) -> None:
    """In a JSONL of bare records a failed rollout may carry no time at all: it has no step, so
    its group cannot count it (a review found the docs saying it always does): B, with 3 timed
    rollouts of 4, is short and dropped here only because D and E set n = 4; the note says so."""
    recs = [{"instance_id": X, **_metrics(T0, k)} for X in (D, E) for k in range(4)]
    recs += [{"instance_id": B, **_metrics(T0, k)} for k in range(3)] + [{"instance_id": B, **FAILED}]
    path = tmp_path / "gym.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    trace, report = import_framework("nemo-gym", path)
    assert (report.rows, report.groups, report.group_size, report.dropped_rows) == (11, 2, 4, 3)
    assert report.notes[0] == (
        "skipped 1 NeMo-Gym rollouts without per_turn_metrics (the agent failed: no call times "
        "or token counts; NeMo-Gym scores them 0): a group that lost one is short and dropped; 1 "
        "of them had no time at all (no step, generation_start_timestamp or directory timestamp), "
        "so no step and no group could count them")


def test_nemo_gym_failed_rollouts_are_skipped_and_unresolved_ones_score_0(tmp_path) -> None:
    """One failed rollout stopped the whole import (per_turn_metrics: none), and one rollout
    without 'resolved' dropped the reward column. Now: A, D, E are kept (A's rollout 2 never
    evaluated: reward 0); B and C each lost a rollout to a failed agent (as app.py writes it,
    and as SWEBenchMetrics.model_dump gives it): short, dropped."""
    rollouts = [(A, T0, _metrics(T0, k, resolved=None if k == 2 else k % 2 == 0))
                for k in range(4)]
    rollouts += [(B, T0, FAILED if k == 1 else _metrics(T0, k)) for k in range(4)]
    rollouts += [(C, T0, FAILED_DUMP if k == 3 else _metrics(T0, k)) for k in range(4)]
    rollouts += [(X, T0, _metrics(T0, k)) for X in (D, E) for k in range(4)]
    path = _gym(tmp_path, rollouts)
    trace, report = import_framework("nemo-gym", path)
    assert (report.files, report.rows, report.groups, report.group_size) == (20, 18, 3, 4)
    assert (report.dropped_groups, report.dropped_rows) == (2, 6)
    assert trace.reward.tolist() == [1.0, 0.0, 0.0, 0.0] + [1.0] * 8
    assert report.notes[:2] == (
        "skipped 2 NeMo-Gym rollouts without per_turn_metrics (the agent failed: no call times "
        "or token counts; NeMo-Gym scores them 0): a group that lost one is short and dropped",
        "1 NeMo-Gym rollouts have no 'resolved' (never evaluated): reward 0, as NeMo-Gym scores "
        "them")
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", str(path), "--from", "nemo-gym", "--out", str(out)])
    assert r.exit_code == 0 and out.exists(), r.output
    assert "3 groups x 4 over 1 step(s)" in r.output


def test_nemo_gym_a_rollout_without_resolved_keeps_the_reward_column(tmp_path) -> None:
    """One rollout that never got its 'resolved' (NeMo-Gym scores it 0) dropped every reward."""
    rollouts = [(A, T0, _metrics(T0, k, resolved=None if k == 3 else True)) for k in range(4)]
    trace, _ = import_framework("nemo-gym", _gym(tmp_path, rollouts))
    assert trace.reward.tolist() == [1.0, 1.0, 1.0, 0.0]


def test_nemo_gym_all_rollouts_failed_is_one_error_line(tmp_path) -> None:
    path = _gym(tmp_path, [(A, T0, FAILED), (A, T0, FAILED_DUMP)])
    with pytest.raises(TraceError) as e:
        import_framework("nemo-gym", path)
    assert str(e.value) == (f"{path}: none of the 2 NeMo-Gym rollouts has per_turn_metrics "
                            "(each agent failed, or its harness writes none: anyswe_agent and "
                            "anyterminal_agent do not): nothing to import")


# -- AReaL: session_tracer/{role}/sessions-r{rank}.jsonl ---------------------------------------


def _session(task: int, session: int, t: float, gen_s: float, status: str = "accepted",
             reason: str | None = None) -> dict:
    """SessionRecord.to_dict (areal/utils/perf_tracer.py): the default FieldSpecs (``reason``
    and ``finalized_ts`` omitted when None), ``phases`` with the non-empty lists, plus a user
    FieldSpec ``turn_tokens``. ``role`` is the process's (``rollout`` in single-controller
    mode, where the eval rollout shares the worker and its tracer)."""
    record = {"task_id": task, "session_id": session, "rank": 0, "role": "rollout",
              "status": status}
    if reason is not None:
        record["reason"] = reason
    record |= {"submit_ts": t, "finalized_ts": t + gen_s + 1.0, "total_s": gen_s + 1.0,
               "generate_s": gen_s, "reward_s": 0.5,
               "phases": {"generate": [{"start_ts": t, "end_ts": t + gen_s}],
                          "reward": [{"start_ts": t + gen_s, "end_ts": t + gen_s + 0.5}]},
               "turn_tokens": [int(gen_s * 10)]}
    return record


def test_areal_an_eval_task_reusing_a_training_task_id_is_its_own_group(tmp_path) -> None:
    """The eval executor's TaskIdGenerator starts at 0 too (areal/infra/workflow_executor.py),
    and its sessions go to the same file: training tasks 0 and 1 (4 sessions each, run at once
    by GroupedRolloutWorkflow) and, later, eval tasks 0 and 1. These were 2 groups of 8."""
    sessions, sid = [], 0
    for t0, tasks in ((1000.0, (0, 1)), (2000.0, (0, 1))):  # training, then the evaluation
        for task in tasks:
            for k in range(4):
                status, reason = ("rejected", "rejected") if (t0, task, k) == (1000.0, 1, 3) \
                    else ("accepted", None)
                sessions.append(_session(task, sid, t0 + task, 1.0 + k, status, reason))
                sid += 1
    d = tmp_path / "session_tracer" / "rollout"
    d.mkdir(parents=True)
    (d / "sessions-r0.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    trace, report = import_framework("areal", d)
    assert (report.rows, report.groups, report.group_size) == (16, 4, 4)
    assert trace.response_len.tolist() == [10, 20, 30, 40] * 4
    ids = trace.prompt_id.tolist()
    assert len({ids[0], ids[4], ids[8], ids[12]}) == 4
    assert report.notes[-1] == ("2 AReaL (rank, task_id) pairs name sessions that ran at "
                                "separate times (an eval executor numbers its tasks from 0 too, "
                                "into the same file; or a restarted run): one group per run of "
                                "them")


def _areal_dir(tmp_path, sessions: list[dict]):
    d = tmp_path / "session_tracer" / "rollout"
    d.mkdir(parents=True)
    (d / "sessions-r0.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return d


def test_areal_a_session_without_phases_is_skipped_unless_kept(tmp_path) -> None:
    """SessionRecord.to_dict leaves out an empty ``phases``: a ``pending`` session written at
    shutdown has none, and one such record stopped the whole file ("not a AReaL session tracer
    dump: missing field(s) phases"); it is skipped, as its status says."""
    sessions = [_session(0, k, 1000.0, 1.0 + k) for k in range(4)]
    pending = {key: v for key, v in _session(1, 4, 1001.0, 1.0, "pending").items() if key != "phases"}
    trace, report = import_framework("areal", _areal_dir(tmp_path, sessions + [pending]))
    assert trace.response_len.tolist() == [10, 20, 30, 40]


def test_areal_a_kept_session_without_phases_says_it_has_no_turn(tmp_path) -> None:
    """AReaL's OpenAI-proxy agent workflow traces no phase: its accepted sessions have none."""
    proxy = {key: v for key, v in _session(0, 0, 1000.0, 1.0).items() if key != "phases"}
    d = _areal_dir(tmp_path, [proxy])
    with pytest.raises(TraceError) as e:
        import_framework("areal", d)
    assert str(e.value) == (f"{d / 'sessions-r0.jsonl'}: line 1: field 'phases': missing: the "
                            "session recorded no phase (AReaL's OpenAI-proxy agent workflow traces "
                            "none), so it has no turn to import")
