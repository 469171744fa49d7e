"""The CSV and JSONL writers turn a trace into text ``CHUNK_ROWS`` rows at a time, so their
memory stays that of the trace (they turned every column into Python lists at once: 3.6 GiB
for an 8M-row CSV). The bytes must not depend on where the chunks fall: turns split across a
boundary, a bare "\\r" (whose row CSV quotes whole) on either side of one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sortedrl.traces import _text, read_trace, synthesize, write_trace


def _odd(trace):
    """``trace`` with prompt ids (whole groups) that CSV must quote, some with a bare "\r"
    (read back wrong unless its row is quoted). (A finish reason is one of three plain words:
    any other is refused on reading, so none needs quoting.)"""
    extra = {0: ' a\r"b",c\u00e9', 2: "\r", 3: 'q"x,y', 4: "line\nbreak"}
    names = list(dict.fromkeys(trace.prompt_id.tolist()))
    renamed = {names[g]: names[g] + tail for g, tail in extra.items()}
    ids = [renamed.get(i, i) for i in trace.prompt_id.tolist()]
    return dataclasses.replace(trace, prompt_id=np.array(ids))


TRACES = {
    "plain": lambda: synthesize("logic-8k", prompts=5, group_size=4, steps=3),
    "turns": lambda: synthesize("agentic-retool", prompts=3, group_size=4, steps=2),
    "odd": lambda: _odd(synthesize("math-16k", prompts=5, group_size=4, steps=2)),
    "odd-turns": lambda: _odd(synthesize("agentic-search", prompts=5, group_size=4, steps=2)),
}


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
@pytest.mark.parametrize("name", list(TRACES))
def test_bytes_do_not_depend_on_the_chunk_size(tmp_path, monkeypatch, name, ext) -> None:
    trace = TRACES[name]()
    write_trace(trace, tmp_path / f"whole.{ext}")  # one chunk
    whole = (tmp_path / f"whole.{ext}").read_bytes()
    for rows in (1, 7, len(trace) - 1, len(trace)):
        monkeypatch.setattr(_text, "CHUNK_ROWS", rows)
        write_trace(trace, tmp_path / f"c{rows}.{ext}")
        assert (tmp_path / f"c{rows}.{ext}").read_bytes() == whole, rows
    back = read_trace(tmp_path / f"whole.{ext}")
    for column, values in trace.columns().items():
        assert np.array_equal(getattr(back, column), values), column
    for column, values in trace.turn_columns().items():
        assert np.array_equal(getattr(back, column), values), column
