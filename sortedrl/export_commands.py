"""The ``sortedrl export`` command: a tune result's best trial, or a policy and its knobs, as the
config overrides of verl, slime or AReaL (see :mod:`sortedrl.export`).

Prints the overrides one per line, ready for the framework's command line, then each caveat as a
``# caveat:`` line; ``--json`` prints them as one object. Writes no file.

A trial that broke the tune's ``--max-staleness`` (``"feasible": false`` in tune.json; only
``--trial ID`` picks one, never the best or the knee) is exported all the same, as asked, with a
``warning:`` line on stderr naming the trial and the bound it broke, and the same line at the top
of what is printed (``# warning: ...``, or a ``warning`` field first in ``--json``), so that the
caveat stays with the settings wherever they are saved.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import typer

from sortedrl import jsonio
from sortedrl.cli_common import user_errors
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster, cluster_from_dict, load_cluster, preset


@user_errors
def export_cmd(
    framework: str = typer.Argument(..., help="verl, slime or areal"),
    best: str = typer.Argument(..., help="a tune's directory or its tune.json (its best trial), or a policy name"),
    sets: list[str] = typer.Option([], "--set", help="policy knob key=value (with a policy name)"),
    trial: str = typer.Option(None, "--trial", help="tune.json: a trial id, or 'knee' (the cluster "
                              "plan's knee), instead of the best"),
    cluster: str = typer.Option(None, "--cluster", help="cluster preset or file (default: a "
                                "tune.json's own cluster)"),
    group_size: int = typer.Option(None, "--group-size", help="responses per prompt (GRPO n)"),
    prompts: int = typer.Option(None, "--prompts", help="prompts per step"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Print a policy's nearest equivalent in verl, slime or AReaL as config overrides."""
    from sortedrl.export import export

    c = _chosen(best, sets, trial)
    group_size, prompts, said = _run_shape(c, group_size, prompts)
    for line in said:
        typer.echo(line, err=True)
    cl = load_cluster(cluster) if cluster else c.tuned()
    if cl is not None and c.shape:  # (the trial's cluster.* params: a bad one names the file)
        import dataclasses

        cl = dataclasses.replace(cl, **c.shape).validate(f"{c.where}: field 'params' on cluster {cl.name}")
    ran = (c.updates, (c.trace_shape or {}).get("steps")) if c.updates is not None else None
    result = export(framework, c.policy, c.knobs, cl, group_size, prompts, c.auto, c.samples, ran)
    if c.tool_calls and c.samples:  # (the export writes no multi-turn setting: say so)
        result.caveats.append(f"multi-turn: the trial's trajectories made {c.tool_calls / c.samples:.2f} tool "
                              f"calls each; these settings hold no multi-turn rollout or tool server: "
                              f"configure {framework}'s own")
    if framework == "verl" and c.sync_said:
        result.caveats.append(c.sync_said)
    warning = f"{c.where} is infeasible: {c.infeasible}" if c.infeasible else None
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        shown = {"warning": warning, **result.as_dict()} if warning else result.as_dict()
        typer.echo(jsonio.dumps(shown, "the export", indent=2))
        return
    if warning:
        typer.echo(f"# warning: {warning}")
    typer.echo(f"# {framework}: {c.policy} {json.dumps(result.params)} -> {result.entry}")
    for line in result.lines():
        typer.echo(line)
    if not result.overrides:  # (the header alone read as if something had been left out)
        typer.echo(f"# nothing to override: {framework}'s defaults are this policy; --prompts, "
                   "--group-size and --cluster add the run's shape")
    for caveat in result.caveats:
        typer.echo(f"# caveat: {caveat}")


class Chosen(NamedTuple):
    """What BEST names: a policy and its knobs, with, for a tune.json trial, its cluster."""

    policy: str
    knobs: list[str]  # key=value
    shape: dict  # the trial's cluster.* changes
    tuned: Callable[[], Cluster | None]  # the tune's cluster (read only without --cluster)
    where: str  # where they come from, for errors
    auto: dict  # the trial's auto knobs as its run resolved them (summary.auto_params)
    samples: int | None = None  # the trial's run: samples in all (summary.samples_total)
    infeasible: str | None = None  # why tune marked the trial infeasible (None: it is feasible)
    trace_shape: dict | None = None  # the tune's trace: group_size, prompts_per_step (tune.json)
    updates: int | None = None  # the trial's run: updates (summary.updates)
    tool_calls: int | None = None  # the trial's run: tool calls of a multi-turn trace (summary.tool_calls)
    sync_said: str | None = None  # the tune's sync trial on the same shape (what verl's sync trainer runs)


