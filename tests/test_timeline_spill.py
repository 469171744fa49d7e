"""A timeline spilled to disk as the run records (issue 12: a 10M-sample run within 4 GiB): the
same summary and the same bytes in every file as one held in memory; the compacted columns are
not in memory; a field is freed once no one holds it; `simulate` leaves no scratch behind."""

from __future__ import annotations

import contextlib
import gc
import tempfile
import weakref
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl import scratch as temp_scratch_mod
from sortedrl import timeline as timeline_mod
from sortedrl.cli import app
from sortedrl.compare import parse_specs, run_compare
from sortedrl.forecast import Draw, RunSource, forecast_one, run_forecast, step_times, time_parts
from sortedrl.metrics import summarize
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.timeline import SCHEMA, Timeline
from sortedrl.timeline_file import write_npz
from sortedrl.timeline_spill import Spill
from sortedrl.traces import write_trace
from sortedrl.traces.synth import synthesize
from sortedrl.tune.executors import RayCluster, run_trial
from tests.conftest import tiny_cluster
from tests.test_timeline_files import _same_columns

runner = CliRunner()


def _run(policy: str, preset: str, spill: Path | None):
    tr = synthesize(preset, prompts=12, group_size=4, steps=3, seed=3)
    cluster = tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)
    return simulate(tr, make_policy(policy, [], tr), cluster, seed=1, spill_dir=spill)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(timeline_mod, "COMPACT_ROWS", 16)
    monkeypatch.setattr(timeline_mod, "_CHECK_EVERY", 3)


@pytest.mark.parametrize(("policy", "preset"), [("sortedrl", "math-16k"), ("partial", "math-16k"),
                                                ("sync", "agentic-retool")])
def test_a_spilled_timeline_gives_the_same_summary_and_files(tmp_path, small_chunks, policy,
                                                            preset):
    spill = tmp_path / "spill"
    spill.mkdir()
    kept = _run(policy, preset, None)
    spilled = _run(policy, preset, spill)
    tl = spilled.timeline
    assert spilled.summary == kept.summary
    assert all(not chunks for chunks in tl._chunks.values())  # nothing compacted is in memory
    on_disk = {kind for kind in SCHEMA if tl._spill.records.get(kind)}
    assert {"span", "prefill", "admit"} <= on_disk
    if preset.startswith("agentic"):
        assert "tool" in on_disk
    for kind in SCHEMA:
        assert tl.count(kind) == kept.timeline.count(kind), kind
    _same_columns(tl, kept.timeline)
    assert summarize(tl) == kept.summary  # a second summary reads the files again
    write_npz(tl, tmp_path / "spilled.npz")
    write_npz(kept.timeline, tmp_path / "kept.npz")
    assert (tmp_path / "spilled.npz").read_bytes() == (tmp_path / "kept.npz").read_bytes()
    assert list(tl.jsonl_lines()) == list(kept.timeline.jsonl_lines())
    assert tl.progress() == kept.timeline.progress()


def test_each_field_is_a_file_holding_exactly_its_records(tmp_path, small_chunks):
    spill = tmp_path / "spill"
    spill.mkdir()
    tl = _run("sortedrl", "math-16k", spill).timeline
    spans = tl._spill.records["span"]
    assert (spill / "span.t").stat().st_size == 8 * spans  # float64
    assert (spill / "span.sample").stat().st_size == 4 * spans  # int32
    assert (spill / "span.end").stat().st_size == spans  # one byte a label
    admits = tl.columns("admit")["samples"]
    assert (spill / "admit.samples.offsets").stat().st_size == 8 * len(admits)
    assert (spill / "admit.samples.values").stat().st_size == 4 * admits.values.size
    assert admits.offsets[0] == 0 and np.all(np.diff(admits.offsets) >= 0)


def test_a_field_is_held_only_while_someone_uses_it(tmp_path, small_chunks):
    spill = tmp_path / "spill"
    spill.mkdir()
    tl = _run("partial", "math-16k", spill).timeline
    cols = tl.columns("span")
    t = cols["t"]
    assert cols["t"] is t and tl.columns("span")["t"] is t  # held: shared, not read again
    ref = weakref.ref(t)
    first = t.copy()
    del t
    gc.collect()
    assert ref() is None  # let go once no name holds it
    assert np.array_equal(tl.columns("span")["t"], first)  # asked again: read again


def test_a_spill_file_changed_under_the_run_is_an_error(tmp_path, small_chunks):
    spill = tmp_path / "spill"
    spill.mkdir()
    tl = _run("partial", "math-16k", spill).timeline
    with open(spill / "span.t", "r+b") as f:
        f.truncate(8)
    with pytest.raises(OSError, match=r"8 bytes, expected \d+ \(the scratch directory") as e:
        tl.columns("span")["t"]
    assert e.value.filename == str(spill / "span.t")


