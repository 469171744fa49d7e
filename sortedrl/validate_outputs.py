"""Where ``sortedrl validate`` writes its result: ``RUNDIR/validate.json``, or ``--out FILE.json``.

Why this exists: a run directory often comes from someone else, sits on a read-only mount, or is
the record of a run that its owner does not want changed. ``--out`` writes the result elsewhere
and leaves RUNDIR untouched. Without ``--out``, a RUNDIR that cannot be written is refused
before the replay, in one line that names the directory and suggests ``--out`` (it was
``validate.json RUNDIR/validate.json: RUNDIR is not writable``, which named no option to change).

Every other check on ``--out`` is :class:`~sortedrl.outputs.Outputs`': it must not be an input
(a file of RUNDIR, the profile), a directory, a symbolic link, or a path inside a real run's
checkpoint, and a file that exists is replaced only with ``--force``. The default,
RUNDIR/validate.json, is validate's own file and is replaced with a note, as before.
"""

from __future__ import annotations

import os
from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.outputs import Outputs

NAME = "validate.json"  # the default result, in RUNDIR


def validate_outputs(rundir: Path, profile: Path, out: Path | None, plot: Path | None,
                     force: bool) -> tuple[Outputs, Path, Path | None]:
    """Declare validate's outputs before the replay: ``(outs, result file, plot page or None)``."""
    inputs = [profile, *(p for p in rundir.glob("*") if p.is_file() and p.name != NAME)]
    outs = Outputs("validate", force, inputs=inputs)
    if out is None:
        if not os.access(rundir, os.W_OK | os.X_OK):
            raise ConfigError(f"{rundir}: is not writable, and validate writes its result there "
                              f"({rundir / NAME}); give --out FILE.json to write it elsewhere")
        written = outs.file(None, NAME, default=rundir / NAME)
    else:
        if out.suffix.lower() != ".json" and not out.is_dir():  # (a directory: said so below)
            raise ConfigError(f"--out {out}: validate writes JSON (give a .json file)")
        written = outs.file(out, "--out")
    plot = outs.file(plot, "--plot")
    if plot is not None:
        from sortedrl.plot.page import check_html_out

        check_html_out(plot, "--plot", "validate --plot")
    return outs, written, plot
