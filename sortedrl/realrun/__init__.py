"""The real GRPO runner: vLLM generation and torch training behind the same Backend interface.

It implements :class:`sortedrl.policies.controller.Backend` (:mod:`~sortedrl.realrun.backend`)
over vLLM's step-wise ``LLMEngine`` (:mod:`~sortedrl.realrun.engine`), runs the same :class:`~sortedrl.policies.controller.Controller`
and policies as the simulator (:mod:`~sortedrl.realrun.run`), and writes the same timeline,
trace and summary, so that ``validate`` can compare the two.
"""
