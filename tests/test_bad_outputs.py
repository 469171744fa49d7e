"""Bad outputs (issue 15): every output a user can get wrong is one ``error:`` line and exit 2.

For each case: exactly one ``error:`` line on stderr, no traceback, nothing created anywhere in
the working directory (so nothing outside ``--out`` and nothing half-written), and every input
byte-identical afterwards (checksums before and after).

Run: pytest tests/test_bad_outputs.py
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
LOGIC = ROOT / "sortedrl" / "traces" / "data" / "logic-8k.jsonl"
FIXTURE = ROOT / "tests" / "fixtures" / "splitwise_conv_head.csv"
runner = CliRunner()
SMALL = ["--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2"]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the checksum of each file ('dir' for directories)."""
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working directory holding inputs and someone's files, as a user's would."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_bytes(LOGIC.read_bytes())
    (tmp_path / "table.csv").write_bytes(FIXTURE.read_bytes())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "afile").write_text("a file, not a directory")
    for name, marker in (("odd-marker", '{"a": 1}'), ("list-marker", "[1]")):  # hand-made
        (tmp_path / name).mkdir()
        (tmp_path / name / ".sortedrl-run").write_text(marker)
    (tmp_path / "old.json").write_text("{}")
    (tmp_path / "nan.json").write_text('{"preset": "h100-llama3.1-8b", "mbu": NaN}')
    for name in ("offload_s", "train_fix", "net_gbps", "step_fixed_s"):  # NaN passed `< 0` checks
        (tmp_path / f"nan-{name}.json").write_text(f'{{"preset": "h100-llama3.1-8b", "{name}": NaN}}')
    costs = '"step_fixed_s": 0.002, "weight_read_s": %s, "kv_read_s_per_token": 0, "compute_s_per_seq": 0, ' \
            '"prefill_s_per_token": 0, "prefill_s_per_pair": 0, "train_per_token": 1e-6, ' \
            '"train_fix": 1, "sync_s": 1'
    (tmp_path / "nan-cost.json").write_text('{"costs": {%s}}' % (costs % "NaN"))
    (tmp_path / "inf-cost.json").write_text('{"costs": {%s}}' % (costs % "Infinity"))
    (tmp_path / "inf-table.json").write_text('{"costs": {%s, "step_table": [0.001, Infinity]}}' % (costs % "0.001"))
    # a decode step of 1e-320 s: the run took no time and its tokens/s was written as Infinity
    (tmp_path / "denormal-step.json").write_text(
        '{"preset": "h100-llama3.1-8b-1gpu-16seq", "costs": {"step_fixed_s": 1e-320, "weight_read_s": 0, '
        '"kv_read_s_per_token": 0, "compute_s_per_seq": 0, "prefill_s_per_token": 0, "prefill_s_per_pair": 0, '
        '"train_per_token": 0, "train_fix": 0, "sync_s": 0}}')
    # finite, but a forecast's cost of it at $1M a GPU-hour is not
    (tmp_path / "huge-offload.json").write_text(
        '{"preset": "h100-llama3.1-8b-1gpu-16seq", "offload_s": 1e307}')
    run = tmp_path / "run"  # a simulate run directory, for plot and report
    r = runner.invoke(app, ["simulate", *SMALL, "--policy", "sync", "--out", str(run), "--json"])
    assert r.exit_code == 0, r.output
    (tmp_path / "run" / "trace.jsonl").write_bytes(LOGIC.read_bytes())
    return tmp_path


IMPORT = ["trace", "import", "table.csv", "--prompt-len-col", "num_prefill_tokens",
          "--response-len-col", "num_decode_tokens", "--group-size", "4"]
SIM = ["simulate", "--trace", "trace.jsonl", "--policy", "sync"]
CMP = ["compare", "--trace", "trace.jsonl", "--policy", "sync"]

