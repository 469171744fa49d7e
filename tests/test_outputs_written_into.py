"""An --out directory that exists is written into, not replaced (sortedrl.outputs_commit).

An audit (cliout41) found an existing empty --out directory replaced by a new one of ours: a
mount point (a container's volume) failed with ``cannot be replaced (Device or resource
busy)``; an empty writable directory under a parent the user may not write was refused
(``rop is not writable``); and any other lost its mode and group (``drwxrws--- nogroup`` became
``drwxr-xr-x root``, a 0555 one 0755). Now the directory is kept (inode, mode, group, mount) and
the outputs are moved into it, all or nothing: a failure or Ctrl-C leaves the previous outputs
or the new ones.

Run: pytest tests/test_outputs_written_into.py
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.outputs import MARKER, Outputs, write_text
from tests.cli_helpers import Interrupted  # (the sigint_raises fixture: conftest.py)

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
SMALL = ["--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--steps", "2"]
SIM = ["simulate", *SMALL, "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]
RUN = [MARKER, "summary.json", "timeline.npz"]


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ok(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def as_user(args: list[str]) -> subprocess.CompletedProcess:
    """``python -m sortedrl.cli ARGS`` without root's power to write anywhere (as a user's run)."""
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    return subprocess.run([*drop, sys.executable, "-m", "sortedrl.cli", *args], capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_a_directory_keeps_its_inode_mode_and_group_and_what_is_written_takes_its_group(ws):
    out = ws / "sg"
    out.mkdir()
    # another group than the process's, where it may set one (root: any; a user: one of theirs)
    group = 65534 if os.geteuid() == 0 else next((g for g in os.getgroups() if g != os.getegid()), os.getegid())
    os.chown(out, -1, group)
    out.chmod(0o2770)
    before = out.stat()
    for again in (False, True):  # empty, then holding the previous run
        r = ok([*SIM, "--out", "sg"])
        assert ("note: replacing the previous `sortedrl simulate` run in sg" in r.stderr) == again
        now = out.stat()
        assert (now.st_ino, stat.S_IMODE(now.st_mode), now.st_gid) == (before.st_ino, 0o2770, group)
        assert names(out) == RUN  # (no work directory left)
        assert {p.stat().st_gid for p in out.iterdir()} == {group}
    assert names(ws) == ["sg"]


def test_a_new_run_directory_in_a_setgid_parent_takes_its_group(ws):
    (ws / "shared").mkdir()
    group = 65534 if os.geteuid() == 0 else next((g for g in os.getgroups() if g != os.getegid()), os.getegid())
    os.chown(ws / "shared", -1, group)
    (ws / "shared").chmod(0o2775)
    ok(["compare", *SMALL, "--policy", "sync", "--policy", "sortedrl", "--cluster", "h100-llama3.1-8b-2gpu",
        "--out", "shared/c"])
    made = [ws / "shared" / "c", *(ws / "shared" / "c").rglob("*")]
    assert {p.stat().st_gid for p in made} == {group}
    assert (ws / "shared" / "c").stat().st_mode & stat.S_ISGID  # (as mkdir there makes it)


def test_a_read_only_directory_is_written_as_root_and_refused_to_a_user(ws):
    (ws / "ro").mkdir()
    (ws / "ro").chmod(0o555)
    try:
        if os.geteuid() == 0:  # root may write it (as cp or tar would): its mode stays
            ok([*SIM, "--out", "ro"])
            assert stat.S_IMODE((ws / "ro").stat().st_mode) == 0o555 and names(ws / "ro") == RUN
            for p in (ws / "ro").iterdir():
                p.unlink()
        r = as_user([*SIM, "--out", "ro"]) if os.geteuid() == 0 else None
        if r is None:
            result = runner.invoke(app, [*SIM, "--out", "ro"])
            r = subprocess.CompletedProcess([], result.exit_code, "", result.stderr)
        assert (r.returncode, r.stderr) == (2, "error: --out ro: cannot write into it (Permission denied)\n")
        assert names(ws / "ro") == [] and names(ws) == ["ro"]
    finally:
        (ws / "ro").chmod(0o755)


def test_an_empty_directory_under_a_parent_the_user_cannot_write_is_written(ws):
    """Only the directory itself is written now (it was refused: `rop is not writable`)."""
    (ws / "rop" / "out").mkdir(parents=True)
    (ws / "rop").chmod(0o555)
    try:
        r = as_user([*SIM, "--out", "rop/out"]) if os.geteuid() == 0 else None
        if r is None:
            result = runner.invoke(app, [*SIM, "--out", "rop/out"])
            r = subprocess.CompletedProcess([], result.exit_code, "", result.stderr)
        # (the trace's one step fills few of the cluster's slots: that warning, and nothing else)
        assert r.returncode == 0 and r.stderr.count("\n") == 1 and r.stderr.startswith("warning: "), r.stderr
        assert names(ws / "rop") == ["out"] and names(ws / "rop" / "out") == RUN
        # and a rerun replaces that run, in the same place
        r = as_user([*SIM, "--out", "rop/out"]) if os.geteuid() == 0 else None
        if r is not None:
            assert r.returncode == 0 and "note: replacing the previous" in r.stderr, r.stderr
            assert names(ws / "rop") == ["out"] and names(ws / "rop" / "out") == RUN
    finally:
        (ws / "rop").chmod(0o755)


def test_a_mount_point_is_written_into(ws, monkeypatch):
    """A mount point cannot be renamed nor removed (EBUSY), which is all the old way did to an
    empty --out. As root a tmpfs is mounted there; where mounting is not permitted, renaming or
    removing the directory fails as it would on a mount point."""
    mnt = ws / "mnt"
    mnt.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)],
                                                   capture_output=True).returncode == 0
    try:
        if not mounted:
            rename, rmdir = os.rename, os.rmdir

            def busy(path):
                if os.path.abspath(path) == str(mnt):
                    raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))

            monkeypatch.setattr(os, "rename", lambda src, dst, **k: busy(src) or rename(src, dst, **k))
            monkeypatch.setattr(os, "rmdir", lambda path, **k: busy(path) or rmdir(path, **k))
        device = mnt.stat().st_dev
        ok([*SIM, "--out", "mnt"])
        ok([*SIM, "--out", "mnt"])  # and the previous run in it replaced
        assert names(mnt) == RUN and mnt.stat().st_dev == device
        assert json.loads((mnt / "summary.json").read_text())["policy"] == "sync"
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=True)


def test_a_failed_move_leaves_the_previous_run_whole(ws, monkeypatch):
    """The third entry's move in fails: the two before it go back, the previous run comes back
    (its marker last), and the work directories go: the directory is as it was."""
    ok([*SIM, "--out", "run", "--timeline", "jsonl"])
    (ws / "run" / "timeline.html").write_text("a plot page of the run")  # (the run's: replaced with it)
    before = snapshot(ws)
    rename, moved = os.rename, []

    def third_fails(src, dst, **k):
        if os.path.basename(os.path.dirname(src)).startswith(".sortedrl-new-"):
            moved.append(os.path.basename(src))
            if len(moved) == 3:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), src)
        return rename(src, dst, **k)

    monkeypatch.setattr(os, "rename", third_fails)
    r = runner.invoke(app, [*SIM, "--out", "run"])
    assert (r.exit_code, r.stderr.splitlines()[-1]) == (2, "error: --out run: cannot write (Permission denied)")
    assert moved == ["summary.json", "timeline.npz", MARKER]  # (the marker moves in last)
    assert snapshot(ws) == before


def test_a_ctrl_c_during_the_moves_waits_until_the_new_run_is_in(ws, monkeypatch, sigint_raises):
    ok([*SIM, "--out", "run"])
    outs = Outputs("simulate", force=True)
    out = outs.run_dir(Path("run"), Path("run"))
    rename, calls = os.rename, []

    def interrupted(src, dst, **k):
        rename(src, dst, **k)
        calls.append(dst)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(Interrupted):
        outs.write({out: {"a.txt": write_text("a"), "b.txt": write_text("b")}})
    # the previous run's three out, the new run's three in: all before the interrupt
    assert len(calls) == 6 and names(ws / "run") == [MARKER, "a.txt", "b.txt"]
    assert json.loads((ws / "run" / MARKER).read_text())["files"] == ["a.txt", "b.txt"]


def test_what_a_killed_run_left_inside_is_the_runs(ws):
    """A command killed outright (SIGKILL) leaves its work directories in the run directory:
    they are the run's, replaced with it; alone, the directory counts as empty. One that holds
    a previous run moved aside (killed between the moves) is not: no marker, refused."""
    ok([*SIM, "--out", "run"])
    for work in (".sortedrl-scratch-k1ll3d00", ".sortedrl-new-k1ll3d00"):
        (ws / "run" / work).mkdir()
        (ws / "run" / work / "timeline.npz").write_text("half")
    r = ok([*SIM, "--out", "run"])
    assert "note: replacing the previous `sortedrl simulate` run in run" in r.stderr
    assert names(ws / "run") == RUN
    (ws / "empty" / ".sortedrl-scratch-k1ll3d00").mkdir(parents=True)
    ok([*SIM, "--out", "empty"])
    assert names(ws / "empty") == RUN
    (ws / "mixed" / ".sortedrl-old-k1ll3d00").mkdir(parents=True)
    (ws / "mixed" / "summary.json").write_text("{}")
    r = runner.invoke(app, [*SIM, "--out", "mixed"])
    assert (r.exit_code, r.stderr) == (2, "error: --out mixed: not empty (files not written by sortedrl: "
                                          "summary.json); give another directory, or --force to "
                                          "replace it, deleting them\n")


def test_the_scratch_directory_is_inside_a_directory_written_into(ws, monkeypatch):
    """A long run's timeline waits in the place checked writable: the directory itself."""
    (ws / "out").mkdir()
    seen = []
    import sortedrl.cli as cli

    real = cli.run_simulation

    def spy(*args, spill_dir=None, **kwargs):
        seen.append(spill_dir)
        return real(*args, spill_dir=spill_dir, **kwargs)

    monkeypatch.setattr(cli, "run_simulation", spy)
    ok([*SIM, "--out", "out"])
    ok([*SIM, "--out", "new"])
    assert seen[0].parent == ws / "out" and seen[0].name.startswith(".sortedrl-scratch-")
    assert seen[1].parent == ws and seen[1].name.startswith(".new.scratch-")
    assert names(ws) == ["new", "out"] and names(ws / "out") == RUN


