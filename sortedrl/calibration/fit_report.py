"""What ``calibrate --from-*`` says about the terms it fitted, and the warnings it and ``profile
show`` give when a fit does not describe its measurements.

:func:`fitted_lines`: each fitted term with its value, unit and standard error (or why it has
none), as ``calibrate`` prints them under its summary. :func:`profile_warnings`: one line for
each sign, read off the profile's records, that the profile is not the server's:
- a benchmark file the profile replays more than :data:`DURATION_OFF_PCT` off its duration
  (the recorded files: within 5%);
- a file whose engine step count read off its tokens is more than :data:`STEPS_OFF` from the
  replay's (the recorded files: within 2.1%): more steps than replayed is a server that ran fewer
  sequences at once than the concurrency (its ``max_num_seqs`` below the cluster's);
- a file whose ``max_concurrency`` is null (no limit) while its sends kept fewer in flight;
- a benchmark whose ``model_id`` names a known model (:data:`~sortedrl.sim.hardware.MODELS`)
  other than the cluster's. Only an id in which a known model's name appears counts: a local path
  or a model the presets do not know is never flagged.
Both commands read the records alone, so a profile written before these checks gets them too.
:func:`bench_notes`: the notes ``calibrate --from-vllm-bench`` gives when what the files say of
their server plainly is not the cluster given: an engine named for a CPU, ``vllm-cpu``, fitted
onto a GPU preset (a note, not an error: a CPU recording tried on a preset's shape is what a user
may mean). A ``model_id`` naming no known model is not one: a user's own checkpoint is served
under its path. It reads what the fit records of each file (``engine``), which a profile written
before it recorded them does not hold; ``profile show`` says it again.
"""

from __future__ import annotations

import re

from sortedrl.calibration.show import at_bound
from sortedrl.sim.hardware import GPUS, MODELS

DURATION_OFF_PCT = 25.0  # a file's replayed duration this far off (%): the profile is not its server's
STEPS_OFF = 0.10  # steps read off the tokens this share from the replay's: not the server's schedule
_CPU = re.compile(r"(?<![a-z])cpu(?![a-z])", re.IGNORECASE)  # vllm-cpu, 0.6.0+cpu: a CPU build


def _num(v: float) -> str:
    return f"{v:.4g}"


def _error(name: str, stderr: float) -> str:
    return f"stderr {'0' if at_bound(name, stderr) else _num(stderr)}"


def fitted_lines(raw: dict) -> list[str]:
    """The terms a profile's fits (its ``fit.engine`` and ``fit.trainer`` records) fitted, one a
    line: name, value (as the profile's ``costs`` hold it: a sync measured between separate GPUs
    is scaled), unit, and its standard error or why it has none."""
    fit, costs, rows = raw.get("fit") or {}, raw.get("costs") or {}, []
    eng = fit.get("engine") or {}
    loose = set(eng.get("unidentified") or ())
    for name, t in _terms(eng):
        why = ("not separable in these files: no standard error" if name in loose else
               "no file to spare: no standard error" if t.get("stderr") is None else
               _error(name, t["stderr"]))
        rows.append((name, costs.get(name, t["value"]), t.get("unit", ""), why))
    if isinstance(eng.get("host_s"), (int, float)):
        detailed = any(f.get("detailed") for f in eng.get("files", []))
        why = ("held at 0: no file holds per-request latencies" if not detailed else
               "searched (--host-schedule overlapped): no standard error" if eng.get("host_searched") else
               "no file to spare: no standard error" if eng.get("host_stderr_s") is None else
               _error("host_s", eng["host_stderr_s"]))
        rows.append(("host_s", eng["host_s"], "s/request", why))
    tr = fit.get("trainer") or {}
    for name, t in _terms(tr):
        why = ("median of the syncs: no standard error (spread "
               f"{_num(tr.get('sync_spread_s') or 0.0)} s)" if name == "sync_s" else
               "no step to spare: no standard error" if t.get("stderr") is None else
               _error(name, t["stderr"]))
        rows.append((name, costs.get(name, t["value"]), t.get("unit", ""), why))
    if not rows:
        return []
    shown = [(n, "0" if at_bound(n, v) else _num(v), u, w) for n, v, u, w in rows]
    w = [max(len(r[i]) for r in shown) for i in range(3)]
    return ["  fitted terms:", *(f"    {n:<{w[0]}}  {v:>{w[1]}}  {u:<{w[2]}}  {why}".rstrip()
                                 for n, v, u, why in shown)]


def _terms(part: dict) -> list[tuple[str, dict]]:
    """A fit record's terms that hold a number (a record kept from an earlier profile is
    checked only as ``profile show`` reads it)."""
    terms = part.get("terms")
    return [(k, t) for k, t in terms.items() if isinstance(t, dict) and isinstance(t.get("value"), (int, float))
            and (t.get("stderr") is None or isinstance(t["stderr"], (int, float)))] if isinstance(terms, dict) else []


def profile_warnings(raw: dict) -> list[str]:
    """The warnings (without ``warning:``) a profile's records give: see the module's docstring."""
    eng = (raw.get("fit") or {}).get("engine")
    if not isinstance(eng, dict):
        return []
    seqs = (raw.get("engine_config") or {}).get("max_num_seqs")
    out = []
    shape = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    for f in eng.get("files", []):
        out += _file_warnings(f, seqs, shape)
    return out + _model_warnings(raw)


