"""Comparison reports, the plot and report commands, their errors, and offline pages (issue 7).

Run: pytest tests/test_plot_report.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from sortedrl.compare import PolicySpec, run_compare
from sortedrl.plot.report import (
    bars_figure,
    find_lengths,
    histogram_figure,
    pareto_figure,
    report_page,
    response_lengths,
    write_report,
)
from sortedrl.plot.timeline_plot import write_timeline_html
from sortedrl.policies.registry import make_policy
from sortedrl.sim.attempts import AttemptLengths
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.timeline import Timeline
from sortedrl.traces.io import write_trace
from sortedrl.traces.synth import synthesize
from tests.conftest import write_run

SMALL_CLUSTER = "h100-llama3.1-8b-2gpu-8seq"
from sortedrl.cli import app  # noqa: E402  (the real CLI, with plot and report registered)

runner = CliRunner()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    tr = synthesize("logic-8k", prompts=16, group_size=2, steps=2)
    r = simulate(tr, make_policy("sortedrl", [], tr), preset(SMALL_CLUSTER))
    return write_run(tmp_path_factory.mktemp("small") / "run", r), r, tr


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory):
    """What ``sortedrl compare`` writes, built with the library (one oracle run among them)."""
    tr = synthesize("logic-8k", prompts=16, group_size=2, steps=2)
    specs = [PolicySpec("sync", "sync"), PolicySpec("part", "sortedrl", ("mode=partial",)),
             PolicySpec("async", "async"), PolicySpec("oracle_sorted", "oracle_sorted")]
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    summaries = []
    for spec, r in run_compare(tr, specs, preset(SMALL_CLUSTER)):
        write_run(out / spec.label, r)
        summaries.append({"label": spec.label, **r.summary})
    (out / "compare.json").write_text(json.dumps(summaries, indent=2))
    return out, summaries, tr


def trace(fig, name: str):
    (t,) = [t for t in fig.data if t.name == name]
    return t


def test_html_is_offline(small, compare_dir, tmp_path):
    pages = [write_timeline_html(small[1].timeline, tmp_path / "t.html"),
             write_report(compare_dir[0], tmp_path / "r.html")]
    for p in pages:
        text = p.read_text()
        assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)  # nothing fetched, CDN or not
        assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']https?:", text, re.I)
        assert text.count(get_plotlyjs()) == 1  # plotly.js inlined once


# -- report ---------------------------------------------------------------------------------------


def test_the_hatching_is_explained_only_when_an_oracle_run_is_shown(compare_dir, tmp_path):
    out = compare_dir[0]
    said = "Hatched bars are oracle runs"
    assert said in report_page(out)
    plain = tmp_path / "plain"  # the same runs without the oracle (it was said of every report)
    shutil.copytree(out, plain, ignore=shutil.ignore_patterns("oracle_sorted"))
    kept = [s for s in json.loads((out / "compare.json").read_text()) if s["label"] != "oracle_sorted"]
    (plain / "compare.json").write_text(json.dumps(kept))
    page = report_page(plain)
    assert said not in page and "Bars from " in page


def test_report_bars_histogram_and_table(compare_dir):
    out, summaries, tr = compare_dir
    fig = bars_figure(summaries)
    labels = ["sync", "part", "async", "oracle_sorted (oracle)"]
    assert [t.name for t in fig.data if t.showlegend] == labels
    for k, key in enumerate(("makespan_s", "bubble_ratio", "tokens_per_s", "staleness_mean")):
        axis = "yaxis" if k == 0 else f"yaxis{k + 1}"
        bars = [t for t in fig.data if t.yaxis == axis.replace("axis", "")]
        assert [t.y[0] for t in bars] == [s[key] for s in summaries]
    oracle = [t for t in fig.data if t.name == "oracle_sorted (oracle)"]
    assert all(t.marker.pattern.shape == "/" for t in oracle)
    assert fig.layout.yaxis.title.text == "makespan (s)"
    assert fig.layout.yaxis3.title.text == "useful tokens/s"
    assert fig.layout.yaxis4.title.text == "staleness mean (versions)"
    # lengths reconstructed from a timeline are those of each sample's final attempt (a
    # regenerated attempt draws its own length, --regen resample)
    tl = Timeline.read_jsonl(out / "part" / "timeline.jsonl")  # partial mode: resumed samples
    last = {}
    for span in tl.rows("span"):
        last[span[3]] = max(last.get(span[3], 0), span[4])
    draw = AttemptLengths(tr, seed=0)
    want = [draw.length(i, a) for i, a in last.items()]
    assert sorted(response_lengths(tl).tolist()) == sorted(want)
    hist = histogram_figure(response_lengths(tl), "x")
    assert sum(hist.data[0].y) == len(tr)
    assert hist.layout.xaxis.title.text == "response length (tokens)"
    text = report_page(out)
    assert text.count("setAttribute('data-rendered'") == 2  # bars and lengths; no tune.json
    for label in labels:
        assert f">{label}</td>" in text


def test_report_via_the_command(compare_dir):
    out = compare_dir[0]
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == f"wrote {out / 'report.html'}"
    text = (out / "report.html").read_text()
    assert 'id="bars"' in text and 'id="lengths"' in text and 'id="pareto"' not in text


def test_report_of_a_tune_directory(tmp_path, compare_dir):
    _, summaries, tr = compare_dir
    trials = [{"policy": s["policy"], "params": {"k": i}, "summary": s}
              for i, s in enumerate(summaries)]
    per_policy = {s["policy"]: i for i, s in enumerate(summaries)}  # one trial per policy
    tune = {"trials": trials, "pareto": [2, 0], "best": {"overall": 2, "per_policy": per_policy}}
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    write_trace(tr, tmp_path / "trace.jsonl")
    fig = pareto_figure(tune)
    front = trace(fig, "Pareto front")
    order = sorted([2, 0], key=lambda i: summaries[i]["staleness_mean"])
    assert list(front.x) == [summaries[i]["staleness_mean"] for i in order]
    assert list(front.y) == [summaries[i]["learnable_tokens_per_s"] for i in order]
    assert fig.layout.xaxis.title.text == "staleness mean (versions)"
    assert fig.layout.yaxis.title.text == "learnable tokens/s"  # the rate tune ranks by
    assert sum(len(t.x) for t in fig.data if t.name.endswith(" trials")) == len(trials)
    star = trace(fig, "best")  # best.overall, as tune writes it
    assert (list(star.x), list(star.y)) == ([summaries[2]["staleness_mean"]],
                                            [summaries[2]["learnable_tokens_per_s"]])
    lengths, source = find_lengths(tmp_path, [])
    assert source == str(tmp_path / "trace.jsonl")  # the trace file, not a timeline
    assert np.array_equal(lengths, tr.response_len)
    path = write_report(tmp_path)
    text = path.read_text()
    assert 'id="pareto"' in text and 'id="lengths"' in text
    assert ">sortedrl (best of 1)</td>" in text


# -- the plot command and errors ------------------------------------------------------------------


def test_plot_command_writes_html_and_perfetto(small, tmp_path):
    rundir = small[0]
    pf = tmp_path / "sub" / "trace.json"
    r = runner.invoke(app, ["plot", str(rundir), "--perfetto", str(pf)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == f"wrote {rundir / 'timeline.html'}"
    assert json.loads(pf.read_text())["traceEvents"]
    assert "engine 0: rollout" in (rundir / "timeline.html").read_text()


def _count_span_tables(monkeypatch) -> list[int]:
    """Count the calls of ``span_table`` under any name a module imported it by."""
    import sys

    from sortedrl import metrics

    calls, built = [], metrics.span_table

    def counted(tl):
        calls.append(tl.count("span"))
        return built(tl)

    for name, mod in list(sys.modules.items()):  # (ours only: another package's lazy attributes import)
        if name.split(".")[0] == "sortedrl" and getattr(mod, "span_table", None) is built:
            monkeypatch.setattr(mod, "span_table", counted)
    return calls


def test_plot_and_report_build_the_span_table_at_most_once(small, compare_dir, tmp_path,
                                                            monkeypatch):
    # the sorted span table is the plot's peak (1.8 GiB at 8M samples): plot --perfetto built it
    # three times (a check read_timeline already makes, the page's lanes, the trace's lanes)
    calls = _count_span_tables(monkeypatch)
    r = runner.invoke(app, ["plot", str(small[0]), "--out", str(tmp_path / "p.html"),
                            "--perfetto", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert calls == [small[1].timeline.count("span")]
    calls.clear()
    r = runner.invoke(app, ["report", str(compare_dir[0]), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert calls == []  # the response lengths are read from the columns


@pytest.mark.parametrize("fast", [True, False])
def test_a_span_that_ends_before_it_starts_is_refused_by_either_jsonl_reader(tmp_path, monkeypatch,
                                                                          fast):
    # plot no longer checks this on the span table: read_timeline does, on every path
    if not fast:
        monkeypatch.setattr("sortedrl.timeline_file.read_jsonl_fast", lambda path: None)
    run = _corrupt("timeline.jsonl", META + '\n{"kind": "span", "t": 2, "t_end": 1, "engine": 0, '
                   '"sample": 0, "attempt": 0, "version": 0, "tokens": 1, "end": "finish"}\n')(tmp_path)
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [f"error: {run / 'timeline.jsonl'}: a 'span' record ends before "
                                     "it starts (t_end < t)"]


def _corrupt(name: str, text: str | bytes):
    def make(root: Path) -> Path:
        run = root / "run"
        run.mkdir()
        p = run / name
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
        return run
    return make


META = json.dumps({"kind": "meta", "policy": "p", "trace": "t", "cluster": "c", "engines": 1,
                   "max_num_seqs": 2, "samples_total": 1})


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "nope", r"nope: no such directory$"),
    (lambda root: (root / "run").mkdir() or root / "run",
     r"run: no timeline\.npz or timeline\.jsonl \(a run directory is what `sortedrl simulate`, "
     r"`run` or `compare` \(DIR/LABEL\) writes\)$"),
    (_corrupt("timeline.jsonl", META + "\n{not json\n"),
     r"timeline\.jsonl: line 2: not valid JSON"),
    (_corrupt("timeline.jsonl", META + "\n[1, 2]\n"),
     r"timeline\.jsonl: (line 2: )?not a timeline"),
    (_corrupt("timeline.jsonl", b"\xff\xfe\x00garbage"), r"timeline\.jsonl: not UTF-8 text$"),
    (_corrupt("timeline.jsonl", '{"kind": "span", "t": 0}\n'),
     r"timeline\.jsonl: line 1: missing field 't_end'"),
    (_corrupt("timeline.jsonl", '{"kind": "meta", "policy": "p"}\n'),
     r"timeline\.jsonl: the meta record has no 'trace'"),
    (_corrupt("timeline.jsonl", META + '\n{"kind": "span", "t": "x", "t_end": 1, "engine": 0, '
              '"sample": 0, "attempt": 0, "version": 0, "tokens": 1, "end": "finish"}\n'),
     r"timeline\.jsonl: a record has a field of the wrong type"),
])
def test_plot_errors_are_one_line_exit_2_and_write_nothing(tmp_path, make, message):
    target = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["plot", str(target), "--perfetto", str(tmp_path / "p.json")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert re.search(message, lines[0]), lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # no output, no temp file left behind


@pytest.mark.parametrize("edit, message", [
    # an edited or older summary.json: a KeyError or TypeError traceback from the plot's title
    (lambda s: s.pop("tokens_per_s"), "field 'tokens_per_s': missing"),
    (lambda s: s.clear(), "field 'makespan_s': missing"),
    (lambda s: s.update(makespan_s="abc"), "field 'makespan_s': expected a number, got 'abc'"),
    (lambda s: s.update(makespan_s=None), "field 'makespan_s': expected a number, got None"),
])
def test_a_summary_without_the_numbers_the_plot_shows_is_one_error_line(small, tmp_path, edit,
                                                                         message):
    run = tmp_path / "run"
    shutil.copytree(small[0], run)
    summary = json.loads((run / "summary.json").read_text())
    edit(summary)
    (run / "summary.json").write_text(json.dumps(summary))
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.splitlines() == [f"error: {run / 'summary.json'}: {message} (delete the file to "
                                     "recompute the summary from the timeline)"]
    assert not (tmp_path / "p.html").exists()
    (run / "summary.json").unlink()  # as it says: the plot recomputes the summary
    assert runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")]).exit_code == 0


@pytest.mark.parametrize("files, message", [
    (None, r"cmp: no such directory$"),
    ({}, r"cmp: neither compare\.json nor tune\.json here"),
    # one run's directory (simulate's, run's): plot draws it, or report beside other runs
    ({"summary.json": "{}"}, r"cmp: one run \(summary\.json\), not a compare or tune directory: draw it with "
                             r"`sortedrl plot \S*cmp`, or report it beside other runs with `sortedrl "
                             r"report \S*cmp RUN2 \.\.\. --out FILE\.html`; report DIR compares the runs "
                             r"of `sortedrl compare` or `sortedrl tune` \(their --out\)$"),
    ({"timeline.jsonl": ""}, r"cmp: one run \(timeline\.jsonl\), not a compare or tune directory"),
    ({"compare.json": "[{"}, r"compare\.json: line 1: not valid JSON"),
    ({"compare.json": "{}"}, r"compare\.json: expected a non-empty JSON list of summaries"),
    ({"compare.json": '[{"label": "a", "makespan_s": 1}]'}, r"compare\.json: entry 0 has no "
                                                            r"'bubble_ratio'"),
    # hand-edited: these drew a report of NaN bars, or read a run outside the directory
    ({"compare.json": '[{"label": "a", "makespan_s": NaN, "bubble_ratio": 0, "tokens_per_s": 1, '
                      '"staleness_mean": 0}]'},
     r"compare\.json: entry 0 \(a\): makespan_s, .* must be finite numbers$"),
    ({"compare.json": '[{"label": "a", "makespan_s": 1, "bubble_ratio": true, "tokens_per_s": 1, '
                      '"staleness_mean": 0}]'}, r"compare\.json: entry 0 \(a\): .* must be finite"),
    ({"compare.json": '[{"label": "../../etc", "makespan_s": 1, "bubble_ratio": 0, '
                      '"tokens_per_s": 1, "staleness_mean": 0}]'},
     r"compare\.json: entry 0: 'label' '\.\./\.\./etc' is not a run directory's name"),
    ({"compare.json": '[{"label": null, "makespan_s": 1, "bubble_ratio": 0, "tokens_per_s": 1, '
                      '"staleness_mean": 0}]'}, r"compare\.json: entry 0: 'label' None is not"),
    ({"tune.json": '{"trials": []}'}, r"tune\.json: expected an object with a non-empty list"),
    ({"tune.json": '{"trials": [{"summary": {"tokens_per_s": 1, "staleness_mean": 0}}], '
                   '"pareto": [3]}'}, r"tune\.json: 'pareto' must be a list of trial indices"),
    # a review of the readers: these were a KeyError and a TypeError traceback
    ({"tune.json": '{"trials": [{"policy": "sync", "summary": {"tokens_per_s": 1, "staleness_mean": '
                   '0, "gpu_hours": 1, "makespan_s": 2}}], "cluster_pareto": {"front": [0]}}'},
     r"tune\.json: trial 0: a planned trial needs an integer 'id' and a 'params' object$"),
    ({"tune.json": '{"trials": [{"summary": {"tokens_per_s": 1, "staleness_mean": 0, '
                   '"learnable_tokens_per_s": "x"}}]}'},
     r"tune\.json: trial 0: summary's 'learnable_tokens_per_s' is not a finite number$"),
    # a review of hand-edited files (6 Dec 2026): these drew a page of nan, a duplicate bar or
    # no knee, where export refused the same file
    ({"tune.json": '{"trials": [{"summary": {"tokens_per_s": NaN, "staleness_mean": 0}}]}'},
     r"tune\.json: trial 0: summary has no finite number 'tokens_per_s'$"),
    ({"tune.json": '{"trials": [{"feasible": "yes", "summary": {"tokens_per_s": 1, '
                   '"staleness_mean": 0}}]}'},
     r"tune\.json: trial 0: 'feasible' must be true or false, got 'yes'$"),
    ({"tune.json": '{"trials": [{"id": 0, "params": {}, "summary": {"tokens_per_s": 1, '
                   '"staleness_mean": 0, "gpu_hours": 1, "makespan_s": 2}}], '
                   '"cluster_pareto": {"front": [0], "knee": 999}}'},
     r"tune\.json: 'cluster_pareto' knee: no trial with id 999$"),
    ({"tune.json": '{"trials": [{"id": 0, "params": {}, "summary": {"tokens_per_s": 1, '
                   '"staleness_mean": 0, "gpu_hours": 1, "makespan_s": NaN}}], '
                   '"cluster_pareto": {"front": [0]}}'},
     r"tune\.json: trial 0: summary's 'gpu_hours' and 'makespan_s' must be finite numbers$"),
    ({"compare.json": '[{"label": "a", "makespan_s": 1, "bubble_ratio": 0, "tokens_per_s": 1, '
                      '"staleness_mean": 0}, {"label": "a", "makespan_s": 2, "bubble_ratio": 0, '
                      '"tokens_per_s": 1, "staleness_mean": 0}]'},
     r"compare\.json: entry 1: label 'a' is also an earlier entry's \(compare writes each label "
     r"once\)$"),
    ({"tune.json": '{"trials": [{"summary": {"tokens_per_s": 1, "staleness_mean": 0}}], '
                   '"cluster_pareto": {"front": 3}}'},
     r"tune\.json: 'cluster_pareto' must be an object with a list 'front'$"),
])
def test_report_errors_are_one_line_exit_2_and_write_nothing(tmp_path, files, message):
    root = tmp_path / "cmp"
    if files is not None:
        root.mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["report", str(root)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert re.search(message, lines[0]), lines[0]
    assert sorted(tmp_path.rglob("*")) == before


def test_report_names_a_corrupt_run_timeline(tmp_path, compare_dir):
    root = tmp_path / "cmp"
    root.mkdir()
    (root / "compare.json").write_text(json.dumps(compare_dir[1]))
    (root / "sync").mkdir()
    (root / "sync" / "timeline.jsonl").write_text("{oops\n")
    r = runner.invoke(app, ["report", str(root)])
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"error: {root / 'sync' / 'timeline.jsonl'}: line 1: not valid "
                                "JSON (Expecting property name enclosed in double quotes)")
    assert not (root / "report.html").exists()


def test_an_output_that_is_a_directory_is_an_error(small, tmp_path):
    r = runner.invoke(app, ["plot", str(small[0]), "--out", str(tmp_path)])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: --out {tmp_path}: is a directory, not a file"
    assert list(tmp_path.iterdir()) == []


def test_headline_table_one_precision_a_column_and_no_empty_timeline_column(compare_dir, tmp_path):
    """report.html printed makespans as 718.916 beside 1,062.4 (precision by size), and a
    timeline column that was '-' on every row (no run had a timeline.html)."""
    out, summaries, _ = compare_dir
    root = tmp_path / "cmp"
    shutil.copytree(out, root)

    def body(text: str) -> tuple[list[str], list[list[str]]]:
        table = text[text.index('id="summary"'):]
        heads = re.findall(r"<th>(.*?)</th>", table)
        rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr><td.*?</tr>", table)]
        return heads, rows

    heads, rows = body(report_page(root))
    # each with its unit (docs/metrics.md); the bubble as the terminal's `bubble %` prints it, and
    # learnable tokens/s, the rate compare and tune rank by (the report showed only useful)
    assert heads == ["policy", "oracle", "cluster", "makespan (s)", "bubble (%)", "useful tokens/s",
                     "learnable tokens/s", "staleness mean (versions)", "staleness max (versions)",
                     "wasted (tokens)", "efficiency", "updates"]
    for s, row in zip(summaries, rows, strict=True):
        assert row[3:] == [f"{s['makespan_s']:,.1f}", f"{100 * s['bubble_ratio']:.1f}", f"{s['tokens_per_s']:,.0f}",
                           f"{s['learnable_tokens_per_s']:,.0f}", f"{s['staleness_mean']:.2f}",
                           f"{s['staleness_max']:,}", f"{s['wasted_tokens']:,}", f"{s['efficiency']:.3f}",
                           f"{s['updates']:,}"]
    (root / "sync" / "timeline.html").write_text("<html></html>")
    heads, rows = body(report_page(root))
    assert heads[-1] == "timeline"
    assert rows[0][-1] == '<a href="sync/timeline.html">timeline</a>'
    assert [row[-1] for row in rows[1:]] == ["-"] * (len(rows) - 1)
    # a compare.json written before learnable tokens were counted: the column says '-'
    old = [{k: v for k, v in s.items() if k != "learnable_tokens_per_s"} for s in summaries]
    (root / "compare.json").write_text(json.dumps(old))
    heads, rows = body(report_page(root))
    col = heads.index("learnable tokens/s")
    assert [row[col] for row in rows] == ["-"] * len(rows)


def test_the_report_says_what_compare_says_of_updates_and_training(compare_dir, tmp_path):
    # compare's notes that change how a row reads were in the terminal only: runs whose updates
    # differ twofold, runs that trained less; the table has an updates column
    out, summaries, _ = compare_dir
    root = tmp_path / "cmp"
    shutil.copytree(out, root)
    raw = json.loads((root / "compare.json").read_text())
    raw[0].update(updates=1, samples_trained=10)  # (as a run that made one update of part of the trace)
    (root / "compare.json").write_text(json.dumps(raw))
    run = json.loads((root / "sync" / "summary.json").read_text())
    (root / "sync" / "summary.json").write_text(json.dumps({**run, "updates": 1, "samples_trained": 10}))
    text = report_page(root)
    most = max(s["samples_trained"] for s in raw)
    many = max(raw, key=lambda s: s["updates"])
    assert (f'<p class="note">updates differ: sync makes 1 update, {many["label"]} makes {many["updates"]}; fewer '
            'updates mean larger batches, a different training run, not only a faster one</p>') in text
    assert (f'<p class="note">trained less: sync trained 10 of its {raw[0]["samples_total"]:,} samples '
            f'({100 * 10 / raw[0]["samples_total"]:.0f}%), where another trained {most:,}: a makespan that covers '
            'less training reads faster than it is; compare the learnable tok/s</p>') in text
    assert report_page(out).count('<p class="note">updates differ') == (
        max(s["updates"] for s in summaries) >= 2 * max(1, min(s["updates"] for s in summaries)))
