"""A real run's summary table prints its bound and efficiency as not available; the plot's steps
table names its tokens prompt + response.

A tester read ``lower_bound_s 0.0 s`` and ``efficiency 0.000 ratio`` under ``sortedrl run`` as
"0% efficient", where a real run has no cost model to bound it with (docs/metrics.md, "Real
runs"): the table now prints ``-`` for both, with a note, and summary.json keeps the 0. And the
plot's steps table headed ``tokens`` the ``train`` record's prompt + response tokens, where
``metrics.jsonl``'s ``tokens`` of the same update are the response tokens in the loss: the
column is now ``prompt+response tokens``.

Run: pytest tests/test_va46_real_summary.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.cli_common import summary_text
from sortedrl.plot.timeline_plot import write_timeline_html
from sortedrl.policies.registry import make_policy
from sortedrl.realrun.run import RunConfig, _run_meta, prompt_set
from sortedrl.run_summary import REAL_CLUSTER, has_no_bound
from sortedrl.timeline import Timeline

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "fixtures" / "run-sync"
DOCS = " ".join((ROOT / "docs" / "metrics.md").read_text(encoding="utf-8").split())


def row(text: str, key: str) -> str:
    """The table row of ``key`` (metric, value, unit), its spaces squeezed."""
    (line,) = [x for x in text.splitlines() if x.split()[:1] == [key] and len(x.split()) <= 3]
    return " ".join(line.split())


def test_a_real_runs_summary_prints_its_bound_and_efficiency_as_not_available(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    summary = json.loads((RUN / "summary.json").read_text())
    assert (summary["lower_bound_s"], summary["efficiency"]) == (0.0, 0.0)  # the JSON as it is
    text = summary_text(summary, "sync for real on /tmp/tiny")
    assert row(text, "lower_bound_s") == "lower_bound_s - s"
    assert row(text, "efficiency") == "efficiency - ratio"
    assert row(text, "bubble_ratio") == "bubble_ratio 0.740 ratio"  # the others as before
    assert row(text, "makespan_s") == "makespan_s 0.5 s"
    lines = text.splitlines()
    at = lines.index("knobs: rollout_batch=0, minibatches=1")
    assert lines[at + 1:] == [
        "lower_bound_s and efficiency: - for a real run, which has no cost model to bound it with",
        "  (summary.json holds 0); replay its trace.jsonl on a calibrated profile with `sortedrl simulate`",
        "  for one",
        "columns are defined in docs/metrics.md; --json prints every field"]
    assert "summary table `sortedrl run` prints shows both as `-` (not available)" in DOCS


def test_a_simulations_summary_keeps_its_numbers(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--trace", str(RUN / "trace.jsonl"), "--policy", "sync",
                                 "--cluster", str(ROOT / "tests" / "fixtures" / "cpu-profile.json"),
                                 "--out", str(tmp_path / "s")], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert not has_no_bound(s) and s["lower_bound_s"] > 0
    assert row(r.stdout, "lower_bound_s") == f"lower_bound_s {s['lower_bound_s']:,.1f} s"
    assert row(r.stdout, "efficiency") == f"efficiency {s['efficiency']:.3f} ratio"
    assert "no cost model" not in r.stdout


def test_a_real_summary_is_told_by_the_real_runners_cluster_and_its_zero_bound():
    meta = json.loads((RUN / "timeline.jsonl").read_text().splitlines()[0])
    summary = json.loads((RUN / "summary.json").read_text())
    assert (meta["backend"], meta["cluster"], summary["cluster"]) == ("vllm", REAL_CLUSTER, REAL_CLUSTER)
    cfg = RunConfig(model="m", policy="sync", out="o")  # what a run writes now, not only the fixture
    written = _run_meta(cfg, make_policy("sync", [], prompt_set(cfg, 8)), "sort", 32)
    assert (written["cluster"], written["lower_bound_s"]) == (REAL_CLUSTER, 0.0)
    assert has_no_bound(summary)
    assert not has_no_bound({**summary, "lower_bound_s": 0.1})
    assert not has_no_bound({**summary, "cluster": "cpu-profile"})


def test_the_steps_table_names_its_tokens_prompt_plus_response(tmp_path):
    tl = Timeline.read_jsonl(RUN / "timeline.jsonl")
    text = write_timeline_html(tl, tmp_path / "t.html").read_text()
    table = re.search(r'<table class="data" id="steps"><thead><tr>(.*?)</tr></thead><tbody><tr>(.*?)</tr>',
                      text, re.S)
    assert re.findall(r"<th>(.*?)</th>", table[1]) == [
        "update", "version", "start (s)", "end (s)", "duration (s)", "samples", "prompt+response tokens"]
    first = re.findall(r"<td[^>]*>(.*?)</td>", table[2])
    metrics = json.loads((RUN / "metrics.jsonl").read_text().splitlines()[0])
    # update 0: 372 prompt + response tokens in the train record, 188 response tokens in the loss
    assert (first[0], first[-1], metrics["update"], metrics["tokens"]) == ("0", "372", 0, 188)
    assert ("update 0 has `tokens` 188 here and 372 there" in DOCS
            and "`plot` steps table's `prompt+response tokens` column" in DOCS)
    plots = " ".join((ROOT / "docs" / "plots.md").read_text(encoding="utf-8").split())
    assert "`samples` and `prompt+response tokens` (the `train` record's `tokens`;" in plots