def test_a_full_disk_names_the_scratch_file(tmp_path):
    spill = Spill(tmp_path)
    (tmp_path / "sync.t").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(OSError, match="No space left on device \\(the run's timeline") as e:
        spill.append("sync", {"t": np.zeros(1), "t_end": np.zeros(1), "version": np.zeros(1, "i4")})
    assert e.value.filename == str(tmp_path / "sync.t")


def test_set_columns_replaces_spilled_records(tmp_path, small_chunks):
    spill = tmp_path / "spill"
    spill.mkdir()
    tl = _run("partial", "math-16k", spill).timeline
    assert list(spill.glob("span.*"))
    kept = _run("sync", "math-16k", None).timeline.columns("span")
    tl.set_columns("span", kept)
    assert not list(spill.glob("span.*")) and "span" not in tl._spill.records
    assert tl.count("span") == len(kept["t"]) and tl.columns("span") is kept


def test_spill_appends_ragged_offsets_across_chunks(tmp_path):
    from sortedrl.timeline_columns import Ragged
    spill = Spill(tmp_path)
    for lists in ([[1, 2], [3]], [[], [4, 5, 6]]):
        spill.append("admit", {"t": np.zeros(len(lists)), "engine": np.zeros(len(lists), "i4"),
                               "samples": Ragged.from_lists(lists)})
    got = spill.load("admit", "samples", "samples", [], spill.counts("admit"))
    assert got.tolist() == [[1, 2], [3], [], [4, 5, 6]]
    assert spill.records == {"admit": 4}


def test_simulate_leaves_no_scratch_directory(tmp_path, small_chunks):
    out = tmp_path / "runs" / "a"
    r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "12",
                            "--group-size", "4", "--steps", "2", "--policy", "sortedrl",
                            "--cluster", "h100-llama3.1-8b-1gpu-16seq", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".sortedrl-run", "a", "runs",
                                                            "summary.json", "timeline.npz"]


def test_ctrl_c_in_a_spilled_run_leaves_nothing(tmp_path, small_chunks, monkeypatch):
    import sortedrl.sim.run as sim_run

    def interrupted(tl):
        assert any(tl._spill.root.iterdir())  # it had spilled
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_run, "summarize", interrupted)
    r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "12",
                            "--group-size", "4", "--steps", "2", "--policy", "sortedrl",
                            "--cluster", "h100-llama3.1-8b-1gpu-16seq",
                            "--out", str(tmp_path / "a")])
    assert r.exit_code == 130 and "error: interrupted (Ctrl-C)" in r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_compare_keeps_each_policys_timeline_in_its_own_scratch(tmp_path, small_chunks, workers):
    tr = synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)
    specs = parse_specs(["sync", "part=sortedrl"], ["part.mode=partial"])
    cluster = tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)
    spill = tmp_path / "spill"
    spill.mkdir()
    spilled = run_compare(tr, specs, cluster, seed=1, workers=workers, spill_dir=spill)
    kept = run_compare(tr, specs, cluster, seed=1)
    assert sorted(p.name for p in spill.iterdir()) == ["part", "sync"]
    for (spec, a), (_, b) in zip(spilled, kept, strict=True):
        assert a.summary == b.summary
        assert a.timeline._spill.root == spill / spec.label and a.timeline._spill.records["span"]
        write_npz(a.timeline, tmp_path / "a.npz")
        write_npz(b.timeline, tmp_path / "b.npz")
        assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def _spans(tl: Timeline, start: int, n: int) -> None:
    tl.spans.extend((float(k), k + 1.0, 0, k, 0, 0, 5, "finish" if k % 2 else "abort")
                    for k in range(start, start + n))
    tl.compact()


def test_columns_taken_before_more_records_stay_a_snapshot(tmp_path):
    tl = Timeline({}, tmp_path)
    _spans(tl, 0, 10)
    before = tl.columns("span")
    assert len(before["sample"]) == 10
    _spans(tl, 10, 10)
    assert len(before["t"]) == 10 and before["end"].tolist()[-1] == "finish"  # as in memory
    assert tl.columns("span")["sample"].tolist() == list(range(20))


def test_a_kind_a_reader_set_stays_in_memory_as_records_arrive(tmp_path):
    tl = Timeline({}, tmp_path)
    _spans(tl, 0, 20)
    tl.set_columns("span", Timeline.columns(_memory(20), "span"))
    _spans(tl, 20, 20)
    assert tl.count("span") == 40 == len(tl.columns("span")["t"])
    assert tl.columns("span")["sample"].tolist() == list(range(40))
    assert not list(tmp_path.glob("span.*"))


