"""The ``sortedrl simulate`` command: outputs, --json, determinism, and one-line errors.

Run: pytest tests/test_cli.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.metrics import CONTRACT_KEYS
from sortedrl.timeline_file import read_timeline

DATA = Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data"
LOGIC = str(DATA / "logic-8k.jsonl")
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_simulate_writes_summary_and_timeline(tmp_path):
    out = tmp_path / "run"
    r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary)[: len(CONTRACT_KEYS)] == list(CONTRACT_KEYS)
    assert summary["samples_total"] == summary["samples_trained"] == 512
    assert "bubble_ratio" in r.stdout and "wrote" in r.stdout
    tl = read_timeline(out / "timeline.npz")  # columnar by default (--timeline jsonl: text)
    assert np.count_nonzero(tl.columns("span")["end"] == "finish") == 512


def test_json_prints_only_the_summary(tmp_path):
    r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(tmp_path / "a"), "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == json.loads((tmp_path / "a" / "summary.json").read_text())


def test_timeline_alone_gives_the_same_summary(tmp_path):
    from sortedrl.metrics import summarize

    invoke("simulate", "--synthetic", "math-16k", "--prompts", "16", "--steps", "2", "--policy", "sync",
           "--set", "minibatches=2", "--out", str(tmp_path / "m"))
    again = summarize(read_timeline(tmp_path / "m" / "timeline.npz"))
    assert again == json.loads((tmp_path / "m" / "summary.json").read_text())


@pytest.mark.parametrize("source", [("--trace", LOGIC), ("--synthetic", "math-16k")])
def test_same_seed_same_summary_bytes(tmp_path, source):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        r = invoke("simulate", *source, "--policy", "sync", "--seed", "7", "--prompts", "32",
                   "--set", "minibatches=2", "--out", str(out)) if source[0] == "--synthetic" else \
            invoke("simulate", *source, "--policy", "sync", "--seed", "7", "--out", str(out))
        assert r.exit_code == 0, r.output
    assert (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()
    assert (a / "timeline.npz").read_bytes() == (b / "timeline.npz").read_bytes()


def test_different_seed_different_synthetic_run(tmp_path):
    outs = []
    for seed in ("1", "2"):
        r = invoke("simulate", "--synthetic", "math-16k", "--prompts", "16", "--policy", "sync",
                   "--seed", seed, "--json", "--out", str(tmp_path / seed))
        outs.append(json.loads(r.stdout)["makespan_s"])
    assert outs[0] != outs[1]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


HEADER = '{"sortedrl_trace": 1, "max_response_len": 100, "group_size": 1, "source": "t"}\n'
ROW = '{{"prompt_id": "{p}", "sample": {s}, "prompt_len": 5, "response_len": {r}, "truncated": false}}\n'


@pytest.mark.parametrize("args_fn, message", [
    (lambda t: ["--trace", LOGIC, "--policy", "nope"], "unknown policy 'nope'"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--cluster", "a100-llama3.1-8b"],
     "unknown cluster preset 'a100-llama3.1-8b'"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--set", "bogus=1"],
     "--set bogus: unknown parameter for policy sync (known: rollout_batch, minibatches, filter_groups)"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--set", "minibatches=two"],
     "--set minibatches=two: expected an integer"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--set", "minibatches=0"],
     "minibatches must be >= 1, got 0"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--cluster",
                write(t, "small.json", '{"preset": "h100-llama3.1-8b", "kv_budget_tokens": 5000}')],
     "impossible cluster: the KV budget of 4,950 tokens per engine cannot hold one sequence of"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--cluster",
                write(t, "big.json", '{"preset": "h100-qwen2.5-32b", "tp": 1, "gpu_mem_util": 0.5}')],
     "impossible cluster: qwen2.5-32b weights (65.5 GB) leave no KV cache"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--cluster",
                write(t, "typo.json", '{"preset": "h100-llama3.1-8b", "max_num_seq": 5}')],
     "unknown field 'max_num_seq'"),
    (lambda t: ["--trace", write(t, "neg.jsonl", HEADER + ROW.format(p="a", s=0, r=-3)), "--policy", "sync"],
     "neg.jsonl"),
    (lambda t: ["--trace", write(t, "over.jsonl", HEADER + ROW.format(p="a", s=0, r=101)), "--policy", "sync"],
     "above max_response_len 100"),
    (lambda t: ["--trace", write(t, "dup.jsonl", HEADER + ROW.format(p="a", s=0, r=3) * 2), "--policy", "sync"],
     "duplicate (prompt_id, sample)"),
    (lambda t: ["--trace", write(t, "empty.jsonl", ""), "--policy", "sync"], "empty.jsonl"),
    (lambda t: ["--trace", write(t, "bad.jsonl", HEADER + "{not json\n"), "--policy", "sync"], "bad.jsonl"),
    (lambda t: ["--policy", "sync"], "give exactly one of --trace FILE or --synthetic PRESET"),
    # options that shape a synthetic trace were silently ignored with a trace file, invalid or not
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--steps", "-3", "--group-size", "0"],
     f"error: --group-size and --steps: not with a trace file ({LOGIC} has its own group size "
     "and steps); they shape a --synthetic trace"),
    (lambda t: ["--trace", LOGIC, "--policy", "sync", "--prompts", "3"],
     f"error: --prompts: not with a trace file ({LOGIC} has its own prompts per step); it shapes "
     "a --synthetic trace or a --trace-model's draws"),
    (lambda t: ["--synthetic", "nope-1k", "--policy", "sync"], "nope-1k"),
])
def test_errors_are_one_line_exit_2_and_leave_nothing(tmp_path, args_fn, message):
    out = tmp_path / "out"
    r = invoke("simulate", *args_fn(tmp_path), "--out", str(out))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize("args, line", [
    (["simulate", "--steps", "1.5"], "error: sortedrl simulate: Invalid value for '--steps': "),
    (["simulate", "--nope"], "error: sortedrl simulate: No such option: --nope"),
    (["nosuch"], "error: sortedrl: No such command 'nosuch'; see `sortedrl --help`"),
    (["trace", "stats"], "error: sortedrl trace stats: Missing argument 'file'; "
                         "see `sortedrl trace stats --help`"),
    (["simulate", "--policy"], "error: Option '--policy' requires an argument."),
])
def test_usage_errors_are_one_line_exit_2(args, line):
    # typer printed a usage banner and a boxed message for these (the fuzz of CLI arguments)
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith(line), r.stderr


def test_help_is_still_shown():
    r = invoke()  # a group with no arguments shows its help, with typer's exit code
    assert r.exit_code == 2 and "simulate" in r.output and "error:" not in r.output
    r = invoke("simulate", "--help")
    assert r.exit_code == 0 and "--policy" in r.stdout and r.stderr == ""


def _commands(group, path=()):
    for name, cmd in getattr(group, "commands", {}).items():
        yield (*path, name)
        yield from _commands(cmd, (*path, name))


def test_no_help_text_is_cut_at_80_columns():
    """rich cuts a word longer than its column with an ellipsis: the preset grammar and the
    default --out were cut in `simulate`, `compare` and `tune --help` at 80 columns (a review of
    the README's first hour, 6 Dec 2026)."""
    import typer.main

    commands = list(_commands(typer.main.get_command(app)))
    assert ("trace", "import") in commands and ("simulate",) in commands
    for cmd in commands:
        r = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "80"})
        assert r.exit_code == 0 and "…" not in r.stdout, (cmd, [x for x in r.stdout.splitlines() if "…" in x])


