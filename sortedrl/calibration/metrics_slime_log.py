"""Reading slime's console log for ``calibrate --from-metrics``.

slime logs to W&B or TensorBoard only when asked (``--use-wandb``, ``--use-tensorboard``), so
the one record every slime run has is its console: ``log_perf_data``
(``slime/observability/train_metric_utils.py`` at THUDM/slime ``624b824``) logs each rollout's
training timers as ``perf {rollout_id}: {log_dict}`` (the dict's ``repr``), and
``log_rollout_data`` (``rollout_metrics.py``) its rollout's metrics in a line of the same form;
the logger's format is ``[time] file.py:line - message`` (``configure_logger``), maybe after
Ray's ``(TrainRayActor pid=...)``. The step is the rollout id, which is W&B's ``rollout/step``
unless ``--wandb-always-use-train-step`` is set; so a console log merges only with another.
"""

from __future__ import annotations

import ast
import re

from sortedrl.calibration.metrics_console import COLOUR, store_value
from sortedrl.calibration.metrics_read import SLIME_STEP, Metrics, _metrics
from sortedrl.errors import ConfigError
from sortedrl.wandb_runs import step_number

_LINE = re.compile(r"(?:^|\s)perf (\d+): \{(.*)\}\s*$")
_OPEN = re.compile(r"(?:^|\s)perf (\d+): \{")  # a perf line's start, whole or not
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")  # Ray's log deduplication


def is_slime_log(text: str) -> bool:
    """Whether ``text`` holds a slime ``perf N: {...}`` line."""
    return any(_LINE.search(COLOUR.sub("", line)) for line in text.splitlines())


def read_slime_log(text: str, where: str) -> Metrics:
    """Metric name -> {rollout id: value} from slime's ``perf N: {...}`` lines, their top-level
    keys only (a nested dict's or a string's ``'perf/train_time': ...`` is a value's); other
    lines are other output, and a perf line cut short (wrapped by a log collector) is noted. A
    metric of the table whose value is not a number is an error."""
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    cut: list[int] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = _RAY_REPEAT.sub("", COLOUR.sub("", raw))
        m = _LINE.search(line)
        if m is None:
            if _OPEN.search(line):
                cut.append(n)
            continue
        step = step_number(float(m[1]))
        if step is None:
            raise ConfigError(f"{where}: line {n}: 'perf {m[1]}': not a rollout id below 2**53")
        for name, value in _top_items(m[2]):
            store_value(out, repeated, name, value, step, f"{where}: line {n}")
    metrics = _metrics(out, where, repeated, step_column=SLIME_STEP)
    if cut:
        shown = ", ".join(map(str, cut[:5])) + (", ..." if len(cut) > 5 else "")
        metrics.notes.append(f"{where}: {len(cut)} 'perf N: {{...}}' line(s) cut short, not read (line {shown}): "
                             "wrapped or truncated by a log collector?")
    return metrics


def _top_items(body: str) -> list[tuple[str, str]]:
    """The ``(key, value text)`` items of a dict's ``repr`` body at its top level: split at the
    commas outside brackets and quotes; an item whose key is not a string is left out."""
    items, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(body):
        c = body[i]
        if quote:
            if c == "\\":
                i += 1  # (an escaped character)
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
        i += 1
    items.append(body[start:])
    pairs = []
    for item in items:
        key, colon, value = _split_key(item.strip())
        if colon:
            pairs.append((key, value.strip()))
    return pairs


def _split_key(item: str) -> tuple[str, str, str]:
    """``(key, ":", value)`` of ``'key': value`` (either quote, escapes undone); empty when the
    item does not start with a string key."""
    if not item or item[0] not in "'\"":
        return "", "", ""
    i = 1
    while i < len(item) and item[i] != item[0]:
        i += 2 if item[i] == "\\" else 1
    rest = item[i + 1:]
    if not rest.startswith(":"):
        return "", "", ""
    try:
        key = ast.literal_eval(item[:i + 1])
    except (ValueError, SyntaxError):
        return "", "", ""
    return key, ":", rest[1:]
