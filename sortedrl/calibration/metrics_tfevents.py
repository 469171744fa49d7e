"""Reading TensorBoard event files (``events.out.tfevents.*``) for ``calibrate --from-metrics``.

verl (``trainer.logger=['tensorboard']``, ``verl/utils/tracking.py``), OpenRLHF
(``--use_tensorboard``, ``openrlhf/utils/logging_utils.py``: ``train/<key>``), slime
(``--use-tensorboard``) and AReaL (``stats_logger.tensorboard.path``) each write their step
metrics with ``SummaryWriter.add_scalar(key, value, step)``: torch's or tensorboardX's, which
write the same file. It is a TFRecord file (records of a little-endian length, its masked
CRC-32C, the data and its CRC) of ``Event`` protocol buffers (``tensorboard/compat/proto/
event.proto``): ``step`` (field 2) and a ``Summary`` (field 5) of ``Value``s, each a ``tag``
(1) and a ``simple_value`` (2, a 32-bit float), or a scalar ``tensor`` (8) as TensorFlow 2's
writer puts it. Read here with no TensorBoard installed: the wire format is a few rules.

The step is what the framework passed, which differs between them (verl's and OpenRLHF's
global step, from 1; slime's rollout step; AReaL's W&B step, from 0), so an event file is
merged only with other event files: a log directory's, in the order they were written. A last
record cut short (a run still writing) is left out and noted; a damaged record is an error.
"""

from __future__ import annotations

import struct

from sortedrl.calibration.metrics_read import TB_STEP, Metrics, _metrics, _store
from sortedrl.errors import ConfigError
from sortedrl.wandb_runs import step_number

SMALL_RECORD = 4096  # bytes: a scalar's record is about a hundred
DT_FLOAT, DT_DOUBLE = 1, 2  # TensorProto dtypes (tensorflow/core/framework/types.proto)


def read_tfevents(files: list[tuple[bytes, str]], where: str) -> Metrics:
    """Tag -> {step: value} of the scalar summaries in event files' bytes (each with its name),
    several of one run (a log directory: a restart writes a new file, which logs the steps after
    its checkpoint again) read in the order of their events' wall times, so that a step logged
    again keeps its later value, and the fit notes it."""
    scalars: list[tuple[float, int, str, float, str]] = []
    notes: list[str] = []
    for raw, name in files:
        scalars += _scalars(raw, name, notes)
    scalars.sort(key=lambda s: s[0])  # (stable: a file's own order where the times tie)
    out: dict[str, dict[int, float]] = {}
    repeated: set[int] = set()
    for _, step, tag, value, at in scalars:
        _store(out, tag, step, value, at, repeated)
    if not out:
        raise ConfigError(f"{where}: TensorBoard's, but no scalar (add_scalar) values in it")
    metrics = _metrics(out, where, repeated, step_column=TB_STEP)
    metrics.notes += notes
    return metrics


def _scalars(raw: bytes, where: str, notes: list[str]) -> list[tuple[float, int, str, float, str]]:
    """``(wall time, step, tag, value, where)`` of each scalar in one event file's records."""
    found = []
    pos = records = 0
    while pos < len(raw):
        if len(raw) - pos < 12:
            notes.append(f"{where}: its last record is cut short (a run still writing?): left out")
            break
        length, length_crc = struct.unpack_from("<QI", raw, pos)
        if _masked_crc(raw[pos:pos + 8]) != length_crc:
            raise ConfigError(f"{where}: byte {pos}: not a TensorBoard event record (its length's "
                              "checksum does not match): not an event file, or damaged")
        if pos + 16 + length > len(raw):
            notes.append(f"{where}: its last record is cut short (a run still writing?): left out")
            break
        data = raw[pos + 12:pos + 12 + length]
        at = f"{where}: record {records}"
        try:
            event = _event(data, at)
        except (IndexError, struct.error, ValueError) as e:
            raise ConfigError(f"{at}: not a TensorBoard event ({e})") from None
        # (a record read, or one small enough to be a scalar's, whose damage could have hidden
        # one: the pure-Python checksum costs a microsecond a byte, which images would take)
        checked = event or length <= SMALL_RECORD
        if checked and _masked_crc(data) != struct.unpack_from("<I", raw, pos + 12 + length)[0]:
            raise ConfigError(f"{at}: its data's checksum does not match: the file is damaged")
        found += event
        pos += 16 + length
        records += 1
    return found


def _event(data: bytes, at: str) -> list[tuple[float, int, str, float, str]]:
    """The scalars of one ``Event``: ``(wall time, step, tag, value, where)``."""
    wall, step, summaries = 0.0, 0, []
    for field, wire, value in _fields(data):
        if field == 1 and wire == 1:
            wall = struct.unpack("<d", value)[0]
        elif field == 2:
            step = value - (1 << 64) if value >= 1 << 63 else value  # int64
        elif field == 5:
            summaries.append(value)
    found = []
    for summary in summaries:
        for field, _, value in _fields(summary):
            if field == 1:
                tag, number = _scalar(value)
                if tag is not None and number is not None and number == number and abs(number) != float("inf"):
                    found.append((wall, step, tag, number, f"{at}: tag {tag!r}"))
    if found and step_number(float(step)) is None:  # (a text or image record's step is not read)
        raise ConfigError(f"{at}: step {step}: expected a whole number from 0 to below 2**53")
    return found


def _scalar(value: bytes) -> tuple[str | None, float | None]:
    """A ``Summary.Value``'s tag and scalar: its ``simple_value``, or a one-element float or
    double tensor; None for any other (an image, a histogram, text)."""
    tag = number = None
    for field, wire, item in _fields(value):
        if field == 1 and wire == 2:
            tag = item.decode("utf-8", "replace")
        elif field == 2 and wire == 5:
            number = struct.unpack("<f", item)[0]
        elif field == 8 and wire == 2:
            number = _tensor_scalar(item)
    return tag, number


def _tensor_scalar(tensor: bytes) -> float | None:
    dtype, values = 0, []
    for field, wire, item in _fields(tensor):
        if field == 1:
            dtype = item
        elif field == 4:  # tensor_content: the raw little-endian values
            values += _unpack(item, dtype)
        elif field == 5 and wire == 2:  # float_val, packed
            values += struct.unpack(f"<{len(item) // 4}f", item)
        elif field == 5 and wire == 5:
            values += struct.unpack("<f", item)
        elif field == 6 and wire == 2:  # double_val, packed
            values += struct.unpack(f"<{len(item) // 8}d", item)
        elif field == 6 and wire == 1:
            values += struct.unpack("<d", item)
    return float(values[0]) if dtype in (DT_FLOAT, DT_DOUBLE) and len(values) == 1 else None


def _unpack(content: bytes, dtype: int) -> tuple[float, ...]:
    if dtype == DT_FLOAT and len(content) % 4 == 0:
        return struct.unpack(f"<{len(content) // 4}f", content)
    if dtype == DT_DOUBLE and len(content) % 8 == 0:
        return struct.unpack(f"<{len(content) // 8}d", content)
    return ()


def _fields(buf: bytes):
    """``(field number, wire type, value)`` of each field of a protocol buffer message: an int
    for a varint, bytes for the rest."""
    i, end = 0, len(buf)
    while i < end:
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError(f"wire type {wire} at byte {i}")
        if i > end:
            raise ValueError("a field runs past the record's end")
        yield field, wire, value


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError(f"a varint of more than 10 bytes at byte {i}")


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # CRC-32C (Castagnoli), reflected
        table.append(c)
    return table


_CRC = _crc_table()


def _masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (tensorflow/core/lib/hash/crc32c.h ``Mask``)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
