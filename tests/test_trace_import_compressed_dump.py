"""`trace import --from FRAMEWORK DIR` on a dump directory holding a compressed dump file
(``1.jsonl``, ``2.jsonl.gz``): it was skipped without a word (the importers match ``*.jsonl``),
its step missing from the trace, and a directory of only ``.gz`` files said "no verl rollout
dump files". It is one `error:` line naming the file and its compression, as the file given
itself is, exit 2, no output written; a compressed file beside its decompressed copy
(``gunzip -k``) is let be."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sortedrl.traces.importers import import_framework
from tests.cli_helpers import import_error

DUMPS = Path(__file__).parent / "fixtures" / "frameworks"


def _zipped(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("dump", data)
    return buf.getvalue()


def _dump_dir(tmp_path: Path, fixture: str, compressed: str, compress) -> tuple[Path, Path]:
    """A copy of fixture directory ``fixture`` whose file ``compressed`` is replaced by itself
    compressed with ``compress``, named with its suffix: the directory and that file."""
    d = tmp_path / "dump"
    shutil.copytree(DUMPS / fixture, d)
    plain = d / compressed
    packed = plain.with_name(plain.name + SUFFIX[compress])
    packed.write_bytes(compress(plain.read_bytes()))
    plain.unlink()
    return d, packed


SUFFIX = {gzip.compress: ".gz", lzma.compress: ".xz", bz2.compress: ".bz2", _zipped: ".zip"}
KIND = {gzip.compress: "gzip", lzma.compress: "xz", bz2.compress: "bzip2", _zipped: "zip"}


@pytest.mark.parametrize("framework, fixture, compressed, compress, plain", [
    ("verl", "verl_rollout", "2.jsonl", gzip.compress, "verl rollout dump files are read as "
     "plain *.jsonl"),
    ("verl", "verl_rollout", "1.jsonl", bz2.compress, "verl rollout dump files are read as "
     "plain *.jsonl"),
    ("nemo-rl", "nemo_rl_logs", "train_data_step2.jsonl", lzma.compress, "NeMo-RL "
     "train_data_step files are read as plain train_data_step*.jsonl"),
    ("slime", "slime_rollout", "rollout_data_1.pt", gzip.compress, "slime debug rollout files "
     "are read as plain *.pt"),
    ("slime", "slime_rollout", "rollout_data_0.pt", _zipped, "slime debug rollout files are "
     "read as plain *.pt"),
])
def test_a_compressed_file_in_a_dump_directory_is_one_error_line(
        tok, tmp_path, framework, fixture, compressed, compress, plain) -> None:
    d, packed = _dump_dir(tmp_path, fixture, compressed, compress)
    extra = ["--tokenizer", tok] if framework == "verl" else []
    assert import_error(tmp_path, [d, "--from", framework, *extra]) == (
        f"error: {packed}: {KIND[compress]}-compressed: decompress it first ({plain})")


def test_a_directory_of_only_compressed_files_names_the_first(tok, tmp_path) -> None:
    # was: "no verl rollout dump files (*.jsonl) in this directory", hiding the cause
    d = tmp_path / "dump"
    d.mkdir()
    for name in ("1.jsonl", "2.jsonl"):
        (d / f"{name}.gz").write_bytes(gzip.compress((DUMPS / "verl_rollout" / name).read_bytes()))
    assert import_error(tmp_path, [d, "--from", "verl", "--tokenizer", tok]) == (
        f"error: {d / '1.jsonl.gz'}: gzip-compressed: decompress it first (verl rollout dump "
        "files are read as plain *.jsonl)")


def test_areal_trl_and_nemo_gym_directories_alike(tok, tmp_path) -> None:
    # refused before any file is read: the plain file's content does not matter here
    areal = tmp_path / "areal"
    areal.mkdir()
    (areal / "sessions-r0.jsonl").write_text("{}\n")
    (areal / "sessions-r1.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    assert import_error(tmp_path, [areal, "--from", "areal"]) == (
        f"error: {areal / 'sessions-r1.jsonl.gz'}: gzip-compressed: decompress it first (AReaL "
        "session tracer sessions-r{rank}.jsonl files are read as plain sessions-r*.jsonl)")
    trl = tmp_path / "completions"
    trl.mkdir()
    shutil.copy(DUMPS / "trl_completions.table.json", trl)
    (trl / "completions_00010.parquet.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 12)
    assert import_error(tmp_path, [trl, "--from", "trl", "--tokenizer", tok]) == (
        f"error: {trl / 'completions_00010.parquet.zst'}: zstd-compressed: decompress it first "
        "(TRL completions files are read as plain *.json* or *.parquet)")
    gym = tmp_path / "gym"
    (gym / "run1").mkdir(parents=True)
    (gym / "run1" / "nemo_gym_metrics.json.lz4").write_bytes(b"\x04\x22\x4d\x18")
    assert import_error(tmp_path, [gym, "--from", "nemo-gym"]) == (
        f"error: {gym / 'run1' / 'nemo_gym_metrics.json.lz4'}: lz4-compressed (by its name): "
        "decompress it first (NeMo-Gym metrics files are read as plain nemo_gym_metrics.json)")


def test_a_compressed_file_beside_its_decompressed_copy_is_let_be(tok, tmp_path) -> None:
    # `gunzip -k` keeps both: the plain copy is read, once
    d, packed = _dump_dir(tmp_path, "verl_rollout", "2.jsonl", gzip.compress)
    (d / "2.jsonl").write_bytes(gzip.decompress(packed.read_bytes()))
    trace, report = import_framework("verl", d, tok)
    expected, _ = import_framework("verl", DUMPS / "verl_rollout", tok)
    assert (report.files, report.rows) == (2, 32)
    assert trace.step.tolist() == expected.step.tolist()
    assert np.array_equal(trace.response_len, expected.response_len)


def test_a_gzip_pt_given_itself_says_so(tmp_path) -> None:
    # was: "not a torch.save file: corrupt pickle stream (Unsupported operand 31)"
    f = tmp_path / "rollout_data_0.pt.gz"
    f.write_bytes(gzip.compress((DUMPS / "slime_rollout" / "rollout_data_0.pt").read_bytes()))
    assert import_error(tmp_path, [f, "--from", "slime"]) == (
        f"error: {f}: gzip-compressed: decompress it first")


def test_an_upper_case_suffix_is_a_compressed_file_too(tok, tmp_path) -> None:
    # was: `2.jsonl.GZ` skipped without a word (matched neither *.jsonl nor *.jsonl.gz)
    d, packed = _dump_dir(tmp_path, "verl_rollout", "2.jsonl", gzip.compress)
    upper = packed.rename(packed.with_name("2.jsonl.GZ"))
    assert import_error(tmp_path, [d, "--from", "verl", "--tokenizer", tok]) == (
        f"error: {upper}: gzip-compressed: decompress it first (verl rollout dump files are "
        "read as plain *.jsonl)")


def test_a_compressed_slime_eval_file_is_skipped_as_slime_skips_it(tmp_path) -> None:
    # slime's eval dumps hold no GRPO groups and are skipped; compressed, they were refused
    d = tmp_path / "dump"
    shutil.copytree(DUMPS / "slime_rollout", d)
    (d / "eval_0.pt.gz").write_bytes(gzip.compress((d / "rollout_data_0.pt").read_bytes()))
    trace, report = import_framework("slime", d)
    expected, _ = import_framework("slime", DUMPS / "slime_rollout")
    assert report.files == 2
    assert np.array_equal(trace.response_len, expected.response_len)
    (d / "rollout_data_1.pt").rename(d / "rollout_data_1.pt.Gz")
    assert import_error(tmp_path, [d, "--from", "slime"]) == (
        f"error: {d / 'rollout_data_1.pt.Gz'}: zip-compressed: decompress it first (slime debug "
        "rollout files are read as plain *.pt)")
