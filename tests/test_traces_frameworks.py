"""`trace import --from FRAMEWORK`: each framework's dump fixture read to exact lengths, groups
and steps, and the bad inputs the issue names (wrong layout, pickled code, no tokenizer)."""

from __future__ import annotations

import fractions
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces.importers import import_framework

DUMPS = Path(__file__).parent / "fixtures" / "frameworks"


def test_verl_rollout_dir(tokenizer) -> None:
    trace, report = import_framework("verl", DUMPS / "verl_rollout", tokenizer)
    assert (report.files, report.rows, report.groups, report.group_size) == (2, 32, 8, 4)
    assert trace.response_len.tolist() == [
        10, 6, 7, 9, 4, 4, 4, 5, 6, 6, 12, 8, 4, 6, 2, 8,
        10, 6, 6, 14, 5, 4, 5, 7, 5, 12, 8, 8, 8, 10, 7, 8]  # fmt: skip
    assert trace.prompt_len[::4].tolist() == [11, 8, 11, 7, 11, 9, 10, 11]
    assert trace.step[::4].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert trace.meta.max_response_len == 14 and trace.truncated.sum() == 1
    # independently: the word-level tokenizer gives one token per whitespace-separated word
    raw = [json.loads(line) for f in ("1.jsonl", "2.jsonl")
           for line in (DUMPS / "verl_rollout" / f).read_text().splitlines()]
    assert trace.response_len.tolist() == [len(r["output"].split()) for r in raw]
    assert trace.reward.tolist() == [r["score"] for r in raw]
    assert len(set(trace.prompt_id.tolist())) == 8


