"""Assemble a profile from measured fits on top of a preset (or of an earlier profile).

What the measurements do not cover comes from ``--cluster``: its shape (GPUs, tensor
parallelism, placement), its KV budget and ``max_num_seqs``, and any cost term not fitted. The
profile says which terms came from where (``fit.from_preset``), so ``profile show`` can tell a
measured number from an assumed one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from sortedrl.calibration.bench_file import BenchRun, read_bench_runs
from sortedrl.calibration.file_options import refuse_repeats
from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_layouts import onload_in_sync
from sortedrl.calibration.metrics_names import SEPARATE_SYNC
from sortedrl.calibration.metrics_read import read_metrics_files
from sortedrl.calibration.show import check_records, render
from sortedrl.calibration.trace_pairs import TraceSteps
from sortedrl.calibration.vllm_bench import check_enough, fit_bench
from sortedrl.cluster_split import split_of
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster, load_cluster
from sortedrl.sim.cost import CostModel
from sortedrl.sim.profile import FORMAT, cluster_record, is_profile, profile_cluster, read_names

# set by the vllm-bench model
MODEL_FIXED = ("weight_read_s", "compute_s_per_seq", "prefill_s_per_pair", "admit_step_s", "prefill_in_step",
               "step_table")


def build_profile(bench: list[Path], metrics: list[Path] | Path | None, cluster_spec: str,
                  samples_per_step: int | None = None, updates_per_row: int | None = None,
                  run: str | None = None, trace: Path | None = None, host_schedule: str = "serial") -> dict:
    """The profile JSON: every input is read and fitted before anything is written. ``run``:
    the run to read of a W&B export of several (``--run``); ``metrics``: the metrics file, or the
    files of one run (merged by step); ``trace``: the length trace of the
    metrics' run (``--trace``), whose per-step samples fit ``train_per_pair`` too;
    ``host_schedule``: the replay's host schedule for the benchmark files (``--host-schedule``)."""
    metrics = [metrics] if isinstance(metrics, (str, Path)) else list(metrics or [])
    _check_inputs(bench, metrics)
    cluster = load_cluster(cluster_spec)
    base = _base_profile(cluster_spec, cluster)
    fit = dict(base.get("fit") or {})
    costs = cluster.cost()
    measured: set[str] = set(base.get("measured_terms", []))
    if bench:
        found = [(p, *run) for p in bench for run in read_bench_runs(p)]  # (file, run, its bytes)
        check_enough([run for _, run, _ in found])  # (too few runs is said first: two copies are too few as well)
        refuse_repeats(bench, "benchmark")
        bench, runs = _in_fit_order(found)
        engine = fit_bench(runs, cluster, schedule=host_schedule)
        costs = engine.pop("costs")  # with the preset's trainer terms
        fit["engine"] = {"source": "vllm-bench", "fixed_by_model": list(MODEL_FIXED), **engine}
        measured |= set(engine["terms"]) | set(MODEL_FIXED)
        base["device"] = f"the server of the benchmark files (shape of {cluster.name})"
        versions = sorted({r.engine_version for r in runs if r.engine_version})
        base["engine"] = ", ".join(sorted({r.engine for r in runs}))
        base["engine_version"] = ", ".join(versions) or "unknown"
        models = sorted({r.model for r in runs} - {None})
        if models:
            base["model"] = ", ".join(models)
    if metrics:
        steps = TraceSteps(trace, costs) if trace is not None else None
        where = " + ".join(map(str, metrics))
        trainer = fit_metrics(read_metrics_files(metrics, run), where, samples_per_step, updates_per_row, steps)
        fixed, notes = _trainer_form(trainer, cluster, costs)
        fitted = {k: v["value"] for k, v in trainer["terms"].items()}
        if trainer["columns"].get("sync") in SEPARATE_SYNC and cluster.placement == "colocated":
            fitted["sync_s"], note = _separate_sync(trainer["columns"]["sync"], fitted["sync_s"], cluster, where)
            notes.append(note)
        costs = dataclasses.replace(costs, **fixed, **fitted)
        fit["trainer"] = {**trainer, "fixed_by_model": list(fixed)}
        if notes:
            fit["trainer"]["notes"] = [*trainer.get("notes", []), *notes]
        measured |= set(trainer["terms"]) | set(fixed)
    names = [f.name for f in dataclasses.fields(CostModel)]
    fit["from_preset"] = [n for n in names if n not in measured]
    base.update(costs=_costs_json(costs), fit=fit, measured_terms=sorted(measured),
                sources=[*base.get("sources", []), *map(str, bench), *map(str, metrics),
                         *([str(trace)] if trace is not None and metrics else [])])
    # what --cluster would refuse is not written (durations of a few ns fitted step_fixed_s = 0)
    profile_cluster(json.loads(json.dumps(base)), "the fitted profile (not written)", "check")
    return base


