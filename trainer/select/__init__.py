"""Which prompts a step samples, before any rollout is paid for.

``passrate`` (each question's decayed pass-rate posterior and GRESO's skip rule),
``frontier`` (difficulty levels aimed at a target pass-rate band, ``SelectionRules``),
``probe`` (the answer probe: the policy's own probability of the gold reply) and
``probe_selection`` (which probed candidates fill the step's slots, with their weights).
The ``PromptDrawer`` that uses them is ``trainer/sampling.py``. Nothing is imported here.
"""
