"""``sortedrl report RUN1 RUN2 ...``: run directories side by side, real (vLLM) or simulated.

The real run is ``tests/fixtures/run-sync`` (copied, never changed in place); the simulated ones
are simulated here on a tiny trace. No vLLM, no Ray.

Run: pytest tests/test_report_runs.py
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sortedrl.cli import app
from sortedrl.plot.report_runs import lengths_figure, load_runs, run_labels
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.tables import FORMATS
from sortedrl.traces.digest import trace_digest
from tests.cli_helpers import runner
from tests.conftest import make_trace, tiny_cluster, write_run

FIXTURE = Path(__file__).parent / "fixtures" / "run-sync"
LENGTHS = [5, 9, 20, 3, 7, 11, 2, 30]


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Path:
    """``sync`` and ``sortedrl`` simulated on one tiny trace and cluster: ``ROOT/POLICY``."""
    root = tmp_path_factory.mktemp("sims")
    tr = make_trace(LENGTHS, group_size=2)
    for policy in ("sync", "sortedrl"):
        write_run(root / policy, simulate(tr, make_policy(policy, [], tr), tiny_cluster()))
    return root


def real_run(where: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, where))


def table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    table = text[text.index('id="summary"'):]
    heads = re.findall(r"<th>(.*?)</th>", table)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr><td.*?</tr>", table)]
    return heads, rows


def numbers(s: dict) -> list[str]:
    """The headline cells of a simulated run's summary, at the table's precisions."""
    return [format(s["makespan_s"], FORMATS["makespan_s"]), f"{100 * s['bubble_ratio']:.1f}",
            format(s["tokens_per_s"], FORMATS["tokens_per_s"]),
            format(s["learnable_tokens_per_s"], FORMATS["learnable_tokens_per_s"]),
            format(s["staleness_mean"], FORMATS["staleness_mean"]), f"{s['staleness_max']:,}",
            f"{s['wasted_tokens']:,}", format(s["efficiency"], FORMATS["efficiency"]), f"{s['updates']:,}"]


def test_a_real_and_a_simulated_run_side_by_side(sims, tmp_path):
    real = real_run(tmp_path / "real" / "sync")
    out = tmp_path / "side.html"
    r = runner.invoke(app, ["report", str(real), str(sims / "sortedrl"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"wrote {out}"]
    note = ("the runs differ in trace (task:sort: sync; test: sortedrl), samples (128: sync; "
            "8: sortedrl), group size (4: sync; 2: sortedrl), cluster (local-vllm: sync; "
            "tiny: sortedrl) and backend (vLLM: sync; simulated: sortedrl): not a like-for-like "
            "comparison")
    assert r.stderr.splitlines() == [f"note: {note}"]
    text = out.read_text()
    assert f"<strong>Note: {note}.</strong>" in text
    heads, rows = table_rows(text)
    assert heads == ["run", "backend", "policy", "knobs", "trace", "cluster", "makespan (s)",
                     "bubble (%)", "useful tokens/s", "learnable tokens/s",
                     "staleness mean (versions)", "staleness max (versions)", "wasted (tokens)",
                     "efficiency", "updates"]
    # the real run: no learnable tokens counted in its summary, and no bound, so no efficiency
    assert rows[0] == ["sync", "real (vLLM)", "sync", "rollout_batch=0, minibatches=1", "task:sort",
                       "local-vllm", "0.5", "74.0", "2,110", "-", "0.00", "0", "0", "-", "4"]
    s = load_runs([sims / "sortedrl"])[0].summary
    assert rows[1][:3] == ["sortedrl", "simulated", "sortedrl"]
    assert rows[1][4:6] == ["test", "tiny"]
    assert rows[1][6:] == numbers(s)
    for div in ("bars", "lengths"):
        assert f'id="{div}"' in text


def test_each_run_is_labelled_summarised_and_its_lengths_drawn(sims, tmp_path):
    real = real_run(tmp_path / "sync")
    runs = load_runs([real, sims / "sync"])
    assert [r.label for r in runs] == [f"{tmp_path.name}/sync", f"{sims.name}/sync"]
    assert [r.kind for r in runs] == ["real (vLLM)", "simulated"]
    # a finished sample's length is its final attempt's span tokens: the real run generated
    # 1,138 tokens over 128 samples, all useful; the simulation drew the trace's lengths
    assert (runs[0].lengths.size, int(runs[0].lengths.sum())) == (128, 1138)
    assert sorted(runs[1].lengths.tolist()) == sorted(LENGTHS)
    fig = lengths_figure(runs)
    assert [t.name for t in fig.data] == [f"{tmp_path.name}/sync (128 samples, mean 9 tokens)",
                                          f"{sims.name}/sync (8 samples, mean 11 tokens)"]
    for run, line in zip(runs, fig.data, strict=True):
        counts = [int(c) for c in line.customdata[:-1, 2]]  # (the last point repeats the last bin)
        assert sum(counts) == run.lengths.size
        assert list(line.y[:-1]) == pytest.approx([100 * c / run.lengths.size for c in counts])
    assert fig.layout.yaxis.title.text == "samples (% of the run's)"
    assert fig.layout.xaxis.title.text == "response length (tokens)"


def test_runs_on_one_trace_and_cluster_get_no_note_and_parents_tell_equal_names_apart(sims, tmp_path):
    a, b = (Path(shutil.copytree(sims / "sync", tmp_path / cmp / "sync")) for cmp in ("cmp1", "cmp2"))
    (b / "timeline.html").write_text("<html></html>")
    out = tmp_path / "pages" / "r.html"
    r = runner.invoke(app, ["report", str(a), str(b), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    text = out.read_text()
    assert "Note:" not in text
    heads, rows = table_rows(text)
    assert [row[0] for row in rows] == ["cmp1/sync", "cmp2/sync"]
    assert heads[-1] == "timeline"  # linked from the page's own directory, where one exists
    assert [row[-1] for row in rows] == ["-", '<a href="../cmp2/sync/timeline.html">timeline</a>']


def test_a_real_run_still_going_is_marked_unfinished(sims, tmp_path):
    real = real_run(tmp_path / "real")
    (real / "trace.jsonl").unlink()  # (written at the run's end, after summary.json)
    assert [r.kind for r in load_runs([real, sims / "sync"])] == ["real (vLLM), unfinished", "simulated"]


@given(st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=3), min_size=2, max_size=6))
def test_labels_are_distinct_ends_of_the_paths_and_a_unique_name_stays_bare(parts):
    dirs = [Path("/runs", *p) for p in dict.fromkeys(tuple(p) for p in parts)]
    labels = run_labels(dirs)
    assert len(set(labels)) == len(labels)
    for d, label in zip(dirs, labels, strict=True):
        assert label == str(d) or str(d).endswith("/" + label)
        if [e.name for e in dirs].count(d.name) == 1:
            assert label == d.name


def test_labels_grow_only_where_names_clash():
    dirs = [Path("/r/x/a/sync"), Path("/r/y/a/sync"), Path("/r/b/sync"), Path("/r/async")]
    assert run_labels(dirs) == ["x/a/sync", "y/a/sync", "b/sync", "async"]
    # a path that is the end of another's: the whole path, not "//r/a"
    assert run_labels([Path("/x/r/a"), Path("/r/a")]) == ["x/r/a", "/r/a"]


def _inputs(tmp: Path, sims: Path) -> None:
    real_run(tmp / "real")
    shutil.copytree(sims / "sync", tmp / "sim")
    (tmp / "cmp").mkdir()
    (tmp / "cmp" / "compare.json").write_text("[]")
    (tmp / "tune").mkdir()
    (tmp / "tune" / "tune.json").write_text("{}")
    (tmp / "empty").mkdir()
    (tmp / "file.txt").write_text("x")
    shutil.copytree(sims / "sync", tmp / "bad")
    (tmp / "bad" / "summary.json").write_text("{oops")
    shutil.copytree(sims / "sync", tmp / "nostale")
    text = (tmp / "nostale" / "summary.json").read_text()
    (tmp / "nostale" / "summary.json").write_text(re.sub(r'"staleness_mean": [^,]*, ', "", text))
    (tmp / "o.html").write_text("mine")


@pytest.mark.parametrize("args, message", [
    (["real", "sim"], "report of 2 runs: give --out FILE.html (the default, DIR/report.html, is "
                      "for one compare or tune directory)"),
    (["real", "sim", "--out", "x.png"], "--out {t}/x.png: report writes an HTML page (give a .html file)"),
    (["real", "missing", "--out", "new.html"], "{t}/missing: no such directory"),
    (["real", "file.txt", "--out", "new.html"], "{t}/file.txt: not a run directory (a file)"),
    (["real", "cmp", "--out", "new.html"],
     "{t}/cmp: a compare directory (compare.json), not a run: report it alone (`sortedrl report "
     "{t}/cmp`), or give its runs' directories"),
    (["tune", "real", "--out", "new.html"],
     "{t}/tune: a tune directory (tune.json), not a run: report it alone (`sortedrl report "
     "{t}/tune`)"),
    (["real", "empty", "--out", "new.html"],
     "{t}/empty: not a run directory (no summary.json, timeline.npz, timeline.jsonl): give "
     "directories written by `sortedrl run` or `sortedrl simulate`"),
    (["real", "sim", "real", "--out", "new.html"], "{t}/real: given twice; give each run once"),
    (["real", "sim", "sim/../sim", "--out", "new.html"],
     "{t}/sim/../sim: given twice ({t}/sim and {t}/sim/../sim); give each run once"),
    (["real", "bad", "--out", "new.html"],
     "{t}/bad/summary.json: line 1: not valid JSON (Expecting property name enclosed in double quotes)"),
    (["real", "nostale", "--out", "new.html"],
     "{t}/nostale/summary.json: field 'staleness_mean': expected a finite number (delete the file "
     "to recompute the summary from the timeline)"),
    (["real", "sim", "--out", "o.html"], "--out {t}/o.html: exists (add --force to overwrite it)"),
    # an input, or the timeline page a run links, is never replaced, not even with --force
    (["real", "sim", "--out", "real/timeline.html", "--force"],
     "--out {t}/real/timeline.html: is an input of this command; write the output elsewhere"),
])
def test_bad_runs_are_one_error_line_exit_2_and_nothing_written(sims, tmp_path, args, message):
    _inputs(tmp_path, sims)
    args = [a if a.startswith("--") else str(tmp_path / a) for a in args]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = runner.invoke(app, ["report", *args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert r.stderr.splitlines() == ["error: " + message.format(t=tmp_path)]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_runs_of_one_trace_name_but_different_sizes_get_a_note(tmp_path):
    """A synthetic trace is named by its preset whatever its size: the note compares the runs'
    samples and group sizes too."""
    small, big = make_trace(LENGTHS, group_size=2), make_trace(LENGTHS * 4, group_size=4)
    for name, tr in (("small", small), ("big", big)):
        write_run(tmp_path / name, simulate(tr, make_policy("sync", [], tr), tiny_cluster()))
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(tmp_path / "small"), str(tmp_path / "big"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    # (their contents differ too: each run's fingerprint of its trace, tests/test_trace_digest.py)
    traces = f"test #{trace_digest(small)[:8]}: small; test #{trace_digest(big)[:8]}: big"
    assert r.stderr.splitlines() == [f"note: the runs differ in trace ({traces}), samples (8: small; "
                                     "32: big) and group size (2: small; 4: big): not a like-for-like "
                                     "comparison"]


def test_numeric_and_date_labels_are_one_bar_slot_each_and_a_link_keeps_its_name(sims, tmp_path):
    dirs = [Path(shutil.copytree(sims / "sync", tmp_path / name)) for name in ("1", "10", "2026-12-06")]
    link = tmp_path / "latest"
    link.symlink_to(dirs[0])
    assert run_labels([link, dirs[1]]) == ["latest", "10"]
    from sortedrl.plot.report import bars_figure

    fig = bars_figure([run.summary | {"label": run.label} for run in load_runs(dirs)], "Runs", "run")
    axes = [fig.layout[k] for k in fig.layout if k.startswith("xaxis")]
    assert len(axes) == 4 and {a.type for a in axes} == {"category"}
