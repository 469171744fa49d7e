"""Reading what ``simulate``, ``compare`` and ``tune`` wrote, with one-line errors.

The plot commands read files written by other commands, perhaps edited, truncated or from an
older version. Every problem becomes a :class:`PlotError` whose message names the file and what
is wrong, which the CLI prints as one ``error:`` line with exit code 2.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import SortedRLError
from sortedrl.limits import short_repr
from sortedrl.metrics import missing_meta, rank_rate, summarize
from sortedrl.outputs import is_label
from sortedrl.run_summary import check_matches, is_finished, mismatch, read_summary
from sortedrl.timeline import SCHEMA, Timeline
from sortedrl.timeline_file import NAMES, find_timeline, read_timeline

META_KEYS = ("policy", "trace", "cluster", "engines", "max_num_seqs", "samples_total")
"""Meta fields a timeline must have to be plotted."""

BAR_KEYS = ("makespan_s", "bubble_ratio", "tokens_per_s", "staleness_mean")
"""Summary keys every compared policy needs for the report's bars."""

class PlotError(SortedRLError):
    """A run, compare or tune directory that cannot be plotted."""


def check_dir(path: Path, what: str) -> None:
    """The directory a command reads, checked first: otherwise a file given there is reported
    as the output path the command builds from it (``--out FILE/timeline.html``), an option the
    user never gave."""
    if path.exists() and not path.is_dir():
        raise PlotError(f"{path}: not {what} (a file)")


def load_timeline(path: Path) -> Timeline:
    """Read and check a timeline (``timeline.npz`` or ``timeline.jsonl``): a meta record with
    the fields plots need, typed spans."""
    if not path.is_file():
        raise PlotError(f"{path}: no such file (is this a run directory written by simulate?)")
    try:
        tl = read_timeline(path)
    except SortedRLError as e:
        raise PlotError(str(e)) from None
    except (TypeError, ValueError, IndexError) as e:  # a line that is JSON but not a record
        raise PlotError(f"{path}: not a timeline ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror or e})") from None
    if not tl.meta:
        raise PlotError(f'{path}: no meta record (the first line must be {{"kind": "meta", ...}})')
    for key in META_KEYS:
        if key not in tl.meta:
            raise PlotError(f"{path}: the meta record has no {key!r}")
    try:
        for kind in SCHEMA:  # every record converts to its typed columns
            tl.columns(kind)
    except (TypeError, ValueError) as e:
        raise PlotError(f"{path}: a record has a field of the wrong type ({e})") from None
    # read_timeline has refused a span that ends before it starts (both formats: _in_range)
    return tl


def load_json(path: Path) -> object:
    if not path.is_file():
        raise PlotError(f"{path}: no such file")
    return jsonio.read(path, PlotError)


def not_a_run(rundir: Path) -> str:
    """What a directory without a timeline is, and what to give instead: a compare directory's
    runs are its subdirectories, a tune directory keeps none (its report is of it whole)."""
    report = f"`sortedrl report {shlex.quote(str(rundir))}`"  # (a command to paste: quoted)
    if (rundir / "compare.json").is_file():
        try:
            runs = sorted(d.name for d in rundir.iterdir() if d.is_dir() and find_timeline(d).is_file())
        except OSError:  # (an unreadable folder: the hint names none)
            runs = []
        one = f"{rundir / runs[0]}" if runs else f"{rundir}/LABEL"
        return f"a `sortedrl compare` directory, one run per policy: give one of them ({one}), or {report} for all of them"
    if (rundir / "tune.json").is_file():
        return f"a `sortedrl tune` directory, which keeps no runs: {report} shows it"
    return "a run directory is what `sortedrl simulate`, `run` or `compare` (DIR/LABEL) writes"


def load_run(rundir: Path) -> tuple[Timeline, dict]:
    """A run directory's timeline and summary (recomputed from the timeline if absent, or if a
    real run's unfinished summary no longer matches it); a finished run's summary must match
    its timeline (:func:`sortedrl.run_summary.check_matches`, as ``validate`` checks it)."""
    if not rundir.is_dir():
        raise PlotError(f"{rundir}: no such directory")
    tl_path = find_timeline(rundir)
    if not tl_path.is_file():
        raise PlotError(f"{rundir}: no {' or '.join(NAMES)} ({not_a_run(rundir)})")
    tl = load_timeline(tl_path)
    summary_path = rundir / "summary.json"
    if summary_path.exists():
        summary = read_summary(summary_path, PlotError)
        if is_finished(rundir, tl.meta):
            check_matches(tl_path, tl, summary_path, summary, PlotError, "plot")
            return tl, summary
        if mismatch(tl, summary) is None:
            return tl, summary
        # a real run's summary from before it was resumed (its timeline since cut back to a
        # checkpoint and appended to): the timeline is the run, summarised below
    if why := missing_meta(tl.meta):
        raise PlotError(f"{tl_path}: {why}")
    try:
        return tl, summarize(tl)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PlotError(f"{tl_path}: cannot summarise ({e!r})") from None


