"""RUNDIR of ``sortedrl run``: what a new run, ``--resume`` and ``--force`` accept.

A real run writes into RUNDIR as it goes (its logs are flushed every engine step, so that they
survive a crash), so unlike the other commands it cannot build its outputs aside and rename
them into place at the end. Hence the rules here, all checked before any work:

- a new run needs an empty (or new) RUNDIR;
- ``--resume`` needs a checkpoint, and the settings the run started with (the timeline's
  ``meta.run``): a resumed run continues the same experiment, so an option given with another
  value (``--max-num-seqs``, ``--lr``, ``--seed``, ...) is refused, naming both values, rather than
  silently mixing two configurations in one timeline whose meta names only the first;
- ``--force`` starts RUNDIR over. Because the old run is replaced as the new one starts (not
  at the end), it replaces only what ``sortedrl run`` wrote: a directory whose timeline is a
  real run's, holding no file a run does not write. As with every command's ``--force``, never
  a directory that holds an input (``--model``, ``--dataset``) or the current directory, nor one
  whose files this user cannot remove. Nothing is touched until every other check of the run has
  passed, and the old run is kept aside until the new one's first checkpoint
  (:mod:`sortedrl.realrun.rundir_force`).

A checkpoint is written aside (``checkpoint.tmp``, its ``state.json`` last) and then swapped in
by renames (:func:`commit_checkpoint`), so a run killed at any moment leaves one complete
checkpoint: ``checkpoint``, or, killed inside the swap, ``checkpoint.tmp`` or
``checkpoint.prev``. ``--resume`` takes the first of them whose state reads back and renames it
to ``checkpoint`` (:func:`recover_checkpoint`). The new checkpoint's files, and the logs up to the
offsets it records, are on the disk (fsync) before the swap, and the swap's renames after it: a
machine that loses power, not only a killed process, also leaves a complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.outputs import Outputs
from sortedrl.realrun import checkpoint as ckpt_io
from sortedrl.realrun.rundir_force import CHECKPOINT, LOGS, PENDING, PREVIOUS, foreign_entry

# settings a resumed run may change: where things are (a moved run, model or Ray cluster) and
# how the engines start (warm-up, memory share). Two more are compared otherwise: the policy
# knobs (--set) by the checkpoint (checkpoint.restore_policy), --dataset by the task's name
MAY_CHANGE = frozenset({"model", "out", "ray", "warm_tokens", "gpu_memory_utilization", "sets",
                        "dataset"})
ADDED_SETTINGS = ("objective", "is_cap")  # settings an older version's runs did not record
FLAGS = {"kl_coef": "--kl"}  # a setting's option, where it is not --setting-name


def check_run_dir(cfg, out: Path, resume: bool, force: bool, task: str) -> None:
    """One error line for a RUNDIR that this run may not use; deletes nothing."""
    if resume and force:
        raise ConfigError("--resume and --force: give one (--resume continues RUNDIR from its "
                          "last checkpoint, --force deletes it and starts over)")
    if resume:
        _check_resumable(cfg, out, task)
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
        if _finished(out):  # nothing to resume: --resume would only say so
            raise ConfigError(f"--out {out}: holds a complete run (use --force to start it "
                              "over, or another --out)")
        how = ("use --resume to continue it from its last checkpoint, or --force to start it "
               "over" if _has_checkpoint(out) else "it has no checkpoint to resume from: use "
               "--force to start it over")
        raise ConfigError(f"--out {out}: holds a run ({how})")
    # the checks every command's --force makes: not the current directory, no input inside,
    # every file removable; on the directory a link names (set_aside empties it in place, so a
    # linked RUNDIR is used, with or without --force, as the run writes into it)
    inputs = [Path(p) for p in (cfg.model, cfg.dataset) if p]
    target = out.resolve() if out.is_symlink() else out
    Outputs("run", True, inputs=inputs).run_dir(target, target)
    if (found := foreign_entry(target)) is not None:
        raise ConfigError(f"--out {out}: holds {found}, which `sortedrl run` does not write: --force "
                          "replaces a run's files only (move it, or give another directory)")


def first_missing(out: Path) -> Path | None:
    """The outermost of RUNDIR and its parents that does not exist yet (None: RUNDIR exists)."""
    if out.exists():
        return None
    top = out
    while not top.parent.exists():
        top = top.parent
    return top


def unstart(out: Path, created: Path | None, opened) -> None:
    """A new run that failed before its engines started: close (``opened``) and remove the logs
    it began, and RUNDIR and the parents the run created (``created``: the outermost, from
    :func:`first_missing`) while empty, so that the same command can be given again."""
    for f in opened:
        f.close()
    for name in LOGS:
        (out / name).unlink(missing_ok=True)
    if created is None:
        return
    for d in (out, *out.parents):
        if any(d.iterdir()):
            break
        d.rmdir()
        if d == created:
            break


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
        with open(out / "timeline.jsonl", encoding="utf-8") as f:
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
    return latest_checkpoint(out) is not None


def commit_checkpoint(out: Path) -> None:
    """Swap the checkpoint written in ``out/checkpoint.tmp`` in for the last one, by renames:
    at every moment one of the three directories holds a complete checkpoint."""
    ckpt, pending, previous = out / CHECKPOINT, out / PENDING, out / PREVIOUS
    for path in sorted(pending.rglob("*")):  # the renames below must not outrun the data
        if path.is_file():
            sync_to_disk(path)
    sync_to_disk(pending)
    shutil.rmtree(previous, ignore_errors=True)
    if ckpt.exists():
        os.replace(ckpt, previous)
    os.replace(pending, ckpt)
    sync_to_disk(out)  # the renames themselves
    shutil.rmtree(previous, ignore_errors=True)


def sync_to_disk(path: Path) -> None:
    """fsync a file or a directory (a directory's entries: the renames and new names in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(out: Path) -> Path | None:
    """The directory of the run's last complete checkpoint: ``checkpoint``, else (a run killed
    while it swapped a new one in) ``checkpoint.tmp``, then ``checkpoint.prev``; one counts when
    its state reads back (``state.json`` is written last). None: no checkpoint."""
    for name in (CHECKPOINT, PENDING, PREVIOUS):
        try:
            ckpt_io.read_state(out / name)
        except ConfigError:
            continue
        return out / name
    return None


def recover_checkpoint(out: Path) -> None:
    """Before a resume: rename the last complete checkpoint to ``checkpoint`` when a kill left
    it as ``checkpoint.tmp`` or ``checkpoint.prev`` (an unreadable ``checkpoint`` goes)."""
    found = latest_checkpoint(out)
    if found is None or found.name == CHECKPOINT:
        return
    shutil.rmtree(out / CHECKPOINT, ignore_errors=True)
    os.replace(found, out / CHECKPOINT)


def _check_resumable(cfg, out: Path, task: str) -> None:
    if not out.exists():
        raise ConfigError(f"--resume: {out} does not exist (run without --resume to start it)")
    if not _has_checkpoint(out):
        how = ("start it over with --force (without --resume)" if out.is_dir() and is_run_dir(out)
               else "give the directory of a run")
        raise ConfigError(f"--resume: {out} has no checkpoint to resume from (a run writes one "
                          f"after each update); {how}")
    head = _meta(out)
    started = head.get("run") if head else None
    if not isinstance(started, dict) or head.get("backend") != "vllm":
        raise ConfigError(f"--resume: {out / 'timeline.jsonl'}: does not start with the meta "
                          "record of a `sortedrl run` (its settings)")
    was_task = str(head.get("trace", "")).removeprefix("task:")
    # a setting added since runs began to record theirs: a run that did not record it ran at its default
    defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.name in ADDED_SETTINGS}
    started, given = {**defaults, **started, "task": was_task}, {**vars(cfg), "task": task}
    differ = [k for k in given if k not in MAY_CHANGE and k in started and started[k] != given[k]]
    if differ:
        was = " ".join(f"{_flag(k)} {_shown(started[k])}" for k in differ)
        now = " ".join(f"{_flag(k)} {_shown(given[k])}" for k in differ)
        raise ConfigError(f"--resume: {out} was started with {was}, not {now}; a resumed run "
                          "keeps its settings (give the same options, or --force without "
                          "--resume to start it over)")


def _finished(out: Path) -> bool:
    """Whether the files a run writes when it ends are there (its summary and its trace)."""
    return (out / "summary.json").is_file() and (out / "trace.jsonl").is_file()


def check_not_complete(out: Path, steps: int) -> None:
    """--resume of a run that finished (the files written at its end are there): one error line,
    before any file is touched or an engine starts. (Its checkpoint may still hold samples
    neither trained nor discarded, the groups filtered after its last update: it checked that,
    and resumed such a run; but a finished run's timeline has its auto knobs added to its first
    line (:func:`sortedrl.realrun.run_logs.add_to_meta`), which moves every offset the
    checkpoint recorded, and a resume cut the log inside a record.)"""
    if _finished(out):
        raise ConfigError(f"--resume: {out}: the run is complete ({steps} of {steps} steps); "
                          "nothing to resume")


def _flag(setting: str) -> str:
    return FLAGS.get(setting, "--" + setting.replace("_", "-"))


def _shown(value: object) -> str:
    return "none" if value is None else str(value)
