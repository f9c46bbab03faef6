"""Proctor: reinforcement learning on verifiable tasks.

Subpackages: ``proctor.sandbox`` (Docker-isolated execution), ``proctor.envs``
(verifiable environments), ``proctor.trainer`` (GRPO, and PPO beside it), ``proctor.plan``
(memory and token cost of a run before it starts), ``proctor.tiny_model`` (the small model
the tests and the demo generate offline), ``proctor.cli`` (the ``proctor`` command).
"""

__version__ = "0.1.0"
