"""Containers of a process killed before it could close are removed by the next sandbox's pool
(sandbox/owner.py); a live owner's, or one this machine cannot judge, are left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import docker
import pytest

from proctor.sandbox import Sandbox
from proctor.sandbox.container import LABEL
from proctor.sandbox.owner import OWNER_LABEL, owner_id, owner_is_dead

pytestmark = pytest.mark.docker

WARM_AND_WAIT = """
import sys, time
from proctor.sandbox import Sandbox
sb = Sandbox(slots=1)
sb.warmup(["python"])
print("warm", flush=True)
time.sleep(600)
"""


def owned_by(client: docker.DockerClient, owner: str) -> list[str]:
    return [c["Id"] for c in client.api.containers(all=True, filters={"label": [f"{LABEL}=1", f"{OWNER_LABEL}={owner}"]})]


def test_owner_values_are_judged_only_in_this_boot_and_pid_namespace():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not owner_is_dead(owner_id())                  # this process
    assert owner_is_dead(owner_id(child.pid))             # exited (its pid not yet reused: checked below)
    scope = owner_id().rsplit("/", 1)[0]
    boot, ns = scope.split("/")
    assert not owner_is_dead(f"other-boot/{ns}/{child.pid}")
    assert not owner_is_dead(f"{boot}/4026599999/{child.pid}")   # another pid namespace: its pids mean nothing here
    assert not owner_is_dead(f"{scope}/not-a-pid") and not owner_is_dead("")


def test_a_killed_processs_warm_containers_are_swept_by_the_next_pool(docker_ready):
    client = docker.from_env()
    proc = subprocess.Popen([sys.executable, "-c", WARM_AND_WAIT], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert proc.stdout.readline().strip() == "warm"
        orphans = owned_by(client, owner_id(proc.pid))
        assert orphans, "the child's warm container carries its owner label"
    finally:
        proc.send_signal(signal.SIGKILL)   # no close, no finally: what a scheduler's kill does
        proc.wait()
    assert owned_by(client, owner_id(proc.pid)) == orphans   # left behind
    with Sandbox(slots=1) as live:
        live.warmup(["python"])
        mine = owned_by(client, owner_id())
        with Sandbox(slots=1):   # a second pool starts and sweeps: the live pool's container stays
            deadline = time.monotonic() + 30
            while owned_by(client, owner_id(proc.pid)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert owned_by(client, owner_id(proc.pid)) == []
            assert set(mine) <= set(owned_by(client, owner_id()))
