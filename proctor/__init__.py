"""Proctor: reinforcement learning on verifiable tasks.

Subpackages: ``proctor.sandbox`` (Docker-isolated execution), ``proctor.envs``
(verifiable environments), ``proctor.trainer`` (GRPO).
"""

__version__ = "0.1.0"
