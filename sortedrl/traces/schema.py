"""The length-trace record: what one rollout sample looked like, and nothing the scheduler decided.

A trace is a table with one row per sample (one response to one prompt) plus three metadata
fields. It is stored column-wise in numpy arrays because traces reach millions of rows and the
simulator reads whole columns at once.

Rows are kept in *canonical order*: groups (the ``group_size`` samples of one prompt in one step)
are contiguous, in order of first appearance, and the samples of a group are in ``sample`` order.
The simulator's dataloader hands out groups in this order. Writers always write canonical order,
so a write followed by a read gives an equal :class:`Trace`.

The same prompt may appear in several steps (epochs); the key of a row is therefore
``(step, prompt_id, sample)`` when the trace has a ``step`` column and ``(prompt_id, sample)``
otherwise. A duplicate key is an error. A finish reason, where a trace has the column, is one of
:data:`FINISH_REASONS` (vLLM's), and ``length`` exactly where ``truncated`` is true; ``truncated``
may be true below the cap (docs/traces.md says why).

A row may also carry its *turns* (a multi-turn agentic trajectory: generation, tool call, tool
output, next turn), as optional ragged columns ``turn_offsets``, ``turn_gen``, ``turn_tool_s``
and ``turn_tool_tokens``; :mod:`sortedrl.traces.turns` defines and validates them. A trace
without turns has them all ``None`` and behaves exactly as a single-turn trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.limits import INT32_MAX
from sortedrl.tables import counted
from sortedrl.traces import turns as _turns
from sortedrl.traces.columns import Line, bool_column, float_column, int_column, str_column
from sortedrl.traces.turns import TURN_COLUMNS

REQUIRED = ("prompt_id", "sample", "prompt_len", "response_len", "truncated")
OPTIONAL = ("step", "reward", "finish_reason")
COLUMNS = REQUIRED + OPTIONAL
# How a response ended, in vLLM's (and SGLang's) words: at EOS or a stop string, at a length
# limit, or stopped from outside before it ended (a real run's unfinished rows). Any other value
# is refused: a typo (``stopp``) would otherwise count as neither finished nor unfinished.
FINISH_REASONS = ("stop", "length", "abort")
MAX_SAMPLES = INT32_MAX  # a timeline names a sample with a 32-bit id (its int32 columns)


def check_samples(prompts: int, group_size: int, steps: int) -> None:
    """Refuse to draw a trace too large for one run, before any array is allocated (a huge
    ``--prompts`` ended in a MemoryError traceback)."""
    total = prompts * group_size * steps
    if total > MAX_SAMPLES:
        raise TraceError(f"{prompts:,} prompts x {group_size:,} samples x {steps:,} steps = "
                         f"{total:,} samples: a run holds at most {MAX_SAMPLES:,} (a timeline's "
                         "sample ids are 32-bit)")


@dataclass(frozen=True)
class TraceMeta:
    """Trace-wide facts: the generation cap, the GRPO group size n, and where it came from."""

    max_response_len: int
    group_size: int
    source: str = ""


@dataclass(eq=False)
class Trace:
    """A validated, canonically ordered length trace. Build it with :meth:`from_columns`."""

    meta: TraceMeta
    prompt_id: np.ndarray  # str (numpy unicode)
    sample: np.ndarray  # int64
    prompt_len: np.ndarray  # int64
    response_len: np.ndarray  # int64
    truncated: np.ndarray  # bool
    step: np.ndarray | None = None  # int64
    reward: np.ndarray | None = None  # float64
    finish_reason: np.ndarray | None = None  # str (numpy unicode)
    turn_offsets: np.ndarray | None = None  # int64, rows + 1 (see sortedrl.traces.turns)
    turn_gen: np.ndarray | None = None  # int64, one per turn: generated tokens
    turn_tool_s: np.ndarray | None = None  # float64, one per turn: tool seconds after it
    turn_tool_tokens: np.ndarray | None = None  # int64, one per turn: tool-output tokens after it
    name: str = field(default="trace", compare=False)

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_columns(
        cls,
        columns: dict[str, object],
        meta: TraceMeta,
        where: str = "trace",
        name: str | None = None,
        rows: list[int] | None = None,
        owned: bool = False,
    ) -> Trace:
        """Validate raw columns and return the canonical trace.

        ``where`` names the source in error messages (usually the file path); ``rows`` maps each
        input row to the line number to report (defaults to 1-based row index). Turn columns
        are given flat with ``turn_offsets``, or per row (lists) without it. ``owned``: the
        caller (a file reader) hands its arrays over, so a writable one already in canonical
        order is kept instead of copied (a 10M-row trace is held once, not twice, at the peak).
        """
        for col in REQUIRED:
            if col not in columns:
                raise TraceError(f"{where}: missing required column '{col}'")
        n = len(columns["prompt_id"])  # type: ignore[arg-type]
        if n == 0:
            raise TraceError(f"{where}: the trace has no rows")
        line = (lambda i: rows[i]) if rows is not None else (lambda i: i + 1)

        if meta.max_response_len < 1:
            raise TraceError(
                f"{where}: metadata 'max_response_len' must be >= 1, got {meta.max_response_len}"
            )
        if meta.group_size < 1:
            raise TraceError(f"{where}: metadata 'group_size' must be >= 1, got {meta.group_size}")

        prompt_id = str_column(columns["prompt_id"], "prompt_id", where, line)
        sample = int_column(columns["sample"], n, "sample", 0, where, line)
        prompt_len = int_column(columns["prompt_len"], n, "prompt_len", 1, where, line, length=True)
        response_len = int_column(columns["response_len"], n, "response_len", 1, where, line, length=True)
        truncated = bool_column(columns["truncated"], n, "truncated", where, line)
        if meta.max_response_len > INT32_MAX:  # (after the rows: a cap inferred from one is named there)
            raise TraceError(f"{where}: metadata 'max_response_len': {meta.max_response_len:,} is above "
                             f"{INT32_MAX:,}, the largest length (lengths are 32-bit in a run)")
        step = reward = finish = None
        if columns.get("step") is not None:
            step = int_column(columns["step"], n, "step", 0, where, line)
        if columns.get("reward") is not None:
            reward = float_column(columns["reward"], n, "reward", where, line)
        if columns.get("finish_reason") is not None:
            finish = str_column(columns["finish_reason"], "finish_reason", where, line)
            _check_finish_reasons(finish, where, line)
            _check_truncated(truncated, finish, where, line)
        _check_bounds(meta, response_len, sample, where, line)
        order, canonical = _canonical_order(meta, prompt_id, sample, step, where, line)

        turns = _turns.check_turns(columns, n, response_len, where, line)
        if turns is not None:
            turns = _turns.reorder(turns, order)

        # the validated columns may be the caller's arrays: indexing by ``order`` copies them,
        # so the trace never shares memory with its input, unless the input was handed over
        # (``owned``) and is already in canonical order: then a writable array is kept as it is
        keep = owned and canonical

        def take(a: np.ndarray | None) -> np.ndarray | None:
            if a is None:
                return None
            return a if keep and a.flags.writeable and a.flags.owndata else a[order]

        return cls(
            meta=meta,
            prompt_id=take(prompt_id),
            sample=take(sample),
            prompt_len=take(prompt_len),
            response_len=take(response_len),
            truncated=take(truncated),
            step=take(step),
            reward=take(reward),
            finish_reason=take(finish),
            **dict(zip(TURN_COLUMNS, turns or (None,) * 4, strict=True)),
            name=name or (meta.source or where),
        )

    # -- views ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.response_len.shape[0])

    @property
    def num_groups(self) -> int:
        return len(self) // self.meta.group_size

    @property
    def prompts_per_step(self) -> int:
        """Groups in the first step (all groups when the trace has no step column)."""
        if self.step is None:
            return self.num_groups
        first = self.step[:: self.meta.group_size]
        return int(np.count_nonzero(first == first[0]))

    @property
    def num_steps(self) -> int:
        """Distinct steps (1 without a step column). Not ``num_groups // prompts_per_step``: a
        real dump after dynamic-sampling filtering has steps of unequal size (64, 60, 64, 64),
        and steps of 64, 8 and 32 prompts are 3 steps, not 1."""
        return 1 if self.step is None else int(np.unique(self.step[:: self.meta.group_size]).size)

    def step_prompts(self) -> np.ndarray:
        """Prompts (groups) of each step, in step order (all groups in one without a step column)."""
        if self.step is None:
            return np.array([self.num_groups], dtype=np.int64)
        return np.unique(self.step[:: self.meta.group_size], return_counts=True)[1].astype(np.int64)

    def columns(self) -> dict[str, np.ndarray]:
        """The present per-row columns, in schema order (the turn columns are apart)."""
        return {c: getattr(self, c) for c in COLUMNS if getattr(self, c) is not None}

    @property
    def has_turns(self) -> bool:
        return self.turn_offsets is not None

    def turn_columns(self) -> dict[str, np.ndarray]:
        """The four flat turn columns (``turn_offsets`` first), or ``{}`` without turns."""
        if self.turn_offsets is None:
            return {}
        return {c: getattr(self, c) for c in TURN_COLUMNS}

    def turns_per_row(self) -> np.ndarray:
        """Turns of each trajectory (int64, one per row); all 1 for a trace without turns."""
        if self.turn_offsets is None:
            return np.ones(len(self), dtype=np.int64)
        return np.diff(self.turn_offsets)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace) or self.meta != other.meta:
            return False
        a = {**self.columns(), **self.turn_columns()}
        b = {**other.columns(), **other.turn_columns()}
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

    __hash__ = None  # type: ignore[assignment]


def _check_bounds(meta: TraceMeta, response_len: np.ndarray, sample: np.ndarray, where: str,
                  line: Line) -> None:
    """Every response within the cap, every sample index below the group size."""
    over = np.flatnonzero(response_len > meta.max_response_len)
    if over.size:
        i = int(over[0])
        raise TraceError(
            f"{where}: row {line(i)}: field 'response_len': {int(response_len[i])} is above "
            f"max_response_len {meta.max_response_len}"
        )
    big = np.flatnonzero(sample >= meta.group_size)
    if big.size:
        i = int(big[0])
        raise TraceError(
            f"{where}: row {line(i)}: field 'sample': {int(sample[i])} is not below group_size {meta.group_size}"
        )


def _check_finish_reasons(finish: np.ndarray, where: str, line: Line) -> None:
    """Every finish reason one of FINISH_REASONS. Vectorized: one comparison over every row
    (with ``stop``, nearly all of them), then each further one over the rows left."""
    left = np.flatnonzero(finish != FINISH_REASONS[0])
    for reason in FINISH_REASONS[1:]:
        left = left[finish[left] != reason]
    if left.size:
        i = int(left[0])
        raise TraceError(f"{where}: row {line(i)}: field 'finish_reason': unknown value "
                         f"{str(finish[i])!r} (known: {', '.join(FINISH_REASONS)})")


def _check_truncated(truncated: np.ndarray, finish: np.ndarray, where: str, line: Line) -> None:
    """``truncated`` exactly where the finish reason is ``length``: it means that finish reason
    (docs/traces.md), and a row with one but not the other would count as cut short in one
    statistic and finished in another."""
    bad = np.flatnonzero(truncated != (finish == "length"))
    if bad.size:
        i = int(bad[0])
        raise TraceError(f"{where}: row {line(i)}: field 'truncated': {str(bool(truncated[i])).lower()} "
                         f"contradicts field 'finish_reason': {str(finish[i])!r} (truncated means "
                         "finish reason 'length')")


def _canonical_order(meta: TraceMeta, prompt_id: np.ndarray, sample: np.ndarray,
                     step: np.ndarray | None, where: str, line: Line) -> tuple[np.ndarray, bool]:
    """``(order, canonical)``: the row order that makes the trace canonical (groups by first
    appearance, samples by index), and whether it is the identity. A duplicate key and a group
    of other than ``group_size`` samples are errors."""
    gidx = _first_appearance_ids(prompt_id, step)
    same_group = gidx[1:] == gidx[:-1]
    canonical = bool(((gidx[1:] > gidx[:-1]) | (same_group & (sample[1:] >= sample[:-1]))).all())
    del same_group
    if canonical:  # what writers write: the (stable) sort would give 0, 1, 2, ...
        order = np.arange(len(sample))
        g_sorted, s_sorted = gidx, sample
    else:
        order = np.lexsort((sample, gidx))
        g_sorted, s_sorted = gidx[order], sample[order]
    dup = np.flatnonzero((g_sorted[1:] == g_sorted[:-1]) & (s_sorted[1:] == s_sorted[:-1]))
    if dup.size:
        i = int(order[dup[0] + 1])
        at = f" in step {int(step[i])}" if step is not None else ""
        raise TraceError(
            f"{where}: row {line(i)}: duplicate (prompt_id, sample) = ({str(prompt_id[i])!r}, {int(sample[i])}){at}"
        )
    counts = np.bincount(gidx)
    short = np.flatnonzero(counts != meta.group_size)
    if short.size:
        g = int(short[0])
        i = int(np.flatnonzero(gidx == g)[0])
        raise TraceError(
            f"{where}: prompt {str(prompt_id[i])!r} (first at row {line(i)}) has {counted(int(counts[g]), 'sample')}, "
            f"expected group_size {meta.group_size}"
        )
    return order, canonical


def _first_appearance_ids(prompt_id: np.ndarray, step: np.ndarray | None) -> np.ndarray:
    """Group index of every row, numbering groups ``(step, prompt_id)`` by first appearance."""
    n = prompt_id.shape[0]
    # Fast path for the usual (canonical or grouped) input: the rows of a group are contiguous.
    # Then each run of equal keys is one group, provided no key starts two runs.
    change = prompt_id[1:] != prompt_id[:-1]
    if step is not None:
        change |= step[1:] != step[:-1]
    starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    if starts.size * 4 <= n:
        run_pid = prompt_id[starts]
        _, run_code = np.unique(run_pid, return_inverse=True)
        run_code = run_code.reshape(-1).astype(np.int64)
        if step is None:
            distinct = np.unique(run_code).size
        else:
            distinct = np.unique(np.stack([step[starts], run_code], axis=1), axis=0).shape[0]
        if distinct == starts.size:
            return np.repeat(np.arange(starts.size, dtype=np.int64), np.diff(starts, append=n))
    _, pid_code = np.unique(prompt_id, return_inverse=True)
    pid_code = pid_code.reshape(-1).astype(np.int64)
    if step is None:
        key = pid_code
    else:
        _, key = np.unique(np.stack([step, pid_code], axis=1), axis=0, return_inverse=True)
        key = key.reshape(-1)
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return rank[inverse.reshape(-1)]
