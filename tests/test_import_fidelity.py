"""`trace import --from verl|slime|trl` against what the upstream code writes (an audit compared
each importer with it): group sizes with a prompt drawn twice in one step, verl V1's session
keys, slime's evaluation files, partial rollouts and agent truncation, TRL's weighted reward,
Parquet files and repeated tables. Each dump is written here in the exact layout of the upstream
file cited beside it; the tokenizer (built locally) counts one token per whitespace word."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError, TraceError
from sortedrl.traces.importers import import_framework
from sortedrl.traces.importers._common import group_size_of, prompt_name

runner = CliRunner()


def _cli(args: list[str]):
    r = runner.invoke(app, ["trace", "import", *map(str, args)])
    assert "Traceback" not in r.output, r.output
    return r


def _words(n: int) -> str:
    return " ".join(["w"] * n)


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# -- A: the group size is the most common one; a group k times it is split ------------------------


def test_group_size_is_the_most_common_size() -> None:
    assert group_size_of(Counter({4: 3, 8: 1})) == 4  # was max(): 8
    assert group_size_of(Counter({4: 2, 8: 2})) == 4  # a tie: 4 keeps all 24 samples, 8 only 16
    assert group_size_of(Counter({3: 1, 4: 1})) == 4  # a tie keeping as many: the larger


def _verl_legacy(prompts: list[str], n: int, step: int) -> list[dict]:
    # verl/trainer/ppo/ray_trainer.py _log_rollout_data -> trainer_base._write_generations: input,
    # output (decoded), gts, score, step; no uid. Prompt k's responses are 5 + k + s words.
    return [{"input": p, "output": _words(5 + k + s), "gts": "1", "score": float(s % 2),
             "step": step} for k, p in enumerate(prompts) for s in range(n)]


def test_verl_prompt_drawn_twice_is_split_and_the_other_groups_kept(tok, tmp_path) -> None:
    # "B b b" drawn twice in step 7 (n = 4): its 8 responses share the text key. Before, the
    # group size was max() = 8 and the three groups of 4 were all dropped.
    dump = _jsonl(tmp_path / "verl" / "7.jsonl",
                  _verl_legacy(["A a a", "B b b", "C c c", "B b b"], 4, 7))
    trace, report = import_framework("verl", dump.parent, tok)
    assert (report.groups, report.group_size, report.split_groups, report.dropped_groups) == (
        4, 4, 1, 0)
    a, b, c = (prompt_name(f"text:{p}") for p in ("A a a", "B b b", "C c c"))
    assert trace.prompt_id.tolist() == [a] * 4 + [b] * 4 + [f"{b}#2"] * 4 + [c] * 4
    assert trace.response_len.tolist() == [5, 6, 7, 8, 6, 7, 8, 9, 8, 9, 10, 11, 7, 8, 9, 10]
    assert trace.sample.tolist() == [0, 1, 2, 3] * 4
    assert trace.prompt_len.tolist() == [3] * 16


def test_cli_notes_say_how_many_groups_were_split_and_dropped(tok, tmp_path) -> None:
    records = _verl_legacy(["A a a", "B b b", "C c c", "B b b", "D d d"], 4, 2)
    del records[-2:]  # two of D's four responses filtered out: D is dropped
    dump = _jsonl(tmp_path / "verl" / "2.jsonl", records)
    out = tmp_path / "t.jsonl"
    r = _cli([dump, "--from", "verl", "--tokenizer", tok, "--out", out])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "note: split 1 group(s) holding a multiple of 4 samples (a prompt drawn more than once in "
        "one step, grouped by its text) into groups of 4, in file order",
        "note: dropped 1 group (2 samples) whose size is not a multiple of the group size 4 (a "
        "filtered or aborted sample)"]
    assert ("16 samples of 18 read (2 dropped in groups whose size is not a multiple of 4) from 1 "
            "verl file(s), 4 groups x 4 over 1 step(s), cap 11") in r.stdout


# -- B: verl V1's uid is the TransferQueue key {uid}_{session_id}_{index} -------------------------

UIDS = ("0b7a3c52-9f1e-4d2a-8c3b-5e6f7a8b9c0d", "f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9")


def test_verl_v1_keys_group_by_their_uid(tok, tmp_path) -> None:
    # verl/trainer/ppo/v1/trainer_base.py _log_rollout_data: "uid" = batch.keys[i], keys made by
    # v1/agent_loop_tq.py as f"{uid}_{session_id}_{i}" (uid a uuid4, session in [0, n)), sorted.
    rows = [{"input": f"prompt {p} words here", "output": _words(10 + s + 5 * p), "gts": None,
             "score": float(s % 2), "step": 3, "uid": f"{UIDS[p]}_{s}_0"}
            for p in range(2) for s in range(4)]
    trace, report = import_framework("verl", _jsonl(tmp_path / "3.jsonl", rows), tok)
    # before: the uuid is no digits, so each sample was a group of 1
    assert (report.groups, report.group_size) == (2, 4)
    assert trace.prompt_id.tolist() == ([prompt_name("text:prompt 0 words here")] * 4
                                        + [prompt_name("text:prompt 1 words here")] * 4)
    assert trace.response_len.tolist() == [10, 11, 12, 13, 15, 16, 17, 18]
    assert trace.reward.tolist() == [0.0, 1.0, 0.0, 1.0] * 2


def test_verl_v1_session_with_several_outputs_is_one_sample(tok, tmp_path) -> None:
    # agent_loop_tq.py: an agent loop returning a list puts each output under index i; its score
    # is the final output's (copied to the others) and v1/utils.py computes the GRPO advantage
    # over each session's final output: one session is one trajectory, one group member.
    base = "solve it please"  # 3 tokens
    rows = []
    for s in range(2):
        rows.append({"input": base, "output": _words(6 + s), "gts": None, "score": 0.5,
                     "step": 1, "uid": f"{UIDS[0]}_{s}_0"})
    # session 0's second output: its prompt is the first output's context (3 + 6 tokens) plus
    # 4 tokens of tool output; it generates 5 tokens and is scored 1.0
    rows.insert(1, {"input": f"{base} {_words(6)} tool says x y", "output": _words(5), "gts": None,
                    "score": 1.0, "step": 1, "uid": f"{UIDS[0]}_0_1"})
    trace, report = import_framework("verl", _jsonl(tmp_path / "1.jsonl", rows), tok)
    assert (report.rows, report.groups, report.group_size) == (2, 1, 2)  # 3 records, 2 sessions
    assert trace.response_len.tolist() == [11, 7]  # 6 + 5 generated; the other session's 7
    assert trace.prompt_len.tolist() == [3, 3]
    assert trace.reward.tolist() == [1.0, 0.5]  # the final output's score
    assert trace.turns_per_row().tolist() == [2, 1]
    assert trace.turn_gen.tolist() == [6, 5, 7]
    assert trace.turn_tool_tokens.tolist() == [4, 0, 0]  # 13 - 3 - 6: the context's growth
    assert any("1 session(s) had several agent-loop outputs" in n for n in report.notes)


def test_verl_v1_key_written_twice_is_one_error_line(tok, tmp_path) -> None:
    rows = [{"input": "a b", "output": "c", "gts": None, "score": 0.0, "step": 4,
             "uid": f"{UIDS[0]}_0_0"}] * 2
    dump = _jsonl(tmp_path / "4.jsonl", rows)
    r = _cli([dump, "--from", "verl", "--tokenizer", tok, "--out", tmp_path / "t.jsonl"])
    assert (r.exit_code, r.stderr.splitlines()) == (2, [
        f"error: {dump}: line 2: field 'uid': '{UIDS[0]}_0_0' appears twice in step 4 (first at "
        f"{dump}: line 1)"])


# -- slime ------------------------------------------------------------------------------------------


def _sample(group, index, prompt, plen, rlen, status="completed", loss_mask=None, metadata=None):
    # slime/utils/types.py Sample.to_dict(): __dict__ with status as its value
    return {"group_index": group, "index": index, "rollout_id": None, "prompt": prompt,
            "tokens": list(range(plen + rlen)), "response": "x", "response_length": rlen,
            "label": "1", "reward": 1.0,
            "loss_mask": [1] * rlen if loss_mask is None else loss_mask,
            "weight_versions": [], "rollout_log_probs": [0.0] * rlen, "remove_sample": False,
            "status": status, "metadata": metadata or {}, "non_generation_time": 0.0,
            "spec_info": {}, "prefix_cache_info": {}}


def _pt(path: Path, rollout_id: int, samples: list[dict]) -> Path:
    torch = pytest.importorskip("torch")
    path.parent.mkdir(parents=True, exist_ok=True)
    # slime/observability/rollout_data_utils.py save_debug_rollout_data
    torch.save({"rollout_id": rollout_id, "samples": samples}, path)
    return path


def test_slime_groups_by_group_index_and_names_by_prompt(tmp_path) -> None:
    # slime/rollout/data_source.py numbers every group drawn (sample_group_index): "B" drawn
    # twice in rollout 1 is two groups. Before, the prompt text was the key: one group of 8
    # and the three groups of 4 dropped.
    dup = [_sample(g, g * 4 + k, p, 10, 20 + g + k)
           for g, p in enumerate(["A", "B", "C", "B"]) for k in range(4)]
    trace, report = import_framework("slime", _pt(tmp_path / "1.pt", 1, dup))
    assert (report.groups, report.group_size, report.split_groups, report.dropped_groups) == (
        4, 4, 0, 0)
    a, b, c = (prompt_name(f"prompt:{json.dumps(p)}") for p in "ABC")
    assert trace.prompt_id.tolist() == [a] * 4 + [b] * 4 + [c] * 4 + [f"{b}#2"] * 4
    assert trace.response_len.tolist() == [20 + g + k for g in range(4) for k in range(4)]


def test_slime_skips_evaluation_files(tmp_path) -> None:
    # rollout_data_utils.py: the eval rollout goes to the same template with rollout_id
    # "eval_5", and its samples have no group_index
    train = [_sample(g, g * 4 + k, f"prompt {g}", 10, 20 + k) for g in range(2) for k in range(4)]
    _pt(tmp_path / "d" / "5.pt", 5, train)
    _pt(tmp_path / "d" / "eval_5.pt", 5, [_sample(None, i, "eval prompt", 10, 30) for i in range(2)])
    trace, report = import_framework("slime", tmp_path / "d")  # was: group_index None error
    assert (report.files, report.groups, len(trace)) == (1, 2, 8)
    assert report.notes == ("skipped 1 evaluation rollout file(s) (eval_*.pt: slime's eval "
                            "dumps, not training samples)",)
    r = _cli([tmp_path / "d" / "eval_5.pt", "--from", "slime", "--out", tmp_path / "t.jsonl"])
    assert (r.exit_code, r.stderr.splitlines()) == (2, [
        f"error: {tmp_path / 'd' / 'eval_5.pt'}: only evaluation rollouts (eval_*.pt: slime's "
        "eval dumps, with no GRPO groups); give the training rollouts ({rollout_id}.pt)"])


def test_slime_partial_rollout_masked_tokens_are_generated(tmp_path) -> None:
    # slime/rollout/sglang_rollout.py generate_and_rm: with --partial-rollout and
    # --mask-offpolicy-in-partial-rollout, loss_mask = [0] * the earlier response length, then
    # 1 per new token. Sample 0 resumed 300 tokens and generated 100 more; sample 2 also called
    # a tool (2 tokens) after 3 resumed and 2 new tokens.
    samples = [_sample(0, 0, "P", 10, 400, loss_mask=[0] * 300 + [1] * 100),
               _sample(0, 1, "P", 10, 120),
               _sample(0, 2, "P", 10, 8, loss_mask=[0, 0, 0, 1, 1, 0, 0, 1]),
               _sample(0, 3, "P", 10, 5, loss_mask=[0] * 5)]  # all resumed, nothing new
    trace, _ = import_framework("slime", _pt(tmp_path / "2.pt", 2, samples))
    assert trace.response_len.tolist() == [400, 120, 6, 5]  # was 100 for sample 0, 3 error
    assert trace.turns_per_row().tolist() == [1, 1, 2, 1]
    assert trace.turn_gen.tolist() == [400, 120, 5, 1, 5]
    assert trace.turn_tool_tokens.tolist() == [0, 0, 2, 0, 0]


def test_slime_agent_truncation_is_read_from_metadata(tmp_path) -> None:
    # slime/agent/trajectory.py: _chain_to_samples sets metadata["truncated"] (the last turn's
    # finish_reason == "length"); to_sample always sets status COMPLETED
    samples = []
    for k, (last, flag) in enumerate([(120, True), (40, False), (150, False), (150, None)]):
        mask = [1] * 50 + [0] * 30 + [1] * last
        samples.append(_sample(0, k, "fix the bug", 20, len(mask), loss_mask=mask,
                               metadata={"truncated": flag, "use_tool": True,
                                         "ill_formed": False}))
    samples[3]["status"] = "aborted"  # neither the status nor a flag says: the cap decides
    del samples[3]["metadata"]["truncated"]
    trace, _ = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples),
                                max_response_len=200)
    assert trace.response_len.tolist() == [170, 90, 200, 200]
    assert trace.truncated.tolist() == [True, False, False, True]  # was all False


# -- TRL ----------------------------------------------------------------------------------------

# trl/trainer/grpo_trainer.py GRPOTrainer.log: table = {"step", "prompt", "completion",
# **rewards (one raw, unweighted column per reward function), **extra (log_extra columns),
# "advantage"}; the reward TRL trains on is nansum(rewards_per_func * reward_weights).
COLS = ["step", "prompt", "completion", "accuracy_reward", "format_reward", "num_tool_calls",
        "advantage"]


def _trl_rows(step: int, prompt: str = "what is 2 + 2 ?") -> list[list]:
    rows = []
    for k in range(4):
        acc = 1.0 if k < 2 else 0.0
        rows.append([step, prompt, _words(5 + k), acc, acc, 3, 0.0])
    return rows


def _table_json(path: Path, rows: list[list], cols: list[str] = COLS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"columns": cols, "data": rows}))  # W&B's table export
    return path


def test_trl_several_numeric_columns_need_reward_columns(tok, tmp_path) -> None:
    dump = _table_json(tmp_path / "completions_10.table.json", _trl_rows(10))
    r = _cli([dump, "--from", "trl", "--tokenizer", tok, "--out", tmp_path / "t.jsonl"])
    assert (r.exit_code, r.stderr.splitlines()) == (2, [
        f"error: {dump}: 3 numeric columns could be rewards (accuracy_reward, format_reward, "
        "num_tool_calls): TRL's reward sums only its reward functions' columns times "
        "reward_weights (log_extra columns are not rewards); name them: --reward-columns "
        "accuracy_reward=1.0,format_reward=1.0"])  # was: imported with rewards 5, 5, 3, 3
    trace, _ = import_framework("trl", dump, tok,
                                reward_columns="accuracy_reward=1, format_reward=0.1")
    assert trace.reward.tolist() == [1.1, 1.1, 0.0, 0.0]  # TRL's, with reward_weights [1, 0.1]
    out = tmp_path / "t.jsonl"
    r = _cli([dump, "--from", "trl", "--tokenizer", tok, "--reward-columns",
              "accuracy_reward,format_reward=0.1", "--out", out])
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["reward"] for x in out.read_text().splitlines()[1:]] == [
        1.1, 1.1, 0.0, 0.0]


def test_trl_reward_is_a_nansum_and_one_column_is_taken_as_it_is(tok, tmp_path) -> None:
    rows = _trl_rows(1)
    rows[0][3] = math.nan  # accuracy_reward returned None for this completion
    dump = _table_json(tmp_path / "c.table.json", rows)
    trace, _ = import_framework("trl", dump, tok, reward_columns="accuracy_reward,format_reward=0.5")
    assert trace.reward.tolist() == [0.5, 1.5, 0.0, 0.0]
    rows[0][4] = math.nan  # no function scored it: no reward (TRL's is NaN), so no column
    trace, _ = import_framework("trl", _table_json(dump, rows), tok,
                                reward_columns="accuracy_reward,format_reward=0.5")
    assert trace.reward is None
    one = _table_json(tmp_path / "one.table.json", [r[:4] + r[6:] for r in _trl_rows(1)],
                      COLS[:4] + COLS[6:])
    trace, report = import_framework("trl", one, tok)
    assert trace.reward.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert report.notes == ("reward: column 'accuracy_reward', the only numeric column besides "
                            "step and advantage (a reward_weights entry other than 1 is not in "
                            "the log: give --reward-columns accuracy_reward=WEIGHT)",)


@pytest.mark.parametrize("spec, message", [
    ("accuracy_reward=x", "--reward-columns 'accuracy_reward=x': weight 'x' of 'accuracy_reward' "
                          "is not a finite number"),
    ("=1", "--reward-columns '=1': expected NAME=WEIGHT,... (e.g. "
           "accuracy_reward=1,format_reward=0.1)"),
    ("a,a", "--reward-columns 'a,a': column 'a' named twice"),
])
def test_trl_bad_reward_columns_are_one_error_line(tok, tmp_path, spec, message) -> None:
    dump = _table_json(tmp_path / "c.table.json", _trl_rows(1))
    r = _cli([dump, "--from", "trl", "--tokenizer", tok, "--reward-columns", spec,
              "--out", tmp_path / "t.jsonl"])
    assert (r.exit_code, r.stderr.splitlines()) == (2, [f"error: {message}"])


def test_trl_reward_columns_name_existing_columns_and_only_for_trl(tok, tmp_path) -> None:
    dump = _table_json(tmp_path / "c.table.json", _trl_rows(1))
    with pytest.raises(TraceError) as e:
        import_framework("trl", dump, tok, reward_columns="correctness")
    assert str(e.value) == (f"{dump}: --reward-columns: no column 'correctness'; numeric columns: "
                            "accuracy_reward, format_reward, num_tool_calls")
    rows = _trl_rows(1)
    rows[2][4] = "yes"
    with pytest.raises(TraceError) as e:
        import_framework("trl", _table_json(dump, rows), tok, reward_columns="format_reward")
    assert str(e.value) == f"{dump}: row 3: field 'format_reward': 'yes' is not a number"
    with pytest.raises(ConfigError, match=r"^--reward-columns: only for --from trl "):
        import_framework("verl", tmp_path, tok, reward_columns="score")


def test_trl_prompt_drawn_twice_in_a_step_is_split(tok, tmp_path) -> None:
    rows = _trl_rows(3, "a b") + _trl_rows(3, "c d") + _trl_rows(3, "a b")
    trace, report = import_framework("trl", _table_json(tmp_path / "c.table.json", rows), tok,
                                     reward_columns="accuracy_reward")
    assert (report.groups, report.group_size, report.split_groups) == (3, 4, 1)
    a, c = prompt_name("text:a b"), prompt_name("text:c d")
    assert trace.prompt_id.tolist() == [a] * 4 + [f"{a}#2"] * 4 + [c] * 4


def _parquet(path: Path, rows: list[list]) -> Path:
    """A table as pandas' ``DataFrame(table).to_parquet`` writes it (int64, string, double)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(zip(*rows, strict=True))
    types = [pa.int64(), pa.string(), pa.string(), pa.float64(), pa.float64(), pa.int64(),
             pa.float64()]
    pq.write_table(pa.table({c: pa.array(v, t) for c, v, t in zip(COLS, columns, types,
                                                                  strict=True)}), path)
    return path


