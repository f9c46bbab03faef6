"""One warm, locked-down container whose PID 1 is the fork server."""

from __future__ import annotations

import itertools
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import docker
import docker.errors
import requests.exceptions

from .errors import InfraError
from .owner import OWNER_LABEL, owner_id
from .protocol import Channel, raw_socket

# The fork server runs as root with the few capabilities it needs to clean up after a
# job (kill its processes, empty the places it wrote to), to make each job's directories
# for its users (CHOWN), and to become the job's user in each job process
# (server/confine.py): jobs run as uid 1000 (their tests, where apart, as 1001) with no
# capability, and a process may signal only its own uid's processes, so no job can stop
# or kill the server.
SERVER_USER = "0:0"
SERVER_CAPS = ["KILL", "SETUID", "SETGID", "DAC_OVERRIDE", "FOWNER", "CHOWN"]
# The server's own tmpfs (builds, installed programs): fixed, apart from the job's budget.
PRIVATE_MB = 256
# Files a job may make on its tmpfs: bounds the clean-up after a job (and so the time a
# job can make the server spend on it).
JOB_INODES = 32768
LABEL = "proctor.sandbox"
_serial = itertools.count()
CaseCheck = Callable[[int, Optional[str]], bool]


@dataclass(frozen=True)
class ContainerSpec:
    """What a container is created with; jobs are served only by a container of their spec."""

    image: str
    memory_mb: int
    pids: int
    disk_mb: int
    cpus: float = 1.0
    runtime: Optional[str] = None   # another OCI runtime (runsc, kata) for a stronger boundary
    gvisor: bool = False            # `runtime` is gVisor's runsc (the engine said so)
    compile_mb: int = 0             # the compilers' address space (server/budgets.py), 0: no compiler
    resident_mb: int = 0            # memory and tasks the language keeps resident between jobs
    resident_pids: int = 0          # (Java's compile server; server/budgets.py)

    def host_config(self, api: docker.APIClient) -> dict:
        # The job's memory budget, plus room for the server and for the tmpfs pages
        # the job writes (tmpfs is charged to the container's memory cgroup).
        # The job's budget (or its compilers', whichever is larger: a compiler fails at its
        # RLIMIT_AS before the cgroup is full), the tmpfs pages it may write, the server
        # and what it keeps resident (Java's compile server).
        mem = (max(self.memory_mb, self.compile_mb) + self.resident_mb + self.disk_mb + self.disk_mb // 4
               + 96) << 20
        return api.create_host_config(
            network_mode="none",                 # loopback only
            read_only=True,
            tmpfs=self._tmpfs(),
            shm_size=4 << 20,
            cap_drop=["ALL"],
            cap_add=SERVER_CAPS,
            security_opt=["no-new-privileges"],
            pids_limit=self._host_pids(),
            mem_limit=mem,
            memswap_limit=mem,                   # no swap: memory is memory
            nano_cpus=int(self.cpus * 1e9),
            ulimits=self._ulimits(),
            log_config=docker.types.LogConfig(type="none"),   # outputs travel on the socket, not to disk
            ipc_mode="private",
            init=False,                          # the server is PID 1: it reaps, and cannot be killed from inside
            runtime=self.runtime,
        )

    def _tmpfs(self) -> dict[str, str]:
        """Three root-owned mounts (server/layout.py): /job, where each job gets new directories
        (/work is a symlink into it), and /tmp, both without exec; /run/proctor, the server's builds."""
        inodes = "" if self.gvisor else f",nr_inodes={JOB_INODES}"
        return {
            "/job": f"rw,noexec,nosuid,nodev,size={self.disk_mb}m{inodes},uid=0,gid=0,mode=0755",
            "/tmp": f"rw,noexec,nosuid,nodev,size={max(1, self.disk_mb // 4)}m{inodes},uid=0,gid=0,mode=1777",
            "/run/proctor": f"rw,exec,nosuid,nodev,size={PRIVATE_MB}m,uid=0,gid=0,mode=0711",
        }

    def _host_pids(self) -> int:
        if not self.gvisor:
            return self.pids + 1 + self.resident_pids   # + the server itself and its resident helpers
        # Under gVisor the host cgroup counts the sandbox kernel's own threads (38 idle,
        # about 5 per guest process, measured): a limit of `pids` there kills the
        # sandbox kernel itself. It stays as a backstop; RLIMIT_NPROC (below) is the
        # job's limit, counted by gVisor's kernel for this sandbox alone.
        return 256 + 16 * (self.pids + 1) + 5 * self.resident_pids

    def _ulimits(self) -> list:
        limits = [docker.types.Ulimit(name="nofile", soft=256, hard=256),
                  docker.types.Ulimit(name="core", soft=0, hard=0)]
        if self.gvisor:
            # Under runc RLIMIT_NPROC would count every process of uid 1000 on the host
            # (other containers too); gVisor counts only this sandbox's, and of those only
            # the job's (the server is root, which the limit does not bind). gVisor counts a
            # process under the uid it was forked with: the job's first process, forked as
            # root and then made uid 1000, is not counted (measured), hence pids - 1.
            limits.append(docker.types.Ulimit(name="nproc", soft=self.pids - 1, hard=self.pids - 1))
        return limits