CASES = {
    "label with a path outside --out": (
        [*CMP, "--policy", "../../evil=sync", "--out", "c"], "--policy '../../evil': a label names a directory"),
    "absolute label": ([*CMP, "--policy", "/tmp/evil=sync", "--out", "c"], "--policy '/tmp/evil'"),
    "label '..'": ([*CMP, "--policy", "..=sync", "--out", "c"], "--policy '..'"),
    "label naming compare.json": (
        [*CMP, "--policy", "compare.json=partial", "--out", "c"], "that name is reserved for an output file"),
    "label naming Compare.JSON": ([*CMP, "--policy", "Compare.JSON=partial", "--out", "c"], "reserved"),
    "trace import over its input": ([*IMPORT, "--out", "table.csv"], "is an input of this command"),
    "trace import over its input with --force": (
        [*IMPORT, "--out", "table.csv", "--force"], "is an input of this command"),
    "trace synth over an existing file": (
        ["trace", "synth", "logic-8k", "--out", "trace.jsonl"], "exists (add --force to overwrite it)"),
    "trace synth to an unknown format": (["trace", "synth", "logic-8k", "--out", "t.txt"], "unknown trace format"),
    "--out into someone else's directory": ([*SIM, "--out", "mine"], "not empty (files not written by sortedrl: "),
    "--out into a run of another command": (
        [*CMP, "--out", "run"], "not empty (a `sortedrl simulate` run and files not written by sortedrl: trace.jsonl)"),
    "--out into a directory whose marker names no command": (
        [*SIM, "--out", "odd-marker"], "not empty (files not written by sortedrl)"),
    "--out into a directory whose marker is a list": (
        [*SIM, "--out", "list-marker"], "not empty (files not written by sortedrl)"),
    "--out is a file": ([*SIM, "--out", "afile"], "exists and is not a directory"),
    "--out under a file": ([*SIM, "--out", "afile/run"], "is a file, not a directory"),
    "--out on a read-only filesystem": ([*SIM, "--out", "/proc/sys/sortedrl-run"], "/proc/sys is not writable"),
    "--out where creating fails late": ([*SIM, "--out", "/sys/sortedrl-run"], "cannot write"),
    "--out holding the input, with --force": ([*SIM, "--out", ".", "--force"], "--out ."),
    "--out holding the input trace": (
        ["simulate", "--trace", "run/trace.jsonl", "--policy", "sync", "--out", "run", "--force"],
        "holds the input"),
    "--perfetto unwritable": ([*SIM, "--out", "s", "--perfetto", "/proc/sys/p.json"], "--perfetto"),
    "--perfetto fails late: the run directory goes too": (
        [*SIM, "--out", "s", "--perfetto", "/sys/p.json"], "cannot write"),
    "--perfetto is a directory": ([*SIM, "--out", "s", "--perfetto", "mine"], "is a directory, not a file"),
    "--perfetto over an existing file": ([*SIM, "--out", "s", "--perfetto", "old.json"], "exists (add --force"),
    "--perfetto over the input trace": (
        [*SIM, "--out", "s", "--perfetto", "trace.jsonl", "--force"], "is an input of this command"),
    "--perfetto inside --out": ([*SIM, "--out", "s", "--perfetto", "s/p.json"], "overlaps --out s"),
    "--perfetto under a file": ([*SIM, "--out", "s", "--perfetto", "afile/p.json"], "is a file, not a directory"),
    "plot over its own timeline": (
        ["plot", "run", "--out", "run/timeline.npz", "--force"], "is an input of this command"),
    "plot --perfetto over an existing file": (["plot", "run", "--perfetto", "old.json"], "exists"),
    "report over an existing file": (["report", "run", "--out", "old.json"], "exists (add --force"),
    "tune --out into someone else's directory": (
        ["tune", *SMALL, "--policy", "sync", "--budget", "1", "--out", "mine"], "not empty"),
    "--set knob = inf": (["simulate", "--trace", "trace.jsonl", "--policy", "sortedrl", "--set", "oversubscribe=inf",
                          "--out", "s"], "--set oversubscribe=inf: expected a finite number"),
    "--set knob = nan": (["simulate", *SMALL, "--policy", "sortedrl", "--set", "oversubscribe=nan", "--out", "s"],
                         "--set oversubscribe=nan: expected a finite number"),
    "compare --set knob = -inf": ([*CMP, "--set", "sync.minibatches=1", "--policy", "s=sortedrl",
                                   "--set", "s.oversubscribe=-inf", "--out", "c"], "expected a finite number"),
    "cluster file with NaN": ([*SIM, "--cluster", "nan.json", "--out", "s"],
                              "nan.json: field 'mbu': must be in (0, 1], got nan"),
    **{f"cluster field {name} NaN": (
        [*SIM, "--cluster", f"nan-{name}.json", "--out", "s"],
        f"nan-{name}.json: field '{name}': must be a finite number {'>' if name == 'net_gbps' else '>='} 0, got nan")
       for name in ("offload_s", "train_fix", "net_gbps", "step_fixed_s")},
    "cost term NaN": ([*SIM, "--cluster", "nan-cost.json", "--out", "s"],
                      "nan-cost.json: field 'costs.weight_read_s': expected a finite number >= 0, got nan"),
    "cost term infinite": ([*SIM, "--cluster", "inf-cost.json", "--out", "s"],
                           "inf-cost.json: field 'costs.weight_read_s': expected a finite number >= 0, got inf"),
    "step table infinite": ([*SIM, "--cluster", "inf-table.json", "--out", "s"],
                            "inf-table.json: field 'costs.step_table': expected a list of seconds >= 0"),
    "a decode step of 1e-320 s": (
        [*SIM, "--cluster", "denormal-step.json", "--out", "s"],
        "denormal-step.json: field 'costs': step_fixed_s + weight_read_s must be at least 1e-09 s (a decode step "
        "takes time), got 9.99989e-321"),
    "forecast --gpu-hour-price 1.7e308": (
        ["forecast", "--trace", "trace.jsonl", "--policy", "sync", "--gpu-hour-price", "1.7e308",
         "--report", "f.html"],
        "--gpu-hour-price must be from 0 to 1,000,000 ($ per GPU-hour), got 1.7e+308"),
    "a forecast whose cost is past a float": (
        ["forecast", "--trace", "trace.jsonl", "--policy", "sync", "--cluster", "huge-offload.json",
         "--gpu-hour-price", "1e6", "--report", "f.html"],
        "the forecast: field '[0].cost' is inf, not a finite number (an input past any real "
        "one?); nothing written"),
    "--lr inf for a real run": (["run", "--model", "m", "--policy", "sync", "--steps", "1", "--lr", "inf",
                                 "--out", "r"], "--lr inf: must be a finite number"),
    "tune --max-staleness nan": (["tune", *SMALL, "--policy", "sync", "--max-staleness", "nan", "--out", "t"],
                                 "--max-staleness nan: must be a finite number"),
    "tune range to inf": (["tune", *SMALL, "--policy", "sortedrl", "--param", "sortedrl.oversubscribe=1:inf",
                           "--out", "t"], "expected a finite number"),
    "tune with no feasible trial": (
        ["tune", "--synthetic", "logic-8k", "--prompts", "32", "--group-size", "4", "--steps", "4",
         "--policy", "async", "--max-staleness", "0", "--budget", "1", "--cluster", "h100-llama3.1-8b-2gpu",
         "--out", "t"],
        "no trial of 1 meets --max-staleness 0.0; the closest is trial 0: async (defaults) with staleness_max 3"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_output_is_one_line_and_changes_nothing(ws, case):
    args, message = CASES[case]
    before = snapshot(ws)
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert message in lines[0], lines[0]
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    assert snapshot(ws) == before  # nothing created, nothing half-written, no input changed


# on CPU, the extra's CUDA builds of torch's family are then removed (test_install_check.py)
RUNNER = ("or the real runner's extra: 'sortedrl[gpu]' on CUDA; on CPU 'sortedrl[cpu]', then "
          "`pip uninstall -y torchvision torchaudio torchcodec triton`, as the README's "
          "\"Installing the real runner\" says")


@pytest.mark.parametrize("command, needs, install", [
    (["model", "init", "--out", "new"], "`sortedrl model init` needs torch", f"pip install torch ({RUNNER})"),
    (["calibrate", "--model", "m", "--out", "p.json"], "`sortedrl calibrate` needs torch",
     f"pip install torch ({RUNNER})"),
    (["run", "--model", "m", "--policy", "sync", "--steps", "1", "--out", "r"], "`sortedrl run` needs transformers",
     f"pip install transformers ({RUNNER})"),
    # a sub-command is named as typed; tokenizers alone is enough for a verl import
    (["trace", "import", str(ROOT / "tests/fixtures/frameworks/verl_rollout"), "--from", "verl",
      "--tokenizer", "m", "--out", "t.jsonl"],
     "`sortedrl trace import` needs tokenizers", f"pip install tokenizers ({RUNNER})"),
])
def test_a_missing_extra_says_which_to_install(tmp_path, command, needs, install):
    # torch and vLLM made unimportable, as after `make demo` (which installs neither); `run` gets
    # a model directory copied from elsewhere, so that only the missing extra stops it
    model = tmp_path / "m"
    model.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = ("import sys; sys.modules.update(torch=None, vllm=None, transformers=None, tokenizers=None); "
            f"from sortedrl.cli import app; sys.argv = ['sortedrl', *{command!r}]; app()")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"error: {needs}, which is not installed: {install}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_run_too_large_for_memory_is_one_error_line_and_writes_nothing(tmp_path):
    # 1.6e9 samples pass the size check; with 3 GiB of address space drawing them fails
    code = ("import resource, sys; from sortedrl.cli import app; "
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "sys.argv = ['sortedrl', *sys.argv[1:]]; app()")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", code, "simulate", "--synthetic", "math-16k",
                        "--prompts", "10000000", "--steps", "20", "--policy", "sync", "--out",
                        str(out)], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("error: out of memory: the run needs more than this machine has "
                                "(give fewer samples: --prompts, --steps, a smaller trace)")
    assert list(tmp_path.iterdir()) == []


def test_model_files_and_checkpoint_tensors_get_the_users_umask(tmp_path):
    """safetensors writes its files 0600 whatever the umask: the model's weights were private
    beside its 0644 config (a review of the README's first hour, 6 Dec 2026)."""
    torch = pytest.importorskip("torch")  # (under CI a skip fails: conftest)
    from sortedrl.realrun.checkpoint import save_tensors
    from sortedrl.realrun.model import init_model

    old = os.umask(0o027)
    try:
        init_model(tmp_path / "m", warmup_steps=0)
        save_tensors(tmp_path / "t.safetensors", {"w": torch.zeros(2)})
    finally:
        os.umask(old)
    files = sorted(p for p in (tmp_path / "m").rglob("*") if p.is_file())
    assert "model.safetensors" in [p.name for p in files]
    assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: 0o640 for p in files}
    assert (tmp_path / "m").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "t.safetensors").stat().st_mode & 0o777 == 0o640