def _trainer_form(trainer: dict, cluster: Cluster, base: CostModel) -> tuple[dict, list[str]]:
    """The cost terms the metrics fit's form sets (``fit.trainer.fixed_by_model``). It is
    ``train_fix + train_per_token·tokens`` with the tokens unpadded (verl's
    ``perf/total_num_tokens`` sums the attention mask; OpenRLHF's ``total_length`` is a sample's
    own): its per-token term holds the attention pairs, so the base's pair term, or its padding
    to the longest sequence (``train_padded``, ``train_micro_pairs``), would count them again
    (a 1,024-sample batch took 267.9 s in the simulator for 75.0 s fitted). verl's colocated
    ``timing_s/update_weights`` resumes the rollout's weights and KV cache before the sync
    (engine_workers.py ``update_weights``), OpenRLHF's colocated ``timing/broadcast`` wakes its
    weights up (ppo_trainer.py ``broadcast_to_vllm``): the fitted sync holds the onload
    (:func:`~sortedrl.calibration.metrics_layouts.onload_in_sync`). Returns the terms,
    and a note for each that a base gave otherwise (``profile show`` prints them). The pairs
    cannot be fitted apart: verl logs only the lengths' mean, max and min, and Σ L(L+1)/2 over a
    step's samples is not a function of them; with a base that prices them the fitted
    per-token term comes back high (+10% on h100-llama3.1-8b-2gpu, the audit's run) and
    ``train_fix`` at its bound 0 (:func:`~sortedrl.calibration.metrics_fit.fix_at_bound_note`).
    With ``--trace`` (``fit.trainer.trace``) the pairs are fitted and the tokens and pairs were
    counted under the base's padding and micro-batches, which the profile keeps: none is set."""
    if "trace" in trainer:
        fixed, notes = {}, []
    else:
        fixed, notes = _metrics_only_form(base)
    held = onload_in_sync(trainer["columns"].get("sync"))
    if held is not None and cluster.placement == "colocated":
        fixed["onload_s"] = 0.0
        notes.append(f"onload_s 0 (the base's {base.onload_s:.4g} s): {held[1]}")
    return fixed, notes


def _separate_sync(column: str, measured: float, cluster: Cluster, where: str) -> tuple[float, str]:
    """``sync_s`` of a colocated profile from a sync measured between separate rollout and trainer
    GPUs (verl's one-step-off ``timing_s/sync_rollout_weights``), and the note saying so. A policy
    that needs separate pools runs a colocated profile on its disaggregated split, whose
    ``sync_s`` is the profile's times the preset's split / colocated syncs
    (:func:`~sortedrl.cluster_split.split_costs`): the measured sync is taken as the split's, so
    the profile holds it times the preset's colocated / split syncs, which the split maps back to
    the measured sync. Its onload stays (a pure sync: the run had no sleeping rollout)."""
    try:
        split = split_of(dataclasses.replace(cluster, costs=None))
    except ConfigError:
        raise ConfigError(f"{where}: {column} is a sync between separate rollout and trainer GPUs (verl's "
                          f"one-step-off trainer), but --cluster {cluster.name} has no disaggregated split: "
                          "give the disaggregated cluster the run used") from None
    was, now = dataclasses.replace(cluster, costs=None).cost().sync_s, split.cost().sync_s
    value = measured * (was / now)
    return value, (f"sync_s {value:.4g} s (the measured {measured:.4g} s x {was / now:.4g}): {column} is verl's "
                   "one-step-off sync between separate rollout and trainer GPUs; on this colocated cluster it is "
                   f"scaled by the preset's colocated / disaggregated syncs ({was:.4g} / {now:.4g} s), so the "
                   f"policies that run on the split ({split.name}) sync in the measured time")


