"""Real-run checkpoints hold data, never code: the tagged JSON codec and every built-in policy's
state round-trip exactly, and a policy whose state is not plain data gets one clear error; tensor
files, and a Ray run's segments in flight, that are not as the run wrote them are one error line.
(The kill-and-resume test in test_realrun.py runs the whole path with vLLM.)"""

from __future__ import annotations

import json
import os
import random
from array import array
from collections import Counter, OrderedDict, defaultdict, deque
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sortedrl.errors import ConfigError
from sortedrl.policies.base import SampleState
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.registry import make_policy
from sortedrl.realrun.checkpoint import (
    Attrs,
    assign,
    check_state,
    check_tensor_files,
    decode,
    encode,
    load_tensors,
    load_trainer,
    policy_state,
    read_state,
    restore_policy,
    save_tensors,
    save_trainer,
)
from sortedrl.realrun.ray_backend import check_in_flight
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.floats(allow_nan=False) | st.sampled_from(list(SampleState)),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.integers(0, 9) | st.text(max_size=3), inner, max_size=3)
    | st.lists(inner, max_size=3).map(deque) | st.sets(st.integers(0, 99), max_size=4),
    max_leaves=20)


@given(plain)
def test_plain_data_round_trips_through_json(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_arrays_bytearrays_and_enums_keep_their_types():
    value = {"a": np.array([3, 1], dtype=np.int32), "b": bytearray(b"\x00\x01"),
             "s": [SampleState.ADMITTED, SampleState.WAITING]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back["a"].dtype == np.int32 and back["a"].tolist() == [3, 1]
    assert back["b"] == bytearray(b"\x00\x01")
    assert back["s"] == [SampleState.ADMITTED, SampleState.WAITING]
    assert type(back["s"][0]) is SampleState


POLICIES = [("sync", []), ("sortedrl", []), ("sortedrl", ["mode=partial"]), ("partial", []),
            ("tail_batch", []), ("oracle_sorted", ["predictor=history"])]


def _comparable(obj: object) -> dict:
    return {k: (vars(v) if hasattr(v, "__dict__") and k not in ("params", "ctx") else v)
            for k, v in vars(obj).items() if k not in ("params", "ctx")}


@pytest.mark.parametrize("name, sets", POLICIES)
def test_every_policy_state_round_trips_mid_run(name, sets):
    trace = make_trace([5, 9, 2, 14, 3, 7, 11, 4] * 4, group_size=4)
    policy = make_policy(name, sets, trace)
    simulate(trace, policy, tiny_cluster(max_num_seqs=4))
    saved = json.loads(json.dumps(policy_state(policy)))
    fresh = make_policy(name, sets, trace)
    restore_policy(fresh, saved, "ckpt")
    assert _comparable(fresh) == _comparable(policy)


def test_a_policy_holding_code_cannot_be_checkpointed():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    policy = make_policy("sync", [], trace)
    policy.hook = lambda: None
    with pytest.raises(ConfigError) as e:
        policy_state(policy)
    assert str(e.value) == (
        "cannot checkpoint the policy: policy sync's attribute 'hook': a function is not plain data; keep "
        'policy state in plain data (docs/policies.md, "State a real run keeps") or define state_dict() '
        "and load_state_dict(state)")  # ("policy sync.hook" read like a file's name)


def test_a_defaultdict_of_code_cannot_be_checkpointed_and_says_which_factories_may():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    policy = make_policy("sync", [], trace)
    policy.seen = defaultdict(lambda: 7)
    with pytest.raises(ConfigError, match=r"policy sync's attribute 'seen': a defaultdict of <lambda> is not "
                                          r"plain data \(its factory may be one of int, float, str, list"):
        policy_state(policy)


def test_the_state_a_policy_author_keeps_round_trips_with_its_types():
    # a generator of its own (docs/policies.md), a group's range, counters and defaultdicts came
    # back as plain dicts (a KeyError at the next += after a resume) or were refused
    rng = random.Random(3)
    rng.random()
    value = {"rng": rng, "groups": range(4, 12, 4), "done": frozenset({3, 1}),
             "per_engine": defaultdict(int, {1: 2}), "lists": defaultdict(list), "plain": defaultdict(None),
             "count": Counter({"a": 2}), "order": OrderedDict([(2, "b"), (1, "a")])}
    back = decode(json.loads(json.dumps(encode(value))))
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in value.items()}
    assert back["rng"].random() == rng.random() and back["groups"] == range(4, 12, 4)
    assert back == {**value, "rng": back["rng"]}
    back["per_engine"][5] += 1
    back["lists"][0].append(1)
    assert back["per_engine"] == {1: 2, 5: 1} and back["lists"] == {0: [1]} and back["count"]["z"] == 0
    assert list(back["order"]) == [2, 1]


def test_a_sample_queue_made_in_on_start_is_rebuilt_on_resume():
    # the docs' Harvest makes its SampleQueue in on_start: the policy rebuilt for --resume runs
    # __init__ only, and "has no helper object 'queue' to restore" refused the checkpoint
    policy = make_policy("sync", [], make_trace([5, 9, 2, 14], group_size=2))
    policy.queue = SampleQueue()
    policy.queue.add_fresh(10)
    policy.queue.extend([7, 8])
    assert policy.queue.popleft() == 7
    saved = json.loads(json.dumps(policy_state(policy)))
    fresh = make_policy("sync", [], make_trace([5, 9, 2, 14], group_size=2))
    assert not hasattr(fresh, "queue")
    restore_policy(fresh, saved, "ckpt")
    assert type(fresh.queue) is SampleQueue and len(fresh.queue) == 11
    assert [fresh.queue.popleft() for _ in range(3)] == [8, 0, 1]


def test_checkpoint_knobs_must_match_the_run():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    saved = json.loads(json.dumps(policy_state(make_policy("sync", ["minibatches=2"], trace))))
    with pytest.raises(ConfigError, match="the checkpoint's policy knobs"):
        restore_policy(make_policy("sync", [], trace), saved, "ckpt")


# -- a checkpoint from elsewhere is data to check before anything is touched --------------------

LOGS = ("timeline.jsonl", "metrics.jsonl", "trace.partial.jsonl")


def _state() -> dict:
    """A checkpoint's fields as `realrun.run._checkpoint` writes them (a small run's values)."""
    return {"policy": {"params": {"minibatches": 1}, "state": {}},
            "optimizer": {"param_groups": [{"lr": 1e-3}], "slots": {"0": ["exp_avg"]}},
            "public": {"version": 1}, "settled": 8, "rollout_on": True, "engine_version": 1,
            "backend": {"reward": {0: 1.0}, "kept": [[]] * 4}, "admitted": [4, 5],
            "clock": 3.5, "offsets": {"timeline.jsonl": 10, "metrics.jsonl": 0,
                                      "trace.partial.jsonl": 4},
            "train": (1.0, 0, [0, 1, 2, 3], 40, 2.0)}


def _logs(tmp_path) -> dict:
    for name in LOGS:
        (tmp_path / name).write_text("x" * 10)
    return {name: tmp_path / name for name in LOGS}


def test_a_checkpoint_as_the_run_wrote_it_passes(tmp_path):
    state = _state()
    assert check_state(state, tmp_path / "state.json", _logs(tmp_path), 8) is state


BAD = [  # (change, the error's text after "state.json: ")
    (lambda s: s.pop("offsets"), "field 'offsets' is missing"),
    (lambda s: s["offsets"].update({"/home/someone/.bashrc": 0}),
     "field 'offsets': '/home/someone/.bashrc' is not one of the run's logs (timeline.jsonl, "
     "metrics.jsonl, trace.partial.jsonl)"),
    (lambda s: s.update(offsets={"../../x": 0, "metrics.jsonl": 0, "trace.partial.jsonl": 0}),
     "field 'offsets': '../../x' is not one of the run's logs (timeline.jsonl, metrics.jsonl, "
     "trace.partial.jsonl)"),
    (lambda s: s["offsets"].pop("trace.partial.jsonl"),
     "field 'offsets': the offset of trace.partial.jsonl is missing"),
    (lambda s: s["offsets"].update({"metrics.jsonl": -1}),
     "field 'offsets': metrics.jsonl at -1, expected an integer from 0 to its size, 10"),
    (lambda s: s["offsets"].update({"metrics.jsonl": 11}),
     "field 'offsets': metrics.jsonl at 11, expected an integer from 0 to its size, 10"),
    (lambda s: s["offsets"].update({"metrics.jsonl": 2.0}),
     "field 'offsets': metrics.jsonl at 2.0, expected an integer from 0 to its size, 10"),
    (lambda s: s.update(clock=float("nan")), "field 'clock': expected a number >= 0, got nan"),
    (lambda s: s.update(clock="3"), "field 'clock': expected a number >= 0, got '3'"),
    (lambda s: s.update(clock=10**400), "field 'clock': expected a number >= 0, got 10000000000000000000"),
    (lambda s: s.update(engine_version=True), "field 'engine_version': expected an integer >= 0, got True"),
    (lambda s: s.update(admitted=[1, -2]), "field 'admitted': expected a list of sample indices, got [1, -2]"),
    (lambda s: s.update(train=(1.0, 0, [0], 40)),
     "field 'train': expected [t0, version, samples, tokens, t1], got (1.0, 0, [0], 40)"),
    (lambda s: s.update(policy={"state": {}}),
     "field 'policy': expected an object with 'params' and 'state', got {'state': {}}"),
    (lambda s: s["optimizer"].update(slots={"0": [1]}),
     "field 'optimizer': expected an object with 'param_groups' and 'slots', got "),
    (lambda s: s["backend"].update(reward=[1.0]),
     "field 'backend': expected an object with 'reward' an object, got "),
    (lambda s: s.update(rollout_on=1), "field 'rollout_on': expected true or false, got 1"),
    # indices past the run's 8 samples, and a reward keyed by text (IndexErrors in _restore)
    (lambda s: s.update(admitted=[4, 8]), "field 'admitted': sample 8, but the run has 8"),
    (lambda s: s.update(train=(1.0, 0, [0, 9], 40, 2.0)), "field 'train': sample 9, but the run has 8"),
    (lambda s: s["backend"].update(reward={"0": 1.0}),
     "field 'backend.reward': '0': 1.0 is not a sample's reward"),
    (lambda s: s["optimizer"].update(slots={"x": ["exp_avg"]}),
     "field 'optimizer': expected an object with 'param_groups' and 'slots', got "),
]


@pytest.mark.parametrize("change, error", BAD)
def test_a_checkpoint_not_as_the_run_wrote_it_is_one_error(tmp_path, change, error):
    state = _state()
    change(state)
    with pytest.raises(ConfigError) as e:
        check_state(state, tmp_path / "state.json", _logs(tmp_path), 8)
    assert str(e.value).startswith(f"{tmp_path / 'state.json'}: {error}")


def test_a_missing_log_is_one_error(tmp_path):
    logs = _logs(tmp_path)
    logs["metrics.jsonl"].unlink()
    with pytest.raises(ConfigError, match="field 'offsets': the run's log .*metrics.jsonl is missing"):
        check_state(_state(), tmp_path / "state.json", logs, 8)


class _Helper:
    def __init__(self) -> None:
        self.kept = [[], [], []]
        self.code = array("i", [0, 0])
        self.version = 0
        self.queue: list[int] = []
        self.later = None

    def method(self) -> None:
        pass

    @property
    def size(self) -> int:
        return 3


@pytest.mark.parametrize("attrs, error", [
    ({"__class__": 1}, "'__class__' is not a data attribute of the _Helper to restore"),
    ({"method": 1}, "'method' is not a data attribute of the _Helper to restore"),
    ({"size": 1}, "'size' is not a data attribute of the _Helper to restore"),
    ({"not an identifier": 1}, "'not an identifier' is not a data attribute of the _Helper to restore"),
    ({"other": 1}, "field 'other': not part of this run's state"),
    ({"kept": [[], []]}, "field 'kept': expected 3 entries, got 2"),
    ({"kept": "abc"}, "field 'kept': expected a list, got a str"),
    ({"code": array("d", [0.0, 0.0])},
     "field 'code': expected an array of typecode 'i', got an array of typecode 'd'"),
    ({"version": True}, "field 'version': expected an int, got a bool"),
])
def test_restored_state_must_have_the_runs_names_types_and_lengths(attrs, error):
    target = _Helper()
    with pytest.raises(ConfigError) as e:
        assign(target, attrs, "ckpt", same_shape=True)
    assert str(e.value) == f"ckpt: {error}"
    assert vars(target) == vars(_Helper())  # nothing half-restored by the refused field


def test_a_helpers_state_must_have_its_shapes_too_and_nothing_is_half_restored():
    target = _Helper()
    target.helper = _Helper()
    attrs = {"version": 7, "helper": Attrs({"kept": "abc"})}
    with pytest.raises(ConfigError, match=r"^ckpt: field 'kept': expected a list, got a str$"):
        assign(target, attrs, "ckpt", same_shape=True)
    assert target.version == 0 and target.helper.kept == [[], [], []]  # version not set either
    with pytest.raises(ConfigError, match="^ckpt: the _Helper has no helper object 'other' to restore$"):
        assign(target, {"other": Attrs({"a": 1})}, "ckpt", same_shape=True)


def test_restored_state_of_the_runs_shapes_is_set():
    target = _Helper()
    assign(target, {"kept": [[1], [], [2]], "version": 3, "queue": [5, 6, 7, 8],
                    "later": {"a": 1}, "code": array("i", [4, 5])}, "ckpt", same_shape=True)
    assert target.kept == [[1], [], [2]] and target.version == 3 and target.queue == [5, 6, 7, 8]
    assert target.later == {"a": 1} and target.code == array("i", [4, 5])


def test_a_policy_state_cannot_replace_its_methods():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    policy = make_policy("sync", [], trace)
    saved = json.loads(json.dumps(policy_state(policy)))
    saved["state"]["on_event"] = 1
    with pytest.raises(ConfigError, match="'on_event' is not a data attribute of the SyncPolicy"):
        restore_policy(make_policy("sync", [], trace), saved, "ckpt")


# -- the tensor files -------------------------------------------------------------------------


def _trainer(out_features: int = 3):
    """What load_trainer and save_trainer use of a trainer: a torch model and its optimizer,
    one step taken (so that the optimizer has state to save)."""
    torch = pytest.importorskip("torch", reason="the real runner's checkpoints need torch")
    model = torch.nn.Linear(64, out_features)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 64)).sum().backward()
    opt.step()
    return SimpleNamespace(model=model, opt=opt)