def test_out_into_someone_elses_directory_is_refused_and_force_replaces_it(tmp_path):
    # issue 15: --out into a non-empty directory that is not a previous run of the same command
    # is refused (it used to merge into it); --force replaces it whole.
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(out))
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"error: --out {out}: not empty (files not written by sortedrl: notes.txt); "
                                "give another directory, or --force to replace it, deleting them")
    assert (out / "notes.txt").read_text() == "mine" and not (out / "summary.json").exists()
    r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [".sortedrl-run", "summary.json", "timeline.npz"]


def test_a_previous_run_of_the_same_command_is_replaced_with_a_note(tmp_path):
    out = tmp_path / "run"
    for _ in range(2):
        r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(out), "--json")
        assert r.exit_code == 0, r.output
    assert f"note: replacing the previous `sortedrl simulate` run in {out}" in r.stderr.splitlines()
    assert not [p for p in tmp_path.iterdir() if p.name != "run"]


def test_a_previous_run_with_other_options_in_a_named_out_is_kept_without_force(tmp_path):
    """A rerun with other options into the same --out replaced the earlier run (and a report.html
    written beside it) with only a note; a default directory was already protected so."""
    out = tmp_path / "run"
    assert invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(out)).exit_code == 0
    (out / "report.html").write_text("mine")
    before = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}
    r = invoke("simulate", "--trace", LOGIC, "--policy", "partial", "--out", str(out))
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: {out} holds a `sortedrl simulate` run with other options (--policy: sync "
                        "then partial); give another directory to keep both, or --force to replace it\n")
    assert {p: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    r = invoke("simulate", "--trace", LOGIC, "--policy", "partial", "--out", str(out), "--force")
    assert r.exit_code == 0 and not (out / "report.html").exists()


def test_policies_lists_every_policy_and_knob():
    from sortedrl.policies.registry import BUILTIN

    r = invoke("policies")
    assert r.exit_code == 0, r.output
    for name in BUILTIN:
        assert f"{name}:" in r.stdout
    assert "minibatches = 1" in r.stdout and "mode = on_policy" in r.stdout
    assert "  filter_groups = false  dynamic sampling" in r.stdout  # (as --set takes it, not False)
    for line in r.stdout.splitlines():  # a wrapped line is indented under its policy or knob
        assert line.startswith("  ") or line.split(":")[0] in BUILTIN, line


def test_clusters_lists_presets_with_shapes(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke("clusters")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    eight = next(line for line in lines if line.startswith("h100-llama3.1-8b "))
    assert eight.split() == ["h100-llama3.1-8b", "8", "shared", "1", "8", "x", "256", "426,788"]
    seventy = next(line for line in lines if line.startswith("h100-llama3.1-70b "))
    assert seventy.split()[:7] == ["h100-llama3.1-70b", "16", "shared", "4", "4", "x", "256"]  # Adam state
    assert any(line.startswith("source of mi300x: AMD Instinct MI300X datasheet") for line in lines)
    assert "{gpu}-{model}[-tpN][-Ngpu][-Nseq][-disagg]" in r.stdout
    assert lines[-1] == "columns are defined in docs/metrics.md; --json prints every field"
    shapes = {c["name"]: c for c in json.loads(invoke("clusters", "--json").stdout)}
    assert shapes["h100-llama3.1-70b"]["trainer_gpus"] == 16


def test_simulate_exports_perfetto(tmp_path):
    pf = tmp_path / "trace.json"
    r = invoke("simulate", "--trace", LOGIC, "--policy", "sync", "--out", str(tmp_path / "r"),
               "--perfetto", str(pf))
    assert r.exit_code == 0, r.output
    events = json.loads(pf.read_text())["traceEvents"]
    names = {e.get("name") for e in events if e.get("ph") == "X"}
    assert {"update 0", "rollout", "prefill", "sample 0"} <= names  # (one step: no sync after it)
    assert {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"} >= {"engine 0", "trainer"}


def test_the_cli_pins_glibcs_mmap_threshold():
    # sortedrl's main() keeps big freed arrays from piling up on the heap (cli_common)
    import platform

    from sortedrl.cli_common import pin_malloc_threshold

    assert platform.libc_ver()[0] == "glibc"  # the machines this project runs on
    assert pin_malloc_threshold() is True


@pytest.mark.parametrize(("argv", "pinned"), [(["simulate", "--help"], 1), ([], 1),
                                              (["run", "--help"], 0), (["calibrate"], 0),
                                              (["model", "init"], 0)])
def test_the_real_runners_commands_leave_malloc_alone(monkeypatch, argv, pinned):
    # torch and vLLM run in the process of `run`, `calibrate` and `model`: no malloc setting
    import sortedrl.cli as cli

    calls = []
    monkeypatch.setattr(cli, "pin_malloc_threshold", lambda: calls.append(1))
    monkeypatch.setattr(cli, "app", lambda: None)
    monkeypatch.setattr(cli, "end_cleanly_on_termination", lambda: None)  # (this process's signals stay pytest's)
    monkeypatch.setattr(cli.sys, "argv", ["sortedrl", *argv])
    cli.main()
    assert len(calls) == pinned