class WarmContainer:
    """A started container with an open channel to its server; serves one job at a time."""

    def __init__(self, client: docker.DockerClient, spec: ContainerSpec, host: str, pool_id: str) -> None:
        self.client = client
        self.spec = spec
        self.host = host
        self.pool_id = pool_id
        self.id: Optional[str] = None
        self.name: Optional[str] = None     # set at start: how a create that timed out is found again
        self.channel: Optional[Channel] = None
        self.jobs_served = 0
        self.started_s = 0.0
        self.idle_since = 0.0               # monotonic; set by the pool when it goes idle (eviction order)
        self.ready: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 60.0) -> "WarmContainer":
        api = self.client.api
        t0 = time.monotonic()
        name = self.name = f"proctor-{self.pool_id}-{next(_serial)}-{secrets.token_hex(3)}"
        try:
            created = api.create_container(
                self.spec.image,
                name=name,
                user=SERVER_USER,
                stdin_open=True,
                tty=False,
                hostname="sandbox",
                # Nothing of the host's environment: only what a program needs to run.
                environment={"LANG": "C.UTF-8", "HOME": "/work", "PATH": "/usr/local/bin:/usr/bin:/bin",
                             # the server's own: jobs get a fixed environment of their own
                             **({"PROCTOR_GVISOR": "1"} if self.spec.gvisor else {})},
                labels={LABEL: "1", "proctor.pool": self.pool_id, OWNER_LABEL: owner_id()},
                host_config=self.spec.host_config(api),
            )
            self.id = created["Id"]
            sock = api.attach_socket(self.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self.channel = Channel(raw_socket(sock))
            api.start(self.id)
            self.ready = self.channel.receive(timeout_s)
        except docker.errors.ImageNotFound:
            self.remove()
            raise InfraError(f"sandbox image {self.spec.image} is not built on {self.host}: "
                             "run `proctor images build`") from None
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            self.remove()
            # The engine's own words (an OCI runtime's complaint, say), not the HTTP wrapping around them.
            why = exc.explanation if isinstance(exc, docker.errors.APIError) and exc.explanation else exc
            runtime = f" with runtime {self.spec.runtime}" if self.spec.runtime else ""
            raise InfraError(f"could not start a sandbox container{runtime} on {self.host}: {why}") from None
        except InfraError:
            self.remove()
            raise
        if self.ready.get("type") != "ready":
            self.remove()
            raise InfraError(f"sandbox server said {self.ready!r} instead of ready")
        self.started_s = time.monotonic() - t0
        return self

    def oom_killed(self, wait_s: float = 2.0) -> bool:
        """Whether the kernel's OOM killer struck in this container (it may have taken PID 1)."""
        if self.id is None:
            return False
        deadline = time.monotonic() + wait_s
        while True:
            try:
                state = self.client.api.inspect_container(self.id)["State"]
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                return False
            # Docker records OOMKilled when the container stops; give it a moment to.
            if not state.get("Running") or time.monotonic() > deadline:
                return bool(state.get("OOMKilled"))
            time.sleep(0.05)

    def remove(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        # A create that timed out here may still finish on the engine: look it up by name.
        target = self.id or self.name
        if target is not None:
            try:
                self.client.api.remove_container(target, force=True)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                pass   # engine gone, or never created: the owner sweep (owner.py) gets any late one
            self.id = self.name = None

    # ------------------------------------------------------------------ one job
    def execute(self, request: dict, timeout_s: float, case_passed: Optional[CaseCheck] = None) -> dict:
        """Send one job; return the server's result message. Raises InfraError.

        ``case_passed(index, stdout_sha256)``: whether a stdin/stdout case matched; the
        server asks, during a job that stops at its first failure, since only the host
        knows the expected outputs.
        """
        if self.channel is None:
            raise InfraError("container is not running")
        self.channel.send(request)
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.channel.receive(max(deadline - time.monotonic(), 0.01))
            if reply.get("type") != "case" or reply.get("id") != request["id"]:
                break
            index, digest = reply.get("index"), reply.get("stdout_sha256")
            go = case_passed is not None and isinstance(index, int) and case_passed(index, digest)
            self.channel.send({"type": "go", "id": request["id"], "continue": bool(go)})
        self.jobs_served += 1
        if reply.get("type") == "error":
            raise InfraError(f"sandbox server failed on job {reply.get('id')}: {reply.get('error', '')[-800:]}")
        if reply.get("type") != "result" or reply.get("id") != request["id"]:
            raise InfraError(f"out-of-order reply from the sandbox server: {str(reply)[:200]}")
        return reply
