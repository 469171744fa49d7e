"""`trace import --from slime` on rollouts that write one trajectory as several ``Sample``s.

slime's agent path (``slime/agent/trajectory.py`` at THUDM/slime 624b824a) linearizes a session's
message tree into ``list[Sample]``: one Sample per root-to-leaf chain, and a new one (a "fork")
wherever a turn's prompt does not extend the tokens held (``_split_chain_into_builders``). Every
Sample of one rollout carries the same ``rollout_id`` (``_SampleBuilder.to_sample``: the base
sample's, else its ``index``), ``index`` and ``group_index``, and the whole reward
(``get_trajectory``). The dumps below are written as ``save_debug_rollout_data`` writes them:
``torch.save({"rollout_id": step, "samples": [Sample.to_dict(), ...]})``, every field of the
``Sample`` dataclass present (``slime/utils/types.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sortedrl.traces.importers import import_framework


def _sample(group, index, tokens, response_length, loss_mask, *, rollout_id=None, reward=1.0,
            prompt="fix the bug", status="completed", metadata=None) -> dict:
    """``Sample.to_dict()``: its ``__dict__`` with status, spec_info, prefix_cache_info as
    plain values."""
    return {
        "group_index": group, "index": index, "rollout_id": rollout_id, "prompt": prompt,
        "tokens": tokens, "multimodal_inputs": None, "multimodal_train_inputs": None,
        "multimodal_train_input_id": None, "apply_chat_template_kwargs": {}, "response": "x",
        "response_length": response_length, "label": None, "reward": reward,
        "loss_mask": loss_mask, "weight_versions": [],
        "rollout_log_probs": [0.0] * response_length, "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None, "rollout_routed_experts": None,
        "remove_sample": False, "teacher_log_probs": None, "status": status,
        "metadata": {"truncated": False, "use_tool": True, "ill_formed": False}
        if metadata is None else metadata,
        "generate_function_path": None, "custom_rm_path": None, "train_metadata": None,
        "session_id": None, "non_generation_time": 0.0,
        "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0,
                      "spec_verify_ct": 0, "completion_token_num": 0},
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0}}


def _chain(turns, trained=None):
    """``_SampleBuilder``: ``turns`` is [(prompt_ids, output_ids)], each prompt extending the
    held tokens (CLEAN); the tail beyond them gets loss_mask 0, the output 1 (0 when re-emitted
    untrained); the first prompt is stripped. Returns (tokens, response_length, loss_mask)."""
    tokens: list[int] = []
    mask: list[int] = []
    for k, (prompt, out) in enumerate(turns):
        assert prompt[:len(tokens)] == tokens
        mask += [0] * (len(prompt) - len(tokens)) + [int(trained is None or trained[k])] * len(out)
        tokens = prompt + out
    lead = len(turns[0][0])
    return tokens, len(tokens) - lead, mask[lead:]


def _ids(start, n):
    return list(range(start, start + n))


def _pt(path: Path, step: int, samples: list[dict]) -> Path:
    torch = pytest.importorskip("torch")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": step, "samples": samples}, path)  # save_debug_rollout_data
    return path


def _plain(group, index, plen=10, rlen=30, reward=0.0):
    return _sample(group, index, _ids(0, plen + rlen), rlen, [1] * rlen,
                   rollout_id=index, reward=reward, prompt=f"task {group}")


def test_a_forked_trajectory_is_folded_into_one_row(tmp_path) -> None:
    # group 0, two rollouts (index 0, 1). Rollout 0: turns 1-2 in one builder (20 generated,
    # 5 tool tokens, 30 generated); turn 3's prompt re-tokenizes the history (drift): a fork,
    # a second Sample with the context re-sent and 40 generated. Rollout 1: one Sample.
    p0 = _ids(0, 10)
    t1, t2 = (p0, _ids(100, 20)), (p0 + _ids(100, 20) + _ids(500, 5), _ids(200, 30))
    a = _sample(0, 0, *_chain([t1, t2]), rollout_id=0)
    fork_prompt = p0 + _ids(900, 60)  # drifted: no prefix of the first sample's tokens
    b = _sample(0, 0, *_chain([(fork_prompt, _ids(300, 40))]), rollout_id=0,
                metadata={"truncated": True, "use_tool": True, "ill_formed": False})
    c = _plain(0, 1, rlen=25)
    samples = [a, b, c] + [_plain(g, i) for g in (1, 2) for i in (2 * g, 2 * g + 1)]
    trace, report = import_framework("slime", _pt(tmp_path / "3.pt", 3, samples),
                                     max_response_len=100)
    # was: group 0 (3 samples) dropped as an odd-sized group
    assert (report.groups, report.group_size, report.dropped_groups) == (3, 2, 0)
    assert trace.response_len.tolist()[:2] == [90, 25]
    assert trace.turns_per_row().tolist() == [3, 1, 1, 1, 1, 1]
    assert trace.turn_gen.tolist()[:4] == [20, 30, 40, 25]
    assert trace.turn_tool_tokens.tolist()[:4] == [5, 0, 0, 0]  # the fork's context: unknown
    assert trace.prompt_len.tolist()[0] == 10
    assert trace.truncated.tolist()[:2] == [True, False]  # the last sample's flag
    assert any(n.startswith("folded 2 samples into 1 trajectories") for n in report.notes)
    assert any(n.startswith("1 sample(s) of a folded trajectory do not extend")
               for n in report.notes)


def test_samples_extending_each_other_give_the_tool_tokens_between(tmp_path) -> None:
    # a custom generate writing one Sample per LLM call, each holding the whole context, and
    # setting one rollout_id on them (as validate_rollout_id_annotated requires)
    group = []
    for i in range(2):
        p = _ids(0, 12)
        first = _sample(0, i, p + _ids(100, 8), 8, [1] * 8, rollout_id=i, reward=0.5)
        p2 = p + _ids(100, 8) + _ids(700, 6 + i)  # 6 (7) tool-output tokens appended
        second = _sample(0, i, p2 + _ids(200, 9), 9, [1] * 9, rollout_id=i, reward=0.5)
        group += [first, second]
    trace, report = import_framework("slime", _pt(tmp_path / "0.pt", 0, group))
    assert (report.groups, report.group_size, report.dropped_groups) == (1, 2, 0)  # was 4
    assert trace.turn_gen.tolist() == [8, 9, 8, 9]
    assert trace.turn_tool_tokens.tolist() == [6, 0, 7, 0]
    assert trace.response_len.tolist() == [17, 17]
    assert trace.reward.tolist() == [0.5, 0.5]
    assert not any("do not extend" in n for n in report.notes)


def test_a_branch_re_emits_the_shared_turn_as_context(tmp_path) -> None:
    # two leaves share the first generated turn; the second leaf re-emits it with loss_mask 0
    # (MessageNode.response_trained), so its leading 0s are context, not generated tokens
    p0 = _ids(0, 10)
    shared = (p0, _ids(100, 20))
    leaf1 = _chain([shared, (p0 + _ids(100, 20) + _ids(500, 4), _ids(200, 10))])
    leaf2 = _chain([shared, (p0 + _ids(100, 20) + _ids(600, 3), _ids(300, 7))],
                   trained=[False, True])
    assert leaf2[2] == [0] * 23 + [1] * 7  # shared turn untrained, the new prompt tail, output
    samples = [_sample(0, 0, *leaf1, rollout_id=0),
               _sample(0, 0, *leaf2, rollout_id=0), _plain(0, 1)]
    trace, _ = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))
    assert trace.turn_gen.tolist() == [20, 10, 7, 30]  # was: 3 rows, leaf 2 with 30 generated
    assert trace.turn_tool_tokens.tolist() == [4, 0, 0, 0]  # the branch does not extend leaf 1
    assert trace.response_len.tolist() == [37, 30]


def test_differing_rewards_are_averaged_with_a_note(tmp_path) -> None:
    # examples/multi_agent/agent_system.py: solver and rewriter samples of one rollout each
    # get their own reward and the shared rollout_id (sample.index)
    samples = []
    for i, rewards in enumerate([(1.0, 0.0), (1.0, 1.0)]):
        for r in rewards:
            samples.append(_sample(0, i, _ids(0, 15), 5, [1] * 5, rollout_id=i, reward=r))
    trace, report = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))
    assert trace.reward.tolist() == [0.5, 1.0]
    assert "1 folded trajectory(ies) whose samples' rewards differ: reward is their mean" in (
        report.notes)


def test_unlinked_samples_of_one_rollout_are_dropped_with_the_reason(tmp_path) -> None:
    # an older dump (or a custom generate that set no rollout_id): nothing links the two
    # samples of index 0, so group 0 holds 3 samples and is dropped; the note says why
    samples = [_sample(0, 0, _ids(0, 15), 5, [1] * 5), _sample(0, 0, _ids(0, 18), 6, [1] * 6),
               _sample(0, 1, _ids(0, 15), 5, [1] * 5)]
    samples += [_sample(g, 2 * g + k, _ids(0, 15), 5, [1] * 5) for g in (1, 2) for k in (0, 1)]
    trace, report = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))
    assert (report.groups, report.dropped_groups, report.dropped_rows) == (2, 1, 3)
    assert len(trace) == 4
    note = [n for n in report.notes if "no per-sample 'rollout_id'" in n]
    assert note and note[0].startswith("1 group(s) hold several samples with one 'index'")
    assert "Sample.rollout_id" in note[0]


def test_one_sample_per_rollout_reads_as_before(tmp_path) -> None:
    # the default path: rollout_id None (data_source.py sets none), or the agent path's one
    # Sample per rollout with rollout_id == index: no folding, no note
    samples = [_sample(0, i, _ids(0, 20), 10, [1] * 4 + [0] * 2 + [1] * 4,
                       rollout_id=None if i % 2 else i) for i in range(4)]
    trace, report = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))
    assert (report.groups, report.group_size, report.notes) == (1, 4, ())
    assert trace.turn_gen.tolist() == [4, 4] * 4
    assert trace.turn_tool_tokens.tolist() == [2, 0] * 4


def test_a_rollout_id_that_is_no_integer_is_one_error(tmp_path) -> None:
    from sortedrl.errors import TraceError

    samples = [_sample(0, 0, _ids(0, 15), 5, [1] * 5, rollout_id="r0")]
    with pytest.raises(TraceError, match=r"sample 0: field 'rollout_id': 'r0' is not an integer"):
        import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))


def test_a_folded_sample_with_no_trained_token_adds_no_turn(tmp_path) -> None:
    # the second sample of rollout 7 re-emits the first turn untrained, then a tool tail and an
    # untrained output: nothing of it was generated for this trajectory (was: 33 generated
    # tokens, and the sample counted as one that does not extend the first)
    p, o1 = _ids(0, 10), _ids(100, 20)
    first = _chain([(p, o1)])
    second = _chain([(p, o1), (p + o1 + _ids(200, 5), _ids(300, 8))], trained=[False, False])
    assert 1 not in second[2]
    samples = [_sample(0, 7, *first, rollout_id=7), _sample(0, 7, *second, rollout_id=7),
               _plain(0, 8, rlen=40)]
    trace, report = import_framework("slime", _pt(tmp_path / "0.pt", 0, samples))
    assert trace.turn_gen.tolist() == [20, 40]
    assert trace.response_len.tolist() == [20, 40]
    assert not any("do not extend" in n for n in report.notes)
    assert any(n.startswith("folded 2 samples into 1 trajectories") for n in report.notes)
