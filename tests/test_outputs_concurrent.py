"""Two commands writing into the same existing --out at once (sortedrl.outputs_commit).

A review (rev41) found that the first of two commands writing into the same directory to
finish moved everything but its own work directories aside and deleted it: the other command's
live ``.sortedrl-scratch-*`` (its timeline, while it ran) and ``.sortedrl-new-*`` (its staged
outputs) went too, and it failed after its whole run (``error: output: No such file or
directory``). Each work directory now names the process that made it; one of another process
that is running is left alone (:func:`sortedrl.run_marker.is_live_work`), and the last command
to finish wins, as before the directory was written into.

Run: pytest tests/test_outputs_concurrent.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sortedrl.outputs import MARKER, Outputs, write_text
from sortedrl.run_marker import is_live_work, is_work_dir, work_prefix

ROOT = Path(__file__).resolve().parents[1]
SIM = ["simulate", "--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--steps", "2",
       "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]
RUN = [MARKER, "summary.json", "timeline.npz"]
NOTE = "note: replacing the previous `sortedrl simulate` run in c2\n"
# `sortedrl ARGS` that, its outputs staged, notes the staged summary's inode in INODE, touches
# READY and waits for GO before it moves them in: two runs' moves are ordered by the test
GATED = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import sortedrl.outputs as outputs
    ready, go, inode = map(Path, sys.argv[1:4])
    real = outputs.commit
    def gated(staged, into=(), keep=(), done=None):
        [(dest, tmp)] = staged
        inode.write_text(str(os.stat(tmp / "summary.json").st_ino))
        ready.touch()
        while not go.exists():
            time.sleep(0.02)
        real(staged, into=into, keep=keep, done=done)
    outputs.commit = gated
    from sortedrl.cli import main
    sys.argv = ["sortedrl", *sys.argv[4:]]
    main()
""")


def gated(ws: Path, name: str, args: list[str]) -> subprocess.Popen:
    files = [str(ws / f"{name}.{part}") for part in ("ready", "go", "inode")]
    return subprocess.Popen([sys.executable, "-c", GATED, *files, *args], cwd=ws, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_for(what, proc: subprocess.Popen) -> None:
    """Until ``what()`` is true (a hang guard of 120 s, not a timing assertion)."""
    deadline = time.monotonic() + 120
    while not what():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.02)


def work(out: Path, pid: int, tag: str) -> list[str]:
    return [n for n in os.listdir(out) if n.startswith(f".sortedrl-{tag}-{pid}-")]


def test_two_commands_into_one_directory_both_succeed_and_the_last_wins(tmp_path):
    out = tmp_path / "c2"
    first = subprocess.run([sys.executable, "-m", "sortedrl.cli", *SIM, "--out", "c2"], cwd=tmp_path,
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert first.returncode == 0, first.stderr
    a = gated(tmp_path, "a", [*SIM, "--out", "c2"])
    wait_for(lambda: work(out, a.pid, "scratch"), a)  # (A runs)
    b = gated(tmp_path, "b", [*SIM, "--out", "c2"])  # (B starts beside it, the previous run there)
    wait_for(lambda: (tmp_path / "a.ready").exists() and (tmp_path / "b.ready").exists(), b)
    # both have their scratch and their staged outputs in the directory; A moves its in first
    assert all(work(out, p.pid, tag) for p in (a, b) for tag in ("scratch", "new"))
    (tmp_path / "a.go").touch()
    a_out, a_err = a.communicate(timeout=120)
    assert a.returncode == 0 and a_err.startswith(NOTE) and "error" not in a_err, a_err
    assert work(out, b.pid, "scratch") and work(out, b.pid, "new")  # (B's, untouched)
    (tmp_path / "b.go").touch()
    b_out, b_err = b.communicate(timeout=120)
    assert b.returncode == 0 and b_err.startswith(NOTE) and "error" not in b_err, b_err
    assert sorted(os.listdir(out)) == RUN  # (B's whole run, no work directory left)
    assert os.stat(out / "summary.json").st_ino == int((tmp_path / "b.inode").read_text())
    assert json.loads((out / MARKER).read_text())["files"] == ["summary.json", "timeline.npz"]


def test_another_running_commands_work_is_neither_moved_nor_counted(tmp_path, monkeypatch):
    """In process: a work directory named with a running process (this test's child) is that
    command's: the directory holding only it is empty, and the moves leave it as it is."""
    monkeypatch.chdir(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        out = tmp_path / "run"
        live = [out / f".sortedrl-{tag}-{child.pid}-x1" for tag in ("new", "old", "scratch")]
        for d in live:
            d.mkdir(parents=True)
            (d / "summary.json").write_text("theirs")
        outs = Outputs("simulate")
        run = outs.run_dir(Path("run"), Path("run"))
        assert outs.notes == []  # (empty: no note of replacing anything)
        outs.write({run: {"a.txt": write_text("a")}})
        assert sorted(os.listdir(out)) == sorted([MARKER, "a.txt", *(d.name for d in live)])
        assert all((d / "summary.json").read_text() == "theirs" for d in live)
    finally:
        child.communicate(b"")


def test_the_liveness_rule(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        for name in (f".sortedrl-scratch-{live.pid}-ab12", f".sortedrl-new-{live.pid}-x", f".sortedrl-old-{live.pid}-x",
                     f".sortedrl-probe-{live.pid}-x", ".sortedrl-new-1-x", f".sortedrl-new-{dead.pid}-x",
                     f".sortedrl-new-{os.getpid()}-x", ".sortedrl-new-k1ll3d00", ".sortedrl-new-12345678",
                     f".sortedrl-other-{live.pid}-x", f"sortedrl-new-{live.pid}-x"):
            (tmp_path / name).mkdir()
        (tmp_path / f".sortedrl-scratch-{live.pid}-file").write_text("a user's file")
        os.symlink(tmp_path / f".sortedrl-new-{live.pid}-x", tmp_path / f".sortedrl-new-{live.pid}-link")
        found = {n for n in os.listdir(tmp_path) if is_live_work(tmp_path, n)}
        # running and not this process (pid 1 is running: init), a directory, named as ours
        assert found == {f".sortedrl-scratch-{live.pid}-ab12", f".sortedrl-new-{live.pid}-x",
                         f".sortedrl-old-{live.pid}-x", f".sortedrl-probe-{live.pid}-x", ".sortedrl-new-1-x"}
    finally:
        live.communicate(b"")
    assert not is_live_work(tmp_path, f".sortedrl-scratch-{live.pid}-ab12")  # (gone now)
    assert is_work_dir(tmp_path, ".sortedrl-new-k1ll3d00")
    assert not is_work_dir(tmp_path, f".sortedrl-scratch-{live.pid}-file")
    assert work_prefix("scratch") == f".sortedrl-scratch-{os.getpid()}-"


def test_a_file_named_as_a_work_directory_is_the_users(tmp_path, monkeypatch):
    """Only a directory is a work directory: a user's file of such a name makes the directory
    not empty, and is not deleted without --force."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".sortedrl-new-x").write_text("notes")
    outs = Outputs("simulate")
    try:
        outs.run_dir(Path("run"), Path("run"))
    except Exception as e:
        assert str(e) == ("--out run: not empty (files not written by sortedrl: .sortedrl-new-x); give "
                          "another directory, or --force to replace it, deleting them")
    else:
        raise AssertionError("accepted")
    assert (tmp_path / "run" / ".sortedrl-new-x").read_text() == "notes"
