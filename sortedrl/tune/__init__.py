"""Tuning: search policies' knobs for the fastest run within a staleness budget.

``space`` (the ``--param`` grammar and sampling), ``search`` (grid, or quasi-random search then
local refinement; the Pareto front) and ``executors`` (trials in this process, in local
processes, or on Ray).
"""
