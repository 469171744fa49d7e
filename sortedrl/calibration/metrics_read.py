"""Reading an RL framework's per-step metrics files for ``calibrate --from-metrics``: metric name
-> {step: value}, checked (:func:`read_metrics`), several files merged by step
(:func:`read_metrics_files`, on one step axis: :func:`step_axis`);
:mod:`sortedrl.calibration.metrics_fit` fits them. Metric names map
to roles through :data:`~sortedrl.calibration.metrics_names.ROLES`, the one table
docs/calibration.md documents; a name may carry OpenRLHF's ``train/`` prefix (its W&B and
TensorBoard loggers put it before every key). Accepted files:
- verl's file logger (``VERL_FILE_LOGGER_PATH``): JSON lines ``{"step": N, "data": {...}}``,
  or flat lines ``{"step": N, "metric": value, ...}``;
- AReaL's log (``main.log``, its console): the stats table after each ``Train step N/M done.``
  (:mod:`sortedrl.calibration.metrics_areal_log`);
- verl's console logger (its default, ``.log`` / ``.txt``): lines ``step:N - key:value - ...``
  (:mod:`sortedrl.calibration.metrics_console`); other lines are other output, skipped (a log
  of none is an error);
- a TensorBoard event file (``events.out.tfevents.*``), on the step each framework passed
  (:mod:`sortedrl.calibration.metrics_tfevents`);
- a CSV with one column per metric (``step`` or ``Step`` plus metric names);
- a W&B "export CSV": columns ``Step`` (or a framework's x-axis: OpenRLHF's
  ``train/global_step``, slime's ``rollout/step``) and ``<run> - <metric>`` (split at the last
  `` - ``: a run name may hold one, a metric name never does); the ``__MIN``/``__MAX`` columns
  are the plot's downsampling buckets and are ignored. An export of several runs is read with
  ``--run`` naming one (:mod:`sortedrl.wandb_runs`);
- a W&B API history CSV (``run.history().to_csv()``): a blank index column, the metrics, and
  W&B's own ``_step`` (the step when no other step column is there), ``_runtime``, ``_timestamp``.
A gzip-compressed file (told by its first bytes) is read decompressed, its format from the name
without ``.gz``; a plain file named ``.gz`` is read as it is, and noted. A UTF-8 byte-order
mark (Excel's, some exports') is skipped. In JSON lines and the console log, a metric of the
table whose value is not a number is an error; other keys' are ignored. A step logged again with other values (a run resumed from an earlier checkpoint into the
same log logs the steps after it twice) is read from its last logging, and the fit notes it when
a metric it may read differs (an entropy logged twice is not noted)
(:func:`~sortedrl.wandb_runs.repeated_note`); logged again with the same values, it is read once.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import shlex
import zlib
from pathlib import Path

from sortedrl import jsonio
from sortedrl.calibration.file_options import refuse_repeats
from sortedrl.calibration.metrics_layouts import GLOBAL_STEP
from sortedrl.calibration.metrics_names import KNOWN, STEP_METRICS, WANDB_STEP, listing
from sortedrl.errors import ConfigError, not_found
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.wandb_runs import MAX_STEP, metric_of, only_run, present, repeated_note, step_number

TB_STEP = "TensorBoard step"  # an event file's steps: what its framework passed add_scalar
# step columns whose numbers match no other file's for every version or setting of their
# framework: an event file's (verl's, OpenRLHF's global step from 1, slime's rollout step,
# AReaL's W&B step), AReaL's log's "Train step N" (W&B's step N - 1 from AReaL v1.0, N before),
# slime's console's rollout id (W&B's rollout/step unless --wandb-always-use-train-step)
AREAL_STEP, SLIME_STEP = "Train step", "perf rollout_id"  # AReaL's log's, slime's console's
OWN_AXES = (TB_STEP, AREAL_STEP, SLIME_STEP)
FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".log": "console", ".txt": "console"}


class Metrics(dict):
    """Metric name -> {step: value}, with the notes on how the file was read (``notes``), which
    :func:`fit_metrics` records with its own (``fit.trainer.notes``), and the column its steps
    were read from (``step_column``, as the file names it)."""

    def __init__(self, *args, notes: list[str] | None = None, step_column: str = "step", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.notes: list[str] = list(notes or [])
        self.step_column = step_column


def step_axis(column: str) -> str:
    """The counter a step column numbers its rows by: a framework's own W&B x-axis
    (:data:`~sortedrl.calibration.metrics_names.STEP_METRICS`: OpenRLHF's ``train/global_step``,
    from 1, slime's ``rollout/step``), else ``"step"``: W&B's ``Step`` and ``_step`` (its own
    counter of loggings, from 0, unless the framework sets it: verl sets it to its ``step``, from
    1) and verl's ``step`` (its file and console loggers). Files of two axes are not merged: no
    rule maps one onto the other for every framework."""
    if column in OWN_AXES:  # (each merges only with its own kind: see OWN_AXES)
        return column
    metric = metric_of(column)
    return metric if metric in STEP_METRICS else "step"


def read_metrics_files(paths: list[Path], run: str | None = None) -> Metrics:
    """The metrics of several files merged by step (a W&B chart export is one panel a file: the
    update time in one, the tokens in another). A metric that two files give at one step with
    different values is an error (which to fit is unclear); the same value twice is read once.
    A file named twice is an error."""
    refuse_repeats(paths, "metrics")
    merged = Metrics()
    origin: dict[str, Path] = {}  # metric -> the file it was first read from
    base: tuple[Path, str] | None = None  # the first file and its step column: the others' axis
    for p in paths:
        one = read_metrics(p, run)
        if base is None:
            base = (p, one.step_column)
            merged.step_column = one.step_column
        elif step_axis(one.step_column) != step_axis(base[1]):  # (Step from 0, global_step from 1)
            raise ConfigError(
                f"{p}: steps numbered by {one.step_column!r}, but {base[0]} by {base[1]!r}: two step "
                "counters (W&B's Step or _step; a framework's train/global_step or rollout/step) that "
                "need not start at the same number, so merging by step number could pair different "
                "steps; export both with the same x-axis")
        for name, column in one.items():
            into = merged.setdefault(name, {})
            for step, value in column.items():
                if into.get(step, value) != value:  # (repr: 8.6 and 8.600000000000001 told apart)
                    raise ConfigError(f"{p}: metric {name!r} at step {step}: {value!r}, but {origin[name]} "
                                      f"gives {into[step]!r}: which to fit is unclear")
                into[step] = value
            origin.setdefault(name, p)
        merged.notes += one.notes
    return merged


def is_tfevents(name: str) -> bool:
    """Whether a file's name is a TensorBoard event file's (``events.out.tfevents.<time>...``)."""
    return name.startswith("events.out.tfevents")


def _read_events(p: Path, where: str, run: str | None) -> Metrics:
    """A TensorBoard event file, or a log directory's event files (a restart writes a new one),
    read together in the order they logged; a directory of none is no metrics file."""
    from sortedrl.calibration.metrics_tfevents import read_tfevents

    files = sorted(f for f in p.iterdir() if is_tfevents(f.name) and f.is_file()) if p.is_dir() else [p]
    if not files:
        raise ConfigError(f"{where}: a directory, not a metrics file (nor a TensorBoard log directory: no "
                          "events.out.tfevents.* file in it)")
    if run is not None:
        raise ConfigError(f"--run {run}: {where} is TensorBoard's (one run's): --run applies to W&B export "
                          "CSVs only")
    try:
        return read_tfevents([(f.read_bytes(), str(f)) for f in files], where)
    except FileNotFoundError:
        raise ConfigError(not_found(where, "metrics file not found", stdin=False)) from None


def read_metrics(path: str | Path, run: str | None = None) -> Metrics:
    """Metric name -> {step: value} from one metrics file; ``run``: the run to read of a W&B
    export (``--run``)."""
    where = str(path)
    p = Path(path)
    if is_tfevents(p.name) or p.is_dir():
        return _read_events(p, where, run)
    try:
        # (gzip, or a file named .gz, which says so if it is not: read as they are)
        whole = p.name.lower().endswith(".gz")
        raw = p.read_bytes() if whole else jsonio.read_text_bytes(p, ConfigError, binary=(b"\x1f\x8b",))
    except FileNotFoundError:
        raise ConfigError(not_found(where, "metrics file not found", stdin=False)) from None
    except ConfigError as e:
        if "binary data" not in str(e):
            raise
        raise ConfigError(f"{e} (a TensorBoard event file is told by its name, events.out.tfevents.*: "
                          "give it that name, or its log directory)") from None
    name = p.name.lower().removesuffix(".gz")  # the format: the suffix inside .gz
    gzipped = raw[:2] == b"\x1f\x8b"  # gzip's magic number: metrics.jsonl.gz, or a .csv that is gzipped
    notes = []
    if gzipped:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise ConfigError(f"{where}: gzip-compressed, but it does not decompress ({e}): it is damaged "
                              "or cut short") from None
    elif name != p.name.lower():
        notes.append(f"{where}: named .gz, but not gzip-compressed: read as plain text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        plain = " named .gz, but not gzip-compressed, and" if notes else ""
        raise ConfigError(f"{where}:{plain} not UTF-8 text (byte {e.start})") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark: the first header was '\ufeffStep'
    if not text.strip():
        raise ConfigError(f"{where}: empty file")
    kind = FORMATS.get(Path(name).suffix)
    if kind is None:
        inner = " (gzip-compressed)" if gzipped else ""
        suffix = Path(name).suffix
        said = f"unknown metrics format {suffix!r}" if suffix else \
            f"no format suffix{' inside .gz' if name != p.name.lower() else ''}"
        raise ConfigError(f"{where}{inner}: {said} (known: {', '.join(FORMATS)}, each maybe gzip-compressed "
                          "as .gz): name the file by its format, e.g. metrics.jsonl.gz")
    read = _read_by_kind(kind, text, where, run)
    read.notes[:0] = notes
    return read


def _read_by_kind(kind: str, text: str, where: str, run: str | None) -> Metrics:
    if kind == "csv":
        return _read_csv(text, where, run)
    if kind is not None and run is not None:
        shown = "JSON lines (verl's file logger)" if kind == "json" else "a console log (verl's, AReaL's or slime's)"
        raise ConfigError(f"--run {run}: {where} is {shown}: --run applies to W&B export CSVs only")
    if kind == "json":
        return _read_jsonl(text, where)
    from sortedrl.calibration.metrics_areal_log import is_areal_log, read_areal_log
    from sortedrl.calibration.metrics_console import read_console
    from sortedrl.calibration.metrics_slime_log import is_slime_log, read_slime_log

    if is_areal_log(text):
        return read_areal_log(text, where)
    if is_slime_log(text):
        return read_slime_log(text, where)
    return read_console(text, where)


def _read_jsonl(text: str, where: str) -> Metrics:
    if text.lstrip().startswith("["):  # (one JSON document: line 1 was "not valid JSON")
        raise ConfigError(f"{where}: a JSON array, not JSON lines (one object a step on each line): "
                          f"convert it with jq -c '.[]' {shlex.quote(where)} > steps.jsonl")
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()  # steps logged again with other values
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = jsonio.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or isinstance(rec["step"], bool):
            raise ConfigError(f"{where}: line {n}: expected an object with an integer 'step'")
        step = rec["step"]
        if not 0 <= step < MAX_STEP:
            raise ConfigError(f"{where}: line {n}: field 'step': {short_repr(step)} is not a step number "
                              "(a whole number from 0 to below 2**53)")
        data = rec.get("data", rec)
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: line {n}: field 'data': expected an object of metrics")
        for key, v in data.items():
            if finite(v):
                _store(out, key, step, float(v), f"{where}: line {n}: metric {key!r}", repeated)
            elif key in KNOWN and v is not None and (isinstance(v, bool)
                                                     or not isinstance(v, (int, float))):
                shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
                raise ConfigError(f"{where}: line {n}: metric {key!r}: expected a number, got "
                                  f"{shown}")  # (null, NaN and inf: not logged, as in a CSV)
    return _metrics(out, where, repeated)


def _read_csv(text: str, where: str, run: str | None) -> Metrics:
    reader = csv.reader(text.splitlines())
    try:
        rows = list(reader)
    except csv.Error as e:  # a cell over the csv module's 131,072 characters
        raise ConfigError(f"{where}: row {reader.line_num}: not CSV ({e})") from None
    if not rows:
        raise ConfigError(f"{where}: empty CSV")
    header = only_run(rows[0], run, where, ConfigError)  # other runs' columns: blank
    step_cols, optional = _step_columns(header, where)
    names = _csv_names(header, step_cols, where)
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()  # steps logged again with other values
    for n, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):  # a row cut at a comma (or one with a comma too many)
            raise ConfigError(f"{where}: row {n}: {len(row)} cells, but the header has {len(header)} columns")
        step = _row_step(header, row, step_cols, optional, f"{where}: row {n}")
        if step is None:
            continue  # a W&B row that did not log train/global_step (its sample table, say)
        for col, name in names.items():
            cell = row[col].strip()
            if not cell:
                continue  # W&B leaves a cell empty where a metric was not logged
            try:
                value = float(cell)
            except ValueError:
                raise ConfigError(f"{where}: row {n}: column {header[col]!r}: expected a number, "
                                  f"got {cell!r}") from None
            if math.isfinite(value):  # NaN or inf: not logged, as the JSONL reader skips them
                _store(out, name, step, value, f"{where}: row {n}: column {header[col]!r}", repeated)
    return _metrics(out, where, repeated, header[step_cols[0]].strip())


def _store(out: dict[str, dict[int, float]], name: str, step: int, value: float, at: str,
           repeated: set[int]) -> None:
    """``value`` of metric ``name`` at ``step`` (``at``: where it is). A step logged again (on a
    later line or row) with another value keeps the later one, the value of the run that went on
    after a resume from an earlier checkpoint, and joins ``repeated`` when ``name`` is a metric
    the fit may read (:data:`~sortedrl.calibration.metrics_names.KNOWN`: an entropy logged twice
    does not make the fit's note)."""
    if name == GLOBAL_STEP and step_number(value) is None:
        raise ConfigError(f"{at}: expected a whole number of updates, got {value:g}")
    column = out.setdefault(name, {})
    if column.get(step, value) != value and name in KNOWN:
        repeated.add(step)
    column[step] = value


def _metrics(out: dict[str, dict[int, float]], where: str, repeated: set[int],
             step_column: str = "step") -> Metrics:
    """The metrics read, with one note (for the file, not a step) when steps were logged again
    with other values; ``step_column``: the column the steps were read from."""
    return Metrics(out, notes=[repeated_note(where, len(repeated))] if repeated else [],
                   step_column=step_column)


def _row_step(header: list[str], row: list[str], cols: list[int], optional: bool, at: str) -> int | None:
    """The row's step, the same in every step column; None for a row of an ``optional`` step
    column that did not log it."""
    steps = {}
    for col in cols:
        cell = row[col]
        if optional and not cell.strip():
            continue
        try:  # W&B may write 6.0; a whole number from 0 to below 2**53 (MAX_STEP)
            steps[col] = step_number(float(cell))
        except ValueError:
            steps[col] = None
        if steps[col] is None:
            raise ConfigError(f"{at}: column {header[col]!r}: expected a whole step number, got {cell!r}")
    if len(set(steps.values())) > 1:
        (a, x), *others = steps.items()
        b, y = next((c, s) for c, s in others if s != x)
        raise ConfigError(f"{at}: columns {header[a]!r} and {header[b]!r} give steps {x} and {y}: "
                          "which to read is unclear")
    return next(iter(steps.values()), None)


def _step_columns(header: list[str], where: str) -> tuple[list[int], bool]:
    """The step columns: ``step`` / ``Step``, else a framework's W&B x-axis (OpenRLHF's
    ``train/global_step``, slime's ``rollout/step``), else W&B's own ``_step`` of a history CSV
    (each a metric column, empty in rows that did not log it: True); several (``Step`` and
    ``step``) must agree in every row."""
    cols = [i for i, h in enumerate(header) if h.strip().lower() == "step"]
    if cols:
        return cols, False
    for metric in (*STEP_METRICS, WANDB_STEP):
        cols = [i for i, h in enumerate(header) if h and metric_of(h) == metric]
        if cols:
            return cols, True
    raise ConfigError(f"{where}: no 'Step' (or {', '.join(map(repr, STEP_METRICS))} or {WANDB_STEP!r}) column "
                      f"(columns found: {listing(present(header))})")


def _csv_names(header: list[str], step_cols: list[int], where: str) -> dict[int, str]:
    """Column index -> metric name; W&B's ``<run> - <metric>`` loses its run prefix (the header
    holds one run's: :func:`~sortedrl.wandb_runs.only_run` blanked the others'). Two columns of
    one metric (two runs of one name, say) are an error: which one to fit is unclear."""
    names: dict[int, str] = {}
    for i, h in enumerate(header):
        if (i in step_cols or not h or h.endswith(("__MIN", "__MAX"))
                or h.strip().lower().startswith("_")):
            continue
        same = [j for j, name in names.items() if name == metric_of(h)]
        if same:
            raise ConfigError(f"{where}: columns {same[0] + 1} ({header[same[0]]!r}) and {i + 1} ({h!r}) both "
                              f"hold metric {metric_of(h)!r}: which to fit is unclear")
        names[i] = metric_of(h)
    return names

