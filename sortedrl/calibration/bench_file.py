"""Read the JSON that vLLM's benchmark client writes, checked field by field.

Both layouts are accepted: ``vllm bench serve --save-result --save-detailed`` (vLLM >= 0.9) and
the older ``benchmarks/benchmark_serving.py``. They share the keys used here: ``duration``,
``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``request_rate``, ``max_concurrency``;
the newer one adds ``start_times`` and ``queue_times`` (without them, :attr:`BenchRun.sends`
reads a closed loop's sends off the latencies). A chat run's role chunk, a ramp-up's sends and
runs appended to one file are read as docs/calibration.md says. A summary saved without
``--save-detailed`` has no per-request lists; its ``total_input_tokens``,
``total_output_tokens`` and ``completed`` stand in for them (every request then gets the mean
lengths, an approximation the fit report names).

``max_concurrency`` null is vLLM's client run without ``--max-concurrency``: no limit, every
request sent at once (at the infinite rate). Where the file's sends say otherwise (its
``start_times`` and latencies show at most c < N requests in flight: another client, or an
edited file), the run is replayed as the closed loop of c it was, and the fit's report says so
(:attr:`BenchRun.concurrency_from_sends`; :func:`~.bench_concurrency.in_flight`); read as N, a fit of such a file collapsed (-99.9%).

``itls`` hold one gap per streamed *chunk*, not per token: a busy server can send two or more
tokens in one chunk (vLLM merges a request's outputs that its API server has not yet taken), so
a request then has fewer gaps than ``output_lens - 1``. Its tokens' steps can no longer be told
from its chunks; :attr:`BenchRun.merged_tokens` counts them, and the fit sets those requests
aside for its per-token rows (see :mod:`.vllm_bench`). More gaps than tokens is an error.

Times that no run can have are refused up front, naming the file, the field and the request:
a ``duration`` beyond :data:`MAX_DURATION_S` or shorter than the engine steps of the longest
request, a time to first token under an engine step (:data:`MIN_STEP_S`), and a request that
ends (its send after the first, its time to first token and its gaps) after the run's
``duration`` (vLLM's client times every request within it). The fit would otherwise turn them
into an overflowing or singular system, or a replay of steps longer than any clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sortedrl import jsonio, streams
from sortedrl.calibration.bench_chat import chat_run, role_chunk_folded
from sortedrl.calibration.bench_concurrency import closed_loop_sends, in_flight
from sortedrl.errors import ConfigError, not_found
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.sim.cost import MIN_STEP_S

VERSION_KEYS = ("vllm_version", "engine_version", "version")
# the fit replays every engine step (one per output token of the longest request) and every
# request, so a file past these is refused rather than replayed for hours
MAX_TOKENS = {"input_lens": 2**24, "output_lens": 2**20}  # a request's prompt / output tokens
LATENCY_LISTS = ("ttfts", "itls")  # per request, with --save-detailed: both or neither
MAX_REQUESTS = 2**20
MAX_DURATION_S = 1e7  # about 116 days: a longer benchmark is an edit, not a recording
END_SLACK = 0.01  # a request may end this share past the duration (rounding in the saved times)


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run: its requests (in the order the client sent them) and what it measured."""

    path: str
    duration_s: float
    input_lens: np.ndarray
    output_lens: np.ndarray
    concurrency: int  # requests in flight at most (the request count when unlimited)
    arrivals: np.ndarray | None  # None: all at once (infinite rate); else when each request was ready to be sent, s from the start
    ttfts: np.ndarray | None  # time to first token per request, s
    itls: list[np.ndarray] | None  # gaps between streamed chunks per request, s
    start_times: np.ndarray | None  # when each request was sent, s from the first
    engine_version: str | None
    lengths_from_totals: bool  # lengths are the totals' means (a summary without per-request lists)
    engine: str = "vllm"  # the server benchmarked (:func:`_engine`: vllm-cpu, sglang, ...)
    concurrency_from_sends: bool = False  # max_concurrency null, but the sends show a limit (in_flight)
    model: str | None = None  # the model the client asked for (its model_id), None if it names none

    @property
    def detailed(self) -> bool:
        return self.ttfts is not None and self.itls is not None

    @property
    def sends(self) -> np.ndarray | None:
        """When each request was sent, s from the first: its ``start_times``, or, in a file
        without them (the older client's), a closed loop's sends read off its latencies
        (:func:`~.bench_concurrency.closed_loop_sends`); None without latencies."""
        if self.start_times is not None:
            return self.start_times
        if not self.detailed:
            return None
        return closed_loop_sends(self.concurrency, self.ttfts, self.itls)

    @property
    def merged_tokens(self) -> np.ndarray | None:
        """Per request, the tokens that reached the client in one chunk with an earlier token
        (``output_lens - 1 - len(itls)``; 0 when each token streamed alone; None without itls)."""
        if self.itls is None:
            return None
        return self.output_lens - 1 - np.asarray([len(g) for g in self.itls], dtype=np.int64)


