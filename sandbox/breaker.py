"""Per-host circuit breaker for container starts.

A host whose engine or runtime cannot start containers fails every start the same
way, in a fraction of a second; retrying each job on it only multiplies the failures
(and the log lines). After ``down_after`` consecutive failed starts the host is
*down*: no job is sent to it and no container is started on it, except by a probe,
one at a time, after a back-off that doubles up to `MAX_PROBE_AFTER_S` (or at once
on ``Sandbox.reset_host()``). A start that succeeds brings it back up.

State lives under the owning ``Sandbox``'s condition, which also guards the job
slots, so a state change wakes the jobs waiting for a host.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .errors import SandboxError

MAX_PROBE_AFTER_S = 300.0

_GVISOR_FIX = (
    "gVisor must be registered with dockerd and run without its own network stack (sandbox "
    "containers have none): in /etc/docker/daemon.json set "
    '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}, '
    "reload dockerd (`kill -HUP $(pidof dockerd)` or `systemctl reload docker`), and check with "
    "`docker run --rm --runtime=runsc --network=none IMAGE true` (`PROCTOR_RUNTIME=runsc bash scripts/setup.sh` "
    "does all of this)"
)


def start_fix(cause: str, runtime: Optional[str]) -> str:
    """What to do about a host whose containers fail to start with ``cause``."""
    text = cause.lower()
    if "runsc" in text or "gvisor" in text or runtime == "runsc" or "network namespace" in text:
        return _GVISOR_FIX
    if "unknown runtime" in text or "invalid runtime" in text:
        return (f"runtime {runtime!r} is not registered with this dockerd: add it under \"runtimes\" in "
                "/etc/docker/daemon.json (or `dockerd --add-runtime NAME=PATH`), reload dockerd, and check "
                "`docker info` lists it")
    if "not built" in text or "no such image" in text or "image not found" in text:
        return "build the sandbox images on that engine (`proctor images build`, or pass auto_build=True)"
    if "oci runtime" in text or "shim" in text:
        name = runtime or "the engine's default runtime"
        return (f"{name} cannot start containers on that engine: try `docker run --rm --network=none "
                f"{'--runtime=' + runtime + ' ' if runtime else ''}IMAGE true` there and fix what it reports")
    return "check the engine there (`docker info`, `proctor doctor`) and start one container by hand"


@dataclass(frozen=True)
class HostHealth:
    """One host as the breaker sees it. ``cause``/``fix`` are empty while it is up."""

    host: str
    up: bool
    cause: str
    fix: str
    failed_starts: int               # consecutive; reset by a start that succeeds
    down_for_s: float
    next_probe_in_s: Optional[float]  # None while up or while a probe runs
    probing: bool

    def describe(self) -> str:
        """One line for a log or a Result.error: which host, since when, why, what to do."""
        if self.up:
            return f"{self.host}: up"
        when = ("a probe is running" if self.probing else
                f"probing again in {self.next_probe_in_s:.1f} s or on Sandbox.reset_host()")
        return (f"{self.host}: down for {self.down_for_s:.1f} s after {self.failed_starts} failed container "
                f"start(s) in a row; last: {self.cause}. To fix: {self.fix}. ({when})")


Transition = Callable[["Breaker", bool], None]   # (breaker, now_up), called under the condition


class Breaker:
    """Counts consecutive failed starts on one host and decides who may start a container.

    ``cond`` is shared with the caller's job slots (callbacks run while it is held).
    Until a start has succeeded on this host, and after any failure, at most
    ``down_after - failures`` starts run at once, so a host that cannot start
    anything costs at most ``down_after`` attempts before it is down.
    """

    def __init__(self, host: str, cond: threading.Condition, *, down_after: int = 3,
                 probe_after_s: float = 5.0, runtime: Optional[str] = None,
                 on_change: Optional[Transition] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(down_after, int) or isinstance(down_after, bool) or down_after < 1:
            raise SandboxError(f"Sandbox(down_after=) must be an integer >= 1, got {down_after!r}")
        if not isinstance(probe_after_s, (int, float)) or not probe_after_s > 0:
            raise SandboxError(f"Sandbox(probe_after_s=) must be a positive number of seconds, got {probe_after_s!r}")
        self.host = host
        self.down_after = down_after
        self.probe_after_s = probe_after_s
        self.runtime = runtime
        self._cond = cond
        self._on_change = on_change
        self._clock = clock
        self.up = True
        self.failures = 0
        self.probing = False
        self.cause = ""
        self.fix = ""
        self._starting = 0
        self._proven = False
        self._down_at = 0.0
        self.last_down_for_s = 0.0   # how long the last down spell lasted (for the back-up warning)
        self._probe_at = 0.0
        self._backoff = probe_after_s
        # Jobs while down: how many returned infra_error for want of a host, how many ran elsewhere.
        self.jobs_refused = 0
        self.jobs_elsewhere = 0

    # ------------------------------------------------------------------ job starts
    def admit_start(self, wait: bool = True) -> bool:
        """Take a start permit; False if the host is down (or, with ``wait=False``, the gate is full)."""
        with self._cond:
            while self.up and self._gate_full():
                if not wait:
                    return False
                self._cond.wait()
            if not self.up:
                return False
            self._starting += 1
            return True

    def start_succeeded(self) -> None:
        with self._cond:
            self._starting -= 1
            self._succeeded()

    def start_failed(self, cause: str) -> None:
        with self._cond:
            self._starting -= 1
            self.failures += 1
            self.cause, self.fix = cause, start_fix(cause, self.runtime)
            if self.up and self.failures >= self.down_after:
                self._go_down()
            self._cond.notify_all()   # the gate narrowed or the host went down: waiters re-decide

    def start_abandoned(self) -> None:
        """A permit taken but not used (an idle container turned up, or the start was interrupted)."""
        with self._cond:
            self._starting -= 1
            self._cond.notify_all()

    def _gate_full(self) -> bool:
        if self._proven and self.failures == 0:
            return False
        return self._starting >= self.down_after - self.failures

    # ------------------------------------------------------------------ down, probes
    def checked(self, ok: bool, cause: str = "") -> None:
        """The start-up check's one start: up and proven if it worked, down at once if not."""
        if not ok:
            self.trip(cause)
            return
        with self._cond:
            self._succeeded()

    def trip(self, cause: str) -> None:
        """Mark the host down now (its start-up check failed)."""
        with self._cond:
            self.failures += 1
            self.cause, self.fix = cause, start_fix(cause, self.runtime)
            if self.up:
                self._go_down()
            self._cond.notify_all()

    def probe_due(self) -> bool:
        with self._cond:
            return not self.up and not self.probing and self._clock() >= self._probe_at

    def begin_probe(self, force: bool = False) -> bool:
        """Claim the one probe of a down host: when due, or now with ``force``; False if not."""
        with self._cond:
            if self.up or self.probing or not (force or self._clock() >= self._probe_at):
                return False
            self.probing = True
            if force:
                self._backoff = self.probe_after_s   # a person said the host is fixed: start over
            return True

    def end_probe(self, ok: bool, cause: str = "") -> None:
        with self._cond:
            self.probing = False
            if ok:
                self._succeeded()
            else:
                self.failures += 1
                self.cause, self.fix = cause, start_fix(cause, self.runtime)
                self._backoff = min(self._backoff * 2, MAX_PROBE_AFTER_S)
                self._probe_at = self._clock() + self._backoff
            self._cond.notify_all()

    def seconds_to_probe(self) -> Optional[float]:
        """How long until a probe of this down host is due (None when up or probing)."""
        with self._cond:
            if self.up or self.probing:
                return None
            return max(0.0, self._probe_at - self._clock())

    def health(self) -> HostHealth:
        with self._cond:
            now = self._clock()
            return HostHealth(host=self.host, up=self.up, cause="" if self.up else self.cause,
                              fix="" if self.up else self.fix, failed_starts=self.failures,
                              down_for_s=0.0 if self.up else round(now - self._down_at, 3),
                              next_probe_in_s=self.seconds_to_probe(), probing=self.probing)

    @property
    def down_for_s(self) -> float:
        with self._cond:
            return 0.0 if self.up else self._clock() - self._down_at

    # ------------------------------------------------------------------ transitions
    def _succeeded(self) -> None:
        self.failures = 0
        self._proven = True
        self._backoff = self.probe_after_s
        if not self.up:
            self.up = True
            self.last_down_for_s = self._clock() - self._down_at
            self._changed(True)
            self.cause = self.fix = ""
            self.jobs_refused = self.jobs_elsewhere = 0
        self._cond.notify_all()

    def _go_down(self) -> None:
        self.up = False
        self._down_at = self._clock()
        self._backoff = self.probe_after_s
        self._probe_at = self._down_at + self._backoff
        self._changed(False)

    def _changed(self, now_up: bool) -> None:
        if self._on_change is not None:
            self._on_change(self, now_up)


