"""``calibrate --from-metrics`` reads TensorBoard event files, as verl, OpenRLHF, slime and AReaL
write them (``SummaryWriter.add_scalar``), without TensorBoard installed.

The fixtures (tests/fixtures/metrics/tensorboard, written by make_tfevents.py with torch's and
tensorboardX's own writers) hold known terms: verl 5 + 3e-5·T (old-style simple values),
OpenRLHF 6 + 2e-5·T (new-style scalar tensors, and a text summary), AReaL 4 + 4e-5·T.

Run: pytest tests/test_metrics_tfevents.py
"""

from __future__ import annotations

import pytest
from metrics_helpers import FIX, PRESET, TOKENS, calibrate, trainer_fit, values

from sortedrl.calibration.metrics_fit import fit_metrics
from sortedrl.calibration.metrics_read import read_metrics
from sortedrl.calibration.metrics_tfevents import _fields

TB = FIX / "tensorboard"
EVENTS = "events.out.tfevents.fixture"
REL = 1e-6  # the values are 32-bit floats


def record_ends(raw: bytes) -> list[int]:
    """The offset after each TFRecord record (8 bytes of length, 4 of its CRC, the data, 4 of CRC)."""
    ends, pos = [], 0
    while pos < len(raw):
        pos += 16 + int.from_bytes(raw[pos:pos + 8], "little")
        ends.append(pos)
    return ends


@pytest.mark.parametrize("framework, samples, first, terms", [
    ("verl", None, 1, {"train_fix": 5.0, "train_per_token": 3e-5, "sync_s": 1.25}),
    ("openrlhf", "128", 1, {"train_fix": 6.0, "train_per_token": 2e-5, "sync_s": 0.85}),
    ("areal", None, 0, {"train_fix": 4.0, "train_per_token": 4e-5, "sync_s": 3.15}),
])
def test_each_frameworks_event_file_fits_its_terms(tmp_path, framework, samples, first, terms):
    path = TB / framework / EVENTS
    metrics = read_metrics(path)
    assert metrics.step_column == "TensorBoard step" and metrics.notes == []
    assert sorted(next(iter(metrics.values()))) == list(range(first, first + 6))  # the steps add_scalar got
    fit = trainer_fit(tmp_path / "p.json", "--from-metrics", str(path),
                      *(["--samples-per-step", samples] if samples else []))
    assert values(fit) == pytest.approx(terms, rel=REL)


def test_new_style_scalars_are_tensors_and_text_is_left_out():
    # (the OpenRLHF fixture exercises the tensor path: no value there has a simple_value)
    raw = (TB / "openrlhf" / EVENTS).read_bytes()
    assert b"train/generated_samples" in raw  # a text summary, not read
    metrics = read_metrics(TB / "openrlhf" / EVENTS)
    assert sorted(metrics) == ["train/timing/broadcast", "train/timing/ppo_train", "train/total_length"]
    assert metrics["train/total_length"] == pytest.approx({s: t / 128 for s, t in enumerate(TOKENS, 1)}, rel=REL)
    kinds = set()  # the fields of each Summary.Value
    for start, end in zip([0, *record_ends(raw)], record_ends(raw), strict=False):
        for field, _, summary in _fields(raw[start + 12:end - 4]):
            if field == 5:
                for _, _, value in _fields(summary):
                    kinds.add(tuple(sorted({f for f, _, _ in _fields(value)})))
    assert all(2 not in fields for fields in kinds) and any(8 in fields for fields in kinds)


def test_a_file_cut_short_reads_its_whole_records_and_notes_the_rest(tmp_path):
    path = tmp_path / EVENTS
    raw = (TB / "verl" / EVENTS).read_bytes()
    path.write_bytes(raw[:-5])  # the last record (step 6's last scalar) loses its end
    metrics = read_metrics(path)
    assert metrics.notes == [f"{path}: its last record is cut short (a run still writing?): left out"]
    assert len(metrics["critic/score/mean"]) == 5 and len(metrics["timing_s/update_actor"]) == 6