def _saved(tmp_path):
    trainer = _trainer()
    optimizer = save_trainer(tmp_path, trainer)
    save_tensors(tmp_path / "engine.safetensors", trainer.model.state_dict())
    check_tensor_files(tmp_path, optimizer)  # as the run wrote it: passes
    return optimizer


RESUME = "; the run cannot be resumed from it (--force without --resume starts it over)"


def test_tensor_files_cut_short_missing_or_mismatched_are_one_error(tmp_path):
    # a truncated model.safetensors was safetensors' traceback (exit 1) once the logs were cut
    optimizer = _saved(tmp_path)
    model = tmp_path / "model.safetensors"
    whole = model.read_bytes()
    model.write_bytes(whole[:-100])
    with pytest.raises(ConfigError) as e:
        check_tensor_files(tmp_path, optimizer)
    assert str(e.value) == (f"{model}: not a readable checkpoint file (Error while deserializing "
                            f"header: incomplete metadata, file not fully covered){RESUME}")
    model.write_bytes(whole[:40])
    with pytest.raises(ConfigError, match="invalid header length"):
        load_tensors(model)
    model.write_bytes(whole)
    (tmp_path / "optimizer.safetensors").rename(tmp_path / "moved")
    with pytest.raises(ConfigError) as e:
        check_tensor_files(tmp_path, optimizer)
    assert str(e.value) == f"{tmp_path / 'optimizer.safetensors'}: missing{RESUME}"
    (tmp_path / "moved").rename(tmp_path / "optimizer.safetensors")
    with pytest.raises(ConfigError) as e:
        check_tensor_files(tmp_path, {**optimizer, "slots": {"0": ["exp_avg", "extra"]}})
    assert str(e.value) == (f"{tmp_path / 'optimizer.safetensors'}: has no tensor '0.extra', "
                            f"which {tmp_path / 'state.json'} names")
    save_tensors(tmp_path / "engine.safetensors", _trainer(4).model.state_dict())
    with pytest.raises(ConfigError) as e:
        check_tensor_files(tmp_path, optimizer)
    assert str(e.value) == (f"{tmp_path / 'engine.safetensors'}: not the weights of {model} "
                            "(other tensor names or shapes)")


