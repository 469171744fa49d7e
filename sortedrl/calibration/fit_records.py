"""The fit records a profile keeps beside its costs, checked as ``calibrate`` writes them.

``profile show`` prints the records (``fit.engine``, ``fit.trainer``, and ``calibrate --model``'s
``fit.steps``, ``fit.train`` and ``fit.sync``), and ``calibrate --cluster`` extends an earlier
profile. A hand edit of a wrong type or an impossible value (a negative request count, a NaN
error, a MAPE below 0) was printed as if fitted, or failed with an error that named no field:
each is one error line naming its field instead. Records that older releases did not write are
checked only where present.
"""

from __future__ import annotations

from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr


def _bad(where: str, field: str, want: str, v: object) -> ConfigError:
    return ConfigError(f"{where}: field '{field}': expected {want}, got {short_repr(v)}")


def _count(where: str, field: str, v: object, least: int = 1) -> None:
    if type(v) is not int or v < least:
        raise _bad(where, field, f"a whole number >= {least}", v)


def _number(where: str, field: str, v: object, least: float | None = 0.0) -> None:
    if not finite(v) or (least is not None and v < least):
        raise _bad(where, field, "a number" + ("" if least is None else f" >= {least:g}"), v)


def check_trainer_fit(tr: object, where: str) -> None:
    """``fit.trainer`` as :func:`~sortedrl.calibration.metrics_fit.fit_metrics` writes it: a
    hand edit of a wrong type (steps "x", a term NaN, updates_per_row 0) is one error naming
    its field, not printed as if fitted. ``updates_per_row``, ``updates`` and a term's ``stderr``:
    not in profiles written before them."""
    if tr is None or tr == {}:
        return
    if not isinstance(tr, dict):
        raise _bad(where, "fit.trainer", "an object", tr)
    if not isinstance(tr.get("file"), str):
        raise _bad(where, "fit.trainer.file", "a file name", tr.get("file"))
    for key in ("steps", "updates_per_row", "updates"):
        if key == "steps" or key in tr:
            _count(where, f"fit.trainer.{key}", tr.get(key))
    for key in ("update_mape_pct", "update_s_mean", "tokens_mean", "sync_spread_s"):
        if key != "sync_spread_s" or key in tr:
            _number(where, f"fit.trainer.{key}", tr.get(key))
    terms, cols = tr.get("terms"), tr.get("columns")
    if not isinstance(terms, dict) or not terms:
        raise _bad(where, "fit.trainer.terms", "an object of fitted terms", terms)
    for name, term in terms.items():
        _number(where, f"fit.trainer.terms.{name}.value", term.get("value") if isinstance(term, dict) else None)
        if term.get("stderr") is not None:  # (not in profiles written before it; null: no step to spare)
            _number(where, f"fit.trainer.terms.{name}.stderr", term["stderr"])
    if not isinstance(cols, dict) or not isinstance(cols.get("update"), list) or not all(
            isinstance(c, str) for c in cols["update"]):
        raise _bad(where, "fit.trainer.columns", "an object naming the columns read", cols)


def check_engine_fit(eng: object, where: str) -> None:
    """``fit.engine`` as ``calibrate --from-vllm-bench`` writes it: one record a file, each
    with its path, concurrency, requests, measured and predicted duration and error."""
    if eng is None:
        return
    if not isinstance(eng, dict):
        raise _bad(where, "fit.engine", "an object", eng)
    if eng.get("schedule") is not None and eng["schedule"] not in ("serial", "overlapped"):
        raise _bad(where, "fit.engine.schedule", "serial or overlapped (--host-schedule)", eng["schedule"])
    files = eng.get("files")
    if not isinstance(files, list) or not files:
        raise _bad(where, "fit.engine.files", "a list of the benchmark files fitted", files)
    for k, f in enumerate(files):
        at = f"fit.engine.files[{k}]"
        if not isinstance(f, dict):
            raise _bad(where, at, "an object", f)
        if not isinstance(f.get("path"), str):
            raise _bad(where, f"{at}.path", "a file name", f.get("path"))
        for key in ("concurrency", "requests"):
            _count(where, f"{at}.{key}", f.get(key))
        _number(where, f"{at}.duration_s", f.get("duration_s"), least=1e-300)
        _number(where, f"{at}.predicted_s", f.get("predicted_s"))
        _number(where, f"{at}.error_pct", f.get("error_pct"), least=-100.0)
        if f.get("latency_mape_pct") is not None:
            _number(where, f"{at}.latency_mape_pct", f["latency_mape_pct"])
        for key in ("steps_measured", "steps_replayed", "merged_requests", "merged_tokens", "running_most"):
            if f.get(key) is not None:
                _count(where, f"{at}.{key}", f[key], least=0)


# calibrate --model's records: (part, the key that shows it, numbers >= 0, signed, counts)
CPU_PARTS = (("steps", "mape", ("mape",), ("total_error",), ("measurements",)),
             ("train", "mape", ("mape",), (), ("measurements",)),
             ("sync", "median", ("median", "spread"), (), ("samples",)))


def check_cpu_fit(fit: dict, where: str) -> None:
    """``fit.steps``, ``fit.train`` and ``fit.sync`` as ``calibrate --model`` writes them, where
    ``profile show`` prints them (an object holding its ``mape`` or ``median``)."""
    for part, shown, nonnegative, signed, counts in CPU_PARTS:
        rec = fit.get(part)
        if not isinstance(rec, dict) or shown not in rec:
            continue
        for key in nonnegative:
            if key == shown or rec.get(key) is not None:
                _number(where, f"fit.{part}.{key}", rec.get(key))
        for key in signed:  # a relative error: the prediction is at least 0
            if key in rec:
                _number(where, f"fit.{part}.{key}", rec[key], least=-1.0)
        for key in counts:
            if key in rec:
                _count(where, f"fit.{part}.{key}", rec[key])
