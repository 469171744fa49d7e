"""A stop that lands while a scratch directory is being made leaves nothing in ``$TMPDIR``.

``forecast`` and ``tune`` keep each draw's timeline in a scratch directory in ``$TMPDIR``
(:mod:`sortedrl.scratch`); a worker the parent stops ends with ``os._exit`` once it has removed
the ones it knows. Two moments were open (a file of a random name was once left in
``test_signals.py``'s ``$TMPDIR`` under load): a worker's first look-up of the temporary
directory probes it with a file, which ``os._exit`` left; and a directory made but not yet
known was left by the worker's exit, or by the parent's ``Terminated``. Each test runs a real
process with its own ``$TMPDIR`` and lands the signal in that moment on purpose.

Run: pytest tests/test_scratch_stopped.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# mkdtemp sends this process a SIGTERM as soon as the directory exists
STOP_AFTER_MKDIR = """
import os, signal, tempfile
real = tempfile.mkdtemp
def mkdtemp(*args, **kwargs):
    path = real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return path
tempfile.mkdtemp = mkdtemp
"""

IN_A_WORKER = STOP_AFTER_MKDIR + """
from sortedrl import parallel
from sortedrl.scratch import temp_scratch
parallel.worker_signals()  # a pool worker's handlers: SIGTERM removes its scratch and exits at once
with temp_scratch("tune"):
    print("not stopped")
"""

IN_THE_CLI = STOP_AFTER_MKDIR + """
from sortedrl.cli_common import Terminated, end_cleanly_on_termination
from sortedrl.scratch import temp_scratch
end_cleanly_on_termination()
try:
    with temp_scratch("forecast"):
        print("not stopped")
except Terminated as e:
    print(f"terminated {e.exit_code}")
"""

# a worker forked in a pool makes its scratch directory; every file it creates is noted
WORKER_OPENS = """
import os, sys, tempfile
from sortedrl import parallel
from sortedrl.scratch import temp_scratch
with parallel.worker_pool():
    pid = os.fork()
    if pid == 0:
        opened = []
        real = os.open
        def noted(path, flags, *a, **k):
            if flags & os.O_CREAT:
                opened.append(str(path))
            return real(path, flags, *a, **k)
        os.open = noted
        with temp_scratch("tune"):
            pass
        print("opened:", opened, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run(code: str, tmp: Path) -> subprocess.CompletedProcess:
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_worker_stopped_as_its_scratch_is_made_removes_it(tmp_path):
    r = run(IN_A_WORKER, tmp_path / "tmp")
    assert (r.returncode, r.stdout, r.stderr) == (128 + signal.SIGTERM, "", "")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_cli_stopped_as_its_scratch_is_made_removes_it(tmp_path):
    r = run(IN_THE_CLI, tmp_path / "tmp")
    assert (r.returncode, r.stdout, r.stderr) == (0, "terminated 143\n", "")
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_pool_worker_writes_no_probe_file_in_tmpdir(tmp_path):
    # a child that looked the temporary directory up itself opened a file of a random name there
    r = run(WORKER_OPENS, tmp_path / "tmp")
    assert (r.returncode, r.stdout, r.stderr) == (0, "opened: []\n", "")
    assert list((tmp_path / "tmp").iterdir()) == []
