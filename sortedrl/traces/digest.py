"""A short fingerprint of what a trace asks a simulator to do, to tell two traces apart.

Why this exists: a run records its trace by name (``trace.jsonl``, ``math-16k``), and a name
does not pin the contents: every real run writes a ``trace.jsonl``, and one synthetic preset
under two seeds is two traces. ``report RUN1 RUN2 ...`` warns when runs are not like-for-like;
with the fingerprint in each simulated run's timeline meta (``trace_digest``) it can tell traces
that share a name apart, and see that a real run's trace and a simulation of that trace are one.

The fingerprint covers what the simulation reads: the generation cap and group size, and per
sample its prompt length, response length, truncation, step, reward and turns (where the trace
has them), in canonical order. Prompt ids and sample indices are left out (renaming the prompts
changes no simulation), and so is the file format: a trace written as JSONL and read back from
Parquet has the same fingerprint. It is 16 hex digits of BLAKE2b: a label, not a signature.
"""

from __future__ import annotations

import hashlib

import numpy as np

from sortedrl.traces.schema import Trace

FIELDS = (("prompt_len", np.int64), ("response_len", np.int64), ("truncated", np.bool_),
          ("step", np.int64), ("reward", np.float64), ("turn_offsets", np.int64),
          ("turn_gen", np.int64), ("turn_tool_s", np.float64), ("turn_tool_tokens", np.int64))
"""The columns fingerprinted, each as the dtype it is hashed in (absent ones are marked)."""


def trace_digest(trace: Trace) -> str:
    """The trace's fingerprint: 16 hex digits."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"cap={trace.meta.max_response_len};n={trace.meta.group_size};".encode())
    for name, dtype in FIELDS:
        column = getattr(trace, name)
        if column is None:
            h.update(f"{name}:-;".encode())
            continue
        values = np.ascontiguousarray(column, dtype=dtype)
        h.update(f"{name}:{values.size};".encode())
        h.update(memoryview(values).cast("B"))
    return h.hexdigest()