def _chosen(best: str, sets: list[str], trial: str | None) -> Chosen:
    """The policy, knobs and cluster BEST names.

    A tune.json may be hand-edited or come from someone else: every field read from it is
    checked, and a bad one is one error naming the file and the field."""
    from sortedrl.policies.base import parse_params
    from sortedrl.policies.registry import BUILTIN, builtin_class
    from sortedrl.tune.space import as_sets, split_cluster

    path = Path(best)
    named = best in BUILTIN or ":" in best  # a policy's name wins over a directory of that name
    if not named and (path / "compare.json").is_file() and not (path / "tune.json").is_file():
        raise ConfigError(_not_a_tune(path))
    if path.suffix != ".json" and not (path / "tune.json").is_file():
        if not named and (path.is_dir() or "/" in best or os.sep in best):  # a path, not a policy
            why = ("is a `sortedrl simulate` run, not a tune: export its policy by name with its --set knobs"
                   if (path / "summary.json").is_file() else
                   "holds no tune.json" if path.is_dir() else "no such file or directory")
            raise ConfigError(f"{best}: {why} (BEST is a tune's directory or its tune.json, or a policy name)")
        if trial is not None:
            raise ConfigError("--trial needs a tune.json")
        return Chosen(best, list(sets), {}, lambda: None, "--set", {})
    if path.is_dir():
        path = path / "tune.json"
    if sets:
        raise ConfigError("--set applies to a policy name, not to a tune.json trial")
    result = jsonio.read(path, ConfigError, bad="not a tune.json (JSONDecodeError: {e})")
    if not isinstance(result, dict):
        raise ConfigError(f"{path}: not a tune.json (expected an object, got {_shown(result)})")
    trials = _field(result, "trials", path, list, "a list of trials")
    chosen = _trial_id(result, trial, path)
    if chosen is None:
        raise ConfigError(f"{path}: no feasible trial to export")
    match = [t for t in trials if isinstance(t, dict) and _is_id(t.get("id")) and t["id"] == chosen]
    if not match:
        raise ConfigError(f"{path}: no trial with id {chosen}")
    where = f"{path}: trial {chosen}"
    policy = match[0].get("policy")
    if isinstance(policy, str) and ":" in policy and policy not in BUILTIN:  # (said so, not imported)
        from sortedrl.export import BUILT_IN_ONLY

        raise ConfigError(f"{where}: policy {policy} is a user policy (module:Class), and {BUILT_IN_ONLY}")
    cls = builtin_class(policy, where)
    params = match[0].get("params")
    if not isinstance(params, dict):
        raise ConfigError(f"{where}: 'params' is not an object")
    try:
        shape, knobs = split_cluster(as_sets(params))
    except (KeyError, ValueError) as e:
        raise ConfigError(f"{where}: params {params}: not a cluster field or value ({e})") from None
    parse_params(cls.Params, knobs, policy, f"{where}: field 'params'")  # (not --set: none given)
    base = result.get("cluster")
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"{path}: field 'cluster': expected a cluster name, got {base!r}")
    return Chosen(policy, knobs, shape, lambda: _tuned_cluster(result, path), where,
                  _auto_params(match[0], where), _samples_total(match[0], where),
                  _infeasible(result, match[0], where), _trace_shape(result, path),
                  _summary_count(match[0], "updates", where), _summary_count(match[0], "tool_calls", where),
                  _sync_on_shape(trials, match[0], shape))


def _sync_on_shape(trials: list, trial: dict, shape: dict) -> str | None:
    """For a ``sortedrl`` or ``partial`` trial, which verl runs as its synchronous trainer: the
    simulated time of the tune's feasible ``sync`` trials on the same cluster shape (the fastest,
    when several), against the trial's own; None when the tune ran no such trial, or a time is
    not recorded (a hand-written trial)."""
    from sortedrl.tune.space import as_sets, split_cluster

    own = _makespan(trial)
    if trial.get("policy") not in ("sortedrl", "partial") or own is None:
        return None
    twins = []
    for t in trials:
        if not (isinstance(t, dict) and t.get("policy") == "sync" and t.get("feasible", True) is True
                and isinstance(t.get("params"), dict) and _is_id(t.get("id"))):
            continue
        try:
            same = split_cluster(as_sets(t["params"]))[0] == shape
        except (KeyError, ValueError):  # (a hand-edited trial: not this shape)
            same = False
        if same and _makespan(t) is not None:
            knobs = ", ".join(f"{k}={v}" for k, v in t["params"].items() if not str(k).startswith("cluster."))
            twins.append((_makespan(t), t["id"], knobs))
    if not twins:
        return None
    fastest, ident, knobs = min(twins)
    which = f"the fastest of the tune's {len(twins)} sync trials" if len(twins) > 1 else "the tune's sync trial"
    return (f"time: these settings run verl's synchronous trainer: expect the makespan of {which} on "
            f"this shape (trial {ident}{f', with {knobs}' if knobs else ''}, {fastest:,.1f} s), not this "
            f"trial's ({own:,.1f} s)")


