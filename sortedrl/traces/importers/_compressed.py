"""A compressed dump file in a dump directory (``2.jsonl.gz`` beside ``1.jsonl``): an importer
matches its files by name (``*.jsonl``), so such a file would be skipped without a word and its
step left out of the trace. It is refused as a compressed file given itself is
(:func:`~sortedrl.text_check.not_text`: ``gzip-compressed: decompress it first``). The
suffix is matched in any case (``2.jsonl.GZ``), as the file's first bytes say what it is.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from sortedrl.errors import TraceError
from sortedrl.text_check import compression

# the compression a file name's last suffix says (its first bytes say it first, where known)
SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zip": "zip",
            ".lz4": "lz4"}
HEAD = 16  # bytes enough for every magic number text_check knows


def file_compression(path: Path) -> str | None:
    """The compression a file's first bytes say (:func:`~sortedrl.text_check.compression`);
    None for none, or a file that cannot be read (its reader says why)."""
    try:
        with open(path, "rb") as handle:
            return compression(handle.read(HEAD))
    except OSError:
        return None


def refuse_compressed_dumps(directory: Path, patterns: tuple[str, ...], what: str,
                            recursive: bool = False, ignore: re.Pattern | None = None) -> None:
    """One error line naming the first file in ``directory`` (under it: ``recursive``) that
    matches one of ``patterns`` but for a compression suffix (in any case), unless the file it
    decompresses to is there too (``gunzip -k`` keeps both; that one is read) or its plain name
    matches ``ignore`` (files the importer skips anyway, e.g. slime's ``eval_N.pt``)."""
    found = sorted(p for p in (directory.rglob("*") if recursive else directory.glob("*"))
                   if p.suffix.lower() in SUFFIXES and p.is_file()
                   and any(fnmatch.fnmatchcase(p.stem, pat) for pat in patterns))
    for f in found:
        if f.with_suffix("").is_file() or (ignore is not None and ignore.search(f.stem)):
            continue
        kind = file_compression(f)
        said = f"{kind}-compressed" if kind else f"{SUFFIXES[f.suffix.lower()]}-compressed (by its name)"
        raise TraceError(f"{f}: {said}: decompress it first ({what} files are read as plain "
                         f"{' or '.join(patterns)})")
