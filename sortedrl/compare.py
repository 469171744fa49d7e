"""Compare policies side by side: the same trace, the same GPUs, one summary each.

A policy that needs a disaggregated cluster (``async``, ``one_step_off``) is run on the
disaggregated split of the same GPUs when the given cluster is colocated, so that every policy
gets the same hardware; the summary's ``cluster`` says which placement each one used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sortedrl.cluster_split import split_costs, split_of
from sortedrl.errors import ConfigError, PolicyError
from sortedrl.outputs import OutputError, check_label
from sortedrl.parallel import run_jobs
from sortedrl.parallel_progress import SampleCounts
from sortedrl.policies.registry import make_policy, policy_class
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.cluster_spec import TRAIN_STATE_BYTES
from sortedrl.sim.hardware import GPUS, MODELS
from sortedrl.sim.run import SimResult, simulate
from sortedrl.table_notes import sandbox_note, seed_note, trained_note, updates_note
from sortedrl.tables import UNITS, Col, Note, cell, counted, fmt, key_value_table, percent, render
from sortedrl.traces.schema import Trace
from sortedrl.trainer_bound import trainer_bound_note

RESERVED = ("compare.json", "report.html")  # files beside the per-policy directories


@dataclass(frozen=True)
class PolicySpec:
    label: str
    name: str
    sets: tuple[str, ...] = ()


def default_label(name: str) -> str:
    """A policy's label when ``--policy`` gives none: its name, a user policy's class name."""
    return name.rpartition(":")[2]


def parse_specs(policies: list[str], sets: list[str]) -> list[PolicySpec]:
    """``--policy [LABEL=]NAME`` (repeatable) and ``--set LABEL.key=value``."""
    if not policies:
        raise ConfigError("compare needs at least one --policy")
    labels: dict[str, str] = {}
    for p in policies:
        label, sep, name = p.partition("=")
        if not sep:  # a user policy module:Class is labelled by its class
            label, name = default_label(p), p
        if not label or not name:
            raise ConfigError(f"--policy {p!r}: expected NAME or LABEL=NAME")
        try:
            check_label(label, RESERVED)
        except OutputError as e:
            raise OutputError(f"{e} (or name it LABEL=NAME)" if not sep else str(e)) from None
        if label in labels:
            raise ConfigError(f"--policy {p!r}: label {label!r} is used twice (name them LABEL=NAME)")
        same = next((x for x in labels if x.lower() == label.lower()), None)
        if same is not None:  # (one directory on a case-insensitive file system)
            raise ConfigError(f"--policy {p!r}: labels {same!r} and {label!r} differ only in case; "
                              "a label names a directory, so choose another")
        policy_class(name)  # unknown names fail here, before any work
        labels[label] = name
    per: dict[str, list[str]] = {label: [] for label in labels}
    for s in sets:
        # the longest label the spec starts with: a label may hold a dot (--set a.b.key=value)
        target = max((x for x in per if s.startswith(x + ".")), key=len, default=None)
        target, dot, kv = (target, ".", s[len(target) + 1:]) if target else s.partition(".")
        if not dot or "=" not in kv or "=" in target:
            raise ConfigError(f"--set {s!r}: compare needs LABEL.key=value (labels: {', '.join(labels)})")
        if target not in per:
            raise ConfigError(f"--set {s!r}: no policy labelled {target!r} (labels: {', '.join(labels)})")
        per[target].append(kv)
    return [PolicySpec(label, name, tuple(per[label])) for label, name in labels.items()]


def placement_for(policy_placements: tuple[str, ...] | None, placement: str) -> str:
    """The placement a policy runs on, given a cluster's: the same, or ``disaggregated`` when
    the policy needs separate pools (the rule of :func:`cluster_for`, without building the
    split)."""
    if (not policy_placements or placement in policy_placements
            or "disaggregated" not in policy_placements):
        return placement
    return "disaggregated"


def cluster_for(policy_placements: tuple[str, ...] | None, cluster: Cluster,
                policy: str | None = None) -> Cluster:
    """The cluster a policy runs on: the given one, or its disaggregated split if it must. (A
    policy that runs only colocated gets the given cluster, and ``simulate`` refuses a
    disaggregated one: there is no colocated form of separate pools to fall back to.)
    ``policy``: its name, for the error when the GPUs have no split (:func:`check_split`)."""
    if placement_for(policy_placements, cluster.placement) == cluster.placement:
        return cluster
    split = split_of(cluster, policy)
    if cluster.costs is None:  # the preset's terms follow the split's shape
        return split
    return dataclasses.replace(split, costs=split_costs(cluster, split))


def used_clusters(policies: Sequence[str], cluster: Cluster) -> list[Cluster]:
    """The clusters ``policies`` (names) run on: ``cluster``, its disaggregated split, or both."""
    out: list[Cluster] = []
    for name in policies:
        used = cluster_for(policy_class(name).placements, cluster, name)
        if used not in out:
            out.append(used)
    return out


def needs_split(policies: Sequence[str], cluster: Cluster) -> bool:
    """Whether some of ``policies`` (names) runs on ``cluster``'s disaggregated split."""
    return any(placement_for(policy_class(name).placements, cluster.placement) != cluster.placement
               for name in policies)