def test_an_interrupted_write_names_the_folder_holding_the_previous_run(ws):
    """A command killed outright between its moves (the state built here by hand) leaves the
    previous run, marker first, in a ``.sortedrl-old-*`` folder: the rerun says so and names
    it, rather than call it files not written by sortedrl and point at --force alone, which
    deletes it. Its entries moved back, the rerun replaces it; --force discards it."""
    ok([*SIM, "--out", "run"])
    old = ws / "run" / ".sortedrl-old-k1ll3d00"
    old.mkdir()
    for name in RUN:
        os.rename(ws / "run" / name, old / name)
    (ws / "run" / ".sortedrl-new-k1ll3d00").mkdir()
    (ws / "run" / ".sortedrl-new-k1ll3d00" / "timeline.npz").write_text("the new run's, not yet moved in")
    (ws / "run" / ".sortedrl-scratch-k1ll3d00").mkdir()
    message = ("error: --out run: holds an interrupted sortedrl write; the previous run is in "
               "run/.sortedrl-old-k1ll3d00: move its entries back into run, or --force to discard it\n")
    for moved_in in (False, True):  # (killed before or after the first new entry was moved in)
        if moved_in:
            (ws / "run" / "summary.json").write_text("{}")
        before = snapshot(ws)
        r = runner.invoke(app, [*SIM, "--out", "run"])
        assert (r.exit_code, r.stderr) == (2, message)
        assert snapshot(ws) == before
    (ws / "run" / "summary.json").unlink()
    for name in RUN:
        os.rename(old / name, ws / "run" / name)
    r = ok([*SIM, "--out", "run"])
    assert "note: replacing the previous `sortedrl simulate` run in run" in r.stderr
    assert names(ws / "run") == RUN  # (the work folders left over went with the previous run)
    old.mkdir()
    for name in RUN:
        os.rename(ws / "run" / name, old / name)
    r = ok([*SIM, "--out", "run", "--force"])
    assert "note: replacing run (--force)" in r.stderr and names(ws / "run") == RUN


def test_a_ctrl_c_as_the_scratch_folder_is_made_leaves_none(ws, monkeypatch, sigint_raises):
    """The in---out scratch folder is made and noted with signals held (as scratch.temp_scratch
    does), its removal in a finally over the whole: a Ctrl-C just after the mkdir left it."""
    import sortedrl.outputs as outputs

    (ws / "out").mkdir()
    outs = Outputs("simulate")
    out = outs.run_dir(Path("out"), Path("out"))
    made, mkdtemp = [], outputs.tempfile.mkdtemp

    def interrupted(*args, **kwargs):
        made.append(mkdtemp(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGINT)
        return made[-1]

    monkeypatch.setattr(outputs.tempfile, "mkdtemp", interrupted)
    with pytest.raises(Interrupted), outs.scratch(out):
        raise AssertionError("the interrupt waits for the folder to be noted, then stops the block")
    assert Path(made[0]).name.startswith(f".sortedrl-scratch-{os.getpid()}-")
    assert names(ws / "out") == [] and outs.work == set()
