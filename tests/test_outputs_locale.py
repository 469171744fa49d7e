"""Text outputs are UTF-8 whatever the locale says. `plot` wrote its page in the locale's
encoding: under an ASCII locale with Python's UTF-8 mode and locale coercion off (as on a host
whose locale is not UTF-8), the inlined plotly.js's non-ASCII characters stopped it with a
UnicodeEncodeError traceback, exit 1. Every text file is now written as UTF-8, so the bytes are
the same under any locale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "run-sync"
ASCII = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


def _sortedrl(args: list[str], cwd: Path, extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONUTF8"))}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return subprocess.run([sys.executable, "-m", "sortedrl", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, encoding="utf-8", errors="replace")


@pytest.mark.parametrize("command", [
    ["plot", str(RUN), "--out", "page.html", "--perfetto", "trace.json"],
    ["report", str(RUN), str(RUN.parent / "timeline-partial"), "--out", "page.html"],
])
def test_html_and_json_are_the_same_bytes_under_an_ascii_locale(tmp_path, command) -> None:
    outs = {}
    for name, extra in (("utf8", {"LC_ALL": "C.UTF-8"}), ("ascii", ASCII)):
        d = tmp_path / name
        d.mkdir()
        r = _sortedrl(command, d, extra)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        outs[name] = {p.name: p.read_bytes() for p in sorted(d.iterdir())}
    assert set(outs["ascii"]) >= {"page.html"}
    assert outs["ascii"] == outs["utf8"]
    page = outs["ascii"]["page.html"]
    assert max(page) > 127  # the page holds non-ASCII text, written as UTF-8
    page.decode("utf-8")
