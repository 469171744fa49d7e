"""The logs of ``sortedrl run``, appended as the run goes, and its meta record, completed at the end.

A real run's ``timeline.jsonl``, ``metrics.jsonl`` and ``trace.partial.jsonl`` are appended to
and flushed after every engine step and update, so that they survive a crash (:class:`Appender`).
The timeline's first record, its meta, is written when the run starts; what a run only knows
once its policy has started is added to it when the run has finished (:func:`add_to_meta`): the
auto knobs' resolved values (``auto_params``; SortedRL sizes its window from the engines'
slots at its start), which ``validate`` pins in its replay. (They were only in the summary, so a
replay re-resolved them, on the profile's slots.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sortedrl.realrun.rundir import LOGS
from sortedrl.timeline import Timeline, record_line


class Appender:
    """Append JSON lines; the backend flushes after every engine step and every update, so the
    logs on disk are never more than one step behind (they survive a crash)."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)

    def __call__(self, kind: str, row: tuple) -> None:
        self.f.write(record_line(kind, row))

    def write(self, record: dict) -> None:
        self.f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def start_logs(out: Path, meta: dict) -> Timeline:
    """A new run's empty logs, the timeline's meta record written first."""
    for name in LOGS:
        (out / name).touch()
    head = Appender(out / "timeline.jsonl")
    head.write({"kind": "meta", **meta})
    head.close()
    return Timeline(meta)


def add_to_meta(path: Path, fields: dict) -> None:
    """Add ``fields`` to the meta record, the first line, of the finished run's timeline at
    ``path``: the rest is copied as it is into a sibling, on the disk before it is renamed over
    the log (a kill leaves the old file or the new). Only once the run has written its summary
    and trace: a resume cuts the logs back to the offsets its checkpoint recorded, which a longer
    first line would shift, and a finished run is not resumed."""
    data = path.read_bytes()
    end = data.index(b"\n") + 1
    meta = {**json.loads(data[:end]), **fields}
    tmp = path.with_name(f".{path.name}.meta-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write((json.dumps(meta, separators=(",", ":")) + "\n").encode())
        f.write(memoryview(data)[end:])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
