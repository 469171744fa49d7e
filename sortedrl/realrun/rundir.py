"""RUNDIR of ``sortedrl run``: what a new run, ``--resume`` and ``--force`` accept.

A real run writes into RUNDIR as it goes (its logs are flushed every engine step, so that they
survive a crash), so unlike the other commands it cannot build its outputs aside and rename
them into place at the end. Hence the rules here, all checked before any work:

- a new run needs an empty (or new) RUNDIR;
- ``--resume`` needs a checkpoint;
- ``--force`` starts RUNDIR over. Because the old run is deleted when the new one starts (not
  replaced at the end), it deletes only what ``sortedrl run`` wrote: a directory whose
  timeline is a real run's. As with every command's ``--force``, never a directory that holds
  an input (``--model``, ``--dataset``) or the current directory, nor one whose files this user
  cannot remove. Nothing is deleted until every other check of the run has passed
  (:func:`start_over`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.outputs import Outputs
from sortedrl.realrun import checkpoint as ckpt_io

LOGS = ("timeline.jsonl", "metrics.jsonl", "trace.partial.jsonl")


def check_run_dir(cfg, out: Path, resume: bool, force: bool) -> None:
    """One error line for a RUNDIR that this run may not use; deletes nothing."""
    if resume and force:
        raise ConfigError("--resume and --force: give one (--resume continues RUNDIR from its "
                          "last checkpoint, --force deletes it and starts over)")
    if resume:
        _check_resumable(out)
        return
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    if not any(out.iterdir()):
        return
    if not is_run_dir(out):
        raise ConfigError(f"--out {out}: exists, is not empty and does not hold a `sortedrl run` "
                          "(no timeline.jsonl of a real run); give another directory")
    if not force:
        how = ("use --resume to continue it from its last checkpoint, or --force to start it "
               "over" if _has_checkpoint(out) else "it has no checkpoint to resume from: use "
               "--force to start it over")
        raise ConfigError(f"--out {out}: holds a run ({how})")
    # the checks every command's --force makes: not the current directory, no input inside,
    # every file removable
    inputs = [Path(p) for p in (cfg.model, cfg.dataset) if p]
    Outputs("run", True, inputs=inputs).run_dir(out, out)


def start_over(out: Path) -> None:
    """--force, once every check has passed: remove what the previous run wrote in RUNDIR."""
    if not out.is_dir() or not any(out.iterdir()) or not is_run_dir(out):
        return
    for p in out.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def is_run_dir(out: Path) -> bool:
    """Whether ``out`` holds what ``sortedrl run`` writes: a timeline that starts with a real
    run's meta record (or, for a run stopped before it wrote that record, only its empty logs)."""
    head = _meta(out)
    if head is None:
        return False
    if head == {}:
        return all(p.name in LOGS and p.is_file() and not p.stat().st_size for p in out.iterdir())
    return head.get("kind") == "meta" and head.get("backend") == "vllm"


def _meta(out: Path) -> dict | None:
    """The timeline's first record; {} for an empty timeline, None for none or not JSON."""
    try:
        with open(out / "timeline.jsonl") as f:
            first = f.readline(1 << 20)
    except (OSError, UnicodeDecodeError):
        return None
    if not first.strip():
        return {}
    try:
        head = json.loads(first)
    except (ValueError, RecursionError):
        return None
    return head if isinstance(head, dict) else None


def _has_checkpoint(out: Path) -> bool:
    return (out / "checkpoint" / ckpt_io.STATE).is_file()


def _check_resumable(out: Path) -> None:
    if not out.exists():
        raise ConfigError(f"--resume: {out} does not exist (run without --resume to start it)")
    if not _has_checkpoint(out):
        how = ("start it over with --force (without --resume)" if out.is_dir() and is_run_dir(out)
               else "give the directory of a run")
        raise ConfigError(f"--resume: {out} has no checkpoint to resume from (a run writes one "
                          f"after each update); {how}")
