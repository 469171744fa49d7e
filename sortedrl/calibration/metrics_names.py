"""The one table of metric names that ``calibrate --from-metrics`` reads (:data:`ROLES`), by the
role each plays in the fit, and the few rules that go with a name rather than a file layout: a
total that already holds its parts (:data:`INCLUDES`), a sync timed between separate rollout and
trainer GPUs (:data:`SEPARATE_SYNC`), the columns a step can be read from (:data:`STEP_METRICS`).
docs/calibration.md documents the table; :mod:`sortedrl.calibration.metrics_read` reads the
files, :mod:`sortedrl.calibration.metrics_fit` fits them. Kept apart from the readers so that a
framework's names are added in one place, with the upstream code they come from.
"""

from __future__ import annotations

from sortedrl.calibration.metrics_layouts import GLOBAL_STEP, PREFIX, STEP_METRIC

# role -> metric names, in the order they are looked for: verl, OpenRLHF (each also read with
# OpenRLHF's "train/" prefix), AReaL (timeperf/*, seconds: areal/utils/stats_tracker record_timing),
# slime (perf/*_time, seconds: slime/utils/train_metric_utils.py log_perf_data). A role's first name
# present is read. Update time is the sum of the roles in UPDATE_PARTS that are present; tokens
# come from total tokens, else slime's throughput x time, else mean lengths x samples per update.
ROLES: dict[str, tuple[str, ...]] = {
    # slime's perf/train_time times the whole of train() (log-probs, ref log-probs, actor
    # training: INCLUDES); its perf/actor_train_time is the training alone
    "update": ("timing_s/update_actor", "timing/ppo_train", "timeperf/train_step", "perf/train_time",
               "perf/actor_train_time"),
    "old_log_prob": ("timing_s/old_log_prob", "timeperf/recompute_logp", "perf/log_probs_time"),
    "ref": ("timing_s/ref", "timeperf/ref_logp", "perf/ref_log_probs_time"),
    "experience": ("timing/make_experience",),  # OpenRLHF: the forward passes before training
    # PPO's critic (verl ray_trainer.py: compute_values, update_critic; its fully-async trainer
    # counts both as trainer time; AReaL areal/trainer/rl_trainer.py: record_timing("critic_values")
    # around the critic's compute_values); OpenRLHF's timing/ppo_train already holds its critic's
    # training
    "values": ("timing_s/values", "timeperf/critic_values"),
    "critic": ("timing_s/update_critic", "timeperf/critic_train_step"),
    # verl's one-step-off trainer (one_step_off_policy/ray_trainer.py) times its sync as
    # sync_rollout_weights around _fit_update_weights, whose own update_weights timer is logged
    # too: the first is read (SEPARATE_SYNC). verl's trainer from v0.7.1 (ray_trainer.py:
    # colocated, with the rollout's wake-up), OpenRLHF (ppo_trainer.py), AReaL, slime (logged in
    # the next rollout's row: docs/calibration.md); verl v0.7.0 and earlier log none (the sync
    # is inside timing_s/gen)
    "sync": ("timing_s/sync_rollout_weights", "timing_s/update_weights", "timing/broadcast",
             "timeperf/update_weights", "perf/update_weights_time"),
    # verl: the attention mask's sum (unpadded); AReaL (areal/trainer/ppo/actor.py at cbff54d,
    # the "update" scope's denominator n_tokens: each micro-batch's packed tokens, summed over
    # the step's micro-batches and data-parallel ranks, so unpadded; not ppo_actor/n_tokens,
    # counted before the update on the padded batch)
    "tokens": ("perf/total_num_tokens", "ppo_actor/update/n_tokens"),
    "total_mean": ("total_length",),  # OpenRLHF: prompt + response, the mean of a trained sample
    "prompt_mean": ("prompt_length/mean",),
    "response_mean": ("response_length/mean",),
}
UPDATE_PARTS = ("update", "old_log_prob", "ref", "experience", "values", "critic")
# an update column that already holds other parts' time: those are not added to it
INCLUDES: dict[str, tuple[str, ...]] = {
    "perf/train_time": ("perf/log_probs_time", "perf/ref_log_probs_time", "perf/actor_train_time"),
}
# slime logs no token count: its training throughput times its training time gives one
TOKEN_RATE = ("perf/actor_train_tok_per_s", "perf/actor_train_time")
# sync columns timed between separate rollout and trainer GPUs whatever --cluster says
SEPARATE_SYNC = ("timing_s/sync_rollout_weights",)
# a CSV's step column: Step / step, else a framework's W&B x-axis (a metric column, empty in rows
# that did not log it), else W&B's own history counter (run.history().to_csv())
STEP_METRICS = (STEP_METRIC, "rollout/step")
WANDB_STEP = "_step"
KNOWN = (frozenset(p + name for names in ROLES.values() for name in names for p in ("", PREFIX))
         | {GLOBAL_STEP, *TOKEN_RATE})


def listing(items: list[str], most: int = 12) -> str:
    shown = ", ".join(items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "") if items else "none"
