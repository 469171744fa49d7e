"""Response-length traces: the input every rollout-scheduling simulation runs on.

A trace records, per rollout sample, the prompt and response lengths (and optionally the step,
reward and finish reason) plus the generation cap and GRPO group size. This package defines the
record (:class:`Trace`), reads and writes it (JSONL, CSV, Parquet), imports public per-request
tables, synthesizes traces fitted to published statistics, and summarises them. Bundled example
traces live in ``sortedrl/traces/data/``; see ``docs/traces.md``.
"""

from sortedrl.traces.importer import ImportReport, import_table, import_table_with_report
from sortedrl.traces.io import read_trace, write_trace
from sortedrl.traces.schema import Trace, TraceMeta
from sortedrl.traces.stats import format_stats, print_stats, trace_stats
from sortedrl.traces.synth import PRESETS, SynthParams, synthesize

__all__ = [
    "PRESETS",
    "ImportReport",
    "SynthParams",
    "Trace",
    "TraceMeta",
    "format_stats",
    "import_table",
    "import_table_with_report",
    "print_stats",
    "read_trace",
    "synthesize",
    "trace_stats",
    "write_trace",
]
