"""Raise a measurement's priority on a shared machine: nice -20 in its session's autogroup.

With the kernel's autogroups on, a process's nice ranks it only within its session's group, and
the groups share the cores equally: the session's own group nice (``/proc/self/autogroup``) is
what keeps other sessions' work off the cores a timing measures. Everything the process starts
in its session (a server, Ray and its actors, the CLI) inherits both. Used by the benches and the
fixture recorder that time real engines (bench/validate_cpu.py, tests/fixtures/vllm_bench/record.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def raise_priority(who: str) -> bool:
    """Nice -20 for this process and its session's autogroup; say so (as ``who``) either way."""
    try:
        os.nice(-20)
        auto = Path("/proc/self/autogroup")
        if auto.exists():
            auto.write_text("-20", encoding="ascii")
    except OSError as e:
        print(f"{who}: could not raise the priority ({e}); timings will follow the machine's load", flush=True)
        return False
    print(f"{who}: nice -20 in this session's autogroup", flush=True)
    return True
