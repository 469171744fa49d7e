"""Timeline files (issue 12 item 4): the columnar ``timeline.npz`` and the JSONL timeline give the
same summary, plot, Perfetto trace, report and validation; compaction changes nothing a reader
sees; a malformed columnar file is one error line; Ctrl-C leaves nothing half-written."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl import timeline as timeline_mod
from sortedrl.cli import app
from sortedrl.errors import SortedRLError
from sortedrl.metrics import summarize
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.timeline import SCHEMA, Labels, Ragged, Timeline
from sortedrl.timeline_file import read_jsonl_fast, read_npz, read_timeline, write_npz
from sortedrl.traces.synth import synthesize
from tests.conftest import tiny_cluster

runner = CliRunner()
FIX = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def _run(policy: str = "partial"):
    tr = synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)
    cluster = tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)
    return simulate(tr, make_policy(policy, [], tr), cluster, seed=1)


def _same_columns(a: Timeline, b: Timeline) -> None:
    for kind in SCHEMA:
        ca, cb = a.columns(kind), b.columns(kind)
        for name in ca:
            x, y = ca[name], cb[name]
            if isinstance(x, Ragged):
                assert x.tolist() == y.tolist(), (kind, name)
            elif isinstance(x, Labels):
                assert x.tolist() == y.tolist(), (kind, name)
            else:
                assert np.array_equal(x, y) and x.dtype == y.dtype, (kind, name)


@pytest.mark.parametrize("policy", ["partial", "sortedrl"])
def test_both_formats_round_trip_to_the_same_summary(tmp_path, policy):
    r = _run(policy)
    write_npz(r.timeline, tmp_path / "t.npz")
    r.timeline.write_jsonl(tmp_path / "t.jsonl")
    from_npz, from_jsonl = read_timeline(tmp_path / "t.npz"), read_timeline(tmp_path / "t.jsonl")
    assert read_jsonl_fast(tmp_path / "t.jsonl") is not None  # pyarrow read it
    assert summarize(from_npz) == summarize(from_jsonl) == r.summary
    _same_columns(from_jsonl, Timeline.read_jsonl(tmp_path / "t.jsonl"))  # the reference reader
    assert from_npz.meta == from_jsonl.meta == r.timeline.meta
    _same_columns(from_npz, r.timeline)
    # JSONL records are ordered by start time, so compare as sets of records
    assert sorted(map(str, from_jsonl.rows("span"))) == sorted(map(str, r.timeline.rows("span")))
    # the same run gives the same bytes
    write_npz(r.timeline, tmp_path / "again.npz")
    assert (tmp_path / "again.npz").read_bytes() == (tmp_path / "t.npz").read_bytes()


def test_a_jsonl_timeline_written_before_the_columnar_one_gives_its_summary():
    run = FIX / "timeline-partial"  # written by the JSONL-only code (see fixtures/README.md)
    tl = read_timeline(run / "timeline.jsonl")
    assert summarize(tl) == json.loads((run / "summary.json").read_text())
    assert tl.count("abort") == 2 and np.count_nonzero(tl.columns("span")["end"] == "abort") == 32


def test_compaction_changes_nothing_a_reader_sees(monkeypatch):
    plain = _run("partial")
    monkeypatch.setattr(timeline_mod, "COMPACT_ROWS", 16)
    monkeypatch.setattr(timeline_mod, "_CHECK_EVERY", 3)
    compacted = _run("partial")
    tl = compacted.timeline
    assert len(tl._chunks["span"]) >= 1 and len(tl.spans) < 16  # it did compact, in place
    assert compacted.summary == plain.summary
    _same_columns(tl, plain.timeline)
    assert list(tl.jsonl_lines()) == list(plain.timeline.jsonl_lines())
    assert tl.progress() == plain.timeline.progress()
    assert tl.progress()[0] == np.count_nonzero(tl.columns("span")["end"] == "finish")


def _simulate_cli(out: Path, *extra: str):
    r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "12",
                            "--group-size", "4", "--steps", "2", "--policy", "partial",
                            "--cluster", "h100-llama3.1-8b-1gpu-16seq", "--out", str(out), *extra])
    assert r.exit_code == 0, r.output
    return out


def test_plot_report_and_perfetto_read_both_formats(tmp_path):
    npz = _simulate_cli(tmp_path / "cmp" / "a")
    jsonl = _simulate_cli(tmp_path / "cmp" / "b", "--timeline", "jsonl")
    assert sorted(p.name for p in npz.iterdir()) == [".sortedrl-run", "summary.json", "timeline.npz"]
    assert sorted(p.name for p in jsonl.iterdir()) == [".sortedrl-run", "summary.json",
                                                       "timeline.jsonl"]
    pages = {}
    for run in (npz, jsonl):
        r = runner.invoke(app, ["plot", str(run), "--perfetto", str(run.parent / f"{run.name}.json")])
        assert r.exit_code == 0, r.output
        pages[run.name] = ((run / "timeline.html").read_text(),
                           (run.parent / f"{run.name}.json").read_text())
    assert pages["a"] == pages["b"]
    assert "engine 0: rollout" in pages["a"][0] and json.loads(pages["a"][1])["traceEvents"]
    summaries = [{"label": run.name, **json.loads((run / "summary.json").read_text())}
                 for run in (npz, jsonl)]
    (tmp_path / "cmp" / "compare.json").write_text(json.dumps(summaries))
    r = runner.invoke(app, ["report", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    assert "finished samples" in (tmp_path / "cmp" / "report.html").read_text()


def test_readers_order_the_real_runners_jsonl_by_start_time(tmp_path, monkeypatch):
    """The real runner appends each record when it is complete (crash-safe: flushed, and inside
    a checkpoint's log offsets), so a span, written when it ends, follows records of things that
    started while it ran: its file is not ordered by t. Both JSONL readers order every kind by t
    (equal times keep their order), so readers see what a simulation's file gives them."""
    from sortedrl.realrun.run_logs import Appender

    meta = json.loads((FIX / "run-sync" / "timeline.jsonl").read_text().splitlines()[0])
    path = tmp_path / "timeline.jsonl"
    path.write_text(json.dumps(meta) + "\n")
    tl = Timeline({k: v for k, v in meta.items() if k != "kind"})
    tl.sink = sink = Appender(path)
    tl.admit(0.001, 0, [0, 1, 2])  # as a colocated run records them, in this order:
    tl.add("prefill", 0.003, 0.010, 0, [0, 1, 2], 18, 0)
    tl.add("span", 0.010, 0.018, 0, 1, 0, 0, 2, "finish")  # started at 0.010, written at 0.018
    tl.admit(0.018, 0, [4])
    tl.add("prefill", 0.018, 0.024, 0, [4], 6, 0)
    tl.add("span", 0.024, 0.030, 0, 4, 0, 0, 1, "finish")
    tl.add("span", 0.010, 0.031, 0, 0, 0, 0, 5, "abort")  # started before the records above
    tl.abort(0.031, [0], False)
    tl.add("span", 0.010, 0.035, 0, 2, 0, 0, 6, "finish")
    tl.train(0.036, 0.050, 0, [1, 4, 2], 40)
    sink.close()
    starts = [json.loads(x)["t"] for x in path.read_text().splitlines()[1:]]
    assert starts != sorted(starts)  # the file, as appended
    for read in (read_timeline(path), Timeline.read_jsonl(path)):
        assert read.rows("span") == [(0.010, 0.018, 0, 1, 0, 0, 2, "finish"),
                                     (0.010, 0.031, 0, 0, 0, 0, 5, "abort"),
                                     (0.010, 0.035, 0, 2, 0, 0, 6, "finish"),
                                     (0.024, 0.030, 0, 4, 0, 0, 1, "finish")]
        assert read.rows("admit") == tl.rows("admit") and read.rows("prefill") == tl.rows("prefill")
        assert summarize(read) == summarize(tl)
        assert read.records() == tl.records()  # every record, by start time
    assert read_jsonl_fast(path) is not None  # (the fast reader, not its fallback)
    assert Timeline.read_jsonl(path).spans == read.rows("span")  # its lists, ordered in place
    monkeypatch.setattr(timeline_mod, "COMPACT_ROWS", 2)  # the reference reader's columns too
    assert Timeline.read_jsonl(path).records() == tl.records()
    assert Timeline.read_jsonl(path).rows("span") == read.rows("span")
    ragged = Ragged.from_lists([[1, 2], [], [3], [4, 5, 6]])
    assert ragged.take(np.array([3, 0, 2, 1])).tolist() == [[4, 5, 6], [1, 2], [3], []]


def test_validate_reads_a_columnar_real_timeline(tmp_path):
    runs = {}
    for fmt in ("jsonl", "npz"):
        run = tmp_path / fmt
        run.mkdir()
        for f in (FIX / "run-sync").iterdir():
            if f.name != "timeline.jsonl":
                (run / f.name).write_bytes(f.read_bytes())
        tl = Timeline.read_jsonl(FIX / "run-sync" / "timeline.jsonl")
        write_npz(tl, run / "timeline.npz") if fmt == "npz" else tl.write_jsonl(run / "timeline.jsonl")
        r = runner.invoke(app, ["validate", str(run), "--profile", str(FIX / "cpu-profile.json"),
                                "--json"])
        assert r.exit_code == 0, r.output
        runs[fmt] = {k: v for k, v in json.loads(r.stdout).items() if k != "run"}
    assert runs["npz"] == runs["jsonl"] and runs["npz"]["updates_real"] == 4


def _npz(path: Path, arrays: dict) -> Path:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _good(tmp_path: Path) -> dict:
    tl = _run("partial").timeline
    write_npz(tl, tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("case, message", [
    ("garbage", r"timeline\.npz: not a readable timeline file"),
    ("empty", r"timeline\.npz: not a readable timeline file"),
    ("no format", r"timeline\.npz: not a sortedrl timeline \(array 'format' must be 1\)"),
    ("bad meta", r"timeline\.npz: array 'meta' is not UTF-8 JSON"),
    ("missing field", r"timeline\.npz: has 'span\.t' but no 'span\.tokens'"),
    ("short column", r"timeline\.npz: array 'span\.t_end' has \d+ records, expected \d+"),
    ("float engine", r"timeline\.npz: array 'span\.engine' is float64 of shape \(\d+,\); "
                     r"expected a 1-D array of integers"),
    ("bad offsets", r"timeline\.npz: array 'train\.samples\.offsets' does not index "
                    r"'train\.samples\.values'"),
    ("unknown array", r"timeline\.npz: unknown array 'span\.colour'"),
    ("pickled", r"timeline\.npz: not a readable timeline file"),
    ("wide tokens", r"timeline\.npz: array 'span\.tokens' has a value past int32 "
                    r"\(-2147483648\.\.2147483647\)"),
    ("wide samples", r"timeline\.npz: array 'train\.samples\.values' has a value past int32"),
])
def test_a_bad_columnar_file_is_one_error_line(tmp_path, case, message):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "timeline.npz"
    arrays = _good(tmp_path)
    if case == "garbage":
        path.write_bytes(b"PK\x03\x04 not really a zip")
    elif case == "empty":
        path.write_bytes(b"")
    else:
        if case == "no format":
            del arrays["format"]
        elif case == "bad meta":
            arrays["meta"] = np.frombuffer(b"{oops", dtype=np.uint8)
        elif case == "missing field":
            del arrays["span.tokens"]
        elif case == "short column":
            arrays["span.t_end"] = arrays["span.t_end"][:-1]
        elif case == "float engine":
            arrays["span.engine"] = arrays["span.engine"].astype(float)
        elif case == "bad offsets":
            arrays["train.samples.offsets"] = arrays["train.samples.offsets"] + 1
        elif case == "unknown array":
            arrays["span.colour"] = np.zeros(3)
        elif case == "pickled":
            arrays["meta"] = np.array([{"a": 1}], dtype=object)
        elif case == "wide tokens":  # would wrap to 7 as int32
            arrays["span.tokens"] = arrays["span.tokens"].astype(np.int64) + 2**32
        elif case == "wide samples":
            arrays["train.samples.values"] = arrays["train.samples.values"].astype(np.int64) + 2**32
        _npz(path, arrays)
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), r.stderr
    assert re.search(message, lines[0]), lines[0]
    assert sorted(tmp_path.rglob("*")) == before
    with pytest.raises(Exception) as e:
        read_npz(path)
    assert str(e.value) == lines[0].removeprefix("error: ")


@pytest.mark.parametrize("field, value, message", [
    ("tokens", 2**32 + 7, "a record has a field of the wrong type (span: Python integer "
                          "4294967303 out of bounds for int32)"),
    ("sample", -3, "a 'span' record's field 'sample' has a negative value"),
    ("engine", "two", "a record has a field of the wrong type (span: invalid literal"),
])
def test_a_bad_jsonl_timeline_is_one_error_line(tmp_path, field, value, message):
    """Both JSONL readers (pyarrow's and the reference) refuse what a columnar file refuses:
    a value that would wrap in its column, a negative index or count, a wrong type."""
    run = tmp_path / "run"
    run.mkdir()
    lines = _run("sync").timeline.jsonl_lines()
    records = [json.loads(line) for line in lines]
    span = next(i for i, r in enumerate(records) if r["kind"] == "span")
    records[span][field] = value
    path = run / "timeline.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert r.stderr.startswith(f"error: {path}: ") and message in r.stderr, r.stderr
    assert sorted(p.name for p in run.iterdir()) == ["timeline.jsonl"]


@pytest.mark.parametrize("fmt", ["jsonl", "npz"])
@pytest.mark.parametrize("field, value, message", [
    ("engines", "x", "field 'engines': expected an integer >= 1 and at most 1,048,576, got 'x'"),
    ("samples_total", 2**40, "field 'samples_total': expected an integer >= 0 and below 2**31, "
                             "got 1099511627776"),
    ("lower_bound_s", float("inf"), "field 'lower_bound_s': expected a number >= 0, got inf"),
    ("params", [1], "field 'params': expected an object, got [1]"),
    ("samples_total", 3, "record names sample"),
    ("tp", None, "the timeline's meta record has no 'tp' (every timeline that `sortedrl "
                 "simulate` or `sortedrl run` writes has them)"),
])
def test_a_bad_meta_record_is_one_error_line(tmp_path, fmt, field, value, message):
    """A hand-edited or corrupted meta record (found by a fuzz: these ended in tracebacks, or a
    MemoryError for a samples_total of 2**40, in plot and validate)."""
    run = tmp_path / "run"
    run.mkdir()
    tl = _run("sync").timeline
    if value is None:
        del tl.meta[field]
    else:
        tl.meta[field] = value
    path = run / f"timeline.{fmt}"
    if fmt == "npz":
        write_npz(tl, path)
    else:
        path.write_text("".join(tl.jsonl_lines()))
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.output, r.output
    assert r.stderr.startswith(f"error: {path}: ") and message in r.stderr, r.stderr
    assert sorted(p.name for p in run.iterdir()) == [path.name]


def test_a_huge_samples_total_sizes_nothing(tmp_path):
    """The meta's ``samples_total`` (at most 2**31 - 1) is reported, not allocated: per-sample
    arrays are sized by the samples the records name, so every other figure is the same (a
    hand-edited 2**31 - 1 had `plot` killed for memory)."""
    tl = _run("sortedrl").timeline
    before = summarize(tl)
    tl.meta["samples_total"] = 2**31 - 1
    after = summarize(tl)
    assert after == {**before, "samples_total": 2**31 - 1}
    run = tmp_path / "run"
    run.mkdir()
    (run / "timeline.jsonl").write_text("".join(tl.jsonl_lines()))
    r = runner.invoke(app, ["plot", str(run)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in run.iterdir()) == ["timeline.html", "timeline.jsonl"]


def test_ctrl_c_exits_130_and_leaves_no_run_directory(tmp_path):
    """A long simulate on a terminal shows samples generated and simulated time; Ctrl-C then
    stops it with one line and exit 130, leaving no run directory and no temp files."""
    out = tmp_path / "run"
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "TERM": "xterm",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sortedrl.cli", "simulate", "--synthetic", "math-16k",
         "--prompts", "60000", "--group-size", "16", "--steps", "4", "--policy", "sync",
         "--out", str(out)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=tmp_path,
        # as a terminal's foreground job: a suite started in the background (`cmd &` without job
        # control) has SIGINT ignored, which every child inherits, and Ctrl-C would do nothing
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    shown = b""
    try:
        # Interrupt mid-simulation: once the bar has shown two different simulated times (a
        # last, exact count is also shown after the simulation ends, so one is not enough).
        deadline = time.monotonic() + 300
        while len(set(re.findall(rb"([\d,]+) s simulated", shown))) < 2 and proc.poll() is None \
                and time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                shown += os.read(master, 65536)
        assert b"samples generated" in shown and len(set(re.findall(rb"([\d,]+) s simulated", shown))) >= 2, \
            shown[-2000:]
        proc.send_signal(signal.SIGINT)
        # Keep reading the terminal until the child exits, as a terminal does: a pty that nobody
        # reads fills up (a few KB of progress redraws on a loaded host) and blocks the child's writes.
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    shown += os.read(master, 65536)
                except OSError:  # the child closed the terminal: it is exiting
                    break
        stdout, _ = proc.communicate(timeout=5)
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 130, shown[-2000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]
    assert lines[-1] == "error: interrupted (Ctrl-C)" and "Traceback" not in text
    assert sum("error:" in ln for ln in lines) == 1 and stdout == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run directory, no temp files


def test_columnar_files_open_without_pickle(tmp_path):
    tl = _run("partial").timeline
    write_npz(tl, tmp_path / "t.npz")
    with zipfile.ZipFile(tmp_path / "t.npz") as z:
        names = set(z.namelist())
    assert {"format.npy", "meta.npy", "span.t.npy", "span.end.npy", "span.end.labels.npy",
            "train.samples.offsets.npy", "train.samples.values.npy"} <= names
    with np.load(tmp_path / "t.npz", allow_pickle=False) as z:
        assert json.loads(z["meta"].tobytes()) == tl.meta
        assert z["span.t"].size == tl.count("span")


def test_decisions_are_compacted_by_samples_held(monkeypatch):
    # admit and train records are few but each holds a list of samples: once those lists hold
    # COMPACT_ROWS samples, an update compacts them (a long run would keep every sample's int
    # alive to its end otherwise); the rows a reader sees do not change
    plain = _run("sync")
    monkeypatch.setattr(timeline_mod, "COMPACT_ROWS", 40)
    after: list[tuple[int, int, int]] = []  # after each update: samples pending, chunks made
    train = Timeline.train

    def watched(self, *args):
        train(self, *args)
        after.append((sum(len(row[2]) for row in self.admits) + sum(len(row[3]) for row in self.trains),
                      len(self._chunks["admit"]), len(self._chunks["train"])))

    monkeypatch.setattr(Timeline, "train", watched)
    compacted = _run("sync")
    tl = compacted.timeline
    assert len(after) == 3 and max(held for held, _, _ in after) < 40
    assert after[-1][1:] == (3, 3)  # each step admits and trains 48 samples: 3 chunks each
    assert compacted.summary == plain.summary
    _same_columns(tl, plain.timeline)
    assert list(tl.jsonl_lines()) == list(plain.timeline.jsonl_lines())


def test_columns_after_a_merge_are_never_a_stale_cache():
    # columns() cached a lone chunk under (1 chunk, 0 pending rows); after more chunks it
    # merged them into one, with the same key: the cache must not answer with the old chunk
    tl = Timeline({})
    tl.spans.append((0.0, 1.0, 0, 0, 0, 0, 5, "finish"))
    tl.compact()
    assert tl.columns("span")["sample"].tolist() == [0]
    tl.spans.append((1.0, 2.0, 0, 1, 0, 0, 6, "finish"))
    tl.compact()
    tl.spans.append((2.0, 3.0, 0, 2, 0, 0, 7, "abort"))
    assert tl.columns("span")["sample"].tolist() == [0, 1, 2]
    assert tl.columns("span")["end"].strings().tolist() == ["finish", "finish", "abort"]


@pytest.mark.parametrize("fmt", ["jsonl", "npz"])
def test_a_seed_past_int32_reads_back(tmp_path, fmt):
    # a seed sizes nothing: `simulate --seed 5000000000` writes a timeline its readers accept
    tl = _run("sync").timeline
    tl.meta["seed"] = 5_000_000_000
    path = tmp_path / f"timeline.{fmt}"
    if fmt == "npz":
        write_npz(tl, path)
    else:
        path.write_text("".join(tl.jsonl_lines()))
    assert read_timeline(path).meta["seed"] == 5_000_000_000


def _run_with(tmp_path, meta_change=None, span_engine=None):
    """The fixture's real run, its timeline's meta (or one span's engine) changed."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("trace.jsonl", "summary.json"):
        (run / name).write_bytes((FIX / "run-sync" / name).read_bytes())
    lines = (FIX / "run-sync" / "timeline.jsonl").read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    if meta_change is not None:
        meta_change(meta)
    rows = [json.loads(x) for x in lines[1:]]
    if span_engine is not None:
        next(r for r in rows if r["kind"] == "span")["engine"] = span_engine
    (run / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [meta, *rows]))
    return run


def test_validate_names_a_meta_field_its_run_lacks(tmp_path):
    run = _run_with(tmp_path, lambda meta: meta.pop("engines"))
    r = runner.invoke(app, ["validate", str(run), "--profile", str(FIX / "cpu-profile.json")])
    assert (r.exit_code, r.stderr.strip().splitlines()) == (2, [
        f"error: {run / 'timeline.jsonl'}: the timeline's meta record has no 'engines' (every "
        "timeline that `sortedrl simulate` or `sortedrl run` writes has them)"]), r.output



@pytest.mark.parametrize("change, message", [
    (lambda m: m["run"].update(policy="this:Nope"),
     "field 'run.policy' (pass --trust-policy to import the run's own policy): policy 'this:Nope' "
     "is not built in, and importing it would run code that a file names"),
    (lambda m: m["run"].update(policy="nosuch"),
     "field 'run.policy' (pass --trust-policy to import the run's own policy): unknown policy "
     "'nosuch' (known: sync, sortedrl, partial, tail_batch, async, one_step_off, oracle_sorted)"),
    (lambda m: m["run"].pop("max_num_seqs"), "field 'run.max_num_seqs' is missing"),
    (lambda m: m["run"].update(seed="x"), "field 'run.seed': expected an integer, got 'x'"),
    (lambda m: m["run"].update(sets=5), "field 'run.sets': expected a list, got 5"),
    (lambda m: m["run"].update(sets=[5]), "field 'run.sets': expected a list of key=value strings"),
    (lambda m: m["run"].update(max_num_seqs=1e300),
     "field 'run.max_num_seqs': expected an integer >= 1, got 1e+300"),
    (lambda m: m["run"].update(max_num_seqs=100_000),  # it blamed the profile (named "cpu-profile")
     f"the run's engines on {FIX / 'cpu-profile.json'}: field 'max_num_seqs': at most 65,536, got 100,000"),
    (lambda m: m["run"].update(sets=["zzz=1"]),  # it blamed --set
     "field 'run.sets': zzz: unknown parameter for policy sync (known: rollout_batch, minibatches, "
     "filter_groups)"),
    (lambda m: m.update(engines=2147483647),  # plot drew a lane per engine: a hang
     "line 1: meta record's field 'engines': expected an integer >= 1 and at most 1,048,576, "
     "got 2147483647"),
])
def test_validate_checks_the_runs_configuration_before_it_replays(tmp_path, change, message):
    """A run directory may come from someone else: its policy is imported only when asked
    (`this` would have printed the Zen of Python), and each field is one error line."""
    run = _run_with(tmp_path, change)
    r = runner.invoke(app, ["validate", str(run), "--profile", str(FIX / "cpu-profile.json")])
    assert r.exit_code == 2 and r.stdout == "" and "Zen of Python" not in r.output, r.output
    assert r.stderr.strip().splitlines() == [f"error: {run / 'timeline.jsonl'}: {message}"]
    assert not (run / "validate.json").exists()


def test_validate_refuses_a_span_on_an_engine_the_run_did_not_have(tmp_path):
    run = _run_with(tmp_path, span_engine=2147483646)  # metrics looped to it: a hang
    r = runner.invoke(app, ["validate", str(run), "--profile", str(FIX / "cpu-profile.json")])
    assert (r.exit_code, r.stderr.strip().splitlines()) == (2, [
        f"error: {run / 'timeline.jsonl'}: a span names an engine outside 0..0"]), r.output


def test_validate_imports_the_runs_own_policy_when_trusted(tmp_path, monkeypatch):
    (tmp_path / "my_rl_policies.py").write_text(
        "from sortedrl.policies.sync import SyncPolicy\n\nclass Mine(SyncPolicy):\n"
        "    name = 'mine'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = _run_with(tmp_path, lambda m: m["run"].update(policy="my_rl_policies:Mine"))
    args = ["validate", str(run), "--profile", str(FIX / "cpu-profile.json"), "--json"]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--trust-policy" in refused.stderr
    r = runner.invoke(app, [*args, "--trust-policy"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["policy"] == "my_rl_policies:Mine"


@pytest.mark.parametrize("fmt", ["jsonl", "npz"])
@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_time_that_is_not_a_finite_number_is_one_error(tmp_path, fmt, value):
    """A hand-edited timeline with a NaN or infinite time: one error line, not a page whose every
    figure is NaN (found by a review of the readers)."""
    run = _run_with(tmp_path)
    path = run / "timeline.jsonl"
    rows = path.read_text().splitlines()
    k = next(i for i, line in enumerate(rows) if '"kind": "span"' in line)
    span = json.loads(rows[k])
    span["t_end"] = float(value.replace("Infinity", "inf"))
    rows[k] = json.dumps(span)
    path.write_text("\n".join(rows) + "\n")
    if fmt == "npz":
        tl = timeline_mod.Timeline.read_jsonl(path)
        path.unlink()
        path = run / "timeline.npz"
        write_npz(tl, path)
    with pytest.raises(SortedRLError) as e:
        read_timeline(path)
    assert str(e.value) == f"{path}: a 'span' record's 't_end' is not a finite number"
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.html")])
    assert (r.exit_code, r.stderr.strip().splitlines()) == (2, [f"error: {e.value}"]), r.output
    assert not (tmp_path / "p.html").exists()
