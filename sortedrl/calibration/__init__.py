"""Calibration from measurements users already have: vLLM benchmark JSON and RL step metrics.

``vllm_bench`` fits the engine terms of a profile to ``vllm bench serve`` results, ``metrics_fit``
fits the trainer and sync terms to an RL framework's per-step metrics (read by ``metrics_read``,
named in ``metrics_names``), and ``show`` prints a profile so that a user can judge it before trusting it.
"""
