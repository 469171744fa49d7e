"""Ctrl-C while tune starts or stops Ray (a fresh-eyes walk, stop 49: ``tune --ray local`` under
SIGINT segfaulted, exited 1 in silence, or swallowed the interrupt and ran every trial).

Ray's start forks its processes, and a KeyboardInterrupt raised in a fork handler is printed
and dropped; so a Ctrl-C within ``ray.init`` waits for it to return, then stops the Ray started
here, and is raised: the command ends 130 with nothing running."""

from __future__ import annotations

import signal

import pytest

from sortedrl.sim.cluster import preset
from sortedrl.traces.synth import synthesize
from sortedrl.tune.executors import RayCluster


def test_a_ctrl_c_inside_rays_start_stops_the_ray_started_here(monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
    if ray.is_initialized():  # (a Ray an earlier test left up is joined, not started here)
        ray.shutdown()
    init, seen = ray.init, []

    def init_then_ctrl_c(*args, **kwargs):
        out = init(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # (as if pressed while Ray started)
        seen.append(ray.is_initialized())  # (still inside the start: it waited)
        return out

    monkeypatch.setattr(ray, "init", init_then_ctrl_c)
    tr = synthesize("math-16k", prompts=4, group_size=2, steps=1, seed=0)
    # Ctrl-C as a command gets it: a test worker (pytest-xdist) may ignore SIGINT
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            RayCluster(tr, preset("h100-llama3.1-8b-1gpu-16seq"), 0, "local")
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == [True] and not ray.is_initialized()


def test_a_ray_started_here_keeps_its_session_files_in_a_scratch_it_removes(monkeypatch):
    # tune --ray local left a session directory of ~200 KB in /tmp/ray per run, outside --out
    from pathlib import Path

    ray = pytest.importorskip("ray", reason="Ray is the [ray] extra; make test installs it")
    if ray.is_initialized():
        ray.shutdown()
    init, where = ray.init, []

    def init_seen(*args, **kwargs):
        where.append(kwargs.get("_temp_dir"))
        return init(*args, **kwargs)

    monkeypatch.setattr(ray, "init", init_seen)
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", "/tmp/" + "a-long-temporary-directory-name" * 2)  # (not used: too long for Ray)
    tr = synthesize("math-16k", prompts=4, group_size=2, steps=1, seed=0)
    cluster = RayCluster(tr, preset("h100-llama3.1-8b-1gpu-16seq"), 0, "local")
    try:
        (tmp,) = where
        # in /tmp, not $TMPDIR: Ray's socket paths must stay under 107 bytes (103 on macOS)
        assert Path(tmp).parent == Path("/tmp") and Path(tmp).name.startswith("sortedrl-ray-")
        assert any(Path(tmp).glob("session_*"))
    finally:
        cluster.close()
    assert not Path(tmp).exists() and not ray.is_initialized()
