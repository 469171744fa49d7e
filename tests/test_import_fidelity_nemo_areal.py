"""The NeMo-RL, NeMo-Gym and AReaL importers against dumps in the exact shape their frameworks
write (an audit compared each importer with the upstream code that writes the dump; each case
here failed before its fix). The upstream file that writes each layout is cited at its helper.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
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
