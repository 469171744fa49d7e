"""The real GRPO runner: vLLM generation and torch training behind the same Backend interface.

Not built yet (see the real-runner issue). It will implement
:class:`sortedrl.policies.controller.Backend` over vLLM's step-wise ``LLMEngine``, run the same
:class:`~sortedrl.policies.controller.Controller` and policies as the simulator, and write the
same timeline, trace and summary, so that ``validate`` can compare the two.
"""
