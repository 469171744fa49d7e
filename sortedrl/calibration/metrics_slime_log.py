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

import re

from sortedrl.calibration.metrics_console import COLOUR
from sortedrl.calibration.metrics_names import KNOWN
from sortedrl.calibration.metrics_read import Metrics, _metrics, _store
from sortedrl.errors import ConfigError
from sortedrl.limits import short_repr
from sortedrl.wandb_runs import step_number

STEP_COLUMN = "perf rollout_id"  # slime's console: its own step axis
_LINE = re.compile(r"(?:^|\s)perf (\d+): \{(.*)\}\s*$")
_KEY = re.compile(r"'((?:[^'\\]|\\.)*)': ")  # a str key as repr writes it
# a number as repr writes it, maybe numpy 2's np.float64(...), up to the next item or the end
_NUMBER = re.compile(r"(?:np\.\w+\()?(-?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|nan|inf))\)?(?=, '|$)")


def is_slime_log(text: str) -> bool:
    """Whether ``text`` holds a slime ``perf N: {...}`` line."""
    return any(_LINE.search(COLOUR.sub("", line)) for line in text.splitlines())


def read_slime_log(text: str, where: str) -> Metrics:
    """Metric name -> {rollout id: value} from slime's ``perf N: {...}`` lines; other lines are
    other output. A metric of the table whose value is not a number is an error."""
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    for n, raw in enumerate(text.splitlines(), 1):
        m = _LINE.search(COLOUR.sub("", raw))
        if m is None:
            continue
        step = step_number(float(m[1]))
        if step is None:
            raise ConfigError(f"{where}: line {n}: 'perf {m[1]}': not a rollout id below 2**53")
        body = m[2]
        for key in _KEY.finditer(body):
            if key.start() and body[key.start() - 2:key.start()] != ", ":
                continue  # (a quoted word inside a value, not a key)
            name = key[1]
            number = _NUMBER.match(body, key.end())
            if number is None:
                if name in KNOWN:
                    value = body[key.end():].split(", '", 1)[0]
                    raise ConfigError(f"{where}: line {n}: metric {name!r}: expected a number, got "
                                      f"{short_repr(value)}")
                continue
            value = float(number[1])
            if value == value and abs(value) != float("inf"):
                _store(out, name, step, value, f"{where}: line {n}: metric {name!r}", repeated)
    return _metrics(out, where, repeated, step_column=STEP_COLUMN)
