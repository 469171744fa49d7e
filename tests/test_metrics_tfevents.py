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
from sortedrl.calibration.metrics_read import read_metrics, read_metrics_files
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


def test_event_files_merge_only_with_event_files(tmp_path):
    # two event files of one run (a restart writes a new one): merged by step
    raw = (TB / "verl" / EVENTS).read_bytes()
    first, second = tmp_path / "a" / EVENTS, tmp_path / "b" / EVENTS
    for p in (first, second):
        p.parent.mkdir()
    ends = record_ends(raw)  # the records up to about half, then the rest (the version record first)
    cut = min(e for e in ends if e >= len(raw) // 2)
    first.write_bytes(raw[:cut])
    second.write_bytes(raw[:ends[0]] + raw[cut:])
    merged = read_metrics_files([first, second])
    assert values(fit_metrics(merged, "m")) == pytest.approx(
        {"train_fix": 5.0, "train_per_token": 3e-5, "sync_s": 1.25}, rel=REL)
    # with a CSV: the framework's step is not W&B's (OpenRLHF's and verl's from 1, AReaL's from 0)
    code, lines = calibrate("--from-metrics", str(first), str(FIX / "areal_history.csv"), "--cluster", PRESET,
                            "--out", str(tmp_path / "p.json"))
    assert (code, lines[0][:96]) == (2, f"error: {FIX / 'areal_history.csv'}: steps numbered by '_step', but {first} "
                                        "by 'TensorBoard step'"[:96])


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw[:8] + bytes([raw[8] ^ 1]) + raw[9:], "byte 0: not a TensorBoard event record (its length's "
                                                          "checksum does not match): not an event file, or damaged"),
    (lambda raw: raw[:int.from_bytes(raw[:8], "little") + 16], "a TensorBoard event file of no scalar "
                                                                "(add_scalar) values"),
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
    assert (code, lines) == (2, [f"error: --run x: {path} is a TensorBoard event file (one run's): --run applies "
                                 "to W&B export CSVs only"])


def test_a_tensorboard_directory_points_at_its_event_files(tmp_path):
    code, lines = calibrate("--from-metrics", str(TB / "verl"), "--cluster", PRESET, "--out", str(tmp_path / "p.json"))
    assert (code, lines) == (2, [f"error: {TB / 'verl'}: a directory, not a metrics file (a TensorBoard log "
                                 f"directory: give its event files, {TB / 'verl' / EVENTS})"])
