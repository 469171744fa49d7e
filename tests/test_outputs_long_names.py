"""Any valid output name can be written: its temporary and backup siblings fit in 255 bytes.

An audit (cliout41): ``--out lo/ddd…`` of 240 letters failed with ``cannot write (File name
too long)``, since the scratch and staging siblings ``.NAME.scratch-XXXXXXXX`` and
``.NAME.tmp-XXXXXXXX`` add up to 22 bytes to the name. A long name's asides are shortened now
(sortedrl.aside); a short name's are as they were.

Run: pytest tests/test_outputs_long_names.py
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from sortedrl.aside import aside, suffix
from sortedrl.cli import app
from sortedrl.outputs import MARKER

runner = CliRunner()
SMALL = ["--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--steps", "2"]
SIM = ["simulate", *SMALL, "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_short_names_asides_are_as_they_were():
    assert aside("summary.json", "tmp-") == ".summary.json.tmp-"
    assert aside("run", "scratch-") == ".run.scratch-"
    assert aside("timeline.html", "") == ".timeline.html."
    assert aside("d" * 221, "scratch-") == f".{'d' * 221}.scratch-"  # (the longest kept whole)
    assert suffix(".npz") == ".npz" and suffix("." + "x" * 16) == "" and suffix("") == ""


@pytest.mark.parametrize("name", ["d" * 230, "d" * 255, "é" * 127, "a" + "é" * 127, "€" * 85])
def test_a_long_names_asides_fit_and_cut_no_character(name):
    assert len(name.encode()) <= 255
    for tag in ("tmp-", "old-", "scratch-", ""):
        prefix = aside(name, tag)
        raw = os.fsencode(prefix)
        assert len(raw) + 24 <= 255  # (mkstemp's 8 random characters and a suffix of 16)
        head, digest = prefix[1:].rsplit(f".{tag}", 1)[0].rsplit("~", 1)
        assert name.startswith(head) and len(digest) == 8 and raw.decode() == prefix
    # two long names that begin alike have their own asides
    assert aside(name[:-1] + "1", tag) != aside(name[:-1] + "2", tag)


def test_a_run_directory_and_a_file_of_255_bytes_are_written_and_replaced(ws):
    out, trace = "d" * 255, "p" * 250 + ".json"
    for force in ([], ["--force"]):  # (then both are replaced: the old ones moved aside first)
        r = runner.invoke(app, [*SIM, "--out", out, "--perfetto", trace, *force])
        assert r.exit_code == 0, r.output
    assert sorted(p.name for p in ws.iterdir()) == [out, trace]
    assert sorted(p.name for p in (ws / out).iterdir()) == [MARKER, "summary.json", "timeline.npz"]
    assert json.loads((ws / trace).read_text())["traceEvents"]
    r = runner.invoke(app, ["plot", out])  # (its page, timeline.html, staged in the directory)
    assert r.exit_code == 0, r.output


def test_the_audits_out_of_240_letters_in_a_new_directory(ws):
    out = "lo/" + "d" * 240
    r = runner.invoke(app, [*SIM, "--out", out, "--timeline", "jsonl"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {out}/summary.json and {out}/timeline.jsonl"
    assert [p.name for p in (ws / "lo").iterdir()] == ["d" * 240]


def test_compare_into_a_long_name(ws):
    out = "c" * 255
    r = runner.invoke(app, ["compare", *SMALL, "--policy", "sync", "--policy", "sortedrl", "--cluster",
                            "h100-llama3.1-8b-2gpu", "--out", out])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (ws / out).iterdir()) == [MARKER, "compare.json", "sortedrl", "sync"]


def test_the_other_writers_of_a_file_beside_its_name(tmp_path):
    """A timeline, a profile, a plot page and a model directory are each built beside their
    path too (each with its own kind of temporary name)."""
    from sortedrl.plot.page import atomic_write
    from sortedrl.realrun.model import save_aside
    from sortedrl.sim.profile import write_profile
    from sortedrl.timeline_jsonl import write_atomic

    write_atomic(tmp_path / ("t" * 249 + ".jsonl"), lambda f: f.write("{}\n"), "w")
    write_profile(tmp_path / ("p" * 250 + ".json"), {"sortedrl_profile": 1})
    atomic_write({tmp_path / ("h" * 250 + ".html"): "<html></html>"})
    save_aside(tmp_path / ("m" * 255), lambda tmp: (tmp / "config.json").write_text("{}"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["t" * 249 + ".jsonl", "p" * 250 + ".json", "h" * 250 + ".html", "m" * 255])
    assert (tmp_path / ("m" * 255) / "config.json").read_text() == "{}"


@pytest.mark.parametrize("command", [
    ["trace", "synth", "logic-8k", "--prompts", "4", "--group-size", "2", "--steps", "1"],
    ["trace", "import", "{csv}", "--prompt-len-col", "p", "--response-len-col", "r", "--group-size", "2"],
])
def test_a_trace_of_a_long_name_is_written(ws, command):
    # trace synth and trace import wrote through traces.io.atomic_write, whose temporary file
    # (.NAME.XXXXXXXX.tmp) still took the name whole: 240 letters failed, File name too long
    (ws / "in.csv").write_text("p,r\n10,20\n11,21\n12,22\n13,23\n")
    name = "t" * 240 + ".jsonl"
    r = runner.invoke(app, [*(a.format(csv=ws / "in.csv") for a in command), "--out", name])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(ws)) == sorted(["in.csv", name])  # (no temporary left)
    assert json.loads((ws / name).read_text().splitlines()[0])  # the header record, whole