def placement_note(policy: str, placements: tuple[str, ...] | None, cluster: Cluster) -> str | None:
    """The one rule, said where it applies: a policy that needs separate rollout and training GPUs
    runs on the disaggregated split of the same GPUs (in simulate, compare and tune alike)."""
    used = cluster_for(placements, cluster)
    if used is cluster:
        return None
    return (f"note: {policy} needs separate rollout and training GPUs, so it runs on the disaggregated "
            f"split of the same {cluster.gpus} GPUs: {used.rollout_gpus} roll out, {used.trainer_gpus} "
            f"train ({used.name})" + ("; the given trainer and sync terms are scaled to the split as "
                                        "the preset's are" if cluster.costs is not None else ""))


def offload_note(cluster: Cluster) -> str | None:
    """Said where the trainer's state does not fit its GPUs and the cluster left the choice to
    the simulator (``trainer_offload`` auto): the optimizer is offloaded to host memory, which
    costs every update its moves (a 70B model on 4 H100s was simulated so without a word)."""
    if cluster.costs is not None or cluster.trainer_offload != "auto" or not cluster.optimizer_offloaded:
        return None
    full = TRAIN_STATE_BYTES * MODELS[cluster.model].params / cluster.trainer_gpus
    return (f"note: on {cluster.name} the trainer's weights, gradients and Adam state need {full / 1e9:,.0f} GB "
            f"a GPU (sharded over {counted(cluster.trainer_gpus, 'trainer GPU')} of "
            f"{GPUS[cluster.gpu].hbm_bytes / 1e9:,.0f} GB), so the FP32 master weights and Adam state live in "
            f"host memory and move in and out every update (+{cluster.optimizer_move_s:,.1f} s an update, as "
            "verl's optimizer offload); more GPUs keep them on the GPUs")


def fit_warnings(trace: Trace, cluster: Cluster, synthetic: bool, split: bool = False) -> list[str]:
    """Warn when a trace cannot show how policies differ on this cluster: a step fills fewer than
    half the decode slots (every policy mostly idles), or the trace ends before a steady-state
    step (the first step of every policy is its warm-up), or its steps differ in size (every
    policy's batch is the first step's prompts, so a batch then straddles two steps). ``split``:
    some policy runs on the cluster's disaggregated split (a smaller cluster to try keeps one)."""
    mean = int(np.mean(trace.prompt_len.astype(np.int64) + trace.response_len)) if len(trace) else 0
    slots = slots_warning(trace.name, trace.prompts_per_step * trace.meta.group_size, cluster,
                          "more --prompts" if synthetic else "a trace with more prompts per step", split, mean)
    out = [slots] if slots else []
    if trace.num_steps < 2:
        out.append(f"warning: {trace.name} has 1 step, so no policy gets past its warm-up step "
                   "to a steady state; " + ("give --steps 4" if synthetic else "use a trace of several steps"))
    sizes = trace.step_prompts()
    if sizes.min() != sizes.max():
        out.append(f"warning: the steps of {trace.name} hold {sizes.min():,} to {sizes.max():,} prompts, "
                   f"but every policy takes batches of the first step's {trace.prompts_per_step:,}, so a "
                   "batch can hold prompts of two steps (a batch knob sets another fixed size): use a "
                   "trace whose steps hold equal numbers of prompts to keep them apart")
    return out + list(filter(None, [offload_note(cluster)]))  # (a fact of the cluster, said with these)


def never_synced(label: str, timeline) -> str | None:
    """A warning for a run whose policy updated twice or more and never synced: its engines
    generated every sample with the first version's weights (a policy's ``on_update_done`` that
    returns no ``Sync``; the default returns one). None otherwise (the built-ins always sync)."""
    updates = timeline.count("train")
    if updates < 2 or timeline.count("sync"):
        return None
    return (f"warning: {label} made {updates} updates and no sync, so its engines generated every sample "
            "with the first version's weights: return Sync() from on_update_done (the default does)")


