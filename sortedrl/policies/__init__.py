"""Scheduling policies and the controller that applies them, shared by simulator and real runner.

``base`` (events, actions, the Policy class), ``view`` (what a policy may see), ``controller``
(checks and applies actions on a Backend), ``registry`` (names to classes) and one module per
policy.
"""
