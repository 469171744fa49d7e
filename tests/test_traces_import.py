"""Importing public per-request tables (the Azure conversation trace head and hand-made tables)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sortedrl.errors import ConfigError, TraceError
from sortedrl.traces import (
    ImportReport,
    TraceMeta,
    import_table,
    import_table_with_report,
    read_trace,
    write_trace,
)

FIXTURE = Path(__file__).parent / "fixtures" / "splitwise_conv_head.csv"
COLS = ("num_prefill_tokens", "num_decode_tokens")
PREFILL = [
    374, 396, 879, 91, 91, 381, 1313, 388, 242, 209, 394, 394, 1315, 2221, 389, 415,
    120, 369, 206, 1353, 197, 181, 388, 4085, 2584, 203, 126, 389, 2548, 91, 4081, 181,
    191, 27, 203, 398, 126, 209, 209, 28, 437, 181, 203, 200, 4073, 91, 1087, 382,
]  # fmt: skip
DECODE = [
    44, 109, 55, 16, 16, 84, 142, 84, 14, 152, 124, 59, 174, 15, 90, 106,
    12, 74, 162, 142, 152, 154, 54, 62, 170, 147, 194, 87, 116, 16, 74, 123,
    217, 183, 217, 81, 172, 181, 181, 175, 88, 104, 138, 177, 58, 16, 401, 64,
]  # fmt: skip


def test_azure_conversation_head_in_groups_of_four() -> None:
    trace, report = import_table_with_report(FIXTURE, *COLS, group_size=4)
    assert report == ImportReport(rows=50, prompts=12, dropped_rows=2, clipped_rows=0, mixed_groups=12)
    assert trace.meta == TraceMeta(max_response_len=401, group_size=4, source=FIXTURE.name)
    assert len(trace) == 48
    assert trace.prompt_id.tolist() == [f"p{i:06d}" for i in range(12) for _ in range(4)]
    assert trace.sample.tolist() == [0, 1, 2, 3] * 12
    assert trace.prompt_len.tolist() == PREFILL
    assert trace.response_len.tolist() == DECODE
    assert np.flatnonzero(trace.truncated).tolist() == [46]  # the 401-token response is the max
    assert trace.finish_reason[46] == "length"
    assert set(trace.finish_reason[np.arange(48) != 46].tolist()) == {"stop"}
    assert trace.step is None and trace.reward is None


def test_given_cap_clips_and_marks_truncated() -> None:
    trace, report = import_table_with_report(
        FIXTURE, *COLS, group_size=1, max_response_len=150, source="azure-conv"
    )
    over = [v for v in DECODE + [102, 217] if v > 150]
    assert report == ImportReport(rows=50, prompts=50, dropped_rows=0, clipped_rows=len(over))
    assert trace.meta == TraceMeta(150, 1, "azure-conv")
    assert trace.response_len.max() == 150
    assert trace.truncated.sum() == len(over)  # no row is exactly 150 before clipping
    assert trace.prompt_id[-1] == "p000049"


def test_round_trip_of_an_imported_trace(tmp_path: Path) -> None:
    trace = import_table(FIXTURE, *COLS, group_size=4)
    write_trace(trace, tmp_path / "azure.parquet")
    assert read_trace(tmp_path / "azure.parquet") == trace


def test_jsonl_table_detected_by_content(tmp_path: Path) -> None:
    p = tmp_path / "requests.txt"
    rows = [{"in": 10, "out": 5.0, "id": "r1"}, {"in": 12, "out": 7, "id": "r2"}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    t = import_table(p, "in", "out", group_size=2)
    assert t.response_len.tolist() == [5, 7] and t.truncated.tolist() == [False, True]
    assert t.prompt_id.tolist() == ["p000000", "p000000"]


def test_wide_ids_when_many_prompts(tmp_path: Path) -> None:
    p = tmp_path / "many.csv"
    p.write_text("a,b\n" + "3,4\n" * 1_000_001)
    t = import_table(p, "a", "b")
    assert t.prompt_id[0] == "p0000000" and t.prompt_id[-1] == "p1000000"


def _err(tmp_path: Path, content: str, **kw: object) -> str:
    p = tmp_path / "t.csv"
    p.write_text(content)
    with pytest.raises(TraceError) as e:
        import_table(p, "pl", "rl", **kw)  # type: ignore[arg-type]
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: ")
    return msg[len(f"{p}: ") :]


def test_missing_column_lists_available(tmp_path: Path) -> None:
    assert _err(tmp_path, "pl,resp\n1,2\n") == "no column 'rl'; available columns: 'pl', 'resp'"
    p = tmp_path / "t.jsonl"
    p.write_text('{"pl": 1, "x": 2}\n')
    with pytest.raises(TraceError) as e:
        import_table(p, "pl", "rl")
    assert str(e.value) == f"{p}: no column 'rl'; available columns: 'pl', 'x'"
    p.write_text('{"pl": 1, "rl": 2}\n{"pl": 1}\n')
    with pytest.raises(TraceError) as e:
        import_table(p, "pl", "rl")
    assert str(e.value) == f"{p}: line 2: missing column 'rl'"


@pytest.mark.parametrize(
    ("cell", "shown"), [("0", "'0'"), ("-4", "'-4'"), ("2.5", "'2.5'"), ("abc", "'abc'")]
)
def test_bad_length_names_line_and_column(tmp_path: Path, cell: str, shown: str) -> None:
    assert _err(tmp_path, f"pl,rl\n5,6\n5,{cell}\n") == (
        f"line 3: column 'rl': {shown} is not a positive integer"
    )


def test_other_table_errors(tmp_path: Path) -> None:
    assert _err(tmp_path, "") == "empty file"
    assert _err(tmp_path, "pl,rl\n") == "no data rows after the header"
    assert _err(tmp_path, "pl,rl\n1,2\n1,2,3\n") == "line 3: expected 2 fields, got 3"
    assert _err(tmp_path, "pl,rl\n1,2\n", group_size=2) == "1 data rows, fewer than group_size 2"
    p = tmp_path / "t.jsonl"
    p.write_text('{"pl": 1, "rl": 2}\n{"pl": 1, "rl": true}\n')
    with pytest.raises(TraceError) as e:
        import_table(p, "pl", "rl")
    assert str(e.value) == f"{p}: line 2: column 'rl': True is not a positive integer"
    p.write_text('{"pl": 1, "rl": 2}\n{"pl": 1 "rl": 2}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl: line 2: bad JSON: Expecting ',' delimiter"):
        import_table(p, "pl", "rl")


def test_invalid_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^group_size must be a positive integer, got 0$"):
        import_table(FIXTURE, *COLS, group_size=0)
    with pytest.raises(ConfigError, match=r"^max_response_len must be a positive integer, got 0$"):
        import_table(FIXTURE, *COLS, max_response_len=0)