def _file_warnings(f: dict, seqs: object, shape: dict) -> list[str]:
    path, conc, out = f["path"], f["concurrency"], []
    if f.get("concurrency_from_sends"):
        out.append(f"{path}: max_concurrency is null (no limit: every request sent at once), but its "
                   f"start_times and latencies show at most {conc} requests in flight: replayed as a "
                   f"closed loop of {conc}; check how the benchmark was run (--max-concurrency)")
    if abs(f["error_pct"]) > DURATION_OFF_PCT:
        out.append(f"{path}: the profile replays it {f['error_pct']:+.1f}% off its measured duration "
                   f"(more than {DURATION_OFF_PCT:g}%): the fitted terms do not describe this run; check "
                   "that its max_concurrency and request_rate say how the benchmark ran, that --cluster's "
                   "max_num_seqs is the server's, and --host-schedule (overlapped for a GPU server)")
    measured, replayed = f.get("steps_measured"), f.get("steps_replayed")
    if not measured or not replayed or abs(measured / replayed - 1.0) <= STEPS_OFF:
        return out
    batch = min(conc, seqs) if isinstance(seqs, int) else conc
    running = f.get("running_most")
    head = (f"{path}: {measured} engine steps read off its tokens, {replayed} in the replay "
            f"({100.0 * (measured / replayed - 1.0):+.0f}%)")
    if isinstance(running, int):
        head += f", and at most {running} requests running at once (between their first and last token)"
    seqs_hint = (f"give --cluster the server's max_num_seqs (a preset's -Nseq suffix, e.g. "
                 f"{shape.get('gpu', 'h100')}-{shape.get('model', 'llama3.1-8b')}-"
                 f"{running if isinstance(running, int) else 64}seq, or max_num_seqs in a cluster file)")
    if measured > replayed or (isinstance(running, int) and running < batch):
        out.append(f"{head}: the server probably ran fewer sequences at once than the replay's {batch} "
                   f"(concurrency {conc}, max_num_seqs {seqs}); " + seqs_hint)
    elif isinstance(seqs, int) and conc > seqs:
        out.append(f"{head}: the server probably ran more sequences at once than max_num_seqs {seqs} "
                   f"(concurrency {conc}); " + seqs_hint)
    else:
        out.append(f"{head}: the replay's schedule is not the server's; check --host-schedule "
                   "(overlapped for a GPU server) and the file's max_concurrency")
    return out


def named_models(model_id: str) -> set[str]:
    """The known models (:data:`~sortedrl.sim.hardware.MODELS`) whose name a model id holds, as
    consecutive parts of its last path component, case and the separators (-, _) aside:
    ``meta-llama/Llama-3.1-8B-Instruct`` holds llama3.1-8b, ``Qwen/Qwen3-30B-A3B-Instruct-2507``
    qwen3-30b-a3b; ``/ckpt/step_100`` and ``my-tiny-model`` none."""
    base = re.split(r"[/\\]", model_id.rstrip("/\\"))[-1].lower()
    parts = [p for p in re.split(r"[-_\s]+", base) if p]
    windows = {"".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}
    return {m for m in MODELS if re.sub(r"[-_\s]", "", m) in windows}


def _model_warnings(raw: dict) -> list[str]:
    """A benchmark of a known model other than the cluster's (the profile's ``model``: the
    benchmark files' ``model_id``, comma-separated)."""
    shape, model = raw.get("cluster"), raw.get("model")
    if not isinstance(shape, dict) or not isinstance(model, str) or shape.get("model") not in MODELS:
        return []
    mine, out = shape["model"], []
    for mid in model.split(", "):
        other = sorted(named_models(mid))
        if other and mine not in other:
            out.append(f"the benchmark's model_id {mid!r} is {' or '.join(other)}, but the profile's cluster "
                       f"({shape.get('preset')}) is of {mine}: the profile keeps {mine}'s shape, KV budget and "
                       f"unmeasured terms beside terms measured on another model; give --cluster a preset of "
                       f"the benchmarked model (e.g. {shape.get('gpu')}-{other[0]})")
    return out


def bench_notes(raw: dict, cluster: str) -> list[str]:
    """The notes (with ``note:``) for benchmark files whose engine or model plainly is not that
    of ``cluster`` (``--cluster`` as given): see the module's docstring."""
    eng, shape = (raw.get("fit") or {}).get("engine"), raw.get("cluster")
    if not isinstance(eng, dict) or not isinstance(shape, dict):
        return []
    files = [f for f in eng.get("files", []) if isinstance(f, dict)]
    gpu = shape.get("gpu")
    engines = dict.fromkeys(" ".join(str(f[k]) for k in ("engine", "engine_version") if f.get(k))
                            for f in files if isinstance(f.get("engine"), str))
    return [f"note: the benchmark files' engine is {name}, a CPU build, fitted onto --cluster {cluster} "
            f"({gpu} GPUs): the profile's engine terms are that CPU's step times, not a GPU's"
            for name in engines if _CPU.search(name) and gpu in GPUS]
