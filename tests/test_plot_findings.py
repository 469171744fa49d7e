"""An audit of the plot and report pages: numbers that misled, inputs accepted that should not
be, and cosmetic faults (each test names the finding it holds fixed).

Run: pytest tests/test_plot_findings.py  (the browser's console: tests/test_plot_browser.py)
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.metrics import rank_rate
from sortedrl.plot.report import bars_figure, pareto_figure
from sortedrl.plot.timeline_plot import int_dtick, timeline_figure, timeline_page
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from sortedrl.traces.synth import synthesize
from tests.conftest import write_run

runner = CliRunner()
CLUSTER = "h100-llama3.1-8b-2gpu-8seq"


@pytest.fixture(scope="module")
def tune_dir(tmp_path_factory) -> Path:
    """The audit's tune: async trials whose useful and learnable rates rank them differently."""
    out = tmp_path_factory.mktemp("tune") / "tn3"
    r = runner.invoke(app, ["tune", "--synthetic", "math-16k", "--prompts", "32", "--steps", "3",
                            "--policy", "async", "--param", "async.whole_groups=false",
                            "--param", "async.eta=0,1,2,3", "--param", "async.batch=64,128,256",
                            "--budget", "12", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def run3(tmp_path_factory):
    """sync, 3 updates, a JSONL timeline: a simulated run directory as simulate writes it."""
    tr = synthesize("logic-8k", prompts=16, group_size=2, steps=3)
    r = simulate(tr, make_policy("sync", [], tr), preset(CLUSTER))
    assert len(r.timeline.trains) == 3
    return write_run(tmp_path_factory.mktemp("run3") / "run", r), r


def undominated(points: dict[int, tuple[float, float]]) -> set[int]:
    """Trials no other beats on (staleness down, rate up), by brute force."""
    return {i for i, (x, y) in points.items()
            if not any(x2 <= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points.values())}


# -- 1: the Pareto chart plots the rate the front was built on ------------------------------------


def test_pareto_chart_plots_the_rate_tune_ranked_by(tune_dir):
    tune = json.loads((tune_dir / "tune.json").read_text())
    trials = tune["trials"]
    fig = pareto_figure(tune)
    (dots,) = [t for t in fig.data if t.name == "async trials"]
    assert list(dots.y) == [rank_rate(t["summary"]) for t in trials]
    assert list(dots.x) == [t["summary"]["staleness_mean"] for t in trials]
    # what misled: a trial drawn above the front by its useful rate (3,930 tok/s) that is
    # neither on it nor the star, its learnable rate being lower
    above = [n for n, t in enumerate(trials) if t["summary"]["tokens_per_s"]
             > rank_rate(t["summary"]) + 1.0 and n not in tune["pareto"]]
    assert above, "the audit's case: some trial wastes rollouts"
    # the front's points are the top-left staircase of what is plotted
    points = {n: (x, y) for n, (x, y) in enumerate(zip(dots.x, dots.y, strict=True))
              if trials[n]["feasible"]}
    (front,) = [t for t in fig.data if t.name == "Pareto front"]
    assert {(x, y) for x, y in zip(front.x, front.y, strict=True)} == {
        points[n] for n in undominated(points)}
    (star,) = [t for t in fig.data if t.name == "best"]
    best = trials[tune["best"]["overall"]]["summary"]
    assert (list(star.x), list(star.y)) == ([best["staleness_mean"]], [rank_rate(best)])
    assert fig.layout.yaxis.title.text == "learnable tokens/s"
    assert fig.layout.title.text == (f"Tuning: learnable tokens/s against staleness "
                                     f"({len(trials)} trials, {len(tune['pareto'])} on the "
                                     "Pareto front)")


def test_pareto_chart_of_summaries_without_learnable_tokens_says_useful():
    trials = [{"policy": "p", "summary": {"tokens_per_s": v, "staleness_mean": s}}
              for v, s in ((10.0, 0.0), (20.0, 1.0), (15.0, 2.0))]
    fig = pareto_figure({"trials": trials, "pareto": [0, 1]})
    assert fig.layout.yaxis.title.text == "useful tokens/s"
    (front,) = [t for t in fig.data if t.name == "Pareto front"]
    assert (list(front.x), list(front.y)) == ([0.0, 1.0], [10.0, 20.0])


# -- 2: a timeline cut at a line boundary is not plotted under the whole run's summary -----------


def cut(run: Path, dest: Path, keep: int) -> Path:
    """A copy of ``run`` whose timeline.jsonl keeps its first ``keep`` lines."""
    shutil.copytree(run, dest)
    lines = (run / "timeline.jsonl").read_text().splitlines(keepends=True)
    (dest / "timeline.jsonl").write_text("".join(lines[:keep]))
    return dest


def plot(run: Path, out: Path):
    return runner.invoke(app, ["plot", str(run), "--out", str(out)])


@pytest.mark.parametrize("drop, why", [
    # the last update, under a summary without its count of updates (a hand-made one): the end
    (-1, "it ends at {end:,.3f} s, the summary's makespan is {makespan:,.3f} s"),
    (0, "train records: {trains:,}, the summary's updates: 3"),  # the first third
])
def test_a_truncated_timeline_of_a_simulated_run_is_one_error_line(run3, tmp_path, drop, why):
    run, r = run3
    lines = len((run / "timeline.jsonl").read_text().splitlines())
    t = cut(run, tmp_path / "t", lines + drop if drop else lines // 3)
    if drop:
        summary = json.loads((t / "summary.json").read_text())
        del summary["updates"]
        (t / "summary.json").write_text(json.dumps(summary))
    short = Timeline.read_jsonl(t / "timeline.jsonl")
    assert short.count("train") == (2 if drop else 1)
    end = max(float(short.ends(k).max()) for k in ("span", "prefill", "train", "sync", "offload",
                                                    "onload") if short.count(k))
    before = sorted(tmp_path.rglob("*"))
    res = plot(t, tmp_path / "p.html")
    assert res.exit_code == 2, res.output
    detail = why.format(end=end, makespan=r.summary["makespan_s"], trains=short.count("train"))
    assert res.stderr.splitlines() == [
        f"error: {t / 'timeline.jsonl'}: does not match {t / 'summary.json'} ({detail}): "
        "truncated? (write the run again, or delete summary.json to plot the timeline as it is)"]
    assert sorted(tmp_path.rglob("*")) == before


def test_a_whole_run_still_plots(run3, tmp_path):
    run, r = run3
    res = plot(run, tmp_path / "p.html")
    assert res.exit_code == 0, res.output
    assert f"makespan {r.summary['makespan_s']:,.1f} s" in (tmp_path / "p.html").read_text()


def real_run(run3, dest: Path, cut: bool, finished: bool) -> Path:
    """A real run's directory (meta backend vllm): summary.json of the whole run, the timeline
    (``cut``: its first third, one update, as a run resumed from a checkpoint has it), and
    ``trace.jsonl`` (which a real run writes after its summary, when it finishes) when
    ``finished``."""
    run, r = run3
    dest.mkdir()
    tl = Timeline.read_jsonl(run / "timeline.jsonl")
    tl.meta["backend"] = "vllm"
    tl.write_jsonl(dest / "timeline.jsonl")
    (dest / "summary.json").write_text(json.dumps(r.summary))
    if cut:
        lines = (dest / "timeline.jsonl").read_text().splitlines(keepends=True)
        (dest / "timeline.jsonl").write_text("".join(lines[:len(lines) // 3]))
    if finished:
        (dest / "trace.jsonl").write_text("")
    return dest


def test_a_finished_real_run_is_checked_like_a_simulation(run3, tmp_path):
    whole = real_run(run3, tmp_path / "whole", False, finished=True)
    assert plot(whole, tmp_path / "w.html").exit_code == 0
    t = real_run(run3, tmp_path / "t", True, finished=True)
    res = plot(t, tmp_path / "p.html")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {t / 'timeline.jsonl'}: does not match "
                                 f"{t / 'summary.json'} (train records: 1, the summary's updates: 3)")


def test_an_unfinished_real_run_is_plotted_with_its_timeline_summarised(run3, tmp_path):
    """A real run resumed after it wrote summary.json appends to its timeline while the old
    summary stays: not refused, and the title's numbers are the timeline's, not the summary's."""
    _, r = run3
    t = real_run(run3, tmp_path / "t", True, finished=False)
    res = plot(t, tmp_path / "p.html")
    assert res.exit_code == 0, res.output
    tl = Timeline.read_jsonl(t / "timeline.jsonl")
    end = max(float(tl.ends(k).max()) for k in ("span", "prefill", "train", "sync") if tl.count(k))
    fig = timeline_figure(tl)
    assert tuple(fig.layout.xaxis.range) == (0, end)
    assert f"makespan {end:,.1f} s" in fig.layout.title.text
    text = (tmp_path / "p.html").read_text()
    assert f"makespan {end:,.1f} s" in text
    assert f"makespan {r.summary['makespan_s']:,.1f} s" not in text
    assert json.loads((t / "summary.json").read_text()) == r.summary  # the input is untouched


# -- 4, 5, 7: the timeline page ------------------------------------------------------------------


def step_timeline() -> Timeline:
    """One engine, two updates, the second past 1,000 s (where the table switched precision)."""
    tl = Timeline({"backend": "sim", "policy": "hand", "oracle": False, "params": {},
                   "trace": "hand-trace", "cluster": "hand-cluster", "seed": 0,
                   "placement": "colocated", "engines": 1, "max_num_seqs": 2, "kv_budget": 100,
                   "tp": 1, "gpus": 1, "trainer_gpus": 1, "group_size": 1, "samples_total": 2,
                   "lower_bound_s": 10.0})
    tl.spans += [(0.0, 900.0, 0, 0, 0, 0, 9, "finish"), (0.0, 931.4791, 0, 1, 0, 0, 4, "finish")]
    tl.trains += [(931.4791, 1010.0, 0, [0], 50), (1010.0, 1020.25, 1, [1], 40)]
    return tl


def test_steps_table_has_one_precision_a_column():
    text = timeline_page(step_timeline())
    body = re.search(r'<table class="data" id="steps">.*?<tbody>(.*?)</tbody>', text, re.S)[1]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]
    assert rows == [["0", "0", "931.479", "1,010.000", "78.521", "1", "50"],
                    ["1", "1", "1,010.000", "1,020.250", "10.250", "1", "40"]]


def test_title_is_two_lines():
    fig = timeline_figure(step_timeline())
    head, numbers = fig.layout.title.text.split("<br>")
    assert head == "hand on hand-trace (hand-cluster)"
    assert numbers.startswith("makespan 1,020.2 s | bubble ")


def test_integer_axes_tick_on_integers():
    assert [int_dtick(n) for n in (0, 1, 10, 11, 25, 50, 51, 2000)] == [1, 1, 1, 2, 5, 5, 10, 200]
    fig = timeline_figure(step_timeline())  # 2 samples, versions 0 and 1
    assert (fig.layout.yaxis3.tick0, fig.layout.yaxis3.dtick) == (0, 1)
    (scale,) = [t for t in fig.data if t.name == "policy version"]
    assert (scale.marker.colorbar.tick0, scale.marker.colorbar.dtick) == (0, 1)


# -- 6: the report's bars -------------------------------------------------------------------------


def test_bars_title_names_every_cluster_and_right_axes_clear_the_left_panel():
    base = {"trace": "math-16k", "makespan_s": 1.0, "bubble_ratio": 0.5, "tokens_per_s": 2.0,
            "staleness_mean": 0.0}
    entries = [{**base, "label": "sync", "cluster": "h100-llama3.1-8b"},
               {**base, "label": "async", "cluster": "h100-llama3.1-8b-disagg"},
               {**base, "label": "sortedrl", "cluster": "h100-llama3.1-8b"}]
    fig = bars_figure(entries)
    assert fig.layout.title.text == "Policies on math-16k (h100-llama3.1-8b, h100-llama3.1-8b-disagg)"
    lay = fig.layout
    assert lay.xaxis2.domain[0] - lay.xaxis.domain[1] == pytest.approx(0.2)
    assert all(getattr(lay, f"yaxis{n}").automargin for n in ("", "2", "3", "4"))


# -- 8: a RUNDIR or DIR that is a file -------------------------------------------------------------


@pytest.mark.parametrize("command, what", [("plot", "a run directory"),
                                           ("report", "a compare or tune directory")])
def test_a_file_given_as_the_directory_is_named_as_such(tmp_path, command, what):
    f = tmp_path / "x.txt"
    f.write_text("hello\n")
    res = runner.invoke(app, [command, str(f)])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {f}: not {what} (a file)"]
    assert f.read_text() == "hello\n" and sorted(tmp_path.iterdir()) == [f]