def _metrics_only_form(base: CostModel) -> tuple[dict, list[str]]:
    """The pair and padding terms a fit of the metrics alone sets, and a note for each a base gave."""
    fixed = {"train_per_pair": 0.0, "train_padded": False, "train_micro_pairs": 0.0}
    notes = []
    if base.train_per_pair:
        notes.append(f"train_per_pair 0 (the base's {base.train_per_pair:.3g} s/attention pair): the metrics give no "
                     "per-sample lengths, so the attention pairs are fitted into train_per_token")
    if base.train_padded or base.train_micro_pairs:
        notes.append(f"train_padded {str(base.train_padded).lower()} and train_micro_pairs "
                     f"{base.train_micro_pairs:g} of the base set to false and 0: the fitted tokens are unpadded")
    return fixed, notes


def _check_inputs(bench: list[Path], metrics: list[Path]) -> None:
    if not bench and not metrics:
        raise ConfigError("give --from-vllm-bench FILE.json ... and/or --from-metrics FILE")


def _in_fit_order(found: list[tuple[Path, BenchRun, bytes]]) -> tuple[list[Path], list[BenchRun]]:
    """The files and the runs by concurrency, then by content: the fit's sums, and so the
    profile's last digits, do not depend on the order the files were named in (or their paths).
    Each run once:
    a file given twice (by its path, or a copy of it) counted twice in the fit, and five copies
    of one file passed the rule of a file a term (check_enough)."""
    digests: dict[bytes, str] = {}
    keyed = []
    for i, (path, run, body) in enumerate(found):
        digest = hashlib.sha256(body).digest()
        first = digests.setdefault(digest, run.path)
        if first != run.path:
            what = "file" if run.path == str(path) else "run"  # (a JSON lines file's run: FILE:LINE)
            raise ConfigError(f"{run.path}: the same content as {first}: a benchmark {what} given twice; "
                              f"give each {what} once")
        keyed.append((run.concurrency, digest, i))
    keyed.sort()
    files = list(dict.fromkeys(found[i][0] for _, _, i in keyed))  # (the profile's sources, in that order)
    return files, [found[i][1] for _, _, i in keyed]


def _base_profile(spec: str, cluster: Cluster) -> dict:
    """An earlier profile given as --cluster is kept and extended (its ``cluster`` settings with
    it); a preset or cluster file starts a new one, which keeps every setting of that base but its
    costs (:data:`~sortedrl.sim.profile.CLUSTER_FIELDS`: a profile of unchanged costs simulates as
    the base does)."""
    if spec.endswith(".json"):
        raw = json.loads(Path(spec).read_text(encoding="utf-8-sig"))  # (as load_cluster reads it)
        if is_profile(raw):
            raw = read_names(raw, spec)  # written with the cost terms' new names
            _check_base(raw, spec)
            if "measured_terms" not in raw:  # from `calibrate --model`: every term was measured
                raw["measured_terms"] = sorted(raw.get("costs", {}))
            return raw
    return {"sortedrl_profile": FORMAT,
            # (what the metrics' run ran on is not in them: the trainer terms scale with its GPUs)
            "device": f"{cluster.gpus} x {cluster.gpu} as --cluster {cluster.name} gives them (taken to be the "
                      "metrics' run's GPUs)",
            "model": cluster.model, "engine": "none measured (the preset's cost model)", "engine_version": "",
            "engine_config": {"max_num_seqs": cluster.max_num_seqs, "kv_budget_tokens": cluster.kv_budget},
            "cluster": cluster_record(cluster)}


def _check_base(raw: dict, spec: str) -> None:
    """The records of an earlier profile that the new one keeps or extends: checked as
    ``profile show`` checks them (a hand-edited 'fit', 'sources' or 'measured_terms' was a
    traceback)."""
    check_records(raw, spec)
    render(raw, spec)


def _costs_json(costs: CostModel) -> dict:
    d = dataclasses.asdict(costs)
    if d.get("step_table") is not None:
        d["step_table"] = list(d["step_table"])
    return d

