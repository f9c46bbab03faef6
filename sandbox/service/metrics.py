"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..types import STATUSES

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Counter("proctor_sandbox_jobs", "Jobs finished, by verdict and API", ["verdict", "api"],
                            registry=r)
        self.latency = Histogram("proctor_sandbox_job_seconds", "Seconds from a job's admission to its verdict",
                                 ["api"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Gauge("proctor_sandbox_queue_depth", "Jobs admitted and not yet finished", registry=r)
        self.queue_max = Gauge("proctor_sandbox_queue_max", "The queue's bound (429 beyond it)", registry=r)
        self.slots = Gauge("proctor_sandbox_pool_slots", "Jobs the pool runs at once", registry=r)
        self.idle = Gauge("proctor_sandbox_pool_idle_containers", "Warm containers waiting for a job", registry=r)
        self.hosts_up = Gauge("proctor_sandbox_hosts_up", "Docker engines taking jobs", registry=r)
        self.sessions = Gauge("proctor_sandbox_sessions_open", "Open sessions", registry=r)
        self.cells = Counter("proctor_sandbox_session_cells", "Session calls, by status", ["status"], registry=r)
        self.cache_hits = Gauge("proctor_sandbox_cache_hits", "Jobs answered by the verdict cache", registry=r)
        self.rejected = Counter("proctor_sandbox_rejected_requests", "Requests refused, by reason", ["reason"],
                                registry=r)
        for status in STATUSES:   # every series exists from the start (a rate over a missing one is empty)
            self.jobs.labels(status, "run_code")
            self.jobs.labels(status, "jobs")

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["Metrics"]
