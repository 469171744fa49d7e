"""``sortedrl run --force``: the previous run is kept aside until the new one has a checkpoint.

A real run writes into RUNDIR as it goes, so it cannot build its outputs elsewhere and rename
them in at the end, as the other commands do. ``--force`` deleted the previous run before the
new one started vLLM (minutes on a CPU): a Ctrl-C, a policy's error or a failed engine start in
between left an empty RUNDIR, the previous run gone and nothing to resume. Now the previous
run's files are moved into ``RUNDIR/.previous-run`` (renames within the directory: instant, and
possible wherever the run may write), the new run starts in the emptied RUNDIR, and:

- a new run that stops before its first checkpoint removes its own files and moves the previous
  run's back (:func:`put_back`): the command left the old output, not a mix;
- the first checkpoint deletes the aside (:func:`drop`): from then on the new run is the one
  to resume;
- a run killed (SIGKILL, power) before that leaves the aside in RUNDIR; a later ``--force``
  deletes it with the rest (it is the run's own; until then its files can be moved back by hand).

``--force`` deletes only what a real run, ``validate`` and ``plot``/``report``'s default pages
write: a file of any other name in RUNDIR (the user's notes) is refused, named, before anything
is touched (:func:`foreign_entry`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from sortedrl.interrupts import signals_deferred
from sortedrl.run_marker import OS_METADATA

ASIDE = ".previous-run"
# the names a run writes in RUNDIR (here, not in rundir, which imports this module)
LOGS = ("timeline.jsonl", "metrics.jsonl", "trace.partial.jsonl")
CHECKPOINT, PENDING, PREVIOUS = "checkpoint", "checkpoint.tmp", "checkpoint.prev"
RUN_FILES = frozenset({*LOGS, "summary.json", "trace.jsonl", CHECKPOINT, PENDING, PREVIOUS,
                       "validate.json", "timeline.html", "report.html", ASIDE})


def foreign_entry(out: Path) -> str | None:
    """The first entry of RUNDIR (sorted) that no run writes, and how many more; None if none.
    (A file browser's metadata, ``.DS_Store`` and ``._*``, is not the user's work.)"""
    names = sorted(n for n in os.listdir(out) if n not in RUN_FILES and n not in OS_METADATA
                   and not n.startswith(("._", ".timeline.jsonl.meta-")))  # (a kill's: run_logs)
    if not names:
        return None
    return names[0] + (f" and {len(names) - 1:,} more" if len(names) > 1 else "")


def set_aside(out: Path) -> Path | None:
    """Move the previous run's files into ``RUNDIR/.previous-run`` (a killed run's leftover
    aside is deleted first); None when RUNDIR holds nothing."""
    aside = out / ASIDE
    shutil.rmtree(aside, ignore_errors=True)
    entries = [p for p in out.iterdir() if p.name != ASIDE] if out.is_dir() else []
    if not entries:
        return None
    aside.mkdir()
    with signals_deferred():  # all moved, or none noticed half-way
        for p in entries:
            os.replace(p, aside / p.name)
    return aside


def put_back(out: Path, aside: Path) -> None:
    """A new run that stopped before its first checkpoint (its own files already removed):
    the previous run's files go back where they were."""
    with signals_deferred():
        for p in list(aside.iterdir()):
            os.replace(p, out / p.name)
        aside.rmdir()


def drop(aside: Path | None) -> None:
    """The new run's first checkpoint is on the disk: the previous run goes."""
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def in_checkpoint(path: Path) -> Path | None:
    """The checkpoint directory of a real run that ``path`` is or lies in, else None: any
    command's output written there replaced the run's state (``plot --perfetto
    RUNDIR/checkpoint/state.json --force`` did), which ``--resume`` then refused."""
    for d in (path, *path.parents):
        if d.name in (CHECKPOINT, PENDING, PREVIOUS) and _real_run(d.parent):
            return d
    return None


def _real_run(folder: Path) -> bool:
    """Whether ``folder``'s timeline starts with a real run's meta record (``backend`` vllm)."""
    try:
        with open(folder / "timeline.jsonl", "rb") as f:
            head = json.loads(f.readline(1 << 20) or b"{}")
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and head.get("kind") == "meta" and head.get("backend") == "vllm"
