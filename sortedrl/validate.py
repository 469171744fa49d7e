"""``sortedrl validate``: replay a real run in the simulator and say how far apart they are.

The run directory holds what ``sortedrl run`` wrote: the timeline, the observed trace and the
run's configuration (policy, knobs, engine size) in the timeline's meta record. The simulator
replays the trace with the same policy and knobs (the auto ones at the values the run resolved)
on the cluster a calibrated profile describes, with the run's ``max_num_seqs``. Steps follow
the real run's updates: real step k ends when update k ends, and the simulated step k ends when
the simulation has trained as many samples
(a policy whose decisions depend on timing may split them into a different number of updates).
A step holds its rollout, its update(s), and the sync before it. A real step the simulation has
no update of its own for (it trained those samples in the same update as the step before, or
never trained that many) is not compared: its simulated values and errors are None, and every
per-step mean is over the steps both runs have (``steps_compared``; ``updates_real`` and
``updates_sim`` count the updates of each).
Per step we compare step time, rollout time (time with at least one running sample), update time
and bubble ratio; ``step_time_mape`` and ``bubble_ratio_abs_err`` (whole run) are the headline
errors. ``progress_time_mape`` compares the time by which each step's count of trained samples
is reached; unlike per-step times it does not depend on where a timing-sensitive policy happened
to draw its update boundaries. When the two makespans are more than 2x apart the profile does
not run at the run's speed (another host or model), and a ``warning:`` on stderr says so and
what to do (:mod:`sortedrl.validate_speed`); ``warnings`` in the result holds it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import typer

from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.metrics import missing_meta, span_table, summarize, union_length, unit_ratio
from sortedrl.outputs import Writer, write_json
from sortedrl.policies.registry import builtin_class, make_policy
from sortedrl.run_summary import check_matches, is_real_run, read_summary
from sortedrl.sim.cluster import load_cluster
from sortedrl.sim.run import simulate
from sortedrl.tables import PERCENT, percent
from sortedrl.timeline import Timeline
from sortedrl.timeline_file import find_timeline, read_timeline
from sortedrl.traces.io import read_trace
from sortedrl.validate_speed import speed_warning


def step_ends(tl: Timeline) -> tuple[list[float], list[int]]:
    """End time of every update, and how many samples had been trained by then."""
    tr = tl.columns("train")
    order = np.argsort(tr["t"], kind="stable")
    return tr["t_end"][order].tolist(), np.cumsum(tr["samples"].lengths()[order]).tolist()


def window(tl: Timeline, start: float, end: float) -> dict:
    """Step, rollout and update time, and the bubble ratio, within ``[start, end]``."""
    sp = span_table(tl)
    capacity = int(tl.meta["engines"]) * int(tl.meta["max_num_seqs"])
    a, b = np.clip(sp["t0"], start, end), np.clip(sp["t1"], start, end)
    keep = b > a
    rollout = union_length(a[keep], b[keep])
    busy = float(np.sum(b[keep] - a[keep]))
    train = sum(max(0.0, min(t1, end) - max(t0, start)) for t0, t1, *_ in tl.rows("train"))
    return {"step_s": end - start, "rollout_s": rollout, "train_s": train,
            "bubble_ratio": unit_ratio(1.0 - busy / (capacity * rollout)) if rollout > 0 else 0.0}


def step_table(tl: Timeline, ends: list[float] | None = None) -> list[dict]:
    """Per step (by default one per update, ending when it ends): see :func:`window`."""
    ends = step_ends(tl)[0] if ends is None else ends
    rows, start = [], 0.0
    for k, end in enumerate(ends):
        rows.append({"step": k, **window(tl, start, end)})
        start = end
    return rows


def aligned_updates(real: Timeline, sim: Timeline) -> list[int | None]:
    """For each real update, the simulated update by whose end the simulation had trained as
    many samples (None: it never did).

    A policy's decisions depend on timing, so the simulation may split the same samples into a
    different number of updates; aligning by samples trained keeps the steps comparable.
    """
    sim_counts = step_ends(sim)[1]
    js = np.searchsorted(sim_counts, step_ends(real)[1]).tolist()  # first with at least as many
    return [j if j < len(sim_counts) else None for j in js]


def own_updates(updates: list[int | None]) -> list[bool]:
    """Which real steps the simulation has an update of its own for: one it reached, and not
    the one the step before ended with (then the simulation trained both steps' samples in one
    update, and this step's simulated window would be empty)."""
    return [j is not None and (k == 0 or j != updates[k - 1]) for k, j in enumerate(updates)]


def dropped_attempts(tl: Timeline, cap: int) -> dict:
    """Attempts the real run dropped and regenerated: (sample, attempt) -> a length for them.

    Their true lengths were never observed (they were aborted first); they were at least longer
    than what they had reached, so the replay gives them the cap and they run until a harvest
    drops them too, as they did. The trained attempt keeps the trace's length."""
    last: dict[int, int] = {}
    sp = tl.columns("span")
    for sample, attempt in zip(sp["sample"].tolist(), sp["attempt"].tolist(), strict=True):
        last[sample] = max(last.get(sample, 0), attempt)
    return {(i, a): cap for i, final in last.items() for a in range(final)}


def run_cluster(profile_cluster, meta: dict, ray_terms: dict | None = None):
    """The profile's costs (one engine's) on the real run's shape: its engines, placement and
    engine size. A disaggregated run had one more device, the trainer's. A run on Ray (more
    than one engine, or disaggregated) pays the driver's time per engine step and pushes weights
    through the object store, and its engines slow each other when more than one is busy: the
    terms ``calibrate --ray-engines`` measured (:func:`_ray_terms`), which the simulation applies
    by the number of busy engines (:mod:`sortedrl.sim.contention`)."""
    run = meta["run"]
    engines = int(meta.get("engines", run.get("engines", 1)))
    placement = meta.get("placement", run.get("placement", "colocated"))
    disagg = placement == "disaggregated"
    cluster = dataclasses.replace(profile_cluster, max_num_seqs=int(run["max_num_seqs"]), tp=1,
                                  gpus=engines + disagg, placement=placement,
                                  train_gpus=1 if disagg else 0)
    costs = cluster.costs
    if ray_terms and (engines > 1 or disagg or run.get("ray")) and costs is not None:
        every = ray_terms.get("step_overhead_s", ray_terms.get("ray_round_s", 0.0))
        costs = dataclasses.replace(costs, peer_step_factor=float(ray_terms.get("ray_step_factor") or 1.0),
                                    step_overhead_s=float(every),
                                    step_overhead_one_s=float(ray_terms.get("step_overhead_one_s", 0.0)),
                                    sync_s=float(ray_terms.get("ray_sync_s") or costs.sync_s))
        cluster = dataclasses.replace(cluster, costs=costs)
    return cluster


def _ray_terms(profile) -> dict:
    """The Ray terms a calibrated profile measured (none for presets and other profiles): the
    driver's time per step with every engine busy and with one (``fit.shared_host``; older
    profiles: ``fit.runner.ray_round_s``, from one async run, for any number busy), the weight
    push, and the factor of an engine step beside its peers."""
    try:
        raw = json.loads(Path(profile).read_text(encoding="utf-8-sig"))  # (a BOM: as load_cluster)
    except (OSError, ValueError, RecursionError):  # (load_cluster read it first, and says why)
        return {}
    fit = (raw.get("fit") or {}) if isinstance(raw, dict) else {}
    out = {}
    for part, keys in (("runner", ("ray_round_s", "ray_sync_s")),
                       ("shared_host", ("ray_step_factor", "step_overhead_s", "step_overhead_one_s"))):
        section = fit.get(part)
        for k in keys if isinstance(section, dict) else ():
            if k in section:
                out[k] = _term(section[k], f"{profile}: field 'fit.{part}.{k}'", 1.0 if k.endswith("factor") else 0.0)
    return out


def _term(v: object, where: str, least: float) -> float:
    if not finite(v) or v < least:
        raise ConfigError(f"{where}: expected a number >= {least:g}, got {v!r}")
    return float(v)


def _pct(real: float, sim: float) -> float:
    return abs(sim - real) / real * 100.0 if real > 0 else 0.0


# the run configuration a replay reads (``sortedrl run``'s RunConfig): field -> (type, least)
_RUN_FIELDS = {"max_num_seqs": (int, 1), "seed": (int, None), "engines": (int, 1),
               "tool_pool": (int, 1), "placement": (str, None), "sets": (list, None)}


def check_run(run: object, where: Path, trust_policy: bool = False) -> dict:
    """The meta record's ``run`` configuration, checked: a run directory may come from someone
    else, so its policy is a built-in one unless ``trust_policy`` (a ``module:Class`` policy is
    imported, which runs its module's code)."""
    if not isinstance(run, dict) or "policy" not in run:
        raise ConfigError(f"{where}: the meta record has no 'run' configuration")
    if "max_num_seqs" not in run:
        raise ConfigError(f"{where}: field 'run.max_num_seqs' is missing")
    for key, (typ, least) in _RUN_FIELDS.items():
        v = run.get(key)
        if v is not None and (not isinstance(v, typ) or isinstance(v, bool)
                              or (least is not None and v < least)):
            kind = {int: "an integer", str: "a string", list: "a list"}[typ]
            at_least = "" if least is None else f" >= {least}"
            raise ConfigError(f"{where}: field 'run.{key}': expected {kind}{at_least}, got {v!r}")
    if not all(isinstance(x, str) for x in run.get("sets") or []):
        raise ConfigError(f"{where}: field 'run.sets': expected a list of key=value strings")
    if not trust_policy:
        builtin_class(run["policy"], f"{where}: field 'run.policy' (pass --trust-policy to import "
                                     "the run's own policy)")
    return run


def recorded_auto(meta: dict, where: Path) -> dict:
    """The knobs the run left at 0 (auto), with the values it resolved them to (``auto_params``
    in its meta record). The replay pins them: a later release may size an auto knob otherwise
    (SortedRL's ``update_batch`` changed in Dec 2026), and a replay must run the run's knobs. A
    recording without them (before Dec 2026) replays its ``sets`` as given."""
    auto = meta.get("auto_params", {})
    if not isinstance(auto, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in auto.values()):
        raise ConfigError(f"{where}: field 'auto_params': expected an object of knob values, "
                          f"got {json.dumps(auto)[:80]}")
    return dict(auto)


def _warn(line: str) -> None:
    """A warning on stderr, as the other commands print theirs."""
    typer.echo(f"warning: {line}", err=True)


def _check_settles_the_trace(tl_path: Path, tl: Timeline, trace_path: Path, samples: int) -> None:
    """A finished run trains, discards or filters each sample of its trace.jsonl once: a
    timeline that settles fewer was cut short (with or without its summary.json), and a replay
    of the whole trace against it would compare two different runs. (A trace with fewer samples
    than the timeline settles is replayed: the steps it never reached are not compared.)"""
    settled = sum(tl.columns(kind)["samples"].values.size for kind in ("train", "discard", "filter")
                  if tl.count(kind))
    if settled < samples:
        raise ConfigError(f"{tl_path}: trains or drops {settled:,} samples, {trace_path} holds {samples:,}: "
                          "truncated? (write the run again)")


def validate(rundir: str | Path, profile: str | Path, trust_policy: bool = False,
             warn: Callable[[str], None] = _warn) -> dict:
    """Replay the real run in ``rundir`` on ``profile``'s cluster and compare it, step by step.

    The run must have finished (its ``trace.jsonl`` is written at its end), and its timeline must
    be the whole run that its ``summary.json`` describes, checked as ``plot`` checks it
    (:func:`sortedrl.run_summary.check_matches`): the replay covers the whole trace, and a
    timeline cut at a line boundary still parses. Each of the result's ``warnings`` is also
    given to ``warn`` as it is found (by default a ``warning:`` line on stderr)."""
    rundir = Path(rundir)
    tl_path = find_timeline(rundir, "timeline.jsonl")
    if not tl_path.exists():
        raise ConfigError(f"{rundir}: missing {tl_path.name} (not a run directory from sortedrl run?)")
    real_tl = read_timeline(tl_path)
    if why := missing_meta(real_tl.meta):
        raise ConfigError(f"{tl_path}: {why}")
    if not (rundir / "trace.jsonl").exists():
        raise ConfigError(f"{rundir}: missing trace.jsonl " + (
            "(the run has not finished: `sortedrl run` writes it at its end; resume an interrupted "
            "run with --resume, or draw it as it is with `sortedrl plot`)" if is_real_run(real_tl.meta)
            else "(not a run directory from sortedrl run?)"))
    summary_path = rundir / "summary.json"
    if summary_path.exists():  # (a finished run's: the replay covers its whole trace.jsonl)
        check_matches(tl_path, real_tl, summary_path, read_summary(summary_path, ConfigError),
                      ConfigError, "validate")
    run = check_run(real_tl.meta.get("run"), tl_path, trust_policy)
    trace = read_trace(rundir / "trace.jsonl")
    _check_settles_the_trace(tl_path, real_tl, rundir / "trace.jsonl", len(trace))
    if not str(profile).endswith(".json"):  # (it was read as a preset name: "unknown cluster preset")
        raise ConfigError(f"--profile {profile}: not a profile: give the .json file `sortedrl "
                          "calibrate` wrote (or a cluster file)")
    cluster = run_cluster(load_cluster(str(profile)), real_tl.meta, _ray_terms(profile))
    if trace.turn_offsets is not None and "tool_pool" in run:  # a multi-turn run's sandboxes
        cluster = dataclasses.replace(cluster, tool_pool=int(run["tool_pool"]))
    # the profile was checked as it loaded: what fails now is the run's own shape or knobs
    cluster.validate(f"{tl_path}: the run's engines on {cluster.where}")
    auto = recorded_auto(real_tl.meta, tl_path)
    try:
        policy = make_policy(run["policy"], list(run.get("sets", [])) + [
            f"{k}={v!r}" for k, v in auto.items()], trace)
    except ConfigError as e:
        field = "run.sets' and 'auto_params" if auto else "run.sets"
        raise ConfigError(f"{tl_path}: field '{field}': {str(e).removeprefix('--set ')}") from None
    sim = simulate(trace, policy, cluster, seed=int(run.get("seed", 0)),
                   attempt_lengths=dropped_attempts(real_tl, trace.meta.max_response_len))
    steps = compare_steps(real_tl, sim.timeline)
    real_sum, sim_sum = summarize(real_tl), sim.summary
    warnings = [w for w in (speed_warning(real_sum["makespan_s"], sim_sum["makespan_s"], profile, run),) if w]
    for line in warnings:
        warn(line)

    def mean(key: str) -> float | None:  # over the steps that have the error (None: none has)
        errors = [x[key] for x in steps if x[key] is not None]
        return float(np.mean(errors)) if errors else None

    return {
        "run": str(rundir),
        "profile": str(profile),
        "policy": run["policy"],
        "sets": list(run.get("sets", [])),
        "auto_params": auto,
        "updates_real": real_tl.count("train"),
        "updates_sim": sim.timeline.count("train"),
        "steps_compared": sum(x["step_err_pct"] is not None for x in steps),
        "step_time_mape": mean("step_err_pct"),
        "progress_time_mape": mean("progress_err_pct"),
        "rollout_time_mape": mean("rollout_err_pct"),
        "train_time_mape": mean("train_err_pct"),
        "bubble_ratio_abs_err": abs(sim_sum["bubble_ratio"] - real_sum["bubble_ratio"]),
        "makespan_err_pct": _pct(real_sum["makespan_s"], sim_sum["makespan_s"]),
        **_tool_comparison(real_sum, sim_sum),
        "warnings": warnings,
        "steps": steps,
        "real": real_sum,
        "sim": sim_sum,
        "_timelines": (real_tl, sim.timeline),
    }


def compare_steps(real: Timeline, sim: Timeline) -> list[dict]:
    """One row per real update: real and simulated step, rollout and update time and bubble
    ratio, and their errors; the simulated values and errors are None for a step the simulation
    has no update of its own for (:func:`own_updates`). ``progress_err_pct`` needs only that the
    simulation reached the step's count of trained samples."""
    real_ends = step_ends(real)[0]
    updates = aligned_updates(real, sim)
    sim_t = step_ends(sim)[0]
    real_steps = step_table(real, real_ends)
    rows, start = [], 0.0
    for r, j, own in zip(real_steps, updates, own_updates(updates), strict=True):
        row = {"step": r["step"]}
        s = window(sim, start, sim_t[j]) if own else None
        for key in ("step_s", "rollout_s", "train_s", "bubble_ratio"):
            row[f"real_{key}"], row[f"sim_{key}"] = r[key], s[key] if s else None
        row["step_err_pct"] = _pct(r["step_s"], s["step_s"]) if s else None
        row["progress_err_pct"] = _pct(real_ends[r["step"]], sim_t[j]) if j is not None else None
        row["rollout_err_pct"] = _pct(r["rollout_s"], s["rollout_s"]) if s else None
        row["train_err_pct"] = _pct(r["train_s"], s["train_s"]) if s else None
        row["bubble_abs_err"] = abs(s["bubble_ratio"] - r["bubble_ratio"]) if s else None
        rows.append(row)
        if j is not None:
            start = sim_t[j]
    return rows


def update_counts(result: dict) -> str:
    """The line that gives both runs' update counts, and says which steps were compared."""
    real, sim, compared = result["updates_real"], result["updates_sim"], result["steps_compared"]
    line = f"updates: real {real}, simulated {sim}"
    if compared == real:
        return line if sim <= real else f"{line} (a simulated step may hold more than one update)"
    return (f"{line}; {real - compared} real update(s) have no simulated update of their own "
            "(the simulation trained their samples in a larger update, or never did; '-' below): "
            + (f"the per-step errors are over the {compared} steps both have" if compared else
               "no step is compared, only the whole run"))


TOOL_KEYS = ("tool_calls", "tool_s", "sandbox_wait_s", "bubble_tool_ratio", "bubble_tail_ratio")


def _tool_comparison(real: dict, sim: dict) -> dict:
    """Multi-turn runs: the tool metrics of the real run beside the simulation's (else {})."""
    if "tool_calls" not in real and "tool_calls" not in sim:
        return {}
    return {"tools": {k: {"real": real.get(k), "sim": sim.get(k)} for k in TOOL_KEYS}}


def validate_writer(result: dict, out: Path) -> Writer:
    """What writes ``validate.json``: the result without its private keys (checked for JSON now,
    before any output is written)."""
    return write_json({k: v for k, v in result.items() if not k.startswith("_")}, out)


def overlay_page(result: dict) -> str:
    """The ``--plot`` page: running samples over time, real against simulated, with the
    updates marked (written by :class:`~sortedrl.outputs.Outputs`, which names ``--plot`` when
    the page cannot be written)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from sortedrl.plot.lanes import running_steps
    from sortedrl.plot.page import figure_div, page

    real_tl, sim_tl = result["_timelines"]
    fig = make_subplots(rows=2, cols=1, subplot_titles=("Running samples", "Step time per update"),
                        vertical_spacing=0.15)
    for name, tl, color in (("real", real_tl, "#1f77b4"), ("simulated", sim_tl, "#ff7f0e")):
        sp = span_table(tl)
        x, y = running_steps(sp["t0"], sp["t1"])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": color},
                                 name=f"{name}: running samples"), row=1, col=1)
        for t0, t1, *_ in tl.rows("train"):
            fig.add_vrect(x0=t0, x1=t1, fillcolor=color, opacity=0.15, line_width=0, row=1, col=1)
    steps = result["steps"]
    fig.add_trace(go.Bar(x=[s["step"] for s in steps], y=[s["real_step_s"] for s in steps],
                         name="real step time", marker_color="#1f77b4"), row=2, col=1)
    fig.add_trace(go.Bar(x=[s["step"] for s in steps], y=[s["sim_step_s"] for s in steps],
                         name="simulated step time", marker_color="#ff7f0e"), row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=1, col=1)
    fig.update_yaxes(title_text="samples", row=1, col=1)
    fig.update_xaxes(title_text="update", row=2, col=1)
    fig.update_yaxes(title_text="seconds", row=2, col=1)
    mape = result["step_time_mape"]
    fig.update_layout(height=800, barmode="group", title=(
        f"validate {result['policy']}: step-time MAPE {'-' if mape is None else f'{mape:{PERCENT}}%'}, "
        f"bubble error {percent(result['bubble_ratio_abs_err'])} points"))
    return page(f"validate {result['run']}", [figure_div(fig, "validate")])