def test_a_checkpoint_of_another_model_is_one_error(tmp_path):
    optimizer = _saved(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_trainer(tmp_path, _trainer(4), optimizer)
    assert str(e.value).startswith(
        f"{tmp_path / 'model.safetensors'}: does not fit this run's model (Error(s) in loading "
        "state_dict for Linear: size mismatch for weight: copying a param with shape "
        "torch.Size([3, 64]) from checkpoint")
    assert "\n" not in str(e.value)
    trainer = _trainer()
    load_trainer(tmp_path, trainer, optimizer)  # the same model's: loads
    with pytest.raises(ConfigError, match=r"optimizer.safetensors: does not fit this run's model \('0.extra'\)"):
        load_trainer(tmp_path, trainer, {**optimizer, "slots": {"0": ["extra"]}})


# -- the segments a run on Ray had running at its checkpoint ------------------------------------

SEGMENT = [1, 5, [7, 8, 9], [-0.5, -0.1, -2.0], [[0, 2, 1.0], [1, 1, 1.5]], 0.9, 2.0]


@pytest.mark.parametrize("change", [
    lambda s: s.__setitem__(0, 2),  # engine 2 of a run of two
    lambda s: s.__setitem__(1, 6),  # a sample that was not admitted
    lambda s: s.__setitem__(2, [7, 8]),  # fewer tokens than log-probs
    lambda s: s[4].__setitem__(1, [1, 2, 1.5]),  # stretches of 4 tokens for 3
    lambda s: s[4].__setitem__(0, [-1, 2, 1.0]),  # a negative version
    lambda s: s.__setitem__(5, float("nan")),
    lambda s: s.__setitem__(3, ["x", -0.1, -2.0]),
    lambda s: s.pop(),
])
def test_a_segment_in_flight_not_as_the_run_wrote_it_is_one_error(change):
    state = {"backend": {"in_flight": [list(SEGMENT)]}, "admitted": [4, 5]}
    check_in_flight(state, "state.json", 2)  # as written: passes
    segment = json.loads(json.dumps(SEGMENT))
    change(segment)
    with pytest.raises(ConfigError) as e:
        check_in_flight({"backend": {"in_flight": [segment]}, "admitted": [4, 5]}, "state.json", 2)
    assert str(e.value).startswith("state.json: field 'backend.in_flight': [")
    assert str(e.value).endswith(" is not a segment [engine, sample, tokens, log-probs, stretches, "
                                 "t0, t_end] of an admitted sample on one of the run's engines")


# -- the checkpoint swap (sortedrl/realrun/rundir.py) ---------------------------------------------


def _ckpt(d, update: int) -> None:
    from sortedrl.realrun.checkpoint import write_state

    d.mkdir()
    (d / "model.safetensors").write_text(f"weights after update {update}")
    write_state(d, {"update": update})


@pytest.mark.parametrize("left, resumed", [
    ({"checkpoint": 2}, 2),
    ({"checkpoint": 1, "checkpoint.tmp": None}, 1),  # killed while writing the new one
    ({"checkpoint.prev": 1, "checkpoint.tmp": 2}, 2),  # killed between the two renames
    ({"checkpoint.prev": 1, "checkpoint": 2}, 2),  # killed before the old one was removed
    ({"checkpoint.prev": 1, "checkpoint.tmp": None}, 1),  # the new one's state never written
    ({"checkpoint.tmp": None}, None),
])
def test_a_kill_anywhere_in_the_checkpoint_swap_leaves_one_to_resume(tmp_path, left, resumed):
    from sortedrl.realrun.rundir import latest_checkpoint, recover_checkpoint

    for name, update in left.items():
        if update is None:  # a directory whose state.json was never written
            (tmp_path / name).mkdir()
            (tmp_path / name / "model.safetensors").write_text("half")
        else:
            _ckpt(tmp_path / name, update)
    if resumed is None:
        assert latest_checkpoint(tmp_path) is None
    else:
        recover_checkpoint(tmp_path)
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint"
        assert read_state(tmp_path / "checkpoint") == {"update": resumed}
        weights = (tmp_path / "checkpoint" / "model.safetensors").read_text()
        assert weights == f"weights after update {resumed}"  # the files of that checkpoint


def test_committing_a_checkpoint_replaces_the_last_one_and_leaves_nothing_aside(tmp_path):
    from sortedrl.realrun.rundir import commit_checkpoint

    _ckpt(tmp_path / "checkpoint.tmp", 1)
    commit_checkpoint(tmp_path)
    _ckpt(tmp_path / "checkpoint.tmp", 2)
    commit_checkpoint(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert read_state(tmp_path / "checkpoint") == {"update": 2}


def test_a_checkpoint_is_on_the_disk_before_it_is_swapped_in(tmp_path, monkeypatch):
    """Every file of the new checkpoint and its directory are fsynced before the first rename,
    and the run directory (the renames) after the last: a power loss, not only a kill, leaves a
    complete checkpoint."""
    from sortedrl.realrun import rundir

    _ckpt(tmp_path / "checkpoint", 1)
    _ckpt(tmp_path / "checkpoint.tmp", 2)
    files = sorted(str(p) for p in (tmp_path / "checkpoint.tmp").iterdir())
    assert files  # (the checkpoint's state and weights)
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b))[1])
    rundir.commit_checkpoint(tmp_path)
    first_rename = next(k for k, e in enumerate(events) if e[0] == "replace")
    synced_before = {path for kind, path in events[:first_rename] if kind == "fsync"}
    assert synced_before == set(files) | {str(tmp_path / "checkpoint.tmp")}
    last_rename = max(k for k, e in enumerate(events) if e[0] == "replace")
    assert ("fsync", str(tmp_path)) in events[last_rename:]
    assert read_state(tmp_path / "checkpoint") == {"update": 2}