def _memory(n: int) -> Timeline:
    tl = Timeline()
    _spans(tl, 0, n)
    return tl


def test_asking_whether_a_field_exists_reads_nothing(tmp_path):
    tl = Timeline({}, tmp_path)
    _spans(tl, 0, 10)
    cols = tl.columns("span")
    (tmp_path / "span.t_end").unlink()  # a read would fail
    assert "t_end" in cols and "nope" not in cols


def test_forecast_and_tune_keep_each_timeline_in_tmpdir(tmp_path, small_chunks, monkeypatch):
    """A whole-run forecast or a long tune trial spills its timeline too (to $TMPDIR: neither
    has an output directory to put it beside, and a Ray worker has its own disk): the same
    results as in memory, and nothing left behind."""
    tr = synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)
    cluster = tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)
    spec = parse_specs(["sortedrl"], [])[0]
    kept = simulate(tr, make_policy("sortedrl", [], tr), cluster, seed=0)
    draw = Draw(cluster, float(kept.summary["makespan_s"]), step_times(kept.timeline),
                time_parts(kept), kept.summary)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    roots = []
    append = Spill.append
    monkeypatch.setattr(Spill, "append", lambda self, kind, cols: (roots.append(self.root),
                                                                   append(self, kind, cols))[1])
    assert run_forecast(RunSource(trace=tr), [spec], [cluster]) == [forecast_one(spec, [draw], 0.0)]
    assert roots and {p.parent for p in roots} == {scratch}
    assert roots[0].name.startswith("sortedrl-forecast-") and not any(scratch.iterdir())
    roots.clear()
    gpu_hours = round(cluster.gpus * kept.summary["makespan_s"] / 3600.0, 6)  # as every float
    assert run_trial(tr, cluster, 0, ("sortedrl", [])) == {**kept.summary, "gpus": cluster.gpus,
                                                           "gpu_hours": gpu_hours}
    assert roots and roots[0].name.startswith("sortedrl-tune-") and not any(scratch.iterdir())


def test_a_ray_started_here_keeps_its_trials_scratch_in_the_drivers(tmp_path, monkeypatch, small_chunks):
    """ray.shutdown() kills a worker mid-trial (Ctrl-C) before it can remove its scratch, which
    was left empty in $TMPDIR; on a Ray started here (--ray local) a trial's scratch lies in one
    of the driver's, which close() removes with whatever a killed worker left in it."""
    tr = synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)
    cluster = tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)
    root = tmp_path / "root"
    root.mkdir()
    roots = []
    append = Spill.append
    monkeypatch.setattr(Spill, "append", lambda self, kind, cols: (roots.append(self.root),
                                                                   append(self, kind, cols))[1])
    run_trial(tr, cluster, 0, ("sortedrl", []), scratch_root=root)
    assert roots and {p.parent for p in roots} == {root} and not any(root.iterdir())
    pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
    executor = RayCluster(tr, cluster, 0, "local")
    try:
        made = executor.scratch_root
        assert made.parent == Path(tempfile.gettempdir()) and made.name.startswith("sortedrl-tune-")
        (made / "sortedrl-tune-killed").mkdir()  # what a worker killed mid-trial leaves
        [summary] = executor.map([("sync", [])], lambda n: None)
        assert summary["samples_trained"] == len(tr)
    finally:
        executor.close()
    assert not made.exists()
    # a failure between starting Ray and the first trial leaves neither the scratch nor the Ray
    import ray

    roots.clear()
    made_here = []
    make = temp_scratch_mod.temp_scratch

    @contextlib.contextmanager
    def recorded(*args):
        with make(*args) as path:
            made_here.append(path)
            yield path

    def put(obj):
        raise KeyboardInterrupt

    monkeypatch.setattr("sortedrl.tune.executors.temp_scratch", recorded)
    monkeypatch.setattr(ray, "put", put)
    was_up = ray.is_initialized()  # (a Ray an earlier test left up is not this executor's to stop)
    with pytest.raises(KeyboardInterrupt):
        RayCluster(tr, cluster, 0, "local")
    # the scratches made: the trials' and, for a Ray started here, its session files'
    assert ray.is_initialized() == was_up
    assert [p.name.split("-")[1] for p in made_here] == (["tune"] if was_up else ["ray", "tune"])
    assert not any(p.exists() for p in made_here)


def test_an_unwritable_tmpdir_is_one_error_line(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    write_trace(synthesize("math-16k", prompts=4, group_size=2, steps=1, seed=0), trace)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    r = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "sync"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert r.stderr == (f"error: {tmp_path / 'missing'}: cannot make forecast's scratch directory "
                        "(No such file or directory; set TMPDIR to a writable directory)\n")
