"""The ``async`` policy (AReaL's bounded staleness) as verl's fully-async trainer and as AReaL's
staleness manager: the units each counts in, and the knobs a simulated run resolved.

Both peers bound admission as ``async`` does. AReaL's ``StalenessManager.get_capacity``
(areal/infra/staleness_manager.py) admits while ``(eta + v + 1) x consumer_batch_size`` exceeds
the rollouts accepted and running, at most ``max_concurrent_rollouts`` running (default
``consumer_batch_size``). verl's rollouter (fully_async_rollouter.py, ``set_max_required_samples``)
pauses once ``(1 + staleness_threshold) x required_samples x trigger_parameter_sync_step`` samples
were submitted since the last sync (those in flight or queued then counted again), with
``required_samples = ppo_mini_batch_size x require_batches``, and runs at most
``concurrent_samples_per_replica`` per rollout replica. So ``staleness_threshold = eta`` with one
update per sync. Both count prompts (a rollout of the prompt's n samples); ours counts samples:
an update of B samples is B / n prompts.
"""

from __future__ import annotations

import math

from sortedrl.sim.cluster import Cluster

NO_DROP = ("drop_stale=true: neither verl's fully-async recipe nor AReaL drops a response whose "
           "oldest token is more than eta versions old (no such knob): both bound admission only "
           "and train it, as drop_stale=false simulates (verl's V1 trainer, in its colocate_async "
           "and separate_async modes, drops groups sampled more than "
           "trainer.v1.sampler.max_off_policy_threshold steps ago)")


