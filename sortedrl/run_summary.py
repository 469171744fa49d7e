"""A run directory's ``summary.json``, read and checked against the run's timeline.

``plot`` draws a run under its summary's numbers and ``validate`` replays a real run's whole
``trace.jsonl`` against its timeline; both read a directory that may have been edited, copied in
part or cut short. A timeline cut at a line boundary still parses, so a finished run's summary
must be the one computed from its timeline (:func:`check_matches`), with one check and one
message in both commands.

A run is finished when the files written at its end are there: a simulation's directory
(``simulate`` and ``compare`` write the summary and the timeline together), a real run's once
its ``trace.jsonl``, written after ``summary.json``, is there (:func:`is_finished`). A real run
still going, or resumed after it wrote its summary, appends to its timeline while the old
summary stays.
"""

from __future__ import annotations

from pathlib import Path

from sortedrl import jsonio
from sortedrl.limits import short_repr
from sortedrl.metrics import makespan_of
from sortedrl.timeline import Timeline

SUMMARY_KEYS = ("makespan_s", "bubble_ratio", "tokens_per_s")
"""Numbers every run's summary has (``plot`` shows them in its title; the check reads
``makespan_s``)."""

MATCH_TOLERANCE_S = 1e-3
"""How far a timeline's last end may lie from its summary's ``makespan_s`` (both are written
from the same numbers; this only absorbs rounding)."""


REAL_CLUSTER = "local-vllm"
"""The ``cluster`` of a real run's meta record, and so of its summary (``sortedrl run``:
``sortedrl/realrun/run.py``, ``_run_meta``); a summary carries no ``backend``."""

UNBOUNDED = ("lower_bound_s", "efficiency")
"""A real run's summary keys that are 0 because it has no cost model to bound it with (docs/
metrics.md, "Real runs"): the tables print them ``-`` (:func:`has_no_bound`), the JSON keeps 0."""


def has_no_bound(summary: dict) -> bool:
    """Whether ``summary`` is a real run's, whose :data:`UNBOUNDED` keys do not apply: its cluster
    is the real runner's and its bound 0 (a simulation's bound is above 0 on any trace, and its
    cluster a preset's, a cluster file's or a profile's name)."""
    return summary.get("cluster") == REAL_CLUSTER and summary.get("lower_bound_s") == 0


def is_real_run(meta: dict) -> bool:
    """A ``sortedrl run`` timeline (appended as the run goes), not a simulation's (written once)."""
    return meta.get("backend") == "vllm"


def is_finished(rundir: Path, meta: dict) -> bool:
    """Whether the run in ``rundir`` (its timeline's ``meta``) has written everything it writes
    at its end, so that its summary must match its timeline."""
    return not is_real_run(meta) or (rundir / "trace.jsonl").is_file()


def read_summary(path: Path, error: type[Exception]) -> dict:
    """``summary.json`` as a JSON object with the numbers :data:`SUMMARY_KEYS`, or one ``error``
    naming the file and the field (an edited or older file may lack them)."""
    summary = jsonio.read(path, error)
    if not isinstance(summary, dict):
        raise error(f"{path}: expected a JSON object (a run summary)")
    for key in SUMMARY_KEYS:
        v = summary.get(key)
        if not jsonio.finite(v):
            got = "missing" if key not in summary else f"expected a number, got {short_repr(v)}"
            raise error(f"{path}: field {key!r}: {got} (delete the file to recompute the "
                        "summary from the timeline)")
    return summary


def mismatch(tl: Timeline, summary: dict) -> str | None:
    """How ``tl`` disagrees with ``summary`` (its number of updates, its end), or None."""
    end = makespan_of(tl)
    updates, makespan = summary.get("updates"), float(summary["makespan_s"])
    if isinstance(updates, int) and not isinstance(updates, bool) and updates != tl.count("train"):
        return f"train records: {tl.count('train'):,}, the summary's updates: {updates:,}"
    if abs(end - makespan) > MATCH_TOLERANCE_S + 1e-9 * abs(makespan):
        return f"it ends at {end:,.3f} s, the summary's makespan is {makespan:,.3f} s"
    return None


def check_matches(tl_path: Path, tl: Timeline, summary_path: Path, summary: dict,
                  error: type[Exception], command: str) -> None:
    """A finished run's timeline must be the one its summary was computed from: one ``error``
    otherwise. ``plot`` can draw a cut timeline once summary.json is deleted and says so;
    ``validate`` cannot replay one (its trace.jsonl holds the whole run), so it does not."""
    if why := mismatch(tl, summary):
        fix = "write the run again" + (", or delete summary.json to plot the timeline as it is"
                                       if command == "plot" else "")
        raise error(f"{tl_path}: does not match {summary_path} ({why}): truncated? ({fix})")