def load_compare(path: Path) -> list[dict]:
    """``compare.json``: a non-empty list of summaries, each with a label and the bar keys."""
    raw = load_json(path)
    if not isinstance(raw, list) or not raw:
        raise PlotError(f"{path}: expected a non-empty JSON list of summaries")
    for n, s in enumerate(raw):
        if not isinstance(s, dict):
            raise PlotError(f"{path}: entry {n} is not a JSON object")
        for key in ("label", *BAR_KEYS):
            if key not in s:
                raise PlotError(f"{path}: entry {n} has no {key!r}")
        label = s["label"]
        if not is_label(label):
            raise PlotError(f"{path}: entry {n}: 'label' {short_repr(label)} is not a run "
                            "directory's name (compare writes 1-64 letters, digits or '_.+-')")
        if not all(_finite(s[k]) for k in BAR_KEYS):
            raise PlotError(f"{path}: entry {n} ({label}): "
                            f"{', '.join(BAR_KEYS)} must be finite numbers")
        if any(e.get("label") == label for e in raw[:n]):  # (one bar a label: plotly merges them)
            raise PlotError(f"{path}: entry {n}: label {label!r} is also an earlier entry's "
                            "(compare writes each label once)")
    return raw


def check_compare_runs(root: Path, entries: list[dict]) -> None:
    """Each policy's run directory of the compare in ``root`` holds the run its ``compare.json``
    records (``entries``): one replaced since (``simulate --out C/on --force``) would be shown
    with the old numbers beside its new timeline. A directory without a summary is not checked,
    nor a field only one of the two has (a compare.json written before the field was)."""
    for entry in entries:
        path = root / str(entry["label"]) / "summary.json"
        run = load_json(path) if path.is_file() else {}
        if not isinstance(run, dict) or any(entry[k] != v for k, v in run.items() if k in entry and k != "label"):
            raise PlotError(f"{path}: not the run {root / 'compare.json'} records for {entry['label']!r} "
                            f"(replaced since?); re-run the compare, or draw that run alone with "
                            f"`sortedrl plot {path.parent}`")


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and bool(np.isfinite(value))


def load_tune(path: Path) -> dict:
    """``tune.json``: ``{"trials": [{"policy", "params", "summary", "feasible"}, ...],
    "pareto": [i, ...], "best": {"overall": id, "per_policy": {policy: id}}}``."""
    raw = load_json(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("trials"), list) or not raw["trials"]:
        raise PlotError(f"{path}: expected an object with a non-empty list 'trials'")
    for n, t in enumerate(raw["trials"]):
        if not isinstance(t, dict) or not isinstance(t.get("summary"), dict):
            raise PlotError(f"{path}: trial {n} has no 'summary' object")
        for key in ("tokens_per_s", "staleness_mean"):
            if not _finite(t["summary"].get(key)):
                raise PlotError(f"{path}: trial {n}: summary has no finite number {key!r}")
        rate = t["summary"].get("learnable_tokens_per_s", 0)  # ranks the trials when present
        if not _finite(rate):
            raise PlotError(f"{path}: trial {n}: summary's 'learnable_tokens_per_s' is not a "
                            "finite number")
        if not isinstance(t.get("feasible", True), bool):
            raise PlotError(f"{path}: trial {n}: 'feasible' must be true or false, got "
                            f"{short_repr(t['feasible'])}")
    pareto = raw.get("pareto", [])
    if not isinstance(pareto, list) or not all(
            isinstance(i, int) and 0 <= i < len(raw["trials"]) for i in pareto):
        raise PlotError(f"{path}: 'pareto' must be a list of trial indices")
    if "best" in raw:
        _check_best(path, raw)
    if raw.get("cluster_pareto"):
        _check_plan(path, raw)
    return raw


