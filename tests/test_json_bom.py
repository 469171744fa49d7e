"""JSON inputs with a UTF-8 byte-order mark (a Windows editor writes one) read as without it:
clusters, profiles, trace models, framework dumps, and the readers that read a profile again
after ``load_cluster`` (validate's Ray terms, calibrate's base profile) or a run's dataset.
``json.loads`` refused the mark ("Unexpected UTF-8 BOM"), while traces in JSONL and CSV took it.
An empty JSON input (or one of white space, or of the mark alone) is one error saying so.

Run: pytest tests/test_json_bom.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl import jsonio
from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import load_cluster
from sortedrl.traces.importers import import_framework
from sortedrl.traces.model import load_model
from tests.cli_helpers import fittable_trace as _fittable
from tests.cli_helpers import invoke_ok as _ok

FIX = Path(__file__).resolve().parent / "fixtures"
DUMPS = FIX / "frameworks"
BOM = b"\xef\xbb\xbf"


# -- a UTF-8 byte-order mark before JSON ------------------------------------------------------


def _bom(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(BOM + src.read_bytes())
    return dst


def test_jsonio_read_skips_a_byte_order_mark_and_counts_it_in_a_bad_byte(tmp_path):
    p = tmp_path / "c.json"
    p.write_bytes(BOM + b'{"preset": "h100-llama3.1-8b-2gpu"}')
    assert jsonio.read(p, ConfigError) == {"preset": "h100-llama3.1-8b-2gpu"}
    p.write_bytes(BOM + b'{"preset": "\xff"}')
    with pytest.raises(ConfigError) as e:
        jsonio.read(p, ConfigError)
    assert str(e.value) == f"{p}: not UTF-8 text (byte 15)"


def test_a_cluster_file_and_a_profile_with_a_byte_order_mark_load(tmp_path):
    plain = tmp_path / "plain" / "c.json"
    plain.parent.mkdir()
    plain.write_bytes(b'{"preset": "h100-llama3.1-8b-2gpu", "gpus": 4}')
    cluster = _bom(plain, tmp_path / "bom" / "c.json")
    assert load_cluster(str(cluster)) == load_cluster(str(plain))
    assert load_cluster(str(cluster)).gpus == 4
    profile = _bom(FIX / "cpu-profile.json", tmp_path / "bom" / "cpu-profile.json")
    plain = shutil.copy(FIX / "cpu-profile.json", tmp_path / "plain" / "cpu-profile.json")
    assert load_cluster(str(profile)) == load_cluster(str(plain))
    shown = _ok(["profile", "show", str(profile)])
    assert shown == _ok(["profile", "show", str(plain)]).replace(str(plain), str(profile))
    assert shown.startswith(f"profile {profile} (format 1)\n")


def test_simulate_takes_a_cluster_and_a_trace_model_with_a_byte_order_mark(tmp_path):
    trace = _fittable(tmp_path / "t.jsonl")
    plain = tmp_path / "m.json"
    _ok(["trace", "fit", str(trace), "--out", str(plain), "--json"])
    model = _bom(plain, tmp_path / "bom" / "m.json")
    assert load_model(model) == load_model(plain)
    cluster = tmp_path / "c.json"
    cluster.write_bytes(BOM + b'{"preset": "h100-llama3.1-8b-2gpu"}')
    out = _ok(["simulate", "--trace-model", str(model), "--steps", "1", "--policy", "sync",
               "--cluster", str(cluster), "--out", str(tmp_path / "run")])
    assert out.endswith(f"wrote {tmp_path / 'run' / 'summary.json'} and "
                        f"{tmp_path / 'run' / 'timeline.npz'}\n")


@pytest.mark.parametrize("framework, dump", [("verl", "verl_rollout"),
                                             ("nemo-rl", "nemo_rl_logs"),
                                             ("trl", "trl_completions.table.json")])
def test_a_framework_dump_with_a_byte_order_mark_imports_as_without(tmp_path, tokenizer,
                                                                    framework, dump):
    src = DUMPS / dump
    files = sorted(src.iterdir()) if src.is_dir() else [src]
    dst = tmp_path / dump
    for f in files:
        _bom(f, dst / f.name if src.is_dir() else dst)
    tok = None if framework == "nemo-rl" else tokenizer
    plain, plain_report = import_framework(framework, src, tok)
    marked, marked_report = import_framework(framework, dst, tok)
    assert marked == plain and marked_report == plain_report
    assert len(plain) > 0


def test_the_readers_after_load_cluster_take_a_byte_order_mark_too(tmp_path):
    """validate's Ray terms and calibrate's base profile read the profile again: a mark read
    there as no terms at all (validate) or a traceback (calibrate)."""
    from sortedrl.calibration.build import _base_profile
    from sortedrl.realrun.dataset import read_rows
    from sortedrl.validate import _ray_terms

    raw = json.loads((FIX / "cpu-profile.json").read_text())
    raw["fit"]["shared_host"] = {"ray_step_factor": 1.25, "step_overhead_s": 0.5}
    plain = tmp_path / "plain" / "p.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(raw))
    marked = _bom(plain, tmp_path / "bom" / "p.json")
    assert _ray_terms(str(marked)) == {"ray_step_factor": 1.25, "step_overhead_s": 0.5}
    cluster = load_cluster(str(plain))
    assert _base_profile(str(marked), cluster) == _base_profile(str(plain), cluster)
    data = tmp_path / "plain" / "data.jsonl"
    data.write_text('{"prompt": "sort 2 1 =", "answer": "1 2"}\n')
    numbers, rows = read_rows(_bom(data, tmp_path / "bom" / "data.jsonl"))
    assert (numbers, [(r.prompt, r.answer) for r in rows]) == ([1], [("sort 2 1 =", "1 2")])


# -- an empty JSON input ----------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"\n  \n", BOM])
def test_an_empty_json_input_is_one_error_saying_empty(tmp_path, body):
    # json's "Expecting value: line 1 column 1 (char 0)" said less, beside "empty file" elsewhere
    p = tmp_path / "p.json"
    p.write_bytes(body)
    with pytest.raises(ConfigError) as e:
        jsonio.read(p, ConfigError)
    assert str(e.value) == f"{p}: empty file"
    for args in (["profile", "show", str(p)],
                 ["calibrate", "--from-vllm-bench", str(p), "--cluster", "h100-llama3.1-8b",
                  "--out", str(tmp_path / "out.json")]):
        r = CliRunner().invoke(app, args)
        assert (r.exit_code, r.output.strip().splitlines()) == (2, [f"error: {p}: empty file"])
    assert not (tmp_path / "out.json").exists()
