"""``sortedrl validate RUNDIR --out FILE.json`` writes the result elsewhere, RUNDIR untouched.

Testers found that validate always wrote RUNDIR/validate.json: a run directory from someone else,
a read-only one, or one not to be changed could not be validated (a read-only one was
``error: validate.json RUNDIR/validate.json: RUNDIR is not writable``, naming no option), and
``--json`` printed RUNDIR/validate.json back, whatever had been written. On a copy of the small
real run tests/fixtures/run-sync and its profile tests/fixtures/cpu-profile.json.

Run: pytest tests/test_validate_out.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
RUN, PROFILE = FIX / "run-sync", FIX / "cpu-profile.json"
runner = CliRunner()


def files(top: Path) -> dict:
    return {p.relative_to(top): (p.read_bytes() if p.is_file() else "dir") for p in sorted(top.rglob("*"))}


def validate(run: Path, *args: str):
    return runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), *args])


@pytest.fixture
def run(tmp_path) -> Path:
    return Path(shutil.copytree(RUN, tmp_path / "run"))


def test_out_writes_the_same_result_elsewhere_and_leaves_rundir_untouched(run, tmp_path):
    (run / "validate.json").write_text("{}\n")  # an earlier result: --json printed it back
    before = files(run)
    out = tmp_path / "results" / "v.json"  # (its directory is made)
    r = validate(run, "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    assert files(run) == before
    assert r.stdout == out.read_text()  # the file written, not RUNDIR/validate.json
    result = json.loads(out.read_text())
    assert (result["policy"], len(result["steps"])) == ("sync", 4)

    r = validate(run, "--out", str(out))  # the table, then where it went
    assert r.exit_code == 2 and r.stderr == f"error: --out {out}: exists (add --force to overwrite it)\n"
    r = validate(run, "--out", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {out}"
    assert r.stderr == f"note: replacing {out}\n"
    assert files(run) == before

    r = validate(run)  # the default is as before: RUNDIR/validate.json, replaced with a note
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {run / 'validate.json'}"
    assert r.stderr == f"note: replacing {run / 'validate.json'}\n"
    assert json.loads((run / "validate.json").read_text()) == result


@pytest.mark.parametrize("target, message", [
    ("{run}/summary.json", "is an input of this command; write the output elsewhere"),
    ("{profile}", "is an input of this command; write the output elsewhere"),
    ("{tmp}", "is a directory, not a file"),
    ("{tmp}/v.txt", "validate writes JSON (give a .json file)"),
])
def test_out_refuses_an_input_a_directory_or_another_ending_and_writes_nothing(run, tmp_path, target, message):
    out = target.format(run=run, profile=PROFILE, tmp=tmp_path)
    before = files(tmp_path)
    r = validate(run, "--out", out, "--force")  # (--force does not let an input be replaced)
    assert (r.exit_code, r.stderr) == (2, f"error: --out {out}: {message}\n")
    assert files(tmp_path) == before


def test_out_and_plot_may_not_be_one_file(run, tmp_path):
    out = tmp_path / "v.json"
    r = validate(run, "--out", str(out), "--plot", str(tmp_path / "v.html"))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {out} and {tmp_path / 'v.html'}"
    before = files(tmp_path)
    both = tmp_path / "both.json"
    r = validate(run, "--out", str(both), "--plot", str(both))
    assert (r.exit_code, r.stderr) == (2, f"error: --plot {both}: overlaps --out {both}; give separate paths\n")
    assert files(tmp_path) == before


def _as_user(args: list[str]) -> list[str]:
    """``args`` without root's power to write anywhere (as a user's command would run)."""
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    return [*(drop if os.geteuid() == 0 else []), *args]


def test_a_read_only_rundir_validates_with_out_and_without_it_is_one_error_line(run, tmp_path):
    before = files(run)
    for p in [run, *run.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    out = tmp_path / "v.json"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(_as_user([sys.executable, "-m", "sortedrl.cli", "validate", "run",
                                        "--profile", str(PROFILE), *args]),
                              cwd=tmp_path, capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    try:
        refused = cli()
        done = cli("--out", "v.json")
    finally:
        run.chmod(0o755)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == ("error: run: is not writable, and validate writes its result there "
                              "(run/validate.json); give --out FILE.json to write it elsewhere\n")
    assert done.returncode == 0, done.stderr
    assert (done.stdout.splitlines()[-1], done.stderr) == ("wrote v.json", "")
    assert json.loads(out.read_text())["policy"] == "sync"
    assert files(run) == before


def test_a_plot_that_cannot_be_written_names_plot_not_its_temporary_file(run, tmp_path):
    # was: `error: /tmp/.../.v.html.tmp-_iheyml5.html: cannot write (File too large)`, the staged
    # copy's name (the page wrote itself through a second temporary file of its own)
    import resource

    out, plot = tmp_path / "o" / "v.json", tmp_path / "o" / "v.html"
    limit = 200_000  # bytes: validate.json fits, the page (plotly inlined) does not

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([sys.executable, "-m", "sortedrl", "validate", str(run), "--profile",
                        str(PROFILE), "--out", str(out), "--plot", str(plot)],
                       capture_output=True, text=True, preexec_fn=small_files, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stderr) == (2, f"error: --plot {plot}: cannot write (File too large)\n")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