def test_trl_parquet_files_and_repeated_tables(tok, tmp_path) -> None:
    # grpo_trainer.py (TRL >= 0.28) writes output_dir/completions/completions_{step:05d}.parquet
    # at each log() from a deque of the last generation batch: with num_iterations = 2 the
    # batch generated at step 1 is logged again at step 2
    d = tmp_path / "completions"
    _parquet(d / "completions_00001.parquet", _trl_rows(1))
    _parquet(d / "completions_00002.parquet", _trl_rows(2))
    third = _trl_rows(3, "what is 3 + 3 ?")
    third[1][3] = math.nan
    _parquet(d / "completions_00003.parquet", third)
    _parquet(d / "completions_00004.parquet", [[4] + r[1:] for r in third])
    trace, report = import_framework("trl", d, tok, reward_columns="accuracy_reward,format_reward")
    assert (report.files, report.rows, report.groups, report.steps) == (4, 8, 2, 2)
    assert trace.step.tolist() == [1] * 4 + [3] * 4
    assert trace.response_len.tolist() == [5, 6, 7, 8] * 2
    assert trace.prompt_len.tolist() == [6] * 8
    assert trace.reward.tolist() == [2.0, 2.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0]
    assert report.notes == ("dropped 2 logged table(s) identical to the one before but for the "
                            "step (TRL logs the last generation batch at every logging step: "
                            "num_iterations or steps_per_generation > 1)",)


def test_trl_a_file_that_is_not_parquet_is_one_error_line(tok, tmp_path) -> None:
    bad = tmp_path / "completions_00001.parquet"
    bad.write_text("step,prompt\n")
    r = _cli([bad, "--from", "trl", "--tokenizer", tok, "--out", tmp_path / "t.jsonl"])
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: not a Parquet file: "), lines
