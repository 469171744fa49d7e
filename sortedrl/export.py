"""``sortedrl export verl|slime|areal``: a chosen policy as that framework's own config overrides.

A tuned policy is only useful once it runs in the user's framework. Each framework exposes some of
the same mechanisms under its own names and units (peers.md §1), so this module maps a policy and
its knobs (and, when known, the cluster shape, group size and prompts per step) to the nearest
equivalent: verl 0.9 Hydra overrides, AReaL 1.0 CLI overrides, slime command-line flags. Every
mapping that is not exact carries a caveat saying what differs, and a knob a framework has no
equivalent for is never dropped silently; units are converted (``async``'s staleness and batch
sizes: :mod:`sortedrl.export_async`). A policy with no equivalent (RollPacker's tail batching, an
oracle that reads true lengths, a user's own ``module:Class``, whose code says nothing a mapping
could read) raises :class:`NoEquivalent`.

Every key written exists in the framework's own schema: tests/test_export.py checks them against
the config files in the verl 0.9.1 and AReaL 1.0.4 wheels and slime's argument parser at a pinned
commit (tests/fixtures/slime/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sortedrl.errors import ConfigError
from sortedrl.export_async import areal_async, rollout_gpus, verl_async
from sortedrl.policies.base import params_dict, parse_params
from sortedrl.policies.registry import BUILTIN, policy_class
from sortedrl.sim.cluster import Cluster

FRAMEWORKS = ("verl", "slime", "areal")
GPUS_PER_NODE = 8


class NoEquivalent(ConfigError):
    """The policy has no counterpart in the framework."""


@dataclass
class Export:
    framework: str
    policy: str
    params: dict
    entry: str  # the config file or script the overrides apply to
    prompts: int | None = None  # prompts per step, when known
    group_size: int | None = None  # n, when known
    samples: int | None = None  # the simulated run's samples in all (its summary's samples_total)
    ran: tuple[int, int | None] | None = None  # the simulated run's updates and steps
    overrides: dict[str, object] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)
    auto: dict = field(default_factory=dict)  # knobs left at 0: what a simulated run made them

    def lines(self) -> list[str]:
        """The overrides as the framework takes them on its command line."""
        if self.framework == "slime":
            return [k if v is True else f"{k} {v}" for k, v in self.overrides.items()]
        return [f"{k}={_value(v)}" for k, v in self.overrides.items()]

    def as_dict(self) -> dict:
        return {"framework": self.framework, "policy": self.policy, "params": self.params,
                "entry": self.entry, "overrides": self.overrides, "caveats": self.caveats}


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def export(framework: str, policy: str, sets: list[str], cluster: Cluster | None = None,
           group_size: int | None = None, prompts: int | None = None,
           auto: dict | None = None, samples: int | None = None,
           ran: tuple[int, int | None] | None = None) -> Export:
    """The overrides for ``policy`` with knobs ``sets`` in ``framework``; ``auto``: the knobs left
    at 0 with the values a simulated run resolved them to (a summary's ``auto_params``), which
    the mapping then uses; ``samples``: that run's samples in all (``samples_total``); ``ran``:
    its updates and steps (the steps None when unknown), which a caveat compares with the
    framework's."""
    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    for option, value in (("--group-size", group_size), ("--prompts", prompts)):
        if value is not None and value < 1:  # 0 was left out silently, -5 written as the batch
            raise ConfigError(f"{option} must be >= 1, got {value}")
    # a built-in class given by its path (sortedrl.policies.sync:SyncPolicy) is that policy
    policy = {f"{c.__module__}:{c.__qualname__}": name for name, c in BUILTIN.items()}.get(policy, policy)
    if ":" in policy and policy not in BUILTIN:  # (not imported: no mapping would read it)
        raise _none(framework, policy, f"it is a user policy (module:Class), and {BUILT_IN_ONLY}")
    cls = policy_class(policy, "policy")
    params = params_dict(parse_params(cls.Params, sets, policy))
    out = Export(framework, policy, params, entry="", prompts=prompts, group_size=group_size,
                 samples=samples, ran=ran)
    out.auto = {k: v for k, v in (auto or {}).items() if params.get(k) == 0}
    {"verl": _verl, "slime": _slime, "areal": _areal}[framework](out, params, cluster)
    if params.get("filter_groups"):
        {"verl": _verl_filter, "slime": _slime_filter, "areal": _areal_filter}[framework](out)
    _batch(out, group_size, prompts)
    _minibatches(out, params)
    if cluster is not None:
        {"verl": _verl_cluster, "slime": _slime_cluster, "areal": _areal_cluster}[framework](
            out, cluster)
    return out


def _updates_said(out: Export) -> str:
    """What the simulated run's updates were against verl's one a step: ``(this trial made 1
    update in its 20 steps; verl's synchronous trainer makes one a step)``."""
    if out.ran is None:
        return ""
    updates, steps = out.ran
    over = f" in its {steps:,} steps" if steps else ""
    return (f" (this trial made {updates:,} update{'' if updates == 1 else 's'}{over}; verl's synchronous "
            "trainer makes one a step)")


def _none(framework: str, policy: str, why: str) -> NoEquivalent:
    return NoEquivalent(f"policy {policy} has no equivalent in {framework}: {why}")


BUILT_IN_ONLY = (f"export maps the built-in policies only ({', '.join(BUILTIN)}); export the built-in "
                 "policy closest to it by its name and --set knobs")
NO_TAIL = "RollPacker's tail batching (deferring long prompts to their own rounds) is not in it"
NO_ORACLE = ("oracle_sorted orders prompts by predicted lengths; with the oracle it reads true "
             "lengths, and no framework has a length-predicting scheduler")
NO_VERL_OVERSAMPLING = (
    "over-sampling: verl has no over-sampling with early stop: actor_rollout_ref.rollout."
    "over_sample_rate is read by nothing since verl 0.7 (PR #4422 removed its only reader, the "
    "SGLang SPMD rollout, which launched the step's N requests and aborted the rest once "
    "(1 - rate) x N had finished: requests, not groups); this is verl's synchronous trainer, "
    "which waits for every response of a step")


# -- verl 0.9 ---------------------------------------------------------------------------------------


def _verl(out: Export, p: dict, cluster: Cluster | None) -> None:
    base = "verl/trainer/config/ppo_trainer.yaml (python -m verl.trainer.main_ppo)"
    c = out.caveats
    if out.policy == "sync":
        out.entry = base
    elif out.policy in ("partial", "sortedrl"):
        out.entry = base
        c.append(NO_VERL_OVERSAMPLING)
        if out.policy == "sortedrl":
            c.append("verl has no sorted early updates: SortedRL's harvests of the shortest "
                     "responses into updates of their own are not reproduced" + _updates_said(out))
            ratio = p["oversubscribe"] or out.auto.get("oversubscribe")
            if ratio and ratio < 1:  # sortedrl's window below the slots: a real concurrency cap
                derived = "" if p["oversubscribe"] else " (derived: the simulated run's)"
                c.append(f"oversubscribe={ratio}{derived} < 1: the run kept fewer samples "
                         f"admitted than the engines' slots; for the same concurrency set "
                         f"max_num_seqs to {ratio} x its value")
        if p.get("keep_partial") or p.get("mode") == "partial":
            c.append("resuming: nothing is aborted here, so nothing is resumed; verl resumes "
                     "aborted responses only in its asynchronous trainers (the fully-async "
                     "recipe's async_training.partial_rollout, the V1 trainer's colocate_async and "
                     "separate_async modes), by re-prefilling them")
    elif out.policy == "async":
        out.entry = ("verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml "
                     "(python -m verl.experimental.fully_async_policy.fully_async_main)")
        verl_async(out, p, cluster)
    elif out.policy == "one_step_off":
        out.entry = ("verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml "
                     "(python -m verl.experimental.one_step_off_policy.main_ppo)")
    elif out.policy == "tail_batch":
        raise _none("verl", out.policy, NO_TAIL)
    else:
        raise _none("verl", out.policy, NO_ORACLE)


def _verl_filter(out: Export) -> None:
    if out.policy in ("async", "one_step_off"):  # (SeparateRayPPOTrainer: no filter_groups)
        out.caveats.append("filter_groups: verl's fully-async and one-step-off trainers do not "
                           "read algorithm.filter_groups (only main_ppo's trainer does): groups "
                           "whose rewards are all equal are trained, not replaced")
        return
    out.overrides["algorithm.filter_groups.enable"] = True
    # (its default is null, and verl's trainers refuse that when filtering is on: "algorithm.
    # filter_groups.metric must be set"; the V1 trainer reads it from each trajectory's reward
    # extra info, where verl's reward managers write acc: the score itself when compute_score
    # returns a number; seq_reward was the old DAPO recipe's only)
    out.overrides["algorithm.filter_groups.metric"] = "acc"
    out.caveats.append("filter_groups: verl's DAPO dynamic sampling drops groups whose rewards "
                       "are all equal (metric acc: the score, where compute_score returns a "
                       "number; one returning a dict must hold acc, or name another of its keys) "
                       "and generates fresh prompts until data.train_batch_size groups remain; "
                       "it needs a rule-based reward (or a reward model on its own resource pool)")


def _verl_cluster(out: Export, cl: Cluster) -> None:
    o = out.overrides
    split = out.policy in ("async", "one_step_off") or cl.placement == "disaggregated"
    if split and out.policy not in ("async", "one_step_off"):
        out.caveats.append("verl's synchronous trainer is colocated (hybrid engine): the "
                           "disaggregated split applies to its fully-async and one-step-off "
                           "trainers only; the GPUs are written as one pool")
        split = False
    if split:
        _nodes(o, "trainer", cl.gpus - rollout_gpus(cl))
        _nodes(o, "rollout", rollout_gpus(cl))
    else:
        _nodes(o, "trainer", cl.gpus)
    o["actor_rollout_ref.rollout.tensor_model_parallel_size"] = cl.tp
    o["actor_rollout_ref.rollout.max_num_seqs"] = cl.max_num_seqs


def _nodes(o: dict, pool: str, gpus: int) -> None:
    nodes, per_node = node_split(gpus)
    o[f"{pool}.nnodes"] = nodes
    o[f"{pool}.n_gpus_per_node"] = per_node


def node_split(gpus: int) -> tuple[int, int]:
    """(nodes, GPUs per node) for a pool of ``gpus``: the fewest nodes of at most 8 equal ones."""
    per_node = max(d for d in range(1, GPUS_PER_NODE + 1) if gpus % d == 0)
    return gpus // per_node, per_node


# -- AReaL 1.0 --------------------------------------------------------------------------------------


def _areal(out: Export, p: dict, cluster: Cluster | None) -> None:
    out.entry = "areal GRPOConfig (areal/api/cli_args.py), e.g. examples/math/gsm8k_rl.py"
    o, c = out.overrides, out.caveats
    if out.policy == "async":
        areal_async(out, p, cluster)
    elif out.policy == "sync":
        o["rollout.max_head_offpolicyness"] = 0
        c.append("AReaL runs synchronously with max_head_offpolicyness=0 (its docs: typically "
                 "about 2x slower than asynchronous)")
    elif out.policy == "one_step_off":
        o["rollout.max_head_offpolicyness"] = 1
        c.append("one_step_off: AReaL streams samples rather than alternating whole batches; "
                 "max_head_offpolicyness=1 gives the same bound of one version")
    elif out.policy == "tail_batch":
        raise _none("areal", out.policy, NO_TAIL)
    elif out.policy in ("partial", "sortedrl"):
        raise _none("areal", out.policy, "AReaL has no over-sampling with early stop: its "
                    "rollouts are interrupted only by weight updates, never aborted for length")
    else:
        raise _none("areal", out.policy, NO_ORACLE)


def _areal_cluster(out: Export, cl: Cluster) -> None:
    out.overrides["cluster.n_nodes"], out.overrides["cluster.n_gpus_per_node"] = node_split(cl.gpus)
    out.caveats.append(f"AReaL splits the GPUs unless told to colocate: give the rollout backend "
                       f"{rollout_gpus(cl)} GPUs in engines of tp={cl.tp} and the actor "
                       f"{cl.gpus - rollout_gpus(cl)} in the per-engine backend fields "
                       f"(allocation_mode is deprecated in 1.0)"
                       + ("; to share them as this cluster does, AReaL 1.0.4 colocates with "
                          "rollout.scheduling_strategy.type=colocation (target actor), which needs "
                          "enable_offload=true and actor.weight_update_mode=disk"
                          if cl.placement == "colocated" else ""))


def _areal_filter(out: Export) -> None:
    out.caveats.append("filter_groups: AReaL filters in the training script, not in its config: "
                       "pass trainer.train(dynamic_filter_fn=...) a function that rejects a "
                       "group whose rewards are all equal, and keep dynamic_bs=false (the "
                       "default) so rejected groups are replaced from the dataloader")


# -- slime ------------------------------------------------------------------------------------------


def _slime(out: Export, p: dict, cluster: Cluster | None) -> None:
    o, c = out.overrides, out.caveats
    out.entry = "train.py"
    # one update a rollout, or sync's minibatches: slime's default (None) leaves Megatron's global
    # batch at micro-batch x data-parallel GPUs, 64 updates a rollout of 64 x 8 on 8 GPUs
    o["--num-steps-per-rollout"] = p["minibatches"] if out.policy == "sync" else 1
    if out.policy == "sync":
        samples = (p["rollout_batch"] or out.prompts or 0) * (out.group_size or 0)
        if samples and samples % p["minibatches"]:  # (slime's global batch is the floor)
            c.append(f"minibatches={p['minibatches']}: {samples} samples a rollout do not split "
                     f"evenly: slime trains {samples // p['minibatches']} an update and leaves "
                     f"{samples % p['minibatches']} out")
    elif out.policy == "partial":
        groups = p["rollout_batch"] or out.prompts
        if not groups and "rollout_batch" in out.auto:  # rollout_batch=0: the step's prompts
            groups = out.auto["rollout_batch"]
            c.append(f"rollout_batch=0 (the step's prompts): the simulated run's {groups}")
        if groups:
            o["--over-sampling-batch-size"] = math.ceil(groups * p["over_sample"])
        else:
            c.append(f"set --over-sampling-batch-size to {p['over_sample']} x --rollout-batch-size")
        if p["keep_partial"]:
            o["--partial-rollout"] = True
        if groups:  # (without it slime's default batch ran beside an over-sampling sized on ours)
            o["--rollout-batch-size"] = groups
        c.append("APRIL: slime samples --over-sampling-batch-size prompts and stops at "
                 "--rollout-batch-size complete groups, as our partial policy does")
        if p["max_span"]:
            c.append(f"max_span={p['max_span']}: slime has no bound on how many versions a "
                     f"resumed response spans; --mask-offpolicy-in-partial-rollout trains only "
                     f"its on-policy tokens instead")
    elif out.policy in ("one_step_off", "async"):
        out.entry = "train_async.py"
        c.append("train_async.py overlaps the next rollout with training, one step off")
        if out.policy == "async" and p["eta"] > 1:
            c.append(f"staleness: slime has no staleness bound beyond that one step (its issue "
                     f"#1800); eta={p['eta']} versions is not reproduced (nearest: eta=1)")
    elif out.policy == "tail_batch":
        raise _none("slime", out.policy, NO_TAIL)
    elif out.policy == "sortedrl":
        raise _none("slime", out.policy, "slime trains once per rollout; SortedRL's sorted early "
                    "updates within a step are not in it (nearest: the partial policy)")
    else:
        raise _none("slime", out.policy, NO_ORACLE)


def _slime_cluster(out: Export, cl: Cluster) -> None:
    o = out.overrides
    if cl.placement == "colocated" and out.entry == "train.py":
        o["--colocate"] = True
        trainer = rollout = cl.gpus
    else:
        rollout = rollout_gpus(cl)
        trainer = cl.gpus - rollout
    o["--actor-num-nodes"], o["--actor-num-gpus-per-node"] = node_split(trainer)
    o["--rollout-num-gpus"] = rollout
    o["--rollout-num-gpus-per-engine"] = cl.tp


SLIME_FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


def _slime_filter(out: Export) -> None:
    out.overrides["--dynamic-sampling-filter-path"] = SLIME_FILTER
    out.caveats.append("filter_groups: slime drops a group whose rewards have zero spread "
                       "(check_reward_nonzero_std) and samples until --rollout-batch-size groups "
                       "remain, in rounds of --over-sampling-batch-size prompts (default "
                       "--rollout-batch-size), not one fresh prompt per dropped group")


# -- shared -----------------------------------------------------------------------------------------


VERL_MINI_BATCH = 256  # prompts: actor.ppo_mini_batch_size in verl 0.9.1's ppo_trainer.yaml


def _minibatches(out: Export, p: dict) -> None:
    """The optimizer updates a batch makes, as the simulated run made them: ``minibatches`` for
    ``sync``, one for the others. Left to the frameworks' defaults, verl splits a batch into
    minibatches of 256 prompts (and refuses a smaller train_batch_size) and AReaL into 4."""
    if out.policy == "async" and out.framework == "verl":
        return  # (verl_async writes ppo_mini_batch_size: an update's prompts)
    updates = p.get("minibatches", 1)
    o = out.overrides
    if out.framework == "areal":
        o["actor.ppo_n_minibatches"] = updates  # (its default, 4 in AReaL 1.0.4: 4 updates a batch)
    elif out.framework == "verl":
        key, batch = "actor_rollout_ref.actor.ppo_mini_batch_size", o.get("data.train_batch_size")
        if isinstance(batch, int) and batch % updates == 0:
            o[key] = batch // updates
        else:  # the batch is not known here, or does not split evenly
            out.caveats.append(f"{updates} update(s) a step: set {key} to data.train_batch_size / "
                               f"{updates} (verl's default, {VERL_MINI_BATCH} prompts, makes "
                               f"train_batch_size / {VERL_MINI_BATCH} updates a step and refuses "
                               f"a smaller train_batch_size)")


# The responses a prompt each framework generates unless told: verl 0.9.1's rollout.n
# (ppo_trainer.yaml), AReaL 1.0.4's gconfig.n_samples (GenerationHyperparameters in
# areal/api/cli_args.py), slime's --n-samples-per-prompt (its argument parser at the pinned
# commit); tests/test_export.py reads each from the framework's own source.
GROUP_SIZE_DEFAULT = {"verl": ("verl", 1), "slime": ("slime", 1), "areal": ("AReaL", 1)}


def _batch(out: Export, group_size: int | None, prompts: int | None) -> None:
    keys = {"verl": ("actor_rollout_ref.rollout.n", "data.train_batch_size"),
            "slime": ("--n-samples-per-prompt", "--rollout-batch-size"),
            "areal": ("gconfig.n_samples", "train_dataset.batch_size")}[out.framework]
    o = out.overrides
    if group_size is not None:
        o[keys[0]] = group_size
    else:  # (each framework's default is 1: one response a prompt, no group to compare)
        name, default = GROUP_SIZE_DEFAULT[out.framework]
        out.caveats.append(f"no --group-size: {keys[0]} is not written, and the framework's default "
                           f"stands ({name}'s is {default}: one response a prompt, no GRPO group); "
                           "give --group-size n")
    if out.policy in ("sync", "one_step_off") and out.params.get("rollout_batch"):
        o.setdefault(keys[1], out.params["rollout_batch"])  # (its prompts a step: the batch)
    if prompts is None and out.framework == "slime" and keys[1] not in o:
        out.caveats.append("no --prompts: --rollout-batch-size (prompts a rollout), which slime "
                           "requires, is not written; give --prompts, or set it")
    if prompts is None or (out.framework, out.policy) == ("verl", "async"):
        return  # (fully-async: data.train_batch_size must be 0; the batch is ppo_mini_batch_size)
    if o.get(keys[1], prompts) != prompts:  # async's batch knob, the update batch, sets it
        out.caveats.append(f"--prompts {prompts}: {keys[1]} is the update batch too: written as "
                           f"the batch knob's {o[keys[1]]} prompts")
    o.setdefault(keys[1], prompts)
