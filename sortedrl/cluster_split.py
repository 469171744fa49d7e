"""The disaggregated split of a colocated cluster: which of its GPUs train and which roll out,
whether that leaves whole rollout engines, and the split's cost terms.

Split out of :mod:`sortedrl.compare` (which runs a policy that needs separate pools on the split
of the GPUs it was given); ``forecast`` names the split too.
"""

from __future__ import annotations

import dataclasses

from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.cost import CostModel


def check_split(cluster: Cluster, policy: str | None = None) -> None:
    """One error line, about the policy and the cluster's GPUs, when the default split (a
    quarter of the GPUs train, at least 1) leaves no whole rollout engines: the split's own
    check blamed its ``train_gpus``, which the user never set (``field 'train_gpus': 1 trainer
    GPUs of 1 leave no rollout engine of tp=1`` for ``async`` on one GPU). A cluster file's
    ``train_gpus`` is checked by the split as it was given."""
    if cluster.train_gpus or cluster.placement == "disaggregated":
        return
    trainer = max(1, cluster.gpus // 4)  # (Cluster.trainer_gpus)
    rollout = cluster.gpus - trainer
    if _whole_engines(cluster.gpus, cluster.tp):
        return
    gpus, example = _more_gpus(cluster)
    more = f"{gpus}{' or more' if cluster.tp == 1 else ''} GPUs" if gpus else "more GPUs"
    more += f", e.g. {example}" if example else ""
    who = f"policy {policy}" if policy else "this policy"
    head = f"{who} needs separate rollout and training GPUs (a disaggregated cluster); "
    if cluster.gpus == 1:
        raise ConfigError(head + f"{cluster.where} has 1 GPU: give a cluster of {more}")
    engines = "no engine" if rollout < cluster.tp else "not whole engines"
    raise ConfigError(head + f"{cluster.where}'s {cluster.gpus} GPUs split into {trainer} to train and "
                      f"{rollout} to roll out, {engines} of tp={cluster.tp}: give a cluster of {more} "
                      "(or a cluster file with train_gpus)")


def _more_gpus(cluster: Cluster) -> tuple[int | None, str | None]:
    """The fewest GPUs, more than ``cluster``'s, whose default split leaves whole engines (and,
    for a preset, the preset of that many GPUs, whose split also holds its trainer)."""
    named = _is_preset(cluster)
    for n in range(cluster.gpus + 1, max(1024, 4 * cluster.gpus)):
        if _whole_engines(n, cluster.tp):
            if not named:
                return n, None
            if example := _preset_with_gpus(cluster, n):
                return n, example
    return None, None


def _whole_engines(gpus: int, tp: int) -> bool:
    """Whether the default split of ``gpus`` (a quarter train, at least 1: ``Cluster.trainer_gpus``)
    leaves whole engines of ``tp`` GPUs, at least one."""
    rollout = gpus - max(1, gpus // 4)
    return rollout >= tp and rollout % tp == 0


def _is_preset(cluster: Cluster) -> bool:
    from sortedrl.sim.cluster import preset

    try:
        return preset(cluster.name) == cluster
    except ConfigError:
        return False


def _preset_with_gpus(cluster: Cluster, gpus: int) -> str | None:
    """The name of the preset ``cluster`` with ``gpus`` GPUs, if its split holds; else None."""
    from sortedrl.sim.cluster import _PRESET, preset

    m = _PRESET.match(cluster.name)
    if m is None or m["dis"]:
        return None
    name = (f"{m['gpu']}-{m['model']}" + (f"-tp{m['tp']}" if m["tp"] else "") + f"-{gpus}gpu"
            + (f"-{m['seqs']}seq" if m["seqs"] else ""))
    try:
        dataclasses.replace(preset(name), placement="disaggregated").validate(name)
    except ConfigError:
        return None
    return name


def split_name(cluster: Cluster) -> str:
    """The name of the cluster a disaggregated-only policy runs on (:func:`cluster_for`): a
    tune trial's shape stays last (``h100-llama3.1-8b-disagg[gpus=8]``, as a preset is named)."""
    if cluster.placement == "disaggregated":
        return cluster.name
    base, shape, rest = cluster.name.partition("[")
    return f"{base}-disagg{shape}{rest}"


def split_of(cluster: Cluster, policy: str | None = None) -> Cluster:
    """The disaggregated split of ``cluster``'s GPUs, its costs as given (:func:`split_costs`
    scales explicit ones); :func:`check_split` refuses GPUs that have none (``policy``: the
    policy that needs it, for the error)."""
    check_split(cluster, policy)
    return dataclasses.replace(cluster, name=split_name(cluster), placement="disaggregated").validate(cluster.where)


# the terms that depend on the trainer's GPUs and the sync's link, not on one rollout engine
TRAINER_TERMS = ("train_fix", "train_per_token", "train_per_pair", "sync_s")


def split_costs(cluster: Cluster, split: Cluster) -> CostModel:
    """Explicit costs (a cluster file's, a calibrated profile's) on the disaggregated split of
    their GPUs. An engine keeps its terms (same GPUs, same tp). Each trainer and sync term
    follows how the preset's own term changes from the cluster (``was``) to its split
    (``now``), since the given terms were measured on, or written for, the cluster as given:

    - ``train_per_token``, ``train_per_pair``: scaled by ``now / was`` (the trainer's FLOPs,
      fewer GPUs);
    - ``train_fix``: ``given + (now - was)``. The preset's ``train_fix`` is the cluster's
      ``train_fix`` field, the same on both, plus the optimizer state's move to and from host
      memory when the trainer cannot hold it (``Cluster.optimizer_move_s``, 2·12·P / trainer
      GPUs / host bandwidth), an additive time per update that depends on the trainer's GPUs
      alone. A ratio (4.01 on h100-llama3.1-8b-2gpu) kept a fitted 0 at 0, where the split
      takes 4.01 s, and made a measured 2 s 8.02 s, where it takes 5.01 s; the difference adds
      the move the split does and the cluster did not. Never below 0;
    - ``sync_s``: scaled by ``now / was``, except on a profile whose sync holds the rollout's
      onload: a colocated sync column that wakes the rollout up first (verl's
      ``timing_s/update_weights``, OpenRLHF's colocated ``timing/broadcast``) is fitted with
      ``onload_s`` set to 0 (``calibrate --from-metrics``, :func:`~sortedrl.calibration.build.
      _trainer_form`), so its ``sync_s`` is the preset's sync + onload measured together. The
      split has no onload, so that ``sync_s`` is scaled by ``now.sync_s / (was.sync_s +
      was.onload_s)``: the measured sum is taken to be off the preset's sum by one factor,
      which maps the preset's own sum to exactly the split's sync and never goes below 0 (a
      subtraction of the preset's onload could, where the measured sum is less). Such a profile
      is told by its costs alone (a cluster does not carry the profile's ``fit``): colocated,
      ``onload_s`` 0 where the preset's is not, and ``offload_s`` not 0 (the fit keeps the
      base's offload; costs that price no sleep at all set both to 0).

    Costs equal to the preset's own map to exactly the split preset's terms."""
    given = cluster.costs
    was = dataclasses.replace(cluster, costs=None).cost()
    now = dataclasses.replace(split, costs=None).cost()
    # (written so that a term equal to the preset's gives the split's to the last bit)
    scaled = {name: getattr(now, name) * (getattr(given, name) / getattr(was, name))
              for name in ("train_per_token", "train_per_pair") if getattr(was, name) > 0}
    scaled["train_fix"] = max(0.0, (given.train_fix - was.train_fix) + now.train_fix)
    sync_was = was.sync_s + (was.onload_s if _sync_holds_onload(cluster, given, was) else 0.0)
    if sync_was > 0:
        scaled["sync_s"] = now.sync_s * (given.sync_s / sync_was)
    return dataclasses.replace(given, **scaled)


def _sync_holds_onload(cluster: Cluster, given: CostModel, preset_costs: CostModel) -> bool:
    """Whether ``given.sync_s`` holds the rollout's onload: see :func:`split_costs`."""
    return (cluster.placement == "colocated" and given.onload_s == 0 and preset_costs.onload_s > 0
            and given.offload_s > 0)