def read_bench(path: str | Path) -> BenchRun:
    """Parse and check one benchmark JSON; every problem is one line naming the file and field."""
    raw = jsonio.read(path, ConfigError, "benchmark file not found", "not valid JSON ({e})")
    return _run(raw, str(path))


def read_bench_runs(path: str | Path) -> list[tuple[BenchRun, bytes]]:
    """The runs of one benchmark file, each with its bytes: a ``.jsonl`` file holds one run a
    line (SGLang's ``python -m sglang.bench_serving --output-file F.jsonl --output-details``
    appends each run as a line, its keys those of vLLM's older ``benchmark_serving.py``, whence
    it came), each named ``FILE:LINE``; any other file is one JSON object (vLLM's client), or,
    where it is not and its lines are, runs that ``--append-result`` appended a line each."""
    if not str(path).lower().endswith(".jsonl"):
        try:
            return [(read_bench(path), _bytes(path))]
        except ConfigError:
            data = _bytes(path)
            if not _appended(data):
                raise
            return _lines(path, data)
    return _lines(path, _bytes(path))


def _appended(data: bytes) -> bool:
    """Whether a file that is not one JSON object is runs appended a line each: ``vllm bench
    serve --append-result`` adds a newline and the next run's JSON to the file, ``.json`` named."""
    lines = [line for line in data.splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    try:
        return isinstance(jsonio.loads(jsonio.text(lines[0])), dict)
    except ValueError:  # (UnicodeDecodeError is one)
        return False


def _lines(path: str | Path, data: bytes) -> list[tuple[BenchRun, bytes]]:
    """The runs of a file holding one a line, each named ``FILE:LINE``."""
    runs = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            raw = jsonio.loads(jsonio.text(line))
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not UTF-8 text (byte {e.start})") from None
        except ValueError as e:
            raise ConfigError(f"{where}: not valid JSON ({e})") from None
        runs.append((_run(raw, where), line))
    if not runs:
        raise ConfigError(f"{path}: no benchmark run in it (an empty JSON lines file)")
    return runs


def _bytes(path: str | Path) -> bytes:
    data = streams.peek(path)
    if data is not None:
        return data
    try:
        return jsonio.read_text_bytes(path, ConfigError)
    except FileNotFoundError:
        raise ConfigError(not_found(path, "benchmark file not found")) from None
    except OSError as e:  # a directory, no permission
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None


def _run(raw: object, where: str) -> BenchRun:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a JSON object from `vllm bench serve --save-result`")
    duration = _number(raw, "duration", where)
    if duration <= 0:
        raise ConfigError(f"{where}: field 'duration': must be > 0 s, got {duration}")
    if duration > MAX_DURATION_S:
        raise ConfigError(f"{where}: field 'duration': {duration:g} s is over {MAX_DURATION_S:g} s "
                          "(116 days), longer than any benchmark")
    ok, fallback = _requests(raw, where, duration)
    ins, outs = (np.asarray(v, dtype=np.int64) for v in ok[:2])
    ttfts, itls, starts, queues = ok[2:]
    n = len(ins)
    conc = raw.get("max_concurrency")
    rate = _rate(raw, where)
    ramp = raw.get("ramp_up_strategy") is not None  # (its rate is "inf", its sends spread)
    from_sends = False
    if conc is None:  # vLLM's client without --max-concurrency: no limit
        conc = n
        if math.isinf(rate) and not ramp and starts is not None and ttfts is not None and itls is not None:
            conc = in_flight(starts, ttfts, itls)
            from_sends = conc < n
    elif isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise ConfigError(f"{where}: field 'max_concurrency': expected an integer >= 1 or null, got {conc!r}")
    arrivals = _arrivals(rate, starts, queues, where, ramp)
    version = next((str(raw[k]) for k in VERSION_KEYS if raw.get(k)), None)
    model = raw.get("model_id")
    return BenchRun(where, duration, ins, outs, min(conc, n), arrivals, ttfts, itls, starts,
                    version, fallback, _engine(raw), from_sends, _name(model))


def _engine(raw: dict) -> str:
    """The server a file benchmarked: its ``engine`` when it names one (``vllm bench serve
    --metadata engine=vllm-cpu``, as the recorded files do: the client cannot tell a CPU build
    from a GPU one), else the client's ``backend`` (SGLang's: sglang, sglang-oai, ...; vLLM's:
    vllm, openai)."""
    engine, backend = _name(raw.get("engine")), raw.get("backend")
    if engine is not None:
        return engine
    return "sglang" if isinstance(backend, str) and backend.startswith("sglang") else "vllm"


def _name(value: object) -> str | None:
    """A name a file gives (an engine, a model id): a string of printable characters, at most
    256 of them; None for anything else (not a name: the file's numbers are what is checked)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 256 or not value.isprintable():
        return None
    return value.strip()


# -- fields -------------------------------------------------------------------------------------


def _number(raw: dict, key: str, where: str) -> float:
    v = raw.get(key)
    if v is None:
        raise ConfigError(f"{where}: field {key!r}: missing")
    if not finite(v):
        raise ConfigError(f"{where}: field {key!r}: expected a number, got {short_repr(v)}")
    return float(v)


def _requests(raw: dict, where: str, duration: float) -> tuple[list, bool]:
    """(input_lens, output_lens, ttfts, itls, start_times, queue_times) of completed requests."""
    latencies = [k for k in LATENCY_LISTS if raw.get(k) is not None]  # (null: not saved)
    if "input_lens" not in raw and "output_lens" not in raw:
        if latencies:  # (else they were dropped without a word, and the fit ran on the totals)
            raise ConfigError(f"{where}: field {latencies[0]!r} without 'input_lens' and 'output_lens': "
                              "a request's latencies need its lengths (saved with --save-detailed?)")
        return _from_totals(raw, where, duration), True
    if len(latencies) == 1:  # (the per-token fit needs both: one alone was dropped without a word)
        other = next(k for k in LATENCY_LISTS if k not in latencies)
        raise ConfigError(f"{where}: field {latencies[0]!r} without {other!r}: the per-token fit needs "
                          "both (saved with --save-detailed?)")
    n = _list(raw, "input_lens", where, None)
    lists = {k: _list(raw, k, where, n, required=k == "output_lens")
             for k in ("output_lens", *LATENCY_LISTS, "start_times", "queue_times", "errors")}
    ins, outs = raw["input_lens"], raw["output_lens"]
    for key, vals in (("input_lens", ins), ("output_lens", outs)):
        for i, v in enumerate(vals):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS[key]:
                raise ConfigError(f"{where}: field {key!r}: entry {i}: expected a token count "
                                  f"from 0 to {MAX_TOKENS[key]:,}, got {short_repr(v)}")
    errors = raw.get("errors") if lists["errors"] else None
    keep = [i for i in range(n) if outs[i] > 0 and not (errors and errors[i])]
    if not keep:
        raise ConfigError(f"{where}: no completed request ({n} listed, each with an error or "
                          "no output tokens)")
    _check_steps(duration, max(outs[i] for i in keep), where)
    ttfts = _floats(raw, "ttfts", where, keep, least=MIN_STEP_S) if lists["ttfts"] else None
    itls = None
    if lists["itls"]:
        itls = []
        chat = chat_run(raw)
        for i in keep:
            row = raw["itls"][i]
            if not isinstance(row, list):
                raise ConfigError(f"{where}: field 'itls': entry {i}: expected a list of seconds >= 0, "
                                  f"got {short_repr(row)}")
            bad = next((k for k, x in enumerate(row) if not (finite(x) and x >= 0)), None)
            if bad is not None:
                raise ConfigError(f"{where}: field 'itls': entry {i}: gap {bad}: expected seconds >= 0, "
                                  f"got {short_repr(row[bad])}")
            most = outs[i] if chat else outs[i] - 1
            if len(row) > most:
                first = "the role's chunk" if chat else "the first"
                raise ConfigError(f"{where}: field 'itls': entry {i}: {len(row)} gaps for {outs[i]} output "
                                  f"tokens (one gap per streamed chunk after {first}: at most {most})")
            itls.append(np.asarray(row, dtype=float))
        if chat:
            ttfts, itls = role_chunk_folded(ttfts, itls)
    starts = _floats(raw, "start_times", where, keep) if lists["start_times"] else None
    _check_ends(raw, where, duration, keep, [k for k in ("start_times", "ttfts", "itls") if lists[k]])
    if starts is not None:
        starts = starts - starts.min()
    queues = _floats(raw, "queue_times", where, keep) if lists["queue_times"] else None
    return [[ins[i] for i in keep], [outs[i] for i in keep], ttfts, itls, starts, queues], False


def _list(raw: dict, key: str, where: str, n: int | None, required: bool = False) -> int | bool:
    """``input_lens``'s length (``n`` None), else whether ``key`` is listed with ``n`` entries; a
    ``required`` one must be (null is no list)."""
    v = raw.get(key)
    if v is None and n is not None and not required:
        return False
    if not isinstance(v, list):
        raise ConfigError(f"{where}: field {key!r}: expected a list (saved with --save-detailed?)")
    if n is not None and len(v) != n:
        raise ConfigError(f"{where}: field {key!r}: {len(v)} entries, but 'input_lens' has {n}")
    return len(v) if n is None else True


def _floats(raw: dict, key: str, where: str, keep: list[int], least: float = 0.0) -> np.ndarray:
    """The entries of ``keep``, each a time of at least ``least`` (> 0: a time to first token,
    which takes an engine step of at least MIN_STEP_S)."""
    vals = raw[key]
    for i in keep:
        if not finite(vals[i]) or vals[i] < least:
            why = " (a first token takes an engine step)" if least else ""
            raise ConfigError(f"{where}: field {key!r}: entry {i}: expected seconds >= {least:g}{why}, "
                              f"got {short_repr(vals[i])}")
    return np.asarray([vals[i] for i in keep], dtype=float)


def _check_steps(duration: float, longest: int, where: str) -> None:
    """A request's output tokens take an engine step each, of at least MIN_STEP_S: a shorter
    ``duration`` (1e-300 s) is no run's, and its weight overflowed the fit (an SVD traceback)."""
    if duration < longest * MIN_STEP_S:
        raise ConfigError(f"{where}: field 'duration': {duration:g} s is shorter than the {longest} engine "
                          f"step(s) of its longest request (each at least {MIN_STEP_S:g} s)")


def _check_ends(raw: dict, where: str, duration: float, keep: list[int], fields: list[str]) -> None:
    """Every request ends within the run: its send (after the first request's), its time to
    first token and its gaps add up to at most the ``duration`` (vLLM's client times each request
    within it; END_SLACK allows for rounding). Summed as Python floats: gaps of 1e308 make inf,
    not a numpy overflow warning, and the fit and replay never see them (the replay hung)."""
    if not fields:
        return
    first = min(float(raw["start_times"][i]) for i in keep) if "start_times" in fields else 0.0
    limit = duration * (1.0 + END_SLACK)
    for i in keep:
        end = float(raw["start_times"][i]) - first if "start_times" in fields else 0.0
        end += float(raw["ttfts"][i]) if "ttfts" in fields else 0.0
        end += sum(float(x) for x in raw["itls"][i]) if "itls" in fields else 0.0
        if end > limit:
            names = ", ".join(repr(k) for k in fields)
            raise ConfigError(f"{where}: entry {i} of {names}: the request ends {end:g} s into the run, "
                              f"after its 'duration' of {duration:g} s")


def _from_totals(raw: dict, where: str, duration: float) -> list:
    need = ("completed", "total_input_tokens", "total_output_tokens")
    missing = [k for k in need if k not in raw]
    if missing:
        raise ConfigError(f"{where}: no 'input_lens'/'output_lens' lists and no {', '.join(missing)}: "
                          "cannot tell the requests' lengths")
    done = _number(raw, "completed", where)
    if not 1 <= done <= MAX_REQUESTS or done != int(done):
        raise ConfigError(f"{where}: field 'completed': expected a request count from 1 to "
                          f"{MAX_REQUESTS:,}, got {short_repr(raw['completed'])}")
    n = int(done)
    tin, tout = _number(raw, "total_input_tokens", where), _number(raw, "total_output_tokens", where)
    if tin < 0 or tout < n:
        raise ConfigError(f"{where}: fields 'total_input_tokens'/'total_output_tokens': "
                          f"{tin:g}/{tout:g} tokens for {n} requests")
    for key, total in (("input_lens", tin), ("output_lens", tout)):
        if total / n > MAX_TOKENS[key]:
            field = "total_input_tokens" if key == "input_lens" else "total_output_tokens"
            raise ConfigError(f"{where}: field {field!r}: {total:g} tokens for {n} requests, more "
                              f"than {MAX_TOKENS[key]:,} a request")
    ins, outs = _spread(int(tin), n), _spread(int(tout), n)
    _check_steps(duration, max(outs), where)
    return [ins, outs, None, None, None, None]


def _spread(total: int, n: int) -> list[int]:
    """``n`` integers as equal as possible that sum to ``total``."""
    base, extra = divmod(total, n)
    return [base + (i < extra) for i in range(n)]


def _rate(raw: dict, where: str) -> float:
    v = raw.get("request_rate", "inf")
    if v in ("inf", None) or (isinstance(v, float) and math.isinf(v)):
        return math.inf
    if not finite(v) or v <= 0:
        raise ConfigError(f"{where}: field 'request_rate': expected a rate > 0 or \"inf\", "
                          f"got {short_repr(v)}")
    return float(v)


def _arrivals(rate: float, starts, queues, where: str, ramp: bool = False) -> np.ndarray | None:
    """When each request became ready to send: all at once at an infinite rate, else the send
    time minus the time it waited for the concurrency limit (``start_times - queue_times``).
    ``ramp``: ``--ramp-up-strategy``, whose file says ``request_rate`` "inf" (vLLM's client
    refuses a rate beside it) while its sends follow the ramp from ``ramp_up_start_rps`` to
    ``ramp_up_end_rps``: replayed from its sends, as a finite rate is (read as all at once, a
    linear 1-to-20 rps ramp fitted -63.5%)."""
    if math.isinf(rate) and not ramp:
        return None
    if starts is None:
        what = "a ramp-up (ramp_up_strategy)" if ramp else f"a request_rate of {rate:g}/s"
        other = "without --ramp-up-strategy" if ramp else "with --request-rate inf"
        raise ConfigError(f"{where}: field 'start_times': needed to replay {what} "
                          f"(save with --save-detailed, or benchmark {other})")
    q = queues if queues is not None else np.zeros_like(starts)
    return np.maximum(0.0, starts - q)
