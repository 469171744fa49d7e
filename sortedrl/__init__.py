"""sortedrl: design, simulate and validate rollout-scheduling policies for GRPO-style RL.

The package is split the way the problem is: ``traces`` (response lengths), ``sim`` (a SimPy
cluster that jumps from event to event), ``policies`` (scheduling decisions, shared by the
simulator and the real runner), ``realrun`` (vLLM + torch) and ``cli`` (the ``sortedrl`` command).
"""

__version__ = "0.1.0"
