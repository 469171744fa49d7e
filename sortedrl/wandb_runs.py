"""The runs of a W&B "export CSV", and ``--run``: which one ``calibrate --from-metrics`` and
``trace fit --drift-from`` read.

An export of a chart holds, after its x-axis (``Step``, or a metric such as
``<run> - train/global_step``), one ``<run> - <metric>`` column per run plotted. A column's run
name ends at its last `` - ``: a run name may hold one, a metric name never does. A file of
several runs is read only with ``--run`` naming one. Before, ``trace fit`` read the first run's
column of each metric: a run the user may not have meant, and a metric the first run lacked from
the next (a mean of one run beside the clip ratio of another); ``calibrate`` refused such a file
with no way to choose a run.
"""

from __future__ import annotations

import math

from sortedrl.errors import SortedRLError


def run_of(column: str) -> str | None:
    """The run of a ``<run> - <metric>`` column; None for a column of no run (``Step``)."""
    run, sep, _ = column.rpartition(" - ")
    return run.strip() if sep else None


def metric_of(column: str) -> str:
    """The metric of a ``<run> - <metric>`` column; a column of no run is its own name."""
    return column.rpartition(" - ")[2].strip()


def export_runs(header: list[str]) -> list[str]:
    """The runs with columns in ``header``, in the order the export first names them."""
    return list(dict.fromkeys(run for h in header if (run := run_of(h)) is not None))


def only_run(header: list[str], run: str | None, where: str,
             error: type[SortedRLError]) -> list[str]:
    """``header`` with every column of a run other than the one to read blanked (``""``), so
    a reader that looks columns up by name sees only that run's and the run-less ones.
    The run to read: ``run`` (``--run``), or the only run in the file; several runs without
    ``run``, a ``run`` not in the file, or a ``run`` for a file of no runs raise ``error``."""
    runs = export_runs(header)
    if run is None and len(runs) > 1:
        raise error(f"{where}: {len(runs)} runs in this W&B export ({', '.join(runs)}): "
                    "choose one with --run")
    if run is not None and not runs:
        raise error(f"--run {run}: {where} has no '<run> - <metric>' columns: --run applies to "
                    "W&B export CSVs only")
    if run is not None and run.strip() not in runs:
        raise error(f"--run {run}: no such run in {where} (runs found: {', '.join(runs)})")
    keep = run.strip() if run is not None else None
    return [h if keep is None or run_of(h) in (None, keep) else "" for h in header]


def present(header: list[str]) -> list[str]:
    """The columns of ``header`` that :func:`only_run` did not blank."""
    return [h for h in header if h]


MAX_STEP = 2**53  # a step at or past this is no longer a float's whole number (1e308 was read)


def step_number(value: float) -> int | None:
    """A logged step as an int: a whole number from 0 to below :data:`MAX_STEP` (W&B may write
    ``6.0``); None otherwise."""
    return int(value) if math.isfinite(value) and value == int(value) and 0 <= value < MAX_STEP else None


def repeated_note(where: str, steps: int) -> str:
    """The note for ``steps`` steps logged more than once with other values (both readers of
    step metrics keep the last logging: ``calibrate --from-metrics``, ``trace fit --drift-from``)."""
    return (f"{where}: {steps} step(s) logged more than once with other values (a resumed run?): "
            "the last logging of each is used")
