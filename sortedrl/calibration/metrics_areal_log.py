"""Reading AReaL's own log (``main.log``, or its console) for ``calibrate --from-metrics``.

AReaL logs to W&B, SwanLab or TensorBoard only when asked (its ``stats_logger.wandb.mode``
defaults to ``disabled``, ``tensorboard.path`` to none), so the one record every AReaL run has
is its log: each step's ``StatsLogger.commit`` (``areal/utils/stats_logger.py`` at
areal-project/AReaL ``cbff54d``) logs ``... Train step N/M done.``, then ``Stats (i/n):`` and the
step's stats as ``tabulate_stats`` prints them (``areal/utils/printing.py``): a ``fancy_grid``
table of four ``key | value`` pairs a row, each value in ``.4e`` (five significant digits). The
step read is ``N`` (the ``i``-th table of ``n`` at ``N - 1 + i``), as the log prints it: W&B's
step for it is ``N - 1`` since AReaL v1.0 (``log_step``, from 0) and ``N`` before (v0.5's
``_last_commit_step`` started at 0), which the log does not tell, so it merges only with
another AReaL log.
"""

from __future__ import annotations

import re

from sortedrl.calibration.metrics_console import COLOUR, store_value
from sortedrl.calibration.metrics_read import AREAL_STEP, Metrics, _metrics
from sortedrl.errors import ConfigError

COMMIT = re.compile(r"Train step (\d+)/\d+ done\.")
STATS = re.compile(r"Stats \((\d+)/\d+\):")
CELL = "\u2502"  # fancy_grid's vertical bar between the cells of a row


def is_areal_log(text: str) -> bool:
    """Whether ``text`` holds an AReaL commit line (``Train step N/M done.``)."""
    return COMMIT.search(text) is not None


def read_areal_log(text: str, where: str) -> Metrics:
    """Metric name -> {step: value} from AReaL's log: the stats table after each commit line,
    at the step the line prints. A table before any commit line is not a step's (none is printed so
    today) and is not read; a metric of the table whose value is not a number is an error."""
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    commit = step = None
    headed = False  # a 'Stats (i/n):' line seen after a commit line
    for n, raw in enumerate(text.splitlines(), 1):
        line = COLOUR.sub("", raw).strip()
        found = COMMIT.search(line)
        if found:
            commit, step = int(found[1]), None
            continue
        found = STATS.search(line)
        if found and commit is not None:
            step, headed = commit + int(found[1]) - 1, True
            continue
        row = line[line.find(CELL):] if CELL in line else ""  # (after a prefix: Ray's "(pid=...) ")
        if step is not None and row.endswith(CELL) and len(row) > 1:
            for key, cell in _pairs(row):
                store_value(out, repeated, key, cell, step, f"{where}: line {n}")
    if not out and not headed:  # (StatsLogger.commit prints the line before each table)
        raise ConfigError(f"{where}: AReaL's log, but no 'Stats (i/n):' line after its 'Train step N/M done.' "
                          "lines (StatsLogger.commit prints one before each step's stats table)")
    if not out:
        raise ConfigError(f"{where}: AReaL's log, but no stats table after its 'Train step N/M done.' and "
                          "'Stats (i/n):' lines (StatsLogger.commit's)")
    return _metrics(out, where, repeated, step_column=AREAL_STEP)


def _pairs(line: str) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of one table row (the last row's empty cells left out)."""
    cells = [c.strip() for c in line.strip(CELL).split(CELL)]
    return [(k, v) for k, v in zip(cells[::2], cells[1::2], strict=False) if k]

