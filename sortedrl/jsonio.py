"""``json.loads`` whose every malformed input is a ``json.JSONDecodeError``.

Python refuses to convert an integer of more than 4,300 digits (``sys.int_info``'s default
limit, a guard against slow conversions), and ``json.loads`` lets that ``ValueError`` through
as it is: a reader that catches ``JSONDecodeError`` to name the file and line then shows a
traceback instead. :func:`loads` reports such a number as malformed JSON at its position, and
:func:`finite` tells a usable number from one that a float cannot hold. JSON nested too deeply
for Python's recursion limit is malformed JSON too.
"""

from __future__ import annotations

import json
import math
import re


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


def finite(value: object) -> bool:
    """A JSON number (not a bool) that is a finite float: an integer too large for a float
    (``math.isfinite`` raises OverflowError on it) is not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
