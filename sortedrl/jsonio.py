"""``json.loads`` whose every malformed input is a ``json.JSONDecodeError``.

Python refuses to convert an integer of more than 4,300 digits (``sys.int_info``'s default
limit, a guard against slow conversions), and ``json.loads`` lets that ``ValueError`` through
as it is: a reader that catches ``JSONDecodeError`` to name the file and line then shows a
traceback instead. :func:`loads` reports such a number as malformed JSON at its position, and
:func:`finite` tells a usable number from one that a float cannot hold. JSON nested too deeply
for Python's recursion limit is malformed JSON too. :func:`dumps` writes JSON that is JSON:
Python writes an infinite or NaN float as ``Infinity`` or ``NaN``, which JSON readers refuse.
:func:`read` reads a JSON file whose every failure (missing, a directory, not UTF-8, not JSON)
is one error line naming the file, as every JSON input of the CLI needs; a pipe or FIFO is read
once (:mod:`sortedrl.streams`). :func:`text` decodes a file's bytes as UTF-8 after any byte-order
mark (Windows editors write one; ``json.loads`` refuses it), naming a bad byte by its offset in
the file.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from pathlib import Path

from sortedrl import streams
from sortedrl.errors import SortedRLError, not_found
from sortedrl.text_check import TEXT_HEAD, not_text


def loads(text: str | bytes | bytearray) -> object:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):  # (bytes that are not UTF-8: as they are)
        raise
    except (RecursionError, ValueError) as e:
        doc = text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")
        if isinstance(e, RecursionError):  # arrays or objects nested thousands deep
            raise json.JSONDecodeError("nested too deeply", doc, 0) from None
        # "Exceeds the limit (4300 digits) for integer string conversion"
        found = re.search(r"\d{4301,}", doc)
        raise json.JSONDecodeError("an integer of more than 4,300 digits", doc,
                                   found.start() if found else 0) from e


def read(path: Path | str, error: type[Exception], missing: str = "no such file",
         bad: str = "line {line}: not valid JSON ({msg})") -> object:
    """The JSON value in the file at ``path``, or one ``error`` naming the file: ``missing``
    when it is not there, ``empty file`` when it holds nothing (or only white space), ``bad``
    (formatted with ``line``, ``msg`` and ``e``, the decode error) when it is not JSON, and what
    the system said when it cannot be read."""
    try:
        data = streams.take(path)
        if data is None:  # (the head checked before the rest: a model's 16 GB of weights)
            data = read_text_bytes(path, error)
        body = text(data)
        if not body.strip():  # ("Expecting value: line 1 column 1 (char 0)" said less)
            raise error(f"{path}: empty file")
        return loads(body)
    except FileNotFoundError:
        raise error(not_found(path, missing)) from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:  # a directory, no permission
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: " + bad.format(line=e.lineno, msg=e.msg, e=e)) from None


def read_text_bytes(path: Path | str, error: type[Exception], binary: tuple[bytes, ...] = ()) -> bytes:
    """The bytes of a text input file, read whole only once its first :data:`TEXT_HEAD` bytes may
    be text (:func:`not_text`), else one ``error`` naming the file; a file that starts with one
    of the ``binary`` magic numbers (``PAR1``, gzip's) is read whole as it is. OSError as open's."""
    with open(path, "rb") as f:
        head = f.read(TEXT_HEAD)
        if not head.startswith(binary) and (why := not_text(head)) is not None:  # (startswith(()): False)
            raise error(f"{path}: {why}")
        return head + f.read()


def text(data: bytes) -> str:
    """``data`` decoded as UTF-8, after a byte-order mark if it starts with one; a
    UnicodeDecodeError's ``start`` is the bad byte's offset in ``data`` (the mark counted)."""
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return str(memoryview(data)[bom:], "utf-8")
    except UnicodeDecodeError as e:
        raise UnicodeDecodeError(e.encoding, data, e.start + bom, e.end + bom, e.reason) from None


def finite(value: object) -> bool:
    """A JSON number (not a bool) that is a finite float: an integer too large for a float
    (``math.isfinite`` raises OverflowError on it) is not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def dumps(value: object, what: str, **options) -> str:
    """``json.dumps(value, **options)``, refusing an infinite or NaN float with one error that
    names ``what`` (the output) and the field holding it."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        found = _non_finite(value, "")
        if found is None:
            raise
        field, bad = found
        raise SortedRLError(f"{what}: field {field!r} is {bad}, not a finite number (an input past "
                            "any real one?); nothing written") from None


def _non_finite(value: object, at: str) -> tuple[str, float] | None:
    """The first field (``a.b[2]``) of ``value`` that is an infinite or NaN float, and it."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (at, value)
    if isinstance(value, dict):
        items = ((f"{at}.{k}" if at else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{at}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next(filter(None, (_non_finite(v, where) for where, v in items)), None)