# ---------------------------------------------------------------------- what people read


def down_warning(health: HostHealth, affected: int, others_up: int) -> str:
    """The one warning when a host goes down."""
    where = (f"they and the jobs after them go to the other {others_up} host(s)" if others_up else
             "no other host is up, so every queued job returns infra_error at once")
    return (f"sandbox host {health.host} is DOWN: {health.failed_starts} container start(s) failed in a row; "
            f"last: {health.cause}. To fix: {health.fix}. {affected} job(s) were running or waiting; {where} "
            f"until a probe starts a container (in {health.next_probe_in_s or 0:.0f} s, doubling while it fails, "
            "or now on Sandbox.reset_host()). Each job's Result.error has the details.")


def up_warning(breaker: Breaker) -> str:
    """The one warning when a down host comes back."""
    return (f"sandbox host {breaker.host} is back UP after {breaker.last_down_for_s:.1f} s: a container started. "
            f"While it was down, {breaker.jobs_refused} job(s) returned infra_error for want of a host and "
            f"{breaker.jobs_elsewhere} ran on other hosts.")


def startup_failure(down: list[HostHealth]) -> str:
    """The one error of a Sandbox none of whose hosts passed the start-up check."""
    hosts = " ".join(f"{h.host}: {h.cause}. To fix: {h.fix}." for h in down)
    return f"no sandbox host can start a container, so the Sandbox cannot take jobs. {hosts}"


def refusal(down: list[HostHealth], attempts: list[str]) -> str:
    """Result.error of a job that no host could take."""
    tried = f" Before that: {'; '.join(attempts)}." if attempts else ""
    return ("not run: no sandbox host can start containers. " + " ".join(h.describe() for h in down) + tried
            + " The program was not judged: drop this sample.")


__all__ = ["Breaker", "HostHealth", "MAX_PROBE_AFTER_S", "down_warning", "refusal", "start_fix", "startup_failure", "up_warning"]
