"""Traces with turns built in memory (the contract's columns: turn_offsets, turn_gen,
turn_tool_s, turn_tool_tokens), for the multi-turn simulator tests."""

from __future__ import annotations

import numpy as np

from tests.conftest import make_trace


def make_turn_trace(turns, prompt_lens=None, group_size=1, max_len=None, steps=None):
    """``turns[i]``: sample i's turns as ``(generated, tool_s, tool_tokens)``; the last turn's
    tool call is ignored (set to 0, as the contract says)."""
    gen = [[g for g, _, _ in row] for row in turns]
    trace = make_trace([sum(g) for g in gen], prompt_lens, group_size=group_size, max_len=max_len,
                       steps=steps)
    offsets = np.cumsum([0] + [len(row) for row in turns]).astype(np.int64)
    flat = [(g, s, k) if j < len(row) - 1 else (g, 0.0, 0) for row in turns
            for j, (g, s, k) in enumerate(row)]
    if hasattr(trace, "with_turns"):  # the schema's own constructor, once it exists
        return trace.with_turns(offsets, [f[0] for f in flat], [f[1] for f in flat],
                                [f[2] for f in flat])
    trace.turn_offsets = offsets
    trace.turn_gen = np.array([f[0] for f in flat], dtype=np.int64)
    trace.turn_tool_s = np.array([f[1] for f in flat], dtype=float)
    trace.turn_tool_tokens = np.array([f[2] for f in flat], dtype=np.int64)
    return trace