def rollout_gpus(cl: Cluster) -> int:
    """The rollout pool of the disaggregated split (a quarter trains unless ``train_gpus``)."""
    return cl.gpus - (cl.train_gpus or max(1, cl.gpus // 4))


def verl_async(out, p: dict, cl: Cluster | None) -> None:
    o, c, eta = out.overrides, out.caveats, p["eta"]
    o["async_training.staleness_threshold"] = float(eta)
    o["async_training.trigger_parameter_sync_step"] = 1
    o["async_training.require_batches"] = 1
    o["async_training.partial_rollout"] = True
    o["data.train_batch_size"] = 0  # the rollouter asserts it: it streams one prompt at a time
    c.append(f"staleness: ours (eta={eta}) counts policy versions; verl's rollouter may have "
             f"(1 + staleness_threshold) x require_batches x ppo_mini_batch_size x "
             f"trigger_parameter_sync_step prompts submitted per sync, AReaL's (eta + 1) x B: "
             f"staleness_threshold = eta = {eta} with one update per sync (verl's README: 0 is "
             f"synchronous, 1 about one-step-off, and it recommends below 1)")
    prompts = _update_prompts(out, p, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if prompts:
        o["actor_rollout_ref.actor.ppo_mini_batch_size"] = prompts
        c.append(f"an update trains require_batches x ppo_mini_batch_size = {prompts} prompts "
                 f"(x n samples), as our batch B")
    n = out.group_size
    if out.samples and n:
        o["rollout.total_rollout_steps"] = math.ceil(out.samples / n)
        c.append(f"rollout.total_rollout_steps counts prompts: the simulated run's {out.samples} "
                 f"samples / n")
    else:
        c.append("rollout.total_rollout_steps (prompts to generate in all; 100 in "
                 "fully_async_ppo_trainer.yaml, where the run stops) is not known here: set it "
                 "to the run's prompts (the trace's samples / n)")
    window = _window_prompts(out, p, cl, "async_training.concurrent_samples_per_replica x replicas")
    if window and cl is not None:
        replicas = rollout_gpus(cl) // cl.tp
        o["async_training.concurrent_samples_per_replica"] = math.ceil(window / replicas)
        c.append(f"concurrency: verl runs at most concurrent_samples_per_replica prompts on each "
                 f"of the {replicas} rollout replicas: {window} prompts / {replicas}")
    elif window:
        c.append(f"concurrency: set async_training.concurrent_samples_per_replica (default 16 "
                 f"prompts) to {window} prompts / the rollout replicas (give --cluster)")
    recompute = ("as this run simulated (recompute_on_sync=true)" if p["recompute_on_sync"] else
                 "so the closest simulation is recompute_on_sync=true (this run kept the KV cache)")
    c.append(f"partial_rollout=true: verl aborts in-flight responses at each sync, frees the KV "
             f"cache and resubmits each as its prompt + the tokens generated so far: it "
             f"re-prefills the prefix, {recompute}; partial_rollout=false would not continue "
             f"them across the sync")
    if p["drop_stale"]:
        c.append(NO_DROP)


def areal_async(out, p: dict, cl: Cluster | None) -> None:
    o, c, eta = out.overrides, out.caveats, p["eta"]
    o["rollout.max_head_offpolicyness"] = eta
    c.append(f"staleness: AReaL's max_head_offpolicyness is in policy versions, as our eta: "
             f"{eta} maps as is")
    prompts = _update_prompts(out, p, "train_dataset.batch_size and rollout.consumer_batch_size")
    if prompts:
        o["train_dataset.batch_size"] = o["rollout.consumer_batch_size"] = prompts
    window = _window_prompts(out, p, cl, "rollout.max_concurrent_rollouts")
    if window:
        o["rollout.max_concurrent_rollouts"] = window
    if prompts or window:
        c.append("units: AReaL's consumer_batch_size and max_concurrent_rollouts count rollouts "
                 "(one prompt's n samples), ours samples: ours / n, rounded up")
    if p["recompute_on_sync"]:
        c.append("recompute_on_sync=true is AReaL's default behaviour after a weight update "
                 "(interrupted requests re-prefill)")
    if p["drop_stale"]:
        c.append(NO_DROP)


def _update_prompts(out, p: dict, key: str) -> int | None:
    """B, the samples per update, in prompts: the ``batch`` knob / n, else ``--prompts`` (B is
    the step's prompts x n), else the simulated run's B / n; None (with a caveat) if unknown."""
    c = out.caveats
    if not p["batch"] and out.prompts:
        return out.prompts
    samples = p["batch"] or out.auto.get("batch")
    if not samples:
        c.append(f"batch=0 (the step's prompts x n): set {key} to the prompts per step "
                 f"(give --prompts)")
        return None
    prompts = _in_prompts(out, samples, f"batch={samples} samples per update", key)
    if prompts is not None and not p["batch"]:
        c.append(f"batch=0 (derived): the simulated run resolved it to {samples} samples")
    return prompts


def _window_prompts(out, p: dict, cl: Cluster | None, key: str) -> int | None:
    """``max_concurrent`` (samples in flight) in prompts: as given, else the simulated run's
    window, else the rollout engines' total ``max_num_seqs`` on ``cl``; None if unknown."""
    c = out.caveats
    window = p["max_concurrent"]
    if not window and "max_concurrent" in out.auto:
        window = int(out.auto["max_concurrent"])
        c.append(f"max_concurrent=0 (derived): the simulated run resolved it to {window} samples")
    elif not window and cl is not None:
        window = rollout_gpus(cl) // cl.tp * cl.max_num_seqs
        c.append(f"max_concurrent=0 (the rollout engines' total max_num_seqs): {window} samples "
                 f"on this cluster")
    if not window:
        c.append(f"max_concurrent=0: the simulation runs up to the rollout engines' total "
                 f"max_num_seqs samples at once: set {key} to that / n prompts (give --cluster)")
        return None
    return _in_prompts(out, window, f"max_concurrent={window} samples", key)


def _in_prompts(out, samples: int, what: str, key: str) -> int | None:
    """``samples`` in prompts (/ n, rounded up); None, with a caveat saying what to set ``key``
    to, when n is not known."""
    if not out.group_size:
        out.caveats.append(f"{what}: set {key} to {samples} / n prompts (give --group-size)")
        return None
    return math.ceil(samples / out.group_size)
