"""Importers for the RL frameworks' own per-sample rollout dumps (``trace import --from``).

Users have logs of their own runs, not our trace format. Each module here reads one framework's
dump in its exact layout (the field names are in docs/traces.md and peers.md §4) into the
common rows of :mod:`._common`, which become a canonical trace. A dump whose layout is not the
named framework's is refused with the fields that are missing and those that were found.
"""

from __future__ import annotations

from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.limits import INT32_MAX
from sortedrl.traces.importers._common import FrameworkReport, to_trace
from sortedrl.traces.schema import Trace

FRAMEWORKS = ("verl", "slime", "nemo-rl", "trl", "areal", "nemo-gym")


def check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ConfigError(f"--from {framework!r}: unknown framework; known: {', '.join(FRAMEWORKS)}")


def import_framework(framework: str, path: str | Path, tokenizer: str | Path | None = None,
                     max_response_len: int | None = None, source: str | None = None,
                     decode_tps: float | None = None, prompt_len: int | None = None,
                     reward_columns: str | None = None) -> tuple[Trace, FrameworkReport]:
    """Read ``path`` (a dump file, or a directory of them) as a trace of ``framework``.
    ``decode_tps`` and ``prompt_len`` stand in for the token counts AReaL does not log;
    ``reward_columns`` (``NAME=WEIGHT,...``) names TRL's reward-function columns."""
    p = Path(path)
    tok = None if tokenizer is None else Path(tokenizer)
    if max_response_len is not None and not 1 <= max_response_len <= INT32_MAX:
        raise ConfigError(f"--max-response-len must be from 1 to {INT32_MAX:,}, got "
                          f"{max_response_len:,}")
    if reward_columns is not None and framework != "trl":
        raise ConfigError("--reward-columns: only for --from trl (it names the reward-function "
                          "columns of TRL's completions table); remove it")
    if framework == "verl":
        from sortedrl.traces.importers.verl import read_verl

        rows, files = read_verl(p, tok)
    elif framework == "slime":
        from sortedrl.traces.importers.slime import read_slime

        rows, files = read_slime(p)
    elif framework == "nemo-rl":
        from sortedrl.traces.importers.nemo_rl import read_nemo_rl

        rows, files = read_nemo_rl(p)
    elif framework == "trl":
        from sortedrl.traces.importers.trl import read_trl

        rows, files = read_trl(p, tok, reward_columns)
    elif framework == "areal":
        from sortedrl.traces.importers.areal import read_areal

        rows, files = read_areal(p, decode_tps, prompt_len)
    elif framework == "nemo-gym":
        from sortedrl.traces.importers.nemo_gym import read_nemo_gym

        rows, files = read_nemo_gym(p)
    else:
        check_framework(framework)
    return to_trace(rows, framework, files, str(p), max_response_len,
                    source or f"{framework}:{p.name}")


__all__ = ["FRAMEWORKS", "FrameworkReport", "check_framework", "import_framework"]