def slots_warning(name: str, per_step: int, cluster: Cluster, more: str, split: bool = False,
                  mean_tokens: int = 0) -> str | None:
    """The warning for steps of ``per_step`` samples that fill less than half the decode slots
    (every policy mostly idles), with a smaller preset to try (``split``: one a disaggregated
    split can be made of, 2 GPUs or more), or ``more`` of the trace. ``mean_tokens``: the
    trace's mean prompt + response; an engine whose KV cache holds under half its max_num_seqs of
    such sequences has that many slots (verl's max_num_seqs 1,024 at gpu_mem_util 0.5 on Qwen3-8B:
    an H100 engine's KV cache holds 114 sequences of the bundled math-16k's mean 1,388 tokens, and
    4,096 samples were told they filled 25% of the slots and to try a smaller cluster)."""
    held = cluster.kv_admit_budget // mean_tokens if mean_tokens else cluster.max_num_seqs
    # (said when it holds under half: a running sequence holds less than its whole length, and
    # the presets' caches hold 80% of their slots of a trace's mean length or more)
    per_engine = max(1, held) if 2 * held < cluster.max_num_seqs else cluster.max_num_seqs
    slots = cluster.engines * per_engine
    if per_step >= slots / 2:
        return None
    hint = _smaller_cluster(cluster, per_step, split, per_engine)
    share = 100 * per_step / slots  # (under 0.5%, not "0%": a step of 1 sample fills some)
    which = f"{counted(cluster.engines, 'engine')} x {per_engine}" + (
        "" if per_engine == cluster.max_num_seqs else
        f": the KV cache holds {per_engine:,} sequences of the trace's mean {mean_tokens:,} tokens, "
        f"under max_num_seqs {cluster.max_num_seqs:,}")
    return (f"warning: a step of {name} has {counted(per_step, 'sample')}, filling "
            f"{'<1' if 0 < share < 1 else format(share, '.0f')}% of the {slots:,} decode slots of {cluster.name} "
            f"({which}): every policy will mostly idle; "
            + (f"try --cluster {hint}" if hint else "try a smaller --cluster") + f" or {more}")


def trainer_split_note(runs: list[tuple[str, dict]], cluster: Cluster, named: bool = False
                       ) -> str | None:
    """:func:`trainer_bound_note` of runs that ran on ``cluster``'s disaggregated split, asking
    for the split only when some did (one GPU has none). ``named``: the note names the split's
    cluster (forecast's several clusters)."""
    return trainer_bound_note(runs, cluster_for(("disaggregated",), cluster), named) if runs else None


