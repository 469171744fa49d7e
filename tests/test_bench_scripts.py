"""Every bench script still imports: bench/validate_cpu.py imported `write_validate`, which the
validate module no longer had, and nothing ran the script to notice (benches print figures and
are run by hand, never timed in tests; this only loads each one, without its ``main``).

Run: pytest tests/test_bench_scripts.py
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_a_bench_script_loads(script):
    namespace = runpy.run_path(str(BENCH / script), run_name="bench_import")  # (not __main__)
    assert namespace["__doc__"], f"{script} has no docstring saying why it exists"
