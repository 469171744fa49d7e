"""What a metrics file means, by the trainer that logged it: rows of several updates, and the
sync column that can be trusted.

Read off the upstream code that logs the metrics (each rule names its file):

- verl's fully-async trainer (``recipe/fully_async_policy``, since 2026-01
  ``verl/experimental/fully_async_policy``) logs one row per weight sync: its
  ``MetricsAggregator`` (``detach_utils.py``) sums every ``timing_s/*`` and
  ``perf/total_num_tokens`` over the ``trigger_parameter_sync_step`` updates since the last sync
  and averages every ``*/mean``. Such a file is told by keys no other trainer logs
  (:data:`ASYNC_PREFIX`, :data:`ASYNC_KEYS`) and needs ``--updates-per-row``; its
  ``training/global_step`` (the row's last update) gives each row's own count.
- Its ``timing_s/param_sync`` is not a sync: it includes pausing the rollouter, which waits for
  the in-flight rollouts (``fully_async_rollouter.py`` ``pause``).
- OpenRLHF's ``timing/broadcast`` (``ppo_trainer.py`` ``train_step``) is a pure sync in the
  synchronous trainer; in the async one (``ppo_trainer_async.py``) ``broadcast_to_vllm`` first
  takes ``vllm_lock``, held by the generation in flight, so it includes waiting for that. The
  two log the same keys; ``timing/step_total`` tells them apart: the synchronous trainer logs
  the sum of its ``timing/*`` phases, the async one its loop's wall time (the generation
  overlaps). Without it (OpenRLHF before 2026-03-23 in async mode), the broadcast is kept as
  an upper bound and said so.
- A colocated sync that wakes the rollout up first also times the simulator's ``onload_s``
  (:func:`onload_in_sync`): verl's ``timing_s/update_weights`` (``engine_workers.py``
  ``update_weights``: weights and KV cache), and OpenRLHF's ``timing/broadcast`` since it is
  logged (2026-03-19): with ``--vllm.enable_sleep`` (colocated only) ``broadcast_to_vllm``
  (``ppo_trainer.py``) calls ``wake_up`` with ``tags=["weights"]`` before broadcasting, the
  weights' move back from host memory; the KV cache's wake-up and the sleep are in
  ``timing/generation`` (``samples_generator.py`` ``generate_samples``).
"""

from __future__ import annotations

from sortedrl.errors import ConfigError

PREFIX = "train/"  # OpenRLHF's W&B and TensorBoard loggers (logging_utils.py, log_train)
STEP_METRIC = PREFIX + "global_step"  # OpenRLHF's W&B x-axis (define_metric)
ASYNC_PREFIX = "fully_async/"
ASYNC_KEYS = ("trainer/idle_ratio", "timing_s/param_sync", "timing_s/wait_last_valid",
              "timing_s/timing_s/param_sync")
GLOBAL_STEP = "training/global_step"
PARAM_SYNC_NOTE = ("timing_s/param_sync not read: verl's fully-async trainer times pausing the "
                   "rollouter (which waits for its in-flight rollouts) with the sync")
VERL_NO_SYNC_NOTE = ("verl v0.7.0 and earlier log no sync column: the sync (and the rollout's "
                     "wake-up) is inside timing_s/gen")
OPENRLHF_PHASES = ("timing/generation", "timing/make_experience", "timing/ppo_train", "timing/broadcast")


def named(metrics: dict, name: str) -> tuple[str, dict[int, float]] | None:
    """The column ``name``, or OpenRLHF's ``train/name``; with the name found."""
    for key in (name, PREFIX + name):
        if key in metrics:
            return key, metrics[key]
    return None


def updates_per_row(metrics: dict, where: str, given: int | None) -> int:
    """Updates a row holds: ``--updates-per-row`` (default 1), required for a fully-async file."""
    marks = async_marks(metrics)
    if marks and given is None:
        shown = ", ".join(marks[:3]) + (", ..." if len(marks) > 3 else "")
        raise ConfigError(f"{where}: logged by verl's fully-async trainer ({shown}): a row sums the "
                          "updates between two weight syncs; give --updates-per-row K "
                          "(its async_training.trigger_parameter_sync_step)")
    return 1 if given is None else given


