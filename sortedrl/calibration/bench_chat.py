"""A chat benchmark's first chunk: the role, which vLLM's client counts as the first token.

``vllm bench serve --backend openai-chat`` streams chat completions; vLLM's server sends the
role in a chunk of its own (``chat_completion_stream_generator``'s first iteration) just before the first token's, and the client
times every chunk that has ``choices``: so its ``ttft`` is the role chunk's and each request
has as many gaps as output tokens, one more than a completions run. Split from
:mod:`.bench_file`, which reads the rest of a benchmark file.
"""

from __future__ import annotations

import numpy as np


def chat_run(raw: dict) -> bool:
    """Whether the client streamed chat completions (``--backend openai-chat``, or any backend
    named ``...chat``): vLLM's server then sends the role in a first chunk of its own, just
    before the first token's, and the client counts it: its ``ttft`` is the role chunk's and each
    request has one gap more (:func:`role_chunk_folded`)."""
    backend = raw.get("backend", raw.get("endpoint_type"))
    return isinstance(backend, str) and backend.endswith("chat")


def role_chunk_folded(ttfts: np.ndarray | None, itls: list[np.ndarray]) -> tuple:
    """A chat run's first gap is the role chunk's to the first token's: fold it into the time to
    first token, so each request's gaps are between its tokens' chunks, as a completions run's
    are. Decided by the backend alone (vLLM's chat server always sends the role chunk): a rule
    read off the gaps (some request with as many gaps as tokens) missed a run whose every
    request had a merged chunk, and took the role chunk's time for the first token's. A server
    that sent the role with the first token would be read one gap short a request."""
    firsts = np.asarray([g[0] if len(g) else 0.0 for g in itls])
    return (None if ttfts is None else ttfts + firsts), [g[1:] for g in itls]