def _makespan(trial: dict) -> float | None:
    summary = trial.get("summary")
    value = summary.get("makespan_s") if isinstance(summary, dict) else None
    return float(value) if jsonio.finite(value) and value > 0 else None


def _trace_shape(result: dict, path: Path) -> dict | None:
    """tune.json's ``trace_shape`` (None in one from before it was recorded), its counts checked:
    each an integer >= 1 (``steps`` and ``max_response_len`` may be absent)."""
    shape = result.get("trace_shape")
    if shape is None:
        return None
    keys = ("group_size", "prompts_per_step", *(k for k in ("steps", "max_response_len") if k in shape)) \
        if isinstance(shape, dict) else ()
    if not keys or not all(_is_id(shape.get(k)) and shape[k] >= 1 for k in keys):
        raise ConfigError(f"{path}: field 'trace_shape': expected {', '.join(keys or ('group_size', 'prompts_per_step'))} "
                          f"integers >= 1, got {_shown(shape)}")
    return shape


def _run_shape(c: Chosen, group_size: int | None, prompts: int | None) -> tuple[int | None, int | None, list[str]]:
    """The batch to export: a tune's trial defaults to the responses per prompt its trace had
    (without them verl's rollout.n stayed 1, no GRPO group) and, for a policy whose batch is in
    prompts a step, to the prompts a step it trained (its ``rollout_batch``, else its trace's);
    a flag that gives another is warned of. Other policies' batches (async's ``batch``, in
    samples) are the mapping's, as with a policy's name."""
    said: list[str] = []
    shape = dict(c.trace_shape or {})
    knob = dict(k.partition("=")[::2] for k in c.knobs).get("rollout_batch", "0")
    if c.policy in PROMPTS_A_STEP and knob.isdigit() and int(knob) > 0:
        shape["prompts_per_step"] = int(knob)  # (the trial's own prompts a step)
    elif c.policy not in (*PROMPTS_A_STEP, "sortedrl"):
        shape.pop("prompts_per_step", None)  # (its batch is not the prompts a step)
    for option, given, key in (("--group-size", group_size, "group_size"), ("--prompts", prompts, "prompts_per_step")):
        ran = shape.get(key)
        if given is not None and ran is not None and given != ran:
            said.append(f"warning: {option} {given}: {c.where} ran {ran} ({key}); the export is of another run")
    group_size = shape.get("group_size") if group_size is None else group_size
    prompts = shape.get("prompts_per_step") if prompts is None else prompts
    return group_size, prompts, said


# the policies whose rollout_batch is the prompts a step (or round) an update trains
PROMPTS_A_STEP = ("sync", "one_step_off", "partial", "tail_batch")


def _not_a_tune(path: Path) -> str:
    """The error for a compare's directory given as BEST (it was "unknown policy 'C'"): how to
    export one of its runs (by its policy's name and knobs), and which runs it holds."""
    try:
        entries = jsonio.read(path / "compare.json", ConfigError)
    except ConfigError:
        entries = []
    from sortedrl.policies.registry import BUILTIN

    runs = [(e["label"], e["policy"]) for e in entries if isinstance(e, dict) and isinstance(e.get("label"), str)
            and isinstance(e.get("policy"), str)] if isinstance(entries, list) else []
    built = [f"{label} ({policy})" for label, policy in runs if policy in BUILTIN]
    users = [label for label, policy in runs if policy not in BUILTIN]  # (compare.json holds the class's name only)
    return (f"{path}: a `sortedrl compare` directory, not a tune: export one of its runs by its policy's name "
            f"and knobs (`sortedrl export FRAMEWORK NAME --set key=value`; the knobs are {path}/LABEL/"
            "summary.json's 'params')" + (f"; its runs: {', '.join(built)}" if built else "")
            + (f"; its runs of user policies, which export does not map (it maps built-in policies only): "
               f"{', '.join(users)}" if users else ""))


