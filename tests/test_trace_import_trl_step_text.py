"""`trace import --from trl` on the completions table as TRL writes it: every GRPOTrainer builds
it with ``"step": [str(self.state.global_step)] * n``, so W&B's ``*.table.json`` (and the Parquet
file, from the same table) holds the step as text, ``"10"``. It was refused (``field 'step': '10'
is not an integer``); it reads as the number, the trace equal to the one with integer steps. Text
that is no whole number is still one error line naming the file, row and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces import read_trace
from sortedrl.traces.importers import import_framework

runner = CliRunner()
FIXTURE = Path(__file__).parent / "fixtures" / "frameworks" / "trl_completions.table.json"
COMPARED = ("prompt_id", "sample", "step", "prompt_len", "response_len", "truncated", "reward")


def _wandb_table(step_text) -> dict:
    """The fixture as W&B exports TRL's table: each step cell ``step_text(step)``, and the
    keys W&B adds besides ``columns`` and ``data``."""
    table = json.loads(FIXTURE.read_text())
    for row in table["data"]:
        row[0] = step_text(row[0])
    return {"_type": "table", **table, "ncols": len(table["columns"]),
            "nrows": len(table["data"]), "column_types": {"params": {"type_map": {}},
                                                          "wb_type": "typedDict"}}


def _same_trace(a, b) -> None:
    for name in COMPARED:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_a_wandb_table_with_the_step_as_text_reads_as_the_number(tok, tmp_path) -> None:
    # as TRL writes it, one file per logged table: completions_{step}_{hash}.table.json
    expected, _ = import_framework("trl", FIXTURE, tok)
    table = _wandb_table(str)
    dump = tmp_path / "wandb"
    dump.mkdir()
    for step in (0, 10):
        rows = [r for r in table["data"] if r[0] == str(step)]
        (dump / f"completions_{step}_abc123.table.json").write_text(
            json.dumps({**table, "data": rows, "nrows": len(rows)}))
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", str(dump), "--from", "trl", "--tokenizer",
                            str(tok), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "24 samples from 2 trl file(s), 6 groups x 4 over 2 step(s)" in r.output
    trace = read_trace(out)
    assert trace.step[::4].tolist() == [0, 0, 0, 10, 10, 10]
    assert trace.response_len.tolist() == expected.response_len.tolist()
    _same_trace(trace, expected)


def test_step_text_with_spaces_and_in_parquet_reads_as_the_number(tok, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    expected, _ = import_framework("trl", FIXTURE, tok)
    spaced = tmp_path / "c.table.json"
    spaced.write_text(json.dumps(_wandb_table(lambda step: f" {step}\t")))
    _same_trace(import_framework("trl", spaced, tok)[0], expected)

    table = _wandb_table(str)
    parquet = tmp_path / "completions" / "completions_00010.parquet"
    parquet.parent.mkdir()
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in zip(*table["data"], strict=True)],
                                        names=table["columns"]), parquet)
    assert pq.read_schema(parquet).field("step").type == pa.string()
    trace, report = import_framework("trl", parquet.parent, tok)
    assert (report.files, report.rows, report.steps) == (1, 24, 2)
    _same_trace(trace, expected)


@pytest.mark.parametrize("step", ["ten", "1.5", "", "1e3", "10 0", "-1"])
def test_step_text_that_is_no_whole_number_is_one_error_line(tok, tmp_path, step) -> None:
    table = _wandb_table(str)
    table["data"][2][0] = step
    bad = tmp_path / "c.table.json"
    bad.write_text(json.dumps(table))
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", str(bad), "--from", "trl", "--tokenizer", str(tok),
                            "--out", str(out)])
    why = "-1 is below 0" if step == "-1" else f"{step!r} is not an integer"
    assert (r.exit_code, r.output.strip().splitlines()) == (
        2, [f"error: {bad}: row 3: field 'step': {why}"])
    assert not out.exists()
