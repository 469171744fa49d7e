"""Reading AReaL's own log (``main.log``, or its console) for ``calibrate --from-metrics``.

AReaL logs to W&B, SwanLab or TensorBoard only when asked (its ``stats_logger.wandb.mode``
defaults to ``disabled``, ``tensorboard.path`` to none), so the one record every AReaL run has
is its log: each step's ``StatsLogger.commit`` (``areal/utils/stats_logger.py`` at
areal-project/AReaL ``cbff54d``) logs ``... Train step N/M done.``, then ``Stats (i/n):`` and the
step's stats as ``tabulate_stats`` prints them (``areal/utils/printing.py``): a ``fancy_grid``
table of four ``key | value`` pairs a row, each value in ``.4e`` (five significant digits). The
stats are the ones W&B would get at its step ``N - 1`` (``log_step``, from 0; the ``i``-th of
``n`` at ``N - 2 + i``), so this log merges with an AReaL W&B export on the same steps.
"""

from __future__ import annotations

import re

from sortedrl.calibration.metrics_console import COLOUR
from sortedrl.calibration.metrics_names import KNOWN
from sortedrl.calibration.metrics_read import Metrics, _metrics, _store
from sortedrl.errors import ConfigError
from sortedrl.limits import short_repr

COMMIT = re.compile(r"Train step (\d+)/\d+ done\.")
STATS = re.compile(r"Stats \((\d+)/\d+\):")
DIGITS = 5  # tabulate_stats' floatfmt ".4e"
CELL = "\u2502"  # fancy_grid's vertical bar between the cells of a row


def is_areal_log(text: str) -> bool:
    """Whether ``text`` holds an AReaL commit line (``Train step N/M done.``)."""
    return COMMIT.search(text) is not None


def read_areal_log(text: str, where: str) -> Metrics:
    """Metric name -> {step: value} from AReaL's log: the stats table after each commit line,
    at W&B's step for it. A table before any commit line is not a step's (none is printed so
    today) and is not read; a metric of the table whose value is not a number is an error."""
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    commit = step = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = COLOUR.sub("", raw).strip()
        found = COMMIT.search(line)
        if found:
            commit, step = int(found[1]) - 1, None
            continue
        found = STATS.search(line)
        if found and commit is not None:
            step = commit + int(found[1]) - 1
            continue
        if step is not None and line.startswith(CELL) and line.endswith(CELL):
            for key, cell in _pairs(line):
                _stat(out, repeated, key, cell, step, f"{where}: line {n}")
    if not out:
        raise ConfigError(f"{where}: AReaL's log, but no stats table after its 'Train step N/M done.' lines "
                          "(StatsLogger.commit's)")
    metrics = _metrics(out, where, repeated, step_column="Train step")
    metrics.digits = DIGITS
    return metrics


def _pairs(line: str) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs of one table row (the last row's empty cells left out)."""
    cells = [c.strip() for c in line.strip(CELL).split(CELL)]
    return [(k, v) for k, v in zip(cells[::2], cells[1::2], strict=False) if k]


def _stat(out: dict, repeated: set[int], key: str, cell: str, step: int, at: str) -> None:
    try:
        value = float(cell)
    except ValueError:
        if key in KNOWN:
            raise ConfigError(f"{at}: metric {key!r}: expected a number, got {short_repr(cell)}") from None
        return
    if value == value and abs(value) != float("inf"):
        _store(out, key, step, value, f"{at}: metric {key!r}", repeated)
