"""Token counts of the text dumps (verl, TRL): a local tokenizer, and how a decoded response's
text maps back to the tokens the engine generated (the end-of-sequence token decoded away, a
character the cap cut, tool output the dump does not mark). Split from :mod:`._common`.
"""

from __future__ import annotations

from pathlib import Path

from sortedrl.errors import TraceError


class TokenCounter:
    """Counts tokens of text with a local tokenizer directory (its ``tokenizer.json``).

    Loaded with the ``tokenizers`` library from the file itself, so nothing can reach a model
    hub. Special tokens are not added: the dumps hold text decoded with
    ``skip_special_tokens=True`` (verl, TRL), so a response's count is its generated tokens less
    the end-of-sequence token, and a prompt's lacks the chat template's special tokens.
    """

    def __init__(self, directory: Path | None, framework: str, fields: str) -> None:
        if directory is None:
            raise TraceError(f"--from {framework}: the dump holds text ({fields}); token counts "
                             f"need a local tokenizer directory: give --tokenizer DIR")
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise TraceError(f"--tokenizer {directory}: no tokenizer.json in this directory "
                             f"(a Hugging Face tokenizer saved with save_pretrained)")
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises plain Exception on a bad file
            raise TraceError(f"{path}: not a tokenizer file: {str(e).splitlines()[0]}") from None
        self.directory = Path(directory)

    def count(self, texts: list[str]) -> list[int]:
        encoded = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def responses(self, records: list[tuple[str, dict]], name: str, notes: list[str]) -> list[int]:
        """Token counts of each record's response text ``name`` (the end-of-sequence token is
        decoded away and not counted). Two cases read apart, each said in ``notes``: an empty
        text (only that token was generated) counts 1, the token it was, so that its group is
        kept (one such record stopped the import); and a text that ends in U+FFFD, a character
        cut by the length cap mid-way (the framework decodes the cut bytes to the replacement
        character, which a byte-level tokenizer encodes in 3 tokens: 7 generated tokens
        re-counted 9, above the run's cap), counts each trailing U+FFFD as 1 token."""
        texts = [obj[name] for _, obj in records]
        cut = [len(t) - len(t.rstrip("\ufffd")) for t in texts]
        counts = [n + c for n, c in zip(self.count([t[:len(t) - c] for t, c in zip(texts, cut, strict=True)]),
                                        cut, strict=True)]
        empty = [where for (where, _), n in zip(records, counts, strict=True) if n < 1]
        if empty:
            notes.append(f"{len(empty)} response(s) that count no token ('{name}': empty or "
                         f"blank text, as only the end-of-sequence token decodes) counted as 1 "
                         f"token; the first: {empty[0]}")
        if any(cut):
            notes.append(f"{sum(1 for c in cut if c)} response(s) end in a character cut mid-way "
                         "(U+FFFD, the length cap's cut): each counted as 1 token, not re-encoded")
        return [max(1, n) for n in counts]


TOOL_OUTPUT = "<tool_response>"  # the Hermes/Qwen chat templates' tool-result tag


def tool_output_note(records: list[tuple[str, dict]], name: str, fix: str) -> str | None:
    """A note where responses hold tool output but the dump marks no generated tokens: verl's
    tool agent loop and TRL's tool calling put the tool's result inside the response (its mask
    0, which neither dump keeps), so its tokens count as generated ones (replayed as decode, and
    possibly setting the cap). Read off the templates' ``<tool_response>`` tag; ``fix``: how to
    keep the mask."""
    held = [where for where, obj in records if TOOL_OUTPUT in obj[name] and obj.get("response_mask") is None]
    if not held:
        return None
    return (f"{len(held)} response(s) hold tool output ('{TOOL_OUTPUT}' in '{name}', the first: "
            f"{held[0]}), and the dump marks no generated tokens: their tool output is counted as "
            f"generated tokens ({fix})")