def _check_best(path: Path, raw: dict) -> None:
    """``best`` as tune writes it: ``{"overall": id, "per_policy": {policy: id}}``, each id a
    trial's or null."""
    best, by_id = raw["best"], {_trial_id(t, n): t for n, t in enumerate(raw["trials"])}
    if (not isinstance(best, dict) or not isinstance(best.get("per_policy", {}), dict)
            or not all(v is None or type(v) is int for v in
                       [best.get("overall"), *best.get("per_policy", {}).values()])):
        raise PlotError(f"{path}: 'best' must be an object {{\"overall\": trial id, \"per_policy\": "
                        f"{{policy: trial id}}}} (null: no feasible trial)")
    for where, v in [("overall", best.get("overall")), *best.get("per_policy", {}).items()]:
        if v is not None and v not in by_id:
            raise PlotError(f"{path}: 'best' {where}: no trial with id {v}")
    for policy, v in best.get("per_policy", {}).items():
        if v is not None and trial_policy(by_id[v]) != policy:
            raise PlotError(f"{path}: 'best' {policy}: trial {v} is a trial of "
                            f"{short_repr(trial_policy(by_id[v]))}, not of {short_repr(policy)}")


def _trial_id(t: dict, n: int) -> object:
    return t.get("id", n)


def tune_best(tune: dict) -> tuple[dict[str, int | None], int | None]:
    """Each policy's best trial and the best overall, as indices into ``trials``: the ones tune
    recorded (``best``: by its ``--objective``, among the trials that meet ``--max-staleness``).
    A tune.json without ``best.per_policy`` (written by hand): the feasible trial with the highest
    learnable tokens/s (tune's default objective). None: the policy has no feasible trial."""
    trials = tune["trials"]
    index = {_trial_id(t, n): n for n, t in enumerate(trials)}
    policies = list(dict.fromkeys(trial_policy(t) for t in trials))
    best = tune.get("best")
    if isinstance(best, dict) and "per_policy" in best:
        recorded, overall = best["per_policy"], best.get("overall")
        per = {p: index[recorded[p]] if recorded.get(p) is not None else None for p in policies}
        return per, index[overall] if overall is not None else None
    feasible = [n for n, t in enumerate(trials) if t.get("feasible", True) is not False]

    def top(pool: list[int]) -> int | None:
        return max(pool, key=lambda n: (rank_rate(trials[n]["summary"]), -n)) if pool else None

    return {p: top([n for n in feasible if trial_policy(trials[n]) == p]) for p in policies}, top(feasible)


def tune_front(tune: dict) -> list[int]:
    """The Pareto front's trial indices: ``pareto`` as tune recorded it, or, in a tune.json that
    put trials breaking ``--max-staleness`` on it (written before the front was over feasible
    trials only), the front recomputed over the feasible trials."""
    trials, front = tune["trials"], list(tune.get("pareto", []))
    if all(trials[n].get("feasible", True) is not False for n in front):
        return front
    from sortedrl.tune.search import pareto

    return pareto([{"id": n, "summary": t["summary"]} for n, t in enumerate(trials)
                   if t.get("feasible", True) is not False])


def trial_policy(t: dict) -> str:
    return str(t.get("policy", t["summary"].get("policy", "?")))


def _check_plan(path: Path, raw: dict) -> None:
    """What the cluster-planning figure reads (:func:`sortedrl.plot.plan.plan_figure`)."""
    plan = raw["cluster_pareto"]
    if not isinstance(plan, dict) or not isinstance(plan.get("front"), list):
        raise PlotError(f"{path}: 'cluster_pareto' must be an object with a list 'front'")
    for n, t in enumerate(raw["trials"]):
        if "gpu_hours" not in t["summary"]:
            continue  # not drawn
        if not isinstance(t.get("id"), int) or not isinstance(t.get("params"), dict):
            raise PlotError(f"{path}: trial {n}: a planned trial needs an integer 'id' and a "
                            "'params' object")
        drawn = ("gpu_hours", "makespan_s")
        if not all(_finite(t["summary"].get(k)) for k in drawn):
            raise PlotError(f"{path}: trial {n}: summary's 'gpu_hours' and 'makespan_s' must be "
                            "finite numbers")
    knee, ids = plan.get("knee"), {t.get("id") for t in raw["trials"]}
    if knee is not None and (type(knee) is not int or knee not in ids):
        raise PlotError(f"{path}: 'cluster_pareto' knee: no trial with id {short_repr(knee)}")