def test_a_resumed_runs_directory_keeps_each_steps_later_logging(tmp_path):
    # verl_resumed: stopped after step 5, resumed from step 3; the first file's steps 4 and 5 took
    # 10 s more, the second file (written later) logs 4-6 again: the directory is read in the
    # order the events were written, each step's later logging kept and noted
    run = TB / "verl_resumed"
    metrics = read_metrics(run)
    assert metrics.notes == [f"{run}: 2 step(s) logged more than once with other values (a resumed run?): the "
                             "last logging of each is used"]
    assert values(fit_metrics(metrics, "m")) == pytest.approx(
        {"train_fix": 5.0, "train_per_token": 3e-5, "sync_s": 1.25}, rel=REL)
    # the files named one by one are two files giving two values: which to fit is unclear
    files = sorted(str(f) for f in run.iterdir())
    code, lines = calibrate("--from-metrics", *files, "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert code == 2 and lines[0].startswith(f"error: {files[1]}: metric 'timing_s/update_actor' at step 4: ")
    # with a file of another kind: the framework's step is not W&B's (verl's from 1, AReaL's from 0)
    code, lines = calibrate("--from-metrics", str(run), str(FIX / "areal_history.csv"), "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert code == 2 and lines[0].startswith(
        f"error: {FIX / 'areal_history.csv'}: steps numbered by '_step', but {run} by 'TensorBoard step'")


def test_an_export_named_tfevents_is_read_as_what_its_suffix_says(tmp_path):
    path = tmp_path / "run1_tfevents_export.csv"
    path.write_text("Step,timing/ppo_train\n1,8.4\n")
    assert read_metrics(path) == {"timing/ppo_train": {1: 8.4}}


def flip_first_value(raw: bytes) -> bytes:
    """One bit of the first scalar's value flipped (its record's data checksum kept)."""
    at = raw.index(b"timing_s/update_actor") + len("timing_s/update_actor") + 2  # (tag, then field 2's key)
    return raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:]


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw[:8] + bytes([raw[8] ^ 1]) + raw[9:], "byte 0: not a TensorBoard event record (its length's "
                                                          "checksum does not match): not an event file, or damaged"),
    (flip_first_value, "record 1: its data's checksum does not match: the file is damaged"),

    (lambda raw: raw[:int.from_bytes(raw[:8], "little") + 16], "TensorBoard's, but no scalar (add_scalar) "
                                                                "values in it"),
])
def test_a_bad_event_file_is_one_error(tmp_path, change, message):
    path = tmp_path / EVENTS
    path.write_bytes(change((TB / "verl" / EVENTS).read_bytes()))
    out = tmp_path / "p.json"
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(out))
    assert (code, lines) == (2, [f"error: {path}: {message}"]) and not out.exists()


def test_run_names_no_run_of_an_event_file(tmp_path):
    path = TB / "verl" / EVENTS
    code, lines = calibrate("--from-metrics", str(path), "--run", "x", "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: --run x: {path} is TensorBoard's (one run's): --run applies to W&B "
                                 "export CSVs only"])


def test_a_directory_of_no_event_file_is_no_metrics_file(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("x")
    code, lines = calibrate("--from-metrics", str(tmp_path / "m"), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {tmp_path / 'm'}: a directory, not a metrics file (nor a TensorBoard "
                                 "log directory: no events.out.tfevents.* file in it)"])


def test_a_damaged_record_that_no_longer_holds_a_scalar_is_an_error(tmp_path):
    # its Summary's field number damaged (5 -> 6): the record reads as no scalar, and was skipped
    from sortedrl.calibration.metrics_tfevents import _event

    raw = bytearray((TB / "verl" / EVENTS).read_bytes())
    start = record_ends(bytes(raw))[0]  # record 1: the first scalar
    data = start + 12
    summary = data + bytes(raw[data:data + 64]).index(b"\x2a")  # (wall time, step, then field 5)
    raw[summary] = 0x32
    length = int.from_bytes(raw[start:start + 8], "little")
    assert _event(bytes(raw[data:data + length]), "r") == []  # no scalar left to read
    path = tmp_path / EVENTS
    path.write_bytes(bytes(raw))
    code, lines = calibrate("--from-metrics", str(path), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {path}: record 1: its data's checksum does not match: the file is damaged"])
