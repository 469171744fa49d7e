"""``profile show``'s sections for the records of a profile measured on this machine by
``calibrate --model`` (engine steps, updates, the weight sync, a shared host) or rescaled to its
speed later by ``calibrate --rescale``; :mod:`.show` prints the rest.
"""

from __future__ import annotations

import math

from sortedrl.tables import fmt


def fmt_value(v: object) -> str:
    """A record's value as ``profile show`` prints it: 4 significant digits, a list by its range."""
    if isinstance(v, bool) or v is None:
        return str(v).lower()
    if isinstance(v, (int, float)):
        return f"{v:.4g}"
    if isinstance(v, list):
        return f"{len(v)} values, {fmt_value(min(v))} .. {fmt_value(max(v))}" if v else "[]"
    return str(v)


def count(v: object, whole: bool = False) -> str:
    """A count (steps, requests, tokens) as ``profile show`` prints it: a whole number with
    thousands separators (3,304); ``whole``: a mean count rounded to one (286,875, where
    ``fmt_value`` printed 2.869e+05). Anything else (a hand edit, a missing record) as it is."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if whole and isinstance(v, float) and math.isfinite(v):
        return f"{v:,.0f}"
    return fmt_value(v)


def rescaled(r: dict | None) -> list[str]:
    """A profile rescaled to the host's speed at a later time (``calibrate --rescale``): the
    terms below are the fitted ones with their engine, update and sync parts times these factors
    (and ``fit.steps``); the other fit records below are the calibration's."""
    out = []
    while isinstance(r, dict):
        out.append(f"  rescaled at {r.get('at')} from {r.get('from')}: engine x{r.get('engine_factor', 1):.3f} "
                   f"({count(r.get('steps'))} steps), updates x{r.get('update_factor', 1):.3f} ({count(r.get('updates'))}), "
                   f"sync x{r.get('sync_factor', 1):.3f} ({count(r.get('syncs'))})")
        r = r.get("earlier")
    return out


def cpu_fit(fit: dict) -> list[str]:
    """A profile measured on this machine by ``calibrate --model``."""
    out = []
    st = fit.get("steps")
    if isinstance(st, dict) and "mape" in st:
        out += ["", f"engine steps (calibrate --model): MAPE {100 * st['mape']:.1f}% over "
                    f"{count(st.get('measurements'))} steps, total error {100 * st.get('total_error', 0):+.1f}%"]
    tr = fit.get("train")
    if isinstance(tr, dict) and "mape" in tr:
        out.append(f"updates: MAPE {100 * tr['mape']:.1f}% over {count(tr.get('measurements'))} updates")
        out += _update_forms(tr)
    out += _shared_host(fit.get("shared_host"))
    sy = fit.get("sync")
    if isinstance(sy, dict) and "median" in sy:
        out.append(f"weight sync: median {fmt_value(sy['median'])} s over {count(sy.get('samples'))} syncs, "
                   f"spread {fmt_value(sy.get('spread'))} s")
    return out


def _update_forms(tr: dict) -> list[str]:
    """Which form of the update cost the fit kept, and how well each form fitted."""
    by_form = tr.get("rel_scale_by_form")
    if not isinstance(by_form, dict):
        return []
    spreads = ", ".join(f"{k} {100 * v:.1f}%" for k, v in by_form.items())
    out = [f"  form kept: {tr.get('form')} (residual spread by form: {spreads}; "
           f"{count(tr.get('bare_updates', 0))} of the updates of chosen shapes)"]
    if tr.get("runner_update_s") is not None:
        out.append(f"  a runner update adds {fmt_value(tr['runner_update_s'])} s (log, checkpoint) to a bare one")
    return out


def _shared_host(sh: dict | None) -> list[str]:
    """Engines and trainer on one host's cores (``calibrate --ray-engines N``)."""
    if not isinstance(sh, dict) or "engine_contention" not in sh:
        return []

    def factor(name: str) -> str:
        if sh.get(name + "_by_pair") == []:  # no pair measured it: the neutral x1 was written
            return "x1 (not measured: no pair had a whole engine round beside the update)"
        return f"x{fmt(name, sh[name])} (relative MAD {100 * sh.get(name + '_rel_mad', 0):.1f}%)"

    return [f"shared host ({sh.get('engines')} engine actors + the trainer actor, {sh.get('pairs')} "
            f"interleaved pairs): engine steps {factor('engine_contention')} while the trainer trains, "
            f"updates {factor('train_contention')} beside rollout",
            f"  an engine actor beside its peers, no trainer: {factor('ray_step_factor')} one engine alone",
            *([f"  one engine busy: its steps {factor('engine_contention_one')} while the trainer trains, "
               f"updates {factor('train_contention_one')} beside it"] if "engine_contention_one" in sh else []),
            *([f"  the driver's time per engine round: {fmt_value(sh['step_overhead_s'])} s with every engine busy, "
               f"{fmt_value(sh.get('step_overhead_one_s', 0.0))} s with one"] if "step_overhead_s" in sh else [])]
