"""The simulator: a SimPy cluster of rollout engines and a trainer, driven event to event.

``cost`` (the cost model), ``cluster`` (presets), ``engine`` (continuous batching as a
state machine), ``backend`` (the SimPy processes behind the controller's Backend interface) and
``run`` (one simulation, end to end).
"""