def test_verl_cap_and_uid_grouping(tokenizer, tmp_path) -> None:
    rows = [{"input": f"sort {k % 2} =", "output": "1 2 3"[: 1 + 2 * (k % 3)], "gts": "",
             "score": 0, "step": 5, "uid": f"{k // 2}_{k % 2}_0"} for k in range(4)]
    (tmp_path / "5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace, report = import_framework("verl", tmp_path / "5.jsonl", tokenizer, max_response_len=3)
    assert report.groups == 2 and trace.meta.group_size == 2  # uid's first part names the prompt
    assert trace.response_len.tolist() == [1, 2, 3, 1]
    assert trace.truncated.tolist() == [False, False, True, False]


def test_a_dump_over_the_cap_given_names_the_sample_and_what_to_do(tokenizer) -> None:
    # a framework never generates past its cap: a longer response means the cap given is wrong
    # (a table's rows are clipped instead); sample 19 of the fixture has 14 tokens
    trace, _ = import_framework("verl", DUMPS / "verl_rollout", tokenizer)
    assert trace.response_len[19] == 14
    with pytest.raises(TraceError) as e:
        import_framework("verl", DUMPS / "verl_rollout", tokenizer, max_response_len=13)
    assert str(e.value) == (f"{DUMPS / 'verl_rollout' / '2.jsonl'}: line 4 (step 2, prompt "
                            f"{trace.prompt_id[19]}): 14 response tokens, above "
                            "--max-response-len 13: give the run's cap, or leave it out (the "
                            "longest response then sets it)")


def test_slime_debug_rollout() -> None:
    trace, report = import_framework("slime", DUMPS / "slime_rollout")
    assert (report.files, report.rows, report.groups, report.steps) == (2, 32, 8, 2)
    assert trace.response_len.tolist() == [
        12, 7, 7, 6, 8, 6, 7, 6, 9, 7, 12, 12, 11, 12, 6, 5,
        7, 8, 12, 9, 6, 5, 8, 10, 12, 11, 9, 8, 7, 12, 12, 8]  # fmt: skip
    assert trace.prompt_len[::4].tolist() == [7, 8, 7, 7, 9, 6, 9, 8]
    assert trace.step[::4].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert trace.truncated.tolist() == (trace.response_len == 12).tolist()  # status "truncated"
    assert trace.reward.sum() == 4.0


def test_nemo_rl_train_data() -> None:
    trace, report = import_framework("nemo-rl", DUMPS / "nemo_rl_logs")
    assert (report.files, report.rows, report.groups, report.steps) == (2, 24, 6, 2)
    assert trace.response_len.tolist() == [
        10, 3, 5, 9, 4, 3, 7, 4, 6, 14, 5, 8, 9, 3, 5, 3, 10, 12, 7, 12, 6, 9, 7, 6]  # fmt: skip
    assert trace.prompt_len[::4].tolist() == [5, 5, 5, 5, 8, 8]
    assert trace.step[::4].tolist() == [1, 1, 1, 2, 2, 2]
    raw = [json.loads(line) for f in ("train_data_step1.jsonl", "train_data_step2.jsonl")
           for line in (DUMPS / "nemo_rl_logs" / f).read_text().splitlines()]
    assert trace.response_len.tolist() == [sum(r["token_loss_mask"][0]) for r in raw]  # [[...]]


@pytest.mark.parametrize("value, shown", [
    ("NaN", "nan"), ("Infinity", "inf"), ("1.5", "1.5"),
    # a long text is cut (short_repr): it was printed whole, a 10,000-character error line
    (f'"{"x" * 10_000}"', "'xxxxxxxxxxxxxxxxxxx... (10002 characters)"),
])
def test_a_length_that_is_not_a_whole_number_is_one_error(tmp_path, value, shown) -> None:
    """A NaN or infinite length was a ValueError or OverflowError traceback (a review)."""
    dump = tmp_path / "nemo"
    dump.mkdir()
    lines = (DUMPS / "nemo_rl_logs" / "train_data_step1.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"input_lengths": [8]', f'"input_lengths": [{value}]', 1)
    (dump / "train_data_step1.jsonl").write_text("\n".join(lines) + "\n")
    r = run(["trace", "import", str(dump), "--from", "nemo-rl", "--out", str(tmp_path / "t.jsonl")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "Traceback" not in r.output, r.output
    assert r.output.startswith("error: ") and r.output.rstrip().endswith(
        f"field 'input_lengths': {shown} is not an integer") and len(r.output) < 300, r.output
    assert not (tmp_path / "t.jsonl").exists()


def test_trl_completions_table(tokenizer) -> None:
    trace, report = import_framework("trl", DUMPS / "trl_completions.table.json", tokenizer)
    assert (report.rows, report.groups, report.steps) == (24, 6, 2)
    assert trace.response_len.tolist() == [
        8, 7, 23, 6, 4, 4, 4, 6, 6, 5, 4, 9, 7, 7, 7, 13, 4, 4, 4, 4, 5, 8, 7, 4]  # fmt: skip
    assert trace.step[::4].tolist() == [0, 0, 0, 10, 10, 10]
    assert trace.reward.sum() == 10.0


def test_short_group_is_dropped(tmp_path) -> None:
    data = torch.load(DUMPS / "slime_rollout" / "rollout_data_0.pt", weights_only=True)
    data["samples"] = data["samples"][:-1]  # one sample of the last group filtered out
    torch.save(data, tmp_path / "0.pt")
    trace, report = import_framework("slime", tmp_path / "0.pt")
    assert (report.groups, report.dropped_groups, report.dropped_rows) == (3, 1, 3)
    assert len(trace) == 12


# -- bad input ------------------------------------------------------------------------------------


def run(args: list[str]):
    return CliRunner().invoke(app, args)


def test_wrong_layout_names_missing_and_found(tmp_path) -> None:
    out = tmp_path / "t.jsonl"
    r = run(["trace", "import", str(DUMPS / "nemo_rl_logs"), "--from", "verl",
             "--tokenizer", "x", "--out", str(out)])
    assert r.exit_code == 2 and not out.exists()
    line = r.output.strip()
    assert line.startswith("error: ") and "\n" not in line
    assert "not a verl rollout_data_dir dump: missing field(s) input, output, score, step" in line
    assert "found: content, rewards, generation_logprobs, input_lengths" in line


def test_pt_with_pickled_code_is_refused(tmp_path) -> None:
    bad = tmp_path / "evil.pt"
    torch.save({"rollout_id": 0, "samples": [fractions.Fraction(1, 3)]}, bad)
    with pytest.raises(TraceError) as e:
        import_framework("slime", bad)
    assert str(e.value) == (f"{bad}: refused: loading it needs pickled code, which could run "
                            "arbitrary code (it needs fractions.Fraction to load)")
    from PIL import Image  # (a test dependency)

    vlm = tmp_path / "vlm.pt"  # (slime's multimodal_inputs: process_vision_info's PIL images)
    torch.save([{"rollout_id": 0, "multimodal_inputs": {"images": [Image.new("RGB", (2, 2))]}}], vlm)
    with pytest.raises(TraceError) as e:
        import_framework("slime", vlm)
    assert str(e.value) == (f"{vlm}: refused: loading it needs pickled code, which could run "
                            "arbitrary code (it needs PIL.Image.Image to load: a vision-language "
                            "run's images, in multimodal_inputs)")
    r = run(["trace", "import", str(bad), "--from", "slime", "--out", str(tmp_path / "t.csv")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and r.output.count("\n") == 1
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("framework, dump", [("verl", "verl_rollout"),
                                             ("trl", "trl_completions.table.json")])
def test_text_fields_need_a_tokenizer(tmp_path, framework, dump) -> None:
    out = tmp_path / "t.jsonl"
    r = run(["trace", "import", str(DUMPS / dump), "--from", framework, "--out", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert "token counts need a local tokenizer directory: give --tokenizer DIR" in r.output


def test_tokenizer_directory_without_tokenizer_json(tmp_path) -> None:
    with pytest.raises(TraceError, match="no tokenizer.json in this directory"):
        import_framework("verl", DUMPS / "verl_rollout", tmp_path)


def test_unknown_framework_and_cli_success(tmp_path, tokenizer) -> None:
    r = run(["trace", "import", str(DUMPS), "--from", "openrlhf", "--out", str(tmp_path / "t.jsonl")])
    assert r.exit_code == 2
    assert "unknown framework; known: verl, slime, nemo-rl, trl, areal, nemo-gym" in r.output
    out = tmp_path / "v.parquet"
    r = run(["trace", "import", str(DUMPS / "verl_rollout"), "--from", "verl", "--tokenizer",
             str(tokenizer), "--max-response-len", "16", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "32 samples from 2 verl file(s), 8 groups x 4 over 2 step(s), cap 16" in r.output
    from sortedrl.traces import read_trace

    assert np.array_equal(read_trace(out).response_len,
                          import_framework("verl", DUMPS / "verl_rollout", tokenizer)[0].response_len)


@pytest.mark.parametrize("field, value, message", [
    ("columns", 5, "field 'columns': expected a list of column names"),
    ("columns", [["step"], "prompt", "completion"], "field 'columns': expected a list of column names"),
    ("data", 7, "field 'data': expected a list of rows"),
])
def test_a_malformed_trl_table_is_one_error_line(tmp_path, tokenizer, field, value, message) -> None:
    # found by a fuzz of the importers: each ended in a TypeError traceback
    table = json.loads((DUMPS / "trl_completions.table.json").read_text())
    table[field] = value
    bad = tmp_path / "c.table.json"
    bad.write_text(json.dumps(table))
    out = tmp_path / "t.jsonl"
    r = run(["trace", "import", str(bad), "--from", "trl", "--tokenizer", str(tokenizer),
             "--out", str(out)])
    assert (r.exit_code, r.output.strip().splitlines()) == (2, [f"error: {bad}: {message}"])
    assert not out.exists()