def test_a_crafted_policy_state_is_one_error_line_not_a_traceback(tmp_path):
    # ints past C's in a Random's state, and the policy's own tags (decoded in restore_policy,
    # outside read_state's net): an OverflowError or TypeError traceback
    (tmp_path / "state.json").write_text(json.dumps({"x": {"$random": {"$tuple": [3, {"$tuple": [-1] * 625}, None]}}}))
    with pytest.raises(ConfigError, match=r"state.json: not a readable checkpoint \(can't convert negative"):
        read_state(tmp_path)
    policy = make_policy("sync", [], make_trace([5, 9, 2, 14], group_size=2))
    for bad in ({"$range": "abc"}, {"$defaultdict": [], "factory": "os.system"},
                {"$random": {"$tuple": [3, {"$tuple": [0] * 625}, "x"]}}):
        saved = {"params": policy_state(policy)["params"], "state": {"$dict": [["x", bad]]}}
        with pytest.raises(ConfigError, match=r"^ckpt: field 'policy.state': not a readable policy state"):
            restore_policy(policy, saved, "ckpt")
    saved = {"params": policy_state(policy)["params"], "state": {"x": {"$attrs": {}, "helper": ["x"]}}}
    with pytest.raises(ConfigError, match=r"^ckpt: the SyncPolicy has no helper object 'x' to restore$"):
        restore_policy(policy, saved, "ckpt")  # (an unhashable helper name: a TypeError traceback)


