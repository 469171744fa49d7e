"""Compare policies side by side: the same trace, the same GPUs, one summary each.

A policy that needs a disaggregated cluster (``async``, ``one_step_off``) is run on the
disaggregated split of the same GPUs when the given cluster is colocated, so that every policy
gets the same hardware; the summary's ``cluster`` says which placement each one used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from sortedrl.errors import ConfigError
from sortedrl.outputs import check_label
from sortedrl.policies.registry import make_policy, policy_class
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.run import SimResult, simulate
from sortedrl.traces.schema import Trace

RESERVED = ("compare.json", "report.html")  # files beside the per-policy directories


@dataclass(frozen=True)
class PolicySpec:
    label: str
    name: str
    sets: tuple[str, ...] = ()


def parse_specs(policies: list[str], sets: list[str]) -> list[PolicySpec]:
    """``--policy [LABEL=]NAME`` (repeatable) and ``--set LABEL.key=value``."""
    if not policies:
        raise ConfigError("compare needs at least one --policy")
    labels: dict[str, str] = {}
    for p in policies:
        label, sep, name = p.partition("=")
        if not sep:
            label, name = p, p
        if not label or not name:
            raise ConfigError(f"--policy {p!r}: expected NAME or LABEL=NAME")
        check_label(label, RESERVED)
        if label in labels:
            raise ConfigError(f"--policy {p!r}: label {label!r} is used twice (name them LABEL=NAME)")
        policy_class(name)  # unknown names fail here, before any work
        labels[label] = name
    per: dict[str, list[str]] = {label: [] for label in labels}
    for s in sets:
        target, dot, kv = s.partition(".")
        if not dot or "=" not in kv or "=" in target:
            raise ConfigError(f"--set {s!r}: compare needs LABEL.key=value (labels: {', '.join(labels)})")
        if target not in per:
            raise ConfigError(f"--set {s!r}: no policy labelled {target!r} (labels: {', '.join(labels)})")
        per[target].append(kv)
    return [PolicySpec(label, name, tuple(per[label])) for label, name in labels.items()]


def cluster_for(policy_placements: tuple[str, ...] | None, cluster: Cluster) -> Cluster:
    """The cluster a policy runs on: the given one, or its disaggregated split if it must."""
    if not policy_placements or cluster.placement in policy_placements:
        return cluster
    return dataclasses.replace(cluster, name=f"{cluster.name}-disagg",
                               placement="disaggregated").validate(cluster.name)


def run_compare(trace: Trace, specs: list[PolicySpec], cluster: Cluster, seed: int = 0,
                progress: Callable[[int], None] | None = None) -> list[tuple[PolicySpec, SimResult]]:
    policies = [make_policy(s.name, list(s.sets), trace) for s in specs]  # all knobs checked first
    out = []
    for spec, policy in zip(specs, policies, strict=True):
        result = simulate(trace, policy, cluster_for(policy.placements, cluster), seed=seed,
                          progress=progress)
        out.append((spec, result))
    return out
