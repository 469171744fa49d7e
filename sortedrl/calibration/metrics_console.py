"""Reading verl's console log for ``calibrate --from-metrics``: its default logger prints each
step as ``step:N - key:value - key:value ...`` (``verl/utils/logger/aggregate_logger.py``
``concat_dict_to_str``), maybe after Ray's ``(TaskRunner pid=1234)`` and its colour codes or a
log collector's bracketed prefixes; :mod:`sortedrl.calibration.metrics_read` hands it a
``.log`` or ``.txt`` file that is not AReaL's (:mod:`sortedrl.calibration.metrics_areal_log`).
"""

from __future__ import annotations

import math
import re

from sortedrl.calibration.metrics_names import KNOWN
from sortedrl.calibration.metrics_read import Metrics, _metrics, _store
from sortedrl.errors import ConfigError
from sortedrl.limits import short_repr
from sortedrl.wandb_runs import step_number

# verl's LocalLogger line, after Ray's "(TaskRunner pid=1234) " and any ANSI colour codes, and
# after bracketed prefixes a log collector adds ("[2025-01-01 10:00:00] ", "[rank0] ")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_CONSOLE = re.compile(r"^(?:\([^()]*\)\s+|\[[^\[\]]*\]\s*)*step:(\S+) - (.*)$")
_NUMPY = re.compile(r"^np\.(?:float|int|uint)\d*\((.*)\)$")  # pprint.pformat of numpy 2's scalars


def read_console(text: str, where: str) -> Metrics:
    """verl's console logger: ``step:N - key:value - key:value``, a value as ``pprint.pformat``
    writes a number (``1.5``, ``nan``, ``np.float64(1.5)``). A line of no such form is not read;
    a file of none is an error."""
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    found = False
    for n, line in enumerate(text.splitlines(), 1):
        m = _CONSOLE.match(COLOUR.sub("", line).strip())
        if m is None:
            continue
        found = True
        try:
            step = step_number(float(m[1]))
        except ValueError:
            step = None
        if step is None:
            raise ConfigError(f"{where}: line {n}: 'step:{m[1]}' is not a step number (a whole number from 0 "
                              "to below 2**53)")
        for item in _items(m[2]):
            key, colon, cell = item.rpartition(":")
            key = key.strip()
            if not colon or not key:
                raise ConfigError(f"{where}: line {n}: {short_repr(item)} is not key:value")
            store_value(out, repeated, key, cell, step, f"{where}: line {n}")
    if not found:
        raise ConfigError(f"{where}: no 'step:N - key:value' line (verl's console logger's form), AReaL's "
                          "'Train step N/M done.' and its stats table, or slime's 'perf N: {...}' in this log")
    return _metrics(out, where, repeated)


def store_value(out: dict, repeated: set[int], name: str, cell: str, step: int, at: str) -> None:
    """Metric ``name``'s value at ``step`` as a log prints it (``1.5``, ``nan``, numpy 2's
    ``np.float64(1.5)``), stored when finite (the console logs' readers: verl's, AReaL's,
    slime's); text that is no number is an error for a metric of the table and skipped for any
    other. ``at``: where it is (``FILE: line N``)."""
    cell = _NUMPY.sub(r"\1", cell.strip())
    try:
        value = float(cell)
    except ValueError:
        if name in KNOWN:
            raise ConfigError(f"{at}: metric {name!r}: expected a number, got {short_repr(cell)}") from None
        return
    if math.isfinite(value):
        _store(out, name, step, value, f"{at}: metric {name!r}", repeated)


def _items(body: str) -> list[str]:
    """The ``key:value`` items of a console line, split at `` - ``, where a piece without ``:``
    belongs to a neighbour: the rest of a quoted value (``pprint``'s ``'a - b'``) when the item
    before opens a quote it does not close, else the start of the next item's key (a key holding
    `` - ``: ``val-core/a - b/reward:0.5``), or, last on the line, the end of the item before."""
    items: list[str] = []
    pending: list[str] = []  # pieces without ':' waiting for the rest of their key
    for piece in body.split(" - "):
        if items and not pending and _open_quote(items[-1]):
            items[-1] += " - " + piece
        elif ":" in piece:
            items.append(" - ".join([*pending, piece]))
            pending = []
        else:
            pending.append(piece)
    if pending and items:
        items[-1] = " - ".join([items[-1], *pending])
    elif pending:
        items.append(" - ".join(pending))  # (no item at all: "is not key:value")
    return items


def _open_quote(item: str) -> bool:
    """Whether the value of ``item`` (after its first ``:``) opens a quote it does not close."""
    value = item.partition(":")[2].strip()
    return value[:1] in ("'", '"') and (len(value) < 2 or not value.endswith(value[0]))