def test_a_sample_queue_inside_a_container_is_refused_and_one_rebuilt_has_its_defaults():
    policy = make_policy("sync", [], make_trace([5, 9, 2, 14], group_size=2))
    policy.queues = [SampleQueue()]  # restored, it was an Attrs dict with no popleft
    with pytest.raises(ConfigError, match=r"policy sync's attribute 'queues'\[0\]: a SampleQueue inside a list "
                                          r"or dict is not restored: keep it as an attribute of its own"):
        policy_state(policy)
    del policy.queues
    fresh = make_policy("sync", [], make_trace([5, 9, 2, 14], group_size=2))
    saved = {"params": policy_state(policy)["params"], "state": {"q": {"$attrs": {}, "helper": "SampleQueue"}}}
    restore_policy(fresh, saved, "ckpt")  # (the attributes a checkpoint leaves out: the new queue's)
    assert len(fresh.q) == 0 and fresh.q.ids == deque()


def test_a_set_of_items_that_do_not_compare_is_kept_in_one_order():
    value = {"mixed": frozenset({1, "a", (2, 3)}), "also": {2.5, "b"}}
    once = json.dumps(encode(value))
    assert once == json.dumps(encode({"mixed": frozenset({(2, 3), "a", 1}), "also": {"b", 2.5}}))
    assert decode(json.loads(once)) == value
