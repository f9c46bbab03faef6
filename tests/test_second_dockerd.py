"""The tests' second dockerd leaves the machine's engine as it found it: its default bridge
(``docker0``) included. With ``--bridge=none`` dockerd deletes ``docker0``, and every
``docker run`` on the machine's default network then fails until its dockerd restarts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from second_dockerd import SecondEngine, can_run_dockerd  # noqa: E402

from proctor.sandbox.images import image_ref  # noqa: E402

pytestmark = pytest.mark.docker


def links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True, timeout=30)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()}


def test_the_machines_bridge_survives_and_the_engines_own_is_removed(docker_ready):
    problem = can_run_dockerd()
    if problem is not None:
        pytest.skip(f"no second dockerd here: {problem}")
    before = links()
    if "docker0" not in before:
        pytest.skip("the machine's dockerd has no docker0 to keep (restart it: bash scripts/setup.sh)")
    with SecondEngine() as engine:
        during = links()
        assert engine.bridge in during and "docker0" in during
    after = links()
    assert "docker0" in after, "the second dockerd deleted the machine's docker0"
    assert engine.bridge not in after
    # What a user of the machine's engine would see: a container on the default network starts.
    ran = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/bin/true", image_ref("python")],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
