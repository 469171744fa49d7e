"""A trace's fingerprint (``trace_digest``), and ``report``'s note on runs whose traces differ.

The fingerprint covers what a simulation reads (cap, group size, per-sample prompt and response
lengths, truncation, step, reward, turns), not prompt ids or the file format. Runs are
simulated here on tiny traces; the real run is ``tests/fixtures/run-sync`` with the fingerprint
its runner now records added (the runner's own is asserted in tests/test_realrun.py).

Run: pytest tests/test_trace_digest.py
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sortedrl.cli import app
from sortedrl.plot.report_runs import load_runs, unlike_note
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.timeline_file import read_timeline
from sortedrl.traces.digest import trace_digest
from sortedrl.traces.io import read_trace, write_trace
from sortedrl.traces.schema import Trace
from sortedrl.traces.synth import synthesize
from tests.cli_helpers import runner
from tests.conftest import make_trace, tiny_cluster, write_run

FIXTURE = Path(__file__).parent / "fixtures" / "run-sync"


def renamed(trace: Trace, prefix: str) -> Trace:
    """The same trace with other prompt ids."""
    cols = {"prompt_id": np.array([f"{prefix}{p}" for p in trace.prompt_id]), "sample": trace.sample,
            "prompt_len": trace.prompt_len, "response_len": trace.response_len,
            "truncated": trace.truncated}
    return Trace.from_columns(cols, trace.meta, name="renamed")


@given(st.lists(st.integers(1, 500), min_size=2, max_size=12), st.integers(0, 11), st.integers(1, 9))
def test_the_fingerprint_changes_with_any_length_and_not_with_prompt_ids(lengths, at, delta):
    tr = make_trace(lengths, max_len=1000)
    digest = trace_digest(tr)
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert trace_digest(renamed(tr, "other-")) == digest
    changed = list(lengths)
    changed[at % len(lengths)] += delta
    assert trace_digest(make_trace(changed, max_len=1000)) != digest
    prompts = [10] * len(lengths)
    prompts[at % len(lengths)] += delta
    assert trace_digest(make_trace(lengths, prompt_lens=prompts, max_len=1000)) != digest
    assert trace_digest(make_trace(lengths, max_len=1000 + delta)) != digest  # the cap


def test_the_fingerprint_is_the_same_in_every_file_format_and_differs_by_seed(tmp_path):
    tr = synthesize("logic-8k", prompts=4, group_size=4, steps=2, seed=1)
    digests = set()
    for suffix in (".jsonl", ".csv", ".parquet"):
        write_trace(tr, tmp_path / f"t{suffix}")
        digests.add(trace_digest(read_trace(tmp_path / f"t{suffix}")))
    assert digests == {trace_digest(tr)}
    other = synthesize("logic-8k", prompts=4, group_size=4, steps=2, seed=2)
    assert trace_digest(other) != trace_digest(tr)
    # the group size is part of it: the same lengths in groups of 2 and of 4
    lengths = [3, 5, 7, 9]
    assert trace_digest(make_trace(lengths, group_size=2)) != trace_digest(make_trace(lengths, group_size=4))


def sim_run(where: Path, tr: Trace, policy: str = "sync") -> Path:
    write_run(where, simulate(tr, make_policy(policy, [], tr), tiny_cluster()))
    return where


def test_simulate_records_its_traces_fingerprint(tmp_path):
    tr = make_trace([5, 9, 20, 3], group_size=2)
    write_trace(tr, tmp_path / "t.jsonl")
    r = runner.invoke(app, ["simulate", "--trace", str(tmp_path / "t.jsonl"), "--policy", "sync",
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert read_timeline(tmp_path / "run" / "timeline.npz").meta["trace_digest"] == trace_digest(tr)


def test_report_tells_two_traces_of_one_name_apart(tmp_path):
    one, two = make_trace([5, 9, 20, 3], group_size=2), make_trace([5, 9, 20, 4], group_size=2)
    a, b = sim_run(tmp_path / "a", one), sim_run(tmp_path / "b", two)
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(a), str(b), "--out", str(out)])
    assert r.exit_code == 0, r.output
    note = (f"the runs differ in trace (test #{trace_digest(one)[:8]}: a; test #{trace_digest(two)[:8]}: b): "
            "not a like-for-like comparison")
    assert r.stderr.splitlines() == [f"note: {note}"]
    assert f"<strong>Note: {note}.</strong>" in out.read_text()
    # one trace under two policies: no note
    c = sim_run(tmp_path / "c", one, "sortedrl")
    assert unlike_note(load_runs([a, c])) is None


def test_a_real_run_and_a_simulation_of_its_own_trace_share_one_trace(tmp_path):
    real = Path(shutil.copytree(FIXTURE, tmp_path / "real"))
    tr = read_trace(real / "trace.jsonl")
    lines = (real / "timeline.jsonl").read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    assert "trace_digest" not in meta  # (recorded before runs kept it: the names are compared)
    replay = sim_run(tmp_path / "replay", tr)
    rest = ("cluster (local-vllm: real; tiny: replay) and backend (vLLM: real; simulated: replay): "
            "not a like-for-like comparison")
    assert unlike_note(load_runs([real, replay])) == (
        f"the runs differ in trace (task:sort: real; trace.jsonl: replay), {rest}")
    meta["trace_digest"] = trace_digest(tr)  # as the runner records it now
    (real / "timeline.jsonl").write_text(json.dumps(meta) + "\n" + "".join(lines[1:]))
    assert unlike_note(load_runs([real, replay])) == f"the runs differ in {rest}"


def test_a_run_without_a_fingerprint_is_compared_by_name(tmp_path):
    a = sim_run(tmp_path / "a", make_trace([5, 9, 20, 3], group_size=2))
    b = sim_run(tmp_path / "b", make_trace([5, 9, 20, 4], group_size=2))
    runs = load_runs([a, b])
    assert unlike_note(runs).startswith("the runs differ in trace (test #")
    runs[1] = replace(runs[1], digest=None)  # (a run written before runs recorded one)
    assert unlike_note(runs) is None  # both named "test": compared by name, the contents unknown
