"""Which process owns a sandbox container, and the sweep of containers whose owner died.

A `Sandbox` removes its containers when it closes, but a process killed by a signal (a
scheduler's SIGTERM or SIGKILL, the OOM killer) never gets there: its warm containers would
idle on the engine for good, each holding memory and a slot of the host. Every container
carries ``proctor.owner = <boot id>/<pid namespace>/<pid>``; when a pool starts, it removes
the containers whose owner was a process of this boot and this pid namespace that no longer
exists. An owner on another machine, in another pid namespace (a trainer in a container of
its own) or of an earlier boot is never judged from here: its pid means nothing here.
"""

from __future__ import annotations

import os
from typing import Optional

import docker
import docker.errors
import requests.exceptions

OWNER_LABEL = "proctor.owner"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "unknown"


def owner_id(pid: Optional[int] = None) -> str:
    """This process's owner value (``pid``: another process of this boot and namespace)."""
    return f"{_read('/proc/sys/kernel/random/boot_id')}/{_pid_namespace()}/{pid or os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True


def owner_is_dead(value: str) -> bool:
    """Whether ``value`` names a process of this boot and pid namespace that has exited."""
    here = owner_id().rsplit("/", 1)[0]
    scope, _, pid = value.rpartition("/")
    if "unknown" in here or scope != here or not pid.isdigit():
        return False
    return not _alive(int(pid))


def sweep_orphans(client: docker.DockerClient, sandbox_label: str) -> int:
    """Remove the containers on ``client``'s engine labelled ``sandbox_label=1`` whose owner died;
    how many went. An engine that cannot be listed is left alone (the next pool sweeps again)."""
    removed = 0
    try:
        found = client.api.containers(all=True, filters={"label": [f"{sandbox_label}=1", OWNER_LABEL]})
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return 0
    for c in found:
        if owner_is_dead((c.get("Labels") or {}).get(OWNER_LABEL, "")):
            try:
                client.api.remove_container(c["Id"], force=True)
                removed += 1
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                pass   # gone already, or the engine is busy: the next sweep tries again
    return removed


__all__ = ["OWNER_LABEL", "owner_id", "owner_is_dead", "sweep_orphans"]
