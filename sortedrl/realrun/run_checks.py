"""The checks a real run's settings pass before anything is loaded or written.

Why this exists: ``sortedrl run`` refuses a bad setting in one line naming its option, before it
loads a model, starts Ray or touches RUNDIR; the checks are here, apart from the run itself
(:mod:`sortedrl.realrun.run`), so that the run reads as what it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sortedrl.errors import ConfigError
from sortedrl.realrun.rundir import check_run_dir
from sortedrl.realrun.trainer import OBJECTIVES

if TYPE_CHECKING:
    from sortedrl.realrun.run import RunConfig


def check_config(cfg: RunConfig, out: Path, resume: bool, force: bool, task: str) -> None:
    """One error line for a run that cannot start: RUNDIR (and, resumed, the settings it started
    with), sizes, device, sampling, engines."""
    check_run_dir(cfg, out, resume, force, task)
    for flag, value in (("--steps", cfg.steps), ("--prompts", cfg.prompts),
                        ("--group-size", cfg.group_size), ("--max-tokens", cfg.max_tokens)):
        if value < 1:
            raise ConfigError(f"{flag} {value}: must be >= 1")
    check_device(cfg)
    if cfg.objective not in OBJECTIVES:
        raise ConfigError(f"--objective {cfg.objective}: expected one of {', '.join(OBJECTIVES)}")
    if cfg.warm_tokens < 0:
        raise ConfigError(f"--warm-tokens {cfg.warm_tokens}: must be >= 0")
    if cfg.engines < 1:
        raise ConfigError(f"--engines {cfg.engines}: a run needs at least one engine")
    if cfg.placement not in ("colocated", "disaggregated"):
        raise ConfigError(f"--placement {cfg.placement}: expected colocated or disaggregated")
    inf = float("inf")
    for option, value, ok, want in (  # (--lr, --kl, --max-num-seqs: refused once started, or never)
            ("--temperature", cfg.temperature, 0.0 < cfg.temperature < inf, "a number > 0"),
            ("--is-cap", cfg.is_cap, 1.0 < cfg.is_cap < inf, "a number > 1"),
            ("--lr", cfg.lr, cfg.lr > 0, "a number > 0"), ("--kl", cfg.kl_coef, cfg.kl_coef >= 0, "a number >= 0"),
            ("--max-num-seqs", cfg.max_num_seqs, cfg.max_num_seqs >= 1, ">= 1")):
        if not ok:
            raise ConfigError(f"{option}: must be {want}, got {value}")


def check_device(cfg: RunConfig) -> None:
    """One error line for a device, dtype or memory share this machine cannot run."""
    if cfg.device not in ("cpu", "cuda"):
        raise ConfigError(f"--device: unknown device {cfg.device!r} (known: cpu, cuda)")
    if cfg.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype: unknown dtype {cfg.dtype!r} (known: float32, bfloat16)")
    if not 0.0 < cfg.gpu_memory_utilization < 1.0:
        raise ConfigError(f"--gpu-memory-utilization: must be in (0, 1), got {cfg.gpu_memory_utilization}")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: torch sees no CUDA device here (install the [gpu] "
                              "extra on a GPU machine; see bench/gpu_check.sh)")