def test_force_replaces_a_directory_whole_and_keeps_the_users_umask(ws):
    """Everything in it is replaced; the directory itself is the user's and keeps its mode (it
    was replaced by a new one, 0o750 here, until the audit cliout41), what is written in it gets
    the umask."""
    import os

    mode = (ws / "mine").stat().st_mode & 0o777
    old = os.umask(0o027)
    try:
        r = runner.invoke(app, [*SIM, "--out", "mine", "--force", "--perfetto", "old.json"])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (ws / "mine").iterdir()) == [".sortedrl-run", "summary.json", "timeline.npz"]
    assert (ws / "mine").stat().st_mode & 0o777 == mode == 0o777 & ~old
    assert (ws / "mine" / "summary.json").stat().st_mode & 0o777 == 0o640
    assert (ws / "old.json").stat().st_mode & 0o777 == 0o640 and (ws / "old.json").read_text() != "{}"
    assert not [p for p in ws.iterdir() if p.name.startswith(".")]  # no temp or backup left


def test_default_run_directory_names_what_differs(ws):
    a = runner.invoke(app, [*SIM, "--json"])
    b = runner.invoke(app, [*SIM, "--seed", "3", "--json"])
    c = runner.invoke(app, [*SIM, "--cluster", "h100-llama3.1-8b-2gpu", "--json"])
    assert a.exit_code == b.exit_code == c.exit_code == 0
    assert sorted(p.name for p in (ws / "runs").iterdir()) == [
        "trace-sync-h100-llama3.1-8b", "trace-sync-h100-llama3.1-8b-2gpu", "trace-sync-h100-llama3.1-8b-seed3"]
    # the same name with other options is refused, not silently replaced
    r = runner.invoke(app, [*SIM, "--set", "minibatches=2"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: runs/trace-sync-h100-llama3.1-8b holds a `sortedrl simulate` run "
                                "with other options (--set: none then minibatches=2); give --out DIR to keep "
                                "both, or --force to replace it")


def _as_user(args: list[str]) -> list[str]:
    """``args`` run without root's power to write anywhere (as a user's run would)."""
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return [*(drop if os.geteuid() == 0 else []), *args]


def test_a_write_protected_previous_run_is_refused_before_any_work(ws):
    """Replacing a run whose files cannot be removed was found out only after the work: the new
    run was in place, the command said it had failed, and the old one was left in a hidden
    backup. Now it is refused first."""
    assert runner.invoke(app, [*SIM, "--out", "keep"]).exit_code == 0
    for p in [ws / "keep", *(ws / "keep").rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = snapshot(ws)
    try:
        r = subprocess.run(_as_user([sys.executable, "-m", "sortedrl.cli", *SIM, "--out", "keep"]),
                           cwd=ws, capture_output=True, text=True,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        after = snapshot(ws)
    finally:
        (ws / "keep").chmod(0o755)
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("error: --out keep: cannot be replaced: keep is write-protected (its files "
                        "cannot be removed)\n")
    assert after == before


def test_an_empty_out_directory_that_cannot_be_written_is_refused_before_any_work(ws, monkeypatch):
    """An empty --out directory passed the checks, and an immutable one failed the command at
    its end, after the whole run (a review, 6 Dec 2026). Writing into it is tried first now (it
    is written into, not replaced: audit cliout41). As root the directory is made immutable
    (`chattr +i`); a user may not set that flag, so there the kernel's answer to making a
    directory in such a directory (EPERM) is given by the mkdir itself."""
    import contextlib
    import errno

    (ws / "frozen").mkdir()
    mkdir = os.mkdir

    def refused(path, *a, **k):
        if os.path.basename(os.path.dirname(os.path.abspath(path))) == "frozen":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
        return mkdir(path, *a, **k)

    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i", str(ws / "frozen")], check=True)
            stack.callback(subprocess.run, ["chattr", "-i", str(ws / "frozen")], check=True)
        else:
            stack.enter_context(monkeypatch.context()).setattr(os, "mkdir", refused)
        r = runner.invoke(app, [*SIM, "--out", "frozen"])
        left = sorted(p.name for p in ws.iterdir())
    assert (r.exit_code, r.stderr) == (2, "error: --out frozen: cannot write into it (Operation not "
                                          "permitted)\n")
    assert "frozen" in left and not [n for n in left if n.startswith(".")]  # no probe left
    assert list((ws / "frozen").iterdir()) == []
    assert runner.invoke(app, [*SIM, "--out", "frozen"]).exit_code == 0  # an empty one: replaced
    assert sorted(p.name for p in (ws / "frozen").iterdir()) == [".sortedrl-run", "summary.json",
                                                                  "timeline.npz"]


def test_an_old_output_that_cannot_be_removed_is_named(tmp_path, monkeypatch):
    """Should the old output resist removal once the new one is in place (a race with the
    check above), the error says so and where the old one is, not that nothing was written."""
    from sortedrl import outputs, outputs_commit

    target, staged = tmp_path / "out.txt", tmp_path / "new.txt"
    target.write_text("old")
    staged.write_text("new")
    remove = outputs_commit.remove_path

    def stuck(path):
        if path.name.startswith(".out.txt.old-") and path.exists():
            raise PermissionError(13, "Permission denied", str(path))
        remove(path)

    monkeypatch.setattr(outputs_commit, "remove_path", stuck)
    with pytest.raises(outputs.OutputError) as e:
        outputs_commit.commit([(target, staged)])
    backup = tmp_path / f".out.txt.old-{os.getpid()}"
    assert str(e.value) == (f"{target}: written, but the previous one could not be removed "
                            f"(Permission denied); it is left at {backup}")
    assert target.read_text() == "new" and backup.read_text() == "old"


def test_report_never_replaces_what_it_reads(ws):
    """`report DIR` reads DIR's trace and its runs' timelines besides compare.json: --force does
    not let its --out replace one of them (it replaced a trace with HTML, and a timeline)."""
    r = runner.invoke(app, [*CMP, "--policy", "sortedrl", "--out", "cmp"])
    assert r.exit_code == 0, r.output
    (ws / "cmp" / "trace.jsonl").write_bytes(LOGIC.read_bytes())
    before = snapshot(ws)
    for victim in ("cmp/trace.jsonl", "cmp/sync/timeline.npz", "cmp/compare.json"):
        r = runner.invoke(app, ["report", "cmp", "--out", victim, "--force"])
        assert r.exit_code == 2 and r.stderr == (f"error: --out {victim}: is an input of this "
                                                 "command; write the output elsewhere\n"), r.output
    assert snapshot(ws) == before
    assert runner.invoke(app, ["report", "cmp"]).exit_code == 0


def test_a_summary_json_cannot_hold_is_one_error_line_and_writes_nothing(ws, monkeypatch):
    """Whatever still makes a summary infinite (none of the inputs above) is refused before any
    output is written: summary.json never holds Infinity or NaN, which JSON has not."""
    import sortedrl.cli as cli

    real = cli.run_simulation

    def infinite(*args, **kwargs):
        result = real(*args, **kwargs)
        result.summary["tokens_per_s"] = float("inf")
        return result

    monkeypatch.setattr(cli, "run_simulation", infinite)
    before = snapshot(ws)
    r = runner.invoke(app, [*SIM, "--out", "s", "--perfetto", "p.json"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip().splitlines() == [
        "error: s/summary.json: field 'tokens_per_s' is inf, not a finite number (an input past "
        "any real one?); nothing written"]
    assert snapshot(ws) == before
