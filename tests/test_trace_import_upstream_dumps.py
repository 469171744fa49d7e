"""`trace import` on dumps as today's frameworks write them (helper 207 read verl, TRL and
NeMo-RL's code): a response cut mid-character at the length cap, tool output inside a response
whose mask the dump does not keep, and a NeMo-RL sample that generated nothing. The first two
were misread (the cut refused with the run's own cap; the tool output counted as generated
without a word), the third stopped the whole import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sortedrl.traces.importers import import_framework

FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
CUT = "\ufffd"  # what a decoder makes of a character whose bytes the cap cut


@pytest.fixture(scope="module")
def byte_bpe(tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer (as Qwen's and Llama's are), trained here on a few words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(["sort the numbers 3 2 1 into order: 1 2 3"] * 20, trainer)
    out = tmp_path_factory.mktemp("bpe")
    tk.save(str(out / "tokenizer.json"))
    return out


def verl_dump(tmp_path: Path, **line3) -> Path:
    d = tmp_path / "verl"
    shutil.copytree(FIXTURES / "verl_rollout", d)
    f = d / "2.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    lines[2] = json.dumps({**json.loads(lines[2]), **line3}) + "\n"
    f.write_text("".join(lines))
    return d


def count(tokenizer: Path, text: str) -> int:
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(tokenizer / "tokenizer.json")).encode(text, add_special_tokens=False).ids)


def test_a_response_cut_mid_character_counts_the_cut_as_one_token(byte_bpe, tmp_path):
    """verl decodes a cut multi-byte character to U+FFFD, which a byte-level tokenizer encodes
    in 3 tokens: a response at the cap re-counted above it and `--max-response-len` (the run's
    cap) refused the dump."""
    prefix = "sort the numbers 3 2 1 into order: " * 4  # (the longest response of the dump)
    text = prefix + CUT
    assert count(byte_bpe, text) == count(byte_bpe, prefix) + 3  # (why it was over the cap)
    cap = count(byte_bpe, prefix) + 1
    d = verl_dump(tmp_path, output=text)
    trace, report = import_framework("verl", d, byte_bpe, max_response_len=cap)
    assert cap in trace.response_len.tolist() and trace.response_len.max() <= cap
    assert ("1 response(s) end in a character cut mid-way (U+FFFD, the length cap's cut): each "
            "counted as 1 token, not re-encoded") in report.notes


def test_tool_output_inside_a_response_is_said(tok, tmp_path):
    """verl's tool agent loop puts the tool's result in the response (mask 0, not dumped)."""
    d = verl_dump(tmp_path, output="<tool_call> sort </tool_call> <tool_response> 1 2 3 </tool_response> 1 2 3")
    trace, report = import_framework("verl", d, tok)
    assert len(trace.response_len) == 32
    assert report.notes == (
        f"1 response(s) hold tool output ('<tool_response>' in 'output', the first: {d / '2.jsonl'}: "
        "line 3), and the dump marks no generated tokens: their tool output is counted as generated "
        "tokens (give each record its 'response_mask' to split them: docs/traces.md)",)


def test_a_nemo_rl_sample_that_generated_nothing_counts_one_token(tmp_path):
    """vLLM returns no token when the prompt fills the context: the sample's mask is all 0."""
    d = tmp_path / "nemo"
    shutil.copytree(FIXTURES / "nemo_rl_logs", d)
    before, _ = import_framework("nemo-rl", d, None)
    f = d / "train_data_step2.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    total = lines[2]["token_loss_mask"][0].index(1)  # its prompt: nothing after it now
    lines[2]["input_lengths"] = [total]
    lines[2]["token_loss_mask"] = [[0] * len(lines[2]["token_loss_mask"][0])]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace, report = import_framework("nemo-rl", d, None)
    changed = np.flatnonzero(trace.response_len != before.response_len)
    assert len(trace.response_len) == len(before.response_len)
    assert len(changed) == 1 and trace.response_len[changed[0]] == 1
    assert trace.prompt_len[changed[0]] == total
    assert (f"1 sample(s) with no generated token ('token_loss_mask' all 0: the prompt filled the "
            f"context) counted as 1 token; the first: {f}: line 3") in report.notes
