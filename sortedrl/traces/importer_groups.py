"""Which rows of an imported table form one GRPO group, for :mod:`sortedrl.traces.importer`.

A public serving log has no prompts or steps: consecutive rows form a group. A user's own
rollout dump has them: a step column (``--step-col``) keeps the training steps apart, and a
prompt id column (``--prompt-id-col``) groups the rows of one prompt in one step wherever they
lie (a dump written in completion order interleaves prompts). Without ids the grouping is by
order, so a group whose rows have different prompt lengths (rows of several prompts) is counted,
and the import says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sortedrl.errors import TraceError
from sortedrl.tables import counted


@dataclass(frozen=True)
class Groups:
    """The kept rows in group order (``rows``: indices into the table's rows), each one's
    position in its group (``sample``), its group's prompt id, and what was left out."""

    rows: np.ndarray  # int64, groups x group_size
    sample: np.ndarray  # int64
    prompt_id: np.ndarray  # str, one per kept row
    dropped_rows: int  # rows of groups that are not whole
    dropped_groups: int  # with prompt ids: groups whose size is no multiple of group_size
    split_groups: int = 0  # with prompt ids: groups of k x group_size rows split into k


def group_rows(p: Path, lines: list[int], group_size: int, step: list[int] | None,
               ids: list[str] | None) -> Groups:
    """Group the table's rows: by ``(step, prompt id)`` with ids, else consecutive rows within
    each step (a step's rows must be together) or in the whole table."""
    if ids is not None:
        return _by_id(step, ids, group_size)
    runs = _step_runs(p, lines, step) if step is not None else [(0, len(lines))]
    kept: list[np.ndarray] = []
    dropped = 0
    for start, end in runs:
        whole = (end - start) // group_size * group_size
        kept.append(np.arange(start, start + whole, dtype=np.int64))
        dropped += end - start - whole
    rows = np.concatenate(kept)
    groups = len(rows) // group_size
    width = max(6, len(str(groups - 1)))
    names = np.array([f"p{i:0{width}d}" for i in range(groups)])
    return Groups(rows, np.tile(np.arange(group_size, dtype=np.int64), groups),
                  np.repeat(names, group_size), dropped, 0)


def _step_runs(p: Path, lines: list[int], step: list[int]) -> list[tuple[int, int]]:
    """``(start, end)`` of each step's rows; a step whose rows are not together is an error
    (grouping by order would mix them), naming the line where it comes back."""
    s = np.asarray(step, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    seen: set[int] = set()
    for i in starts:
        if int(s[i]) in seen:
            raise TraceError(f"{p}: line {lines[i]}: step {int(s[i])} again after other steps' rows: "
                             "sort the rows by step, or give --prompt-id-col to group by prompt")
        seen.add(int(s[i]))
    ends = np.r_[starts[1:], len(s)]
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def _by_id(step: list[int] | None, ids: list[str], group_size: int) -> Groups:
    """Rows grouped by ``(step, id)`` in the order each group first appears, each group's rows
    in table order. A group of k x ``group_size`` rows (a prompt drawn k times in one step) is
    split in table order into k groups, the second named ``id#2``, the third ``id#3``, as the
    framework importers split theirs; a group of any other size is left out."""
    keys = list(zip(step, ids, strict=True)) if step is not None else ids
    members: dict[object, list[int]] = {}
    for row, key in enumerate(keys):
        members.setdefault(key, []).append(row)
    whole: list[list[int]] = []
    names: list[str] = []
    split = 0
    taken = set(members)  # a split's names skip the ids its step has ('A#2' beside an 'A' drawn twice)
    for rows in members.values():
        k, rest = divmod(len(rows), group_size)
        if rest:
            continue
        split += k > 1
        whole.extend(rows[j * group_size:(j + 1) * group_size] for j in range(k))
        names.append(ids[rows[0]])
        n = 1
        for _ in range(k - 1):
            n += 1
            while _in_step(keys[rows[0]], f"{ids[rows[0]]}#{n}") in taken:
                n += 1
            names.append(f"{ids[rows[0]]}#{n}")
            taken.add(_in_step(keys[rows[0]], names[-1]))
    kept = np.array([r for group in whole for r in group], dtype=np.int64)
    left = [rows for rows in members.values() if len(rows) % group_size]
    return Groups(kept, np.tile(np.arange(group_size, dtype=np.int64), len(whole)),
                  np.repeat(np.array(names, dtype=str), group_size),
                  sum(map(len, left)), len(left), split)


def _in_step(key: object, name: str) -> object:
    """The grouping key of prompt ``name`` in the step of ``key`` (a (step, id) pair, or an id)."""
    return (key[0], name) if isinstance(key, tuple) else name


def mixed_prompt_lengths(prompt_len: np.ndarray, group_size: int) -> int:
    """How many groups (``prompt_len`` in group order) have rows of different prompt lengths."""
    by_group = prompt_len.reshape(-1, group_size)
    return int(np.count_nonzero(by_group.min(axis=1) != by_group.max(axis=1)))


def table_notes(report, group_size: int, cap: int, by_id: bool, by_step: bool) -> list[str]:
    """What ``trace import`` of a table tells of an :class:`~sortedrl.traces.importer.ImportReport`:
    rows left out, columns it did not read, and groups by order that mix prompt lengths when the
    table has a prompt id column it was not told of (a public serving log's groups are several
    prompts' requests by design: said nothing)."""
    out = []
    if report.split_groups and group_size == 1:  # (the default: rather a --group-size left out)
        out.append(f"note: split {counted(report.split_groups, 'prompt group')} of several rows into "
                   "groups of 1 (--group-size 1): give --group-size N if a prompt's rows are its group")
    elif report.split_groups:
        out.append(f"note: split {counted(report.split_groups, 'prompt group')} holding a multiple of "
                   f"--group-size {group_size:,} rows (a prompt drawn more than once in one step) into "
                   f"groups of {group_size:,}, in table order (the second named ID#2, the third ID#3, "
                   "skipping the ids its step has)")
    if report.dropped_groups:
        out.append(f"note: dropped {counted(report.dropped_groups, 'prompt group')} ({counted(report.dropped_rows, 'row')}) "
                   f"whose size is not a multiple of --group-size {group_size:,} (a filtered or aborted sample?)")
    elif report.dropped_rows:
        n = report.dropped_rows
        rows = counted(n, "row") + " at the end of a step" if by_step else f"{n:,} trailing row{'s' * (n != 1)}"
        out.append(f"note: dropped {rows} that {'does' if n == 1 else 'do'} not fill a group of {group_size:,}")
    if report.clipped_rows:
        out.append(f"note: clipped {counted(report.clipped_rows, 'response')} to max_response_len {cap:,}")
    named = any(option == "--prompt-id-col" for _, option in report.unread)
    if report.mixed_groups and not by_id and named:  # (a serving log's rows are several prompts')
        out.append(f"warning: {report.mixed_groups:,} of {report.prompts:,} groups of {group_size:,} "
                   "consecutive rows have rows of different prompt lengths, so they are not one prompt's "
                   "responses: give --prompt-id-col to group the rows by prompt")
    elif report.mixed_groups and by_id:
        out.append(f"warning: {report.mixed_groups:,} of {report.prompts:,} prompt ids have rows of "
                   "different prompt lengths")
    for column, option in report.unread:
        out.append(f"note: column {column!r} was not read (give {option} {column} to keep it)")
    return out