def async_marks(metrics: dict) -> list[str]:
    return sorted(k for k in metrics if k.startswith(ASYNC_PREFIX) or k in ASYNC_KEYS)


def row_updates(metrics: dict, where: str, steps: list[int], k: int) -> dict[int, int]:
    """Step -> updates in that row: ``k``, except in a fully-async file logging
    ``training/global_step`` (the number of the row's last update): there each row holds the
    updates since the row before (the last row, after the final sync, fewer), and the first,
    whose count the file does not say (verl's trainer since 2026-01 logs ``k - 1`` there), is
    left out. Its largest rise must be ``k``."""
    gs = metrics.get(GLOBAL_STEP)
    if not async_marks(metrics) or not gs or len(gs) < 2:
        return {s: k for s in steps}
    logged = sorted(gs)
    rise = {b: gs[b] - gs[a] for a, b in zip(logged, logged[1:], strict=False)}
    for s, v in rise.items():
        if not (v >= 1 and v == int(v)):
            raise ConfigError(f"{where}: {GLOBAL_STEP} at step {s}: {gs[s]:g} after "
                              f"{gs[logged[logged.index(s) - 1]]:g} in the row before: expected a rise of a "
                              "whole number of updates, 1 or more")
    if max(rise.values()) != k:
        raise ConfigError(f"{where}: {GLOBAL_STEP} rises by up to {max(rise.values()):g} updates a row, "
                          f"not --updates-per-row {k}")
    return {s: int(rise[s]) if s in rise else k for s in steps if s != logged[0]}


def sync_column(metrics: dict, found: tuple[str, dict[int, float]] | None
                ) -> tuple[tuple[str, dict[int, float]] | None, list[str], bool]:
    """The sync column to fit (None: the preset's ``sync_s``), notes saying why for the profile,
    and whether the column is only an upper bound of the sync."""
    if found is None:
        if async_marks(metrics):
            return None, [PARAM_SYNC_NOTE], False
        if any(k.startswith("timing_s/") for k in metrics):
            return None, [VERL_NO_SYNC_NOTE], False
        return None, [], False
    if found[0].removeprefix(PREFIX) != "timing/broadcast":
        return found, [], False
    trainer = openrlhf_trainer(metrics)
    if trainer == "async":
        return None, [f"{found[0]} not read: OpenRLHF's async trainer (timing/step_total is its loop's wall "
                      "time, not the sum of its phases) times the wait for the generation in flight "
                      "(vllm_lock) with the broadcast"], False
    if trainer is None:
        return found, [f"sync_s is an upper bound: {found[0]} of OpenRLHF's async trainer includes the wait "
                       "for the generation in flight, and this file (no timing/step_total) does not say "
                       "which trainer logged it"], True
    return found, [], False


def onload_in_sync(column: str | None) -> tuple[str, str] | None:
    """For a fitted sync column that, on a colocated cluster, also times the rollout's onload
    (its wake-up from vLLM sleep): what ``profile show`` says holds ``onload_s``, and why (the
    note's words); None for a sync timed alone."""
    if column == "timing_s/update_weights":
        return ("verl's colocated update_weights",
                "verl's colocated timing_s/update_weights resumes the rollout's weights and KV cache before "
                "the sync")
    if column is not None and column.removeprefix(PREFIX) == "timing/broadcast":
        return ("OpenRLHF's colocated broadcast",
                f"OpenRLHF's colocated {column} wakes the rollout's weights up (vLLM sleep mode, "
                "wake_up of the weights) before the sync")
    return None


def openrlhf_trainer(metrics: dict) -> str | None:
    """``"sync"`` when every step's ``timing/step_total`` is the sum of its phases (to 1 ms or
    0.01%, a rounding in the export), ``"async"`` when one is not, None when not logged."""
    total = named(metrics, "timing/step_total")
    phases = [named(metrics, name) for name in OPENRLHF_PHASES]
    if total is None or None in phases:
        return None
    cols = [p[1] for p in phases if p is not None]
    steps = sorted(set(total[1]).intersection(*cols))
    if not steps:
        return None
    same = all(abs(total[1][s] - sum(c[s] for c in cols)) <= max(1e-3, 1e-4 * abs(total[1][s]))
               for s in steps)
    return "sync" if same else "async"
