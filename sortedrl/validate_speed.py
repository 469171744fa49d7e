"""``validate``'s warning when the profile does not run at the real run's speed.

A replay on a profile measured on another host, with another model, or on a host far busier
or quieter than the run's, is off by a factor that no schedule explains: a tester validated a
run against a profile of another host and model and read ``step_time_mape 99.0%`` and
``makespan_err_pct 99.0%`` with no word of why (real steps of 4.325 s, replayed in 0.034 s).
The errors then measure the profile, not the simulator or the policy, so ``validate`` says so
on stderr (``warning: ...``, as ``calibrate`` prints its warnings), names the factor, what the
profile was measured on and what the run ran, and how to get a profile of the run's host.

The threshold is a factor of :data:`SPEED_FACTOR` (2) between the two makespans, either way.
On the host a profile was measured on, the replays of docs/calibration.md stayed within 1.9x of
their real runs, on a shared 2-core machine whose load changed its speed from run to run (the
worst: ``one_step_off`` seed 0, 10.1 s real against 18.8 s replayed, 1.86x, at a 1-minute load of
9.9; ``sortedrl`` partial seed 1, 15.2 s against 8.2 s, 1.85x); the rest within 1.7x. A profile
of another host or model is off by 10-100x (the tester's: 127x). A host busier still can pass
2x on its own; the advice then holds as well (a rescale measures the host as it is now).
"""

from __future__ import annotations

import json
from pathlib import Path

from sortedrl.realrun.rescale import RUNNER_FIELDS
from sortedrl.sim.profile import is_profile

SPEED_FACTOR = 2.0
"""The factor between the real and the replayed makespan past which ``validate`` warns."""


def speed_factor(real_s: float, sim_s: float) -> float:
    """How many times the longer makespan is the shorter (1: equal; inf: one is 0)."""
    low, high = sorted((real_s, sim_s))
    return high / low if low > 0 else (1.0 if high == 0 else float("inf"))


def speed_warning(real_s: float, sim_s: float, profile: str | Path, run: dict) -> str | None:
    """The warning (without ``warning:``) when the real run's makespan ``real_s`` and the
    replay's ``sim_s`` are more than :data:`SPEED_FACTOR` apart, else None. ``run``: the real
    run's configuration (its timeline's meta record's ``run``)."""
    factor = speed_factor(real_s, sim_s)
    if factor <= SPEED_FACTOR:
        return None
    times = f"{factor:,.2f}x" if factor != float("inf") else "infinitely"
    which = (f"the real run took {times} as long as its replay" if real_s > sim_s
             else f"the replay took {times} as long as the real run")
    raw = _read(profile)
    model = _text(run.get("model")) or "MODEL"
    fix = f"recalibrate on the run's host (`sortedrl calibrate --model {model} --out PROFILE.json`)"
    if _rescalable(raw) and _text(raw.get("model")) in (None, _text(run.get("model"))):  # (its own model)
        fix += (f", or rescale this profile to that host (`sortedrl calibrate --model {model} "
                f"--rescale {profile} --out PROFILE.json`: one short run)")
    return (f"{which} (makespan_s): the profile {profile} does not run at this run's speed. "
            f"{_measured_on(raw)}; {_ran_on(run)}. The errors measure the profile, not the "
            f"simulator: {fix}")


def _read(profile: str | Path) -> dict:
    try:  # (validate loaded it first, and said why where it could not)
        raw = json.loads(Path(profile).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _measured_on(raw: dict) -> str:
    """What a profile says it was measured on: its ``model``, ``device`` and ``engine``."""
    if not is_profile(raw):
        return "It is a cluster file: a preset's cost model, measured on no host"
    engine = " ".join(filter(None, (_text(raw.get("engine")), _text(raw.get("engine_version")))))
    return (f"It was measured with model {_text(raw.get('model')) or '(not recorded)'} on "
            f"{_text(raw.get('device')) or '(a device not recorded)'}" + (f", {engine}" if engine else ""))


def _ran_on(run: dict) -> str:
    """What the real run says it ran: its model and ``--device`` (a run records no host)."""
    device = f" with --device {run['device']}" if _text(run.get("device")) else ""
    return (f"the run used model {_text(run.get('model')) or '(not recorded)'}{device}, on a host it "
            "does not record")


def _rescalable(raw: dict) -> bool:
    """Whether ``calibrate --rescale`` takes the profile: one from ``calibrate --model``, whose
    ``fit.runner`` recorded the calibration's own run and ``fit.steps`` its step table (what
    :func:`sortedrl.realrun.rescale.run_config` requires of it; not called here, since it
    imports a ``module:factory`` task the profile names)."""
    fit = raw.get("fit") if is_profile(raw) else None
    runner = fit.get("runner") if isinstance(fit, dict) else None
    steps = fit.get("steps") if isinstance(fit, dict) else None
    return (isinstance(runner, dict) and all(k in runner for k in RUNNER_FIELDS)
            and isinstance(steps, dict) and isinstance(steps.get("table"), list))
