"""Output paths as users spell them: ``..`` in ``--out``, outputs inside input directories,
``run --perfetto`` checked with the run's other paths, and a failed write that leaves nothing.

Each refused case is one ``error:`` line, exit 2, and nothing created or changed in the
working directory.

Run: pytest tests/test_outputs_paths.py
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl import outputs
from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
NEMO = ROOT / "tests" / "fixtures" / "frameworks" / "nemo_rl_logs"
runner = CliRunner()
SIM = ["simulate", "--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--policy", "sync"]


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def refused(args: list[str], root: Path) -> str:
    """The one error line of ``args``, which must change nothing under ``root``."""
    before = snapshot(root)
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    assert snapshot(root) == before
    return lines[0]


def test_a_run_directory_given_with_dotdot_is_written(tmp_path, monkeypatch):
    """`--out ../sim` ended in `AssertionError: summary.json escapes ../sim` after the work."""
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path / "x")
    r = runner.invoke(app, [*SIM, "--out", "../sim_x", "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "sim_x").iterdir()) == [".sortedrl-run", "summary.json",
                                                                       "timeline.npz"]
    r = runner.invoke(app, [*SIM, "--out", str(tmp_path / "x" / ".." / "sim_y"), "--perfetto",
                            "nodir/../p.json", "--json"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "sim_y" / "summary.json").is_file() and (tmp_path / "x" / "p.json").is_file()
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        [".sortedrl-run", ".sortedrl-run", "p.json", "sim_x", "sim_y", "summary.json", "summary.json",
         "timeline.npz", "timeline.npz", "x"])  # no `nodir`, no temp left


def test_a_file_given_with_dotdot_is_written_and_no_directory_is_left(tmp_path, monkeypatch):
    """`--out nodir/../t.jsonl` made `nodir`, failed on `nodir/..` and left `nodir` behind."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["trace", "synth", "logic-8k", "--steps", "1", "--out", "nodir/../t.jsonl"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("wrote nodir/../t.jsonl: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    # nor may `..` get an output past the checks onto its input
    assert refused(["trace", "synth", "logic-8k", "--out", "nodir/../t.jsonl"], tmp_path) == (
        "error: --out nodir/../t.jsonl: exists (add --force to overwrite it)")


def test_a_directory_made_before_a_failure_is_removed(tmp_path, monkeypatch):
    """Each missing parent is undone on a failure, also when making a later one fails."""
    out = tmp_path / "a" / "b" / "c" / "f.txt"
    outs = outputs.Outputs("test")
    outs.file(out, "--out")
    mkdir, made = Path.mkdir, []

    def second_fails(self, *args, **kwargs):
        if made:
            raise PermissionError(13, "Permission denied", str(self))
        made.append(self)
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", second_fails)
    with pytest.raises(outputs.OutputError) as e:
        outs.write({out: outputs.write_text("x")})
    assert str(e.value) == f"--out {out}: cannot write (Permission denied)"
    assert made == [tmp_path / "a"] and list(tmp_path.iterdir()) == []


def test_an_output_inside_an_input_directory_is_refused(tmp_path, monkeypatch):
    """`trace import DIR --from nemo-rl --out DIR/train_data_step3.jsonl` was written, and the
    next import of DIR read it as a step of the dump."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(NEMO, tmp_path / "nr")
    for force in ([], ["--force"]):
        assert refused(["trace", "import", "nr", "--from", "nemo-rl", "--out", "nr/train_data_step3.jsonl",
                        *force], tmp_path) == ("error: --out nr/train_data_step3.jsonl: is inside the input "
                                               "directory nr; write the output elsewhere")
    r = runner.invoke(app, ["trace", "import", "nr", "--from", "nemo-rl", "--out", "nr/../t.jsonl"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.jsonl").is_file()


@pytest.fixture
def model_ws(tmp_path, monkeypatch):
    """A model directory (as copied from elsewhere) and a dataset: `run`'s inputs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / "m" / name).write_text("{}")
    (tmp_path / "data.jsonl").write_text('{"prompt": "a", "answer": "a"}\n')
    return tmp_path


RUN = ["run", "--model", "m", "--dataset", "data.jsonl", "--policy", "sync", "--steps", "1", "--out", "rr"]


@pytest.mark.parametrize("perfetto, message", [
    ("m/config.json", "is an input of this command; write the output elsewhere"),
    ("m/tokenizer.json", "is an input of this command; write the output elsewhere"),
    ("data.jsonl", "is an input of this command; write the output elsewhere"),
    ("rr/timeline.jsonl", "overlaps --out rr; give separate paths"),
    ("rr", "overlaps --out rr; give separate paths"),
])
def test_run_perfetto_is_checked_against_the_inputs_and_out(model_ws, perfetto, message):
    """After a real run its Chrome trace would have replaced the model's config.json, the
    dataset, or the run's own timeline: now each is refused before any work."""
    assert refused([*RUN, "--perfetto", perfetto, "--force"], model_ws) == f"error: --perfetto {perfetto}: {message}"


def test_a_new_file_beside_the_models_files_is_not_refused(model_ws):
    """A model directory is not read as a whole (only its named files), so a new file there is
    the user's to make: the run goes on to its own checks (here: a model without weights)."""
    line = refused([*RUN, "--perfetto", "m/p.json"], model_ws)
    assert "--perfetto" not in line and "no *.safetensors weights" in line, line


def test_run_perfetto_where_no_file_can_be_made_is_refused_before_the_run(model_ws):
    line = refused([*RUN, "--perfetto", "/proc/x/p.json"], model_ws)
    assert line.startswith("error: --perfetto /proc/x/p.json: "), line


def test_a_failed_read_names_the_file():
    """It was `error: output: Input/output error`: an input called an output, and not named."""
    r = runner.invoke(app, ["profile", "show", "/proc/self/mem"])
    assert r.exit_code == 2, r.output
    assert r.stderr == "error: /proc/self/mem: cannot read it (Input/output error)\n"