def _smaller_cluster(cluster: Cluster, per_step: int, needs_split: bool = False,
                     per_engine: int | None = None) -> str | None:
    """A preset of the same GPU and model whose decode slots the trace's steps fill: fewer GPUs,
    or, on the fewest already, fewer sequences an engine (a ``-Nseq`` preset). ``per_engine``:
    the sequences an engine holds (its KV cache's, where under its max_num_seqs)."""
    slots = per_engine or cluster.max_num_seqs
    if not cluster.name.startswith(f"{cluster.gpu}-{cluster.model}"):
        return None
    best = None
    split = cluster.name.endswith("-disagg")  # (the same placement: its rollout GPUs decode)
    for gpus in (1, 2, 4, 8, 16, 32):
        if gpus % cluster.tp or gpus >= cluster.gpus or (split or needs_split) and gpus < 2:  # (a split needs 2)
            continue
        rollout = gpus - max(1, gpus // 4) if split or needs_split else gpus  # (a split: a quarter train)
        if rollout < cluster.tp or rollout % cluster.tp:  # (no whole engine of tp GPUs: no preset)
            continue
        if (rollout // cluster.tp) * slots <= 2 * per_step:
            best = gpus
    tp = f"-tp{cluster.tp}" if cluster.tp > 1 else ""
    disagg = "-disagg" if split else ""
    if best is not None:
        return f"{cluster.gpu}-{cluster.model}{tp}-{best}gpu{disagg}"
    seqs = 1 << max(0, (2 * per_step // cluster.engines).bit_length() - 1)  # a power of 2, filled half
    if seqs >= slots:
        return None
    return f"{cluster.gpu}-{cluster.model}{tp}-{cluster.gpus}gpu-{seqs}seq{disagg}"


def _simulate_spec(shared: tuple, spec: PolicySpec) -> SimResult:
    """One policy's run (in a worker of :mod:`sortedrl.parallel`, ``progress``: its counters)."""
    trace, cluster, seed, regen, spill_dir, progress = shared
    policy = make_policy(spec.name, list(spec.sets), trace, spec.label)
    spill = None
    if spill_dir is not None:
        spill = spill_dir / spec.label
        spill.mkdir()
    try:
        return simulate(trace, policy, cluster_for(policy.placements, cluster, policy.name), seed=seed,
                        progress=progress, regen=regen, spill_dir=spill)
    except PolicyError as e:  # two labels of one policy ("a=m:Buggy", "b=m:Buggy"): say which
        if spec.label in (policy.name, default_label(spec.name)):  # (no LABEL= given)
            raise
        raise PolicyError(f"--policy {spec.label}: {e}") from None


def run_compare(trace: Trace, specs: list[PolicySpec], cluster: Cluster, seed: int = 0,
                progress: Callable[[int], None] | None = None, regen: str = "resample",
                workers: int = 1, spill_dir: Path | None = None
                ) -> list[tuple[PolicySpec, SimResult]]:
    """Simulate each policy on the trace and cluster, in order; ``workers`` > 1 runs them in
    that many processes at once (the same results). ``spill_dir`` (empty; the caller removes
    it once done with the timelines) keeps each long run's timeline on disk, in a directory
    named by its label."""
    for s in specs:  # every policy's knobs, and the GPUs it runs on, checked before any run
        policy = make_policy(s.name, list(s.sets), trace, s.label)
        cluster_for(policy.placements, cluster, policy.name)
    if workers > 1 and len(specs) > 1:
        counts = SampleCounts(len(specs)) if hasattr(progress, "watch") else None  # (no bar: no polls)
        if counts is not None:
            total = len(specs) * len(trace)
            progress.phase(f"simulating {len(specs)} policies in {min(workers, len(specs))} "
                           "processes", total=total).watch(counts, total)
        shared = (trace, cluster, seed, regen, spill_dir, counts)
        results = run_jobs(_simulate_spec, shared, specs, workers, counts=counts)
        return list(zip(specs, results, strict=True))
    out = []
    for k, spec in enumerate(specs):
        if hasattr(progress, "phase"):
            progress.phase(f"simulating {spec.label} ({k + 1} of {len(specs)} policies)",
                           total=len(trace))
        out.append((spec, _simulate_spec((trace, cluster, seed, regen, spill_dir, progress),
                                         spec)))
    return out


# -- the side-by-side table -------------------------------------------------------------------------

HEADLINE = [Col("policy", left=True), Col("makespan", "s"), Col("useful", "tok/s"),
            Col("learnable", "tok/s", hide=1), Col("vs", "first"), Col("bubble", "%", hide=3),
            Col("stale", "versions", hide=2), Col("wasted", "%", hide=5), Col("updates", "count", hide=6),
            Col("GPUs", "r+t")]


# the ``stale`` cells are two figures; the unit row gives their unit, this note what they are
# (printed only while the column is: a narrow terminal hides it)
STALE_NOTE = Note("stale: mean/max staleness of the useful tokens, in policy versions", "stale")


def gpu_split(meta: dict) -> str:
    """Which GPUs rolled out and which trained: ``2 shared`` (colocated) or ``1+1``."""
    if meta.get("placement") == "disaggregated":
        return f"{int(meta['engines']) * int(meta['tp'])}+{meta['trainer_gpus']}"
    return f"{meta['gpus']} shared"


def headline_rows(summaries: list[dict], splits: list[str]) -> tuple[list[Col], list[list[str]]]:
    """One row per policy; ``learnable`` only when the summaries have it (and it ranks ``vs``)."""
    learnable = all("learnable_tokens_per_s" in s for s in summaries)
    rank = "learnable_tokens_per_s" if learnable else "tokens_per_s"
    first = summaries[0][rank]
    rows = []
    for s, split in zip(summaries, splits, strict=True):
        gen = s["generated_tokens"]
        rows.append([
            s["label"] + (" *" if s.get("oracle") else ""),
            fmt("makespan_s", s["makespan_s"]),
            fmt("tokens_per_s", s["tokens_per_s"]),
            fmt("learnable_tokens_per_s", s.get("learnable_tokens_per_s", 0)),
            f"{s[rank] / first:.2f}x" if first > 0 else "-",
            percent(s["bubble_ratio"]),
            f"{fmt('staleness_mean', s['staleness_mean'])}/{s['staleness_max']}",
            percent(s["wasted_tokens"] / gen if gen else 0.0),
            str(s["updates"]),
            split,
        ])
    cols = list(HEADLINE)
    if not learnable:
        keep = [i for i, c in enumerate(cols) if c.title != "learnable"]
        cols, rows = [cols[i] for i in keep], [[r[i] for i in keep] for r in rows]
    return cols, rows


def compare_notes(summaries: list[dict], splits: list[str],
                  cluster: Cluster, drawn: Sequence[str] = ()) -> list[str | Note]:
    """What a reader needs to read the table honestly: knobs as used, placements, oracles; the
    notes of one column (the ratio's terms, the ``stale`` legend) go when it is hidden to fit."""
    from sortedrl.policies.auto import knob_text

    knobs = "; ".join(f"{s['label']}: {knob_text(s['params'], s.get('auto_params', {}))}"
                      for s in summaries)
    notes: list[str | Note] = ["knobs: " + knobs]
    moved = [s["label"] for s, split in zip(summaries, splits, strict=True) if not split.endswith("shared")]
    if moved and cluster.placement == "colocated":
        d = cluster_for(("disaggregated",), cluster)
        notes.append(f"GPUs: 'N shared' = all N GPUs roll out and train in turn; 'R+T' = R GPUs roll "
                     f"out while T others train; {', '.join(moved)} {'needs' if len(moved) == 1 else 'need'} separate GPUs, so {'it' if len(moved) == 1 else 'they'} ran on the disaggregated split "
                     f"of the same {cluster.gpus} GPUs ({d.rollout_gpus} roll out, {d.trainer_gpus} train: "
                     f"{d.name})")
    if any(s.get("oracle") for s in summaries):
        notes.append("* oracle: reads true lengths, an upper reference, not a deployable policy")
    rank = "learnable tok/s" if all("learnable_tokens_per_s" in s for s in summaries) else "useful tok/s"
    # (the ratio's terms, even when its numerator's column is hidden to fit: the ratio is shown)
    notes.append(Note(f"vs first: {rank} over {summaries[0]['label']}'s", "vs"))
    notes.append(STALE_NOTE)
    notes += filter(None, [updates_note([(s["label"], s["updates"]) for s in summaries
                                         if "updates" in s]),
                           trained_note([(s["label"], s["samples_trained"], s["samples_total"]) for s in summaries
                                         if "samples_trained" in s]),
                           sandbox_note([(s["label"], s["sandbox_wait_s"], s["tool_s"]) for s in summaries
                                         if "sandbox_wait_s" in s], cluster.tool_pool),
                           seed_note(list(drawn), len(summaries), summaries[0].get("seed", 0))])
    return notes


def compare_text(summaries: list[dict], splits: list[str], cluster: Cluster, title: str,
                 width: int | None, drawn: Sequence[str] = ()) -> str:
    """The table and its notes; ``drawn``: the labels whose figures the seed drew (a note)."""
    cols, rows = headline_rows(summaries, splits)
    return render(cols, rows, width, title, compare_notes(summaries, splits, cluster, drawn))


def wide_text(summaries: list[dict], title: str, width: int | None = None) -> str:
    """Every field of every summary (``compare --wide``): the numbers a metric per row, each
    policy a column; the text fields (policy, trace, cluster, regen, knobs), whose length would
    set every column's width, one line per policy below the table, wrapped at ``width``."""
    from sortedrl.policies.auto import knob_text

    keys = [k for k in summaries[0] if k not in ("label", "auto_params")]
    text = [k for k in keys if k != "params" and any(isinstance(s.get(k), str) for s in summaries)]
    text.append("params")  # the longest, last
    heads = [s["label"] + (" *" if s.get("oracle") else "") for s in summaries]
    rows = [(key, [cell(s.get(key, ""), key).replace("\n", ", ") for s in summaries], UNITS.get(key, ""))
            for key in keys if key not in text]
    notes = []
    for s in summaries:
        fields = [f"{k} {knob_text(s['params'], s.get('auto_params', {}))}" if k == "params"
                  else f"{k} {s.get(k, '')}" for k in text]
        notes.append(f"{s['label']}: " + "; ".join(fields))
    return key_value_table(rows, heads, title, notes, width)