def _infeasible(result: dict, trial: dict, where: str) -> str | None:
    """Why tune marked the trial infeasible (its staleness_max over --max-staleness, the only
    bound a trial can break), with the best feasible trial to export instead; None when it is
    feasible (a hand-written trial without the field is taken as feasible, as report does)."""
    feasible = trial.get("feasible", True)
    if not isinstance(feasible, bool):
        raise ConfigError(f"{where}: field 'feasible': expected true or false, got {_shown(feasible)}")
    if feasible:
        return None
    bound, summary = result.get("max_staleness"), trial.get("summary")
    worst = summary.get("staleness_max") if isinstance(summary, dict) else None
    if jsonio.finite(bound) and jsonio.finite(worst) and worst > bound:
        why = f"its staleness_max {worst} is over the tune's --max-staleness {bound}"
    else:  # (a hand-edited file: the mark without the figures behind it)
        why = "tune.json marks it \"feasible\": false"
    best = result.get("best")
    overall = best.get("overall") if isinstance(best, dict) else None
    named = _is_id(overall) and overall != trial["id"]  # (a hand-edited best may name this one)
    return why + (f"; the best feasible trial is {overall}" if named else "")


def _auto_params(trial: dict, where: str) -> dict:
    """The knobs left at 0 (auto) with the values the trial's run gave them: the export maps
    those, not a guess (a hand-written trial without a summary has none)."""
    summary = trial.get("summary")
    auto = summary.get("auto_params", {}) if isinstance(summary, dict) else {}
    if not isinstance(auto, dict):
        raise ConfigError(f"{where}: field 'summary.auto_params': expected an object, got {_shown(auto)}")
    for knob, value in auto.items():
        if not jsonio.finite(value):
            raise ConfigError(f"{where}: field 'summary.auto_params.{knob}': expected a number, "
                              f"got {_shown(value)}")
    return auto


def _samples_total(trial: dict, where: str) -> int | None:
    """The samples the trial's run generated in all (verl's fully-async run length), if recorded."""
    return _summary_count(trial, "samples_total", where, least=1)


def _summary_count(trial: dict, key: str, where: str, least: int = 0) -> int | None:
    """A count of the trial's summary (``samples_total``, ``updates``), checked; None if absent."""
    summary = trial.get("summary")
    total = summary.get(key) if isinstance(summary, dict) else None
    if total is not None and not (_is_id(total) and total >= least):
        raise ConfigError(f"{where}: field 'summary.{key}': expected an integer >= {least}, "
                          f"got {_shown(total)}")
    return total


def _tuned_cluster(result: dict, path: Path) -> Cluster | None:
    """The cluster the tune ran on, rebuilt from the fields tune.json records (``cluster_fields``),
    so a cluster file or profile that has since changed or gone does not matter. A tune.json
    written before they were recorded names the cluster only: a preset name is rebuilt as
    before; a file's name (its stem or ``name``) is not a cluster, and the error says so."""
    fields = result.get("cluster_fields")
    if fields is not None:
        where = f"{path}: field 'cluster_fields'"
        if not isinstance(fields, dict):
            raise ConfigError(f"{where}: expected an object, got {_shown(fields)}")
        return cluster_from_dict(fields, where, str(result.get("cluster", "cluster")))
    name = result.get("cluster")
    if name is None:
        return None
    try:
        return preset(name)
    except ConfigError:
        raise ConfigError(f"{path}: field 'cluster': {name!r} is not a cluster preset, and this "
                          "tune.json (from before tune recorded 'cluster_fields') does not say "
                          "the cluster's fields: give its file with --cluster") from None


def _trial_id(result: dict, trial: str | None, path: Path) -> int | None:
    if trial is None:
        best = _field(result, "best", path, dict, "an object")
        return _field(best, "overall", path, _is_id_or_none, "a trial id or null", "best.overall")
    if trial == "knee":
        plan = result.get("cluster_pareto")
        if plan is not None and not isinstance(plan, dict):
            raise ConfigError(f"{path}: field 'cluster_pareto': expected an object, got {_shown(plan)}")
        knee = (plan or {}).get("knee")
        if knee is None:
            raise ConfigError(f"{path}: no knee (a tune over --param cluster.* has one when its "
                              f"front bends)")
        if not _is_id(knee):
            raise ConfigError(f"{path}: field 'cluster_pareto.knee': expected a trial id or null, "
                              f"got {_shown(knee)}")
        return knee
    try:
        return int(trial)
    except ValueError:
        raise ConfigError(f"--trial {trial!r}: a trial id or 'knee'") from None


def _is_id(value: object) -> bool:
    return type(value) is int  # (not a bool: true == 1 picked trial 1)


def _is_id_or_none(value: object) -> bool:
    return value is None or _is_id(value)


def _field(obj: dict, key: str, path: Path, kind, expected: str, name: str | None = None):
    """``obj[key]``, which must be of ``kind`` (a type, or a test of the value)."""
    name = name or key
    if key not in obj:
        raise ConfigError(f"{path}: not a tune.json (no field {name!r})")
    value = obj[key]
    if not (isinstance(value, kind) if isinstance(kind, type) else kind(value)):
        raise ConfigError(f"{path}: field {name!r}: expected {expected}, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    """A value for an error line: a container by its kind, anything else by its (short) repr."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
