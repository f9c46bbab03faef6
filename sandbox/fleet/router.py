"""`FleetRouter`: the fleet's one scheduler, a named Ray actor every client shares.

It starts one `SandboxHost` actor per sandbox node, keeps one job budget for all of
them (each node's slots, shared by every client that attaches, so several training
ranks never oversubscribe the fleet), queues jobs first come first served and sends each
to the least loaded node with a free slot. Identical jobs run once fleet-wide (one
`VerdictCache`, here). A node lost mid-job (its actor dies, its calls fail or hang past
the job's limits) costs that job a try on another node, or an ``infra_error`` `Result`
saying what happened: never a verdict the program did not earn.

Clients submit jobs under a batch id and collect finished results, in any order; the
client puts them back in job order (client.py); a collect that has some results waits a
little for more while the batch has many left. Hosts are fed the same way: one drain
task per node long-polls the host's ``exchange``, which carries every job routed to the
node since the last call and brings back the finished ones (host.py). A separate
``submit`` goes only when the node may have a slot free and no call of the drain would
bring it work in time. Actor calls, not routing, are what a job costs here, so they are
per batch, not per job. Everything here runs on the actor's one event loop, so no lock
is needed.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Callable, Optional, Sequence

from .. import images
from ..cache import Claim, VerdictCache, job_key
from ..errors import NoHostAvailable, SandboxError
from ..sandbox import reply_timeout
from ..types import Job, Limits, Result, infra_result
from .host import Outcome, SandboxHost, normal_priority
from .options import FleetInfo, FleetOptions, HostInfo, HostState

log = logging.getLogger("proctor.sandbox.fleet")
START_TIMEOUT_S = 600.0   # a host's first start may build images (auto_build)
TAKE_WAIT_S = 1.0         # a drain's long poll when nothing has finished on its node
TAKE_LINGER_S = 0.25      # ... and how long a reply may wait to carry more results (host.take)
TAKE_GRACE_S = 30.0       # a take unanswered this long past its wait: the node is hung
COLLECT_LINGER_S = 0.1    # a collect with results waits this long for more while the batch has many left
# Default prefetch: about this many seconds of a node's work wait there beyond its slots.
# Deep enough that each exchange carries many jobs (a Ray call costs the router
# ~1.5 ms of CPU on a 2-core VM), shallow enough that a batch's tail is not stuck queued on one
# node while another idles.
QUEUE_S = 0.5
MAX_PREFETCH = 256


@dataclass(eq=False)
class _Host:
    handle: object
    info: HostInfo
    up: bool = True
    done: int = 0
    cause: str = ""
    inflight: dict = field(default_factory=dict)   # tag -> _Item routed to this node, not yet back
    outbox: list = field(default_factory=list)     # (tag, job) routed here, not yet sent: the next exchange takes them
    taking: Optional[int] = None   # low water of the drain's exchange in flight (None: none in flight)
    progress_at: float = 0.0   # time.monotonic() of its last result, or of being sent jobs while idle
    rate: float = 0.0          # jobs it finishes per second while busy (moving average)
    wake: asyncio.Event = field(default_factory=asyncio.Event)   # jobs were sent: the drain polls

    @property
    def busy(self) -> int:
        return len(self.inflight)

    def state(self) -> HostState:
        return HostState(self.info, self.up, self.busy, self.done, self.cause)


@dataclass(eq=False)
class _Batch:
    id: str
    ready: list = field(default_factory=list)    # (index, Result) not yet collected
    event: asyncio.Event = field(default_factory=asyncio.Event)
    owed: int = 0    # jobs admitted whose results were not yet collected
    closed: bool = False


@dataclass(eq=False)
class _Item:
    batch: _Batch
    index: int
    job: Job
    claim: Optional[Claim]
    reroutes: int
    tried: set = field(default_factory=set)      # node ids
    errors: list = field(default_factory=list)
    attempts: int = 0
    patience_s: float = 0.0   # how long a node may work on it without finishing anything


class FleetRouter:
    """The fleet's router; made by `RaySandbox` as ``ray.remote(FleetRouter)`` (an async actor)."""

    def __init__(self, name: str, options: FleetOptions) -> None:
        self.name, self.options = name, options
        self.hosts: list[_Host] = []
        self.failed: list[str] = []
        self.queue: deque[_Item] = deque()
        self.batches: dict[str, _Batch] = {}
        self.clients: set[str] = set()
        self.cache = (VerdictCache(options.cache_entries, directory=options.cache_dir) if options.cache else None)
        self._context: dict[str, str] = {}
        self._tasks: set[asyncio.Future] = set()
        self._start: Optional[asyncio.Task] = None
        self._tags = itertools.count()
        # Actor calls by kind and jobs admitted: calls, not routing, are what a job costs here.
        self.traffic: collections.Counter[str] = collections.Counter()
        normal_priority()

    # ------------------------------------------------------------------ clients
    async def attach(self, client_id: str, options: FleetOptions) -> FleetInfo:
        """Start the hosts (first client only) and count this client; NoHostAvailable if none starts."""
        if options != self.options:
            differ = [f.name for f in fields(FleetOptions) if getattr(options, f.name) != getattr(self.options, f.name)]
            raise SandboxError(f"the sandbox fleet {self.name!r} already runs with other options ({', '.join(differ)}: "
                               f"{[getattr(self.options, n) for n in differ]}); give every rank the same sandbox "
                               "config, or another fleet name")
        if self._start is None:
            self._start = asyncio.ensure_future(self._start_hosts())
        await asyncio.shield(self._start)
        self.clients.add(client_id)
        return self.info()

    async def detach(self, client_id: str) -> int:
        """Forget a client; returns how many are left (the last one shuts the fleet down)."""
        self.clients.discard(client_id)
        return len(self.clients)

    def node(self) -> str:
        """The node this router runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def info(self) -> FleetInfo:
        return FleetInfo(self.name, tuple(h.state() for h in self.hosts), tuple(self.failed))

    def traffic_stats(self) -> dict[str, int]:
        """Counters since the router started: ``jobs`` admitted, ``results`` taken from nodes, and
        actor calls (``client submit``, ``client collect``, ``node submit``, ``node exchange``)."""
        return dict(self.traffic)

    def cache_stats(self) -> Optional[dict]:
        if self.cache is None:
            return None
        stats = self.cache.stats()
        return {f.name: getattr(stats, f.name) for f in fields(stats)} | {"saved": stats.saved}

    # ------------------------------------------------------------------ starting hosts
    async def _start_hosts(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(self.options.resource, 0) >= 1]
        if not nodes:
            raise NoHostAvailable(f"no node of this Ray cluster has the {self.options.resource!r} resource: start "
                                  f"sandbox nodes with `ray start --address HEAD:6379 --resources='{{"
                                  f"\"{self.options.resource}\": 1}}'`")
        free = ray.available_resources().get(self.options.resource, 0)
        if free < len(nodes):   # host actors would wait for ever for a unit another fleet holds
            raise SandboxError(f"{len(nodes)} nodes have the {self.options.resource!r} resource but only {free:g} "
                               "units are free: another sandbox fleet runs on this cluster. Use its name "
                               "(sandbox.name), close it first, or give this fleet other nodes (sandbox.resource)")
        host_class = ray.remote(SandboxHost)
        made = []
        for node in nodes:
            slots = self.options.slots_per_node or max(1, int(node["Resources"].get("CPU", 1)))
            handle = host_class.options(
                num_cpus=0, resources={self.options.resource: 1}, max_restarts=0,
                # Calls at once: submit, exchange, and one per session cell running (jobs run on the
                # host's own threads, one per slot).
                max_concurrency=slots + 64,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(self.options, slots)
            made.append((node, handle))
        answers = await asyncio.gather(*(_within(h.describe.remote(), START_TIMEOUT_S) for _, h in made),
                                       return_exceptions=True)
        for (node, handle), answer in zip(made, answers):
            if isinstance(answer, HostInfo):
                self.hosts.append(_Host(handle, answer))
            else:
                self.failed.append(f"node {node['NodeManagerAddress']} ({node['NodeID'][:8]}): {_cause(answer)}")
                ray.kill(handle)
        if not self.hosts:
            raise NoHostAvailable("no sandbox host of the fleet started: " + "; ".join(self.failed))
        for line in self.failed:
            log.warning("sandbox fleet: a host did not start, the others serve: %s", line)
        for host in self.hosts:
            self._spawn(self._drain(host))

    # ------------------------------------------------------------------ jobs
    def submit(self, batch_id: str, first: int, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` as indexes ``first``, ``first + 1``, ... of batch ``batch_id``."""
        batch = self.batches.get(batch_id)
        if batch is None:
            batch = self.batches[batch_id] = _Batch(batch_id)
        self.traffic.update({"client submit": 1, "jobs": len(jobs)})
        batch.owed += len(jobs)
        for index, job in enumerate(jobs, first):
            self._admit(batch, index, job)
        self._pump()

    async def collect(self, batch_id: str, wait_s: float) -> list[tuple[int, Result]]:
        """Results of the batch finished since the last call (any order); waits up to ``wait_s`` for one."""
        self.traffic["client collect"] += 1
        batch = self.batches.get(batch_id)
        if batch is None:
            return []
        await _ready(batch, 1, wait_s)
        if batch.ready:   # more results in fewer calls; a small window or a batch's last ones come at once
            await _ready(batch, (batch.owed + 1) // 2, COLLECT_LINGER_S)
        out, batch.ready = batch.ready, []
        batch.owed -= len(out)
        return out

    def close_batch(self, batch_id: str) -> None:
        """The client stopped reading: its queued jobs are dropped (a cached job's twins elsewhere still get it)."""
        batch = self.batches.pop(batch_id, None)
        if batch is not None:
            batch.closed = True
            self.queue = deque(i for i in self.queue if not (i.batch is batch and i.claim is None))

    def _admit(self, batch: _Batch, index: int, job: Job) -> None:
        if self.cache is None:
            self.queue.append(_Item(batch, index, job, None, self.options.reroutes))
            return
        claim = self.cache.claim(self._key(job))
        if claim.owner:
            self.queue.append(_Item(batch, index, job, claim, self.options.reroutes))
            return
        loop = asyncio.get_running_loop()
        claim.future.add_done_callback(
            lambda f, b=batch, i=index: loop.call_soon_threadsafe(_deliver, b, i, _outcome(f)))

    def _key(self, job: Job) -> str:
        name = images.LANGUAGE_IMAGE[job.language]
        context = self._context.get(name)
        if context is None:   # what a host's Sandbox keys on: its image, runtime and CPU share
            context = self._context[name] = (f"{images.image_ref(name)}|{self.options.runtime or 'default'}|"
                                             f"{self.options.cpus_per_job:g}")
        return job_key(job, context)

    def _pump(self) -> None:
        """Send queued jobs to nodes with room, one submit call per node; with no node up, every
        queued job is infra_error."""
        sends: dict[_Host, list[tuple[int, Job]]] = {}
        while self.queue:
            item = self.queue[0]
            if item.batch.closed and item.claim is None:
                self.queue.popleft()
                continue
            host = self._free_host(item)
            if host is None:
                if not any(h.up for h in self.hosts):
                    self._fail_queue()
                break
            self.queue.popleft()
            if not host.inflight:
                host.progress_at = time.monotonic()
            if not item.patience_s:
                item.patience_s = _patience_s(item.job, self.options)
            tag = next(self._tags)
            host.inflight[tag] = item
            sends.setdefault(host, []).append((tag, item.job))
        for host, jobs in sends.items():
            host.outbox.extend(jobs)
            if host.taking is None:
                host.wake.set()   # its drain sends them now
            elif host.taking < 0 or host.busy - len(host.outbox) < host.info.slots:
                # The exchange in flight will not come back to be refilled (low water -1), or the node
                # may have a free slot while it waits for its first result: send them now.
                sent, host.outbox = host.outbox, []
                self.traffic["node submit"] += 1
                self._spawn(self._send(host, host.handle.submit.remote(sent)))

    def _free_host(self, item: _Item) -> Optional[_Host]:
        room = [h for h in self.hosts if h.up and h.busy < h.info.slots + self._prefetch(h)]
        if not room:
            return None
        # Not a node the job already failed on, then the least loaded.
        return min(room, key=lambda h: (h.info.node_id in item.tried, h.busy / h.info.slots))

    def _prefetch(self, host: _Host) -> int:
        """Jobs sent to ``host`` beyond its slots: the option, or QUEUE_S of its measured pace."""
        if self.options.prefetch is not None:
            return self.options.prefetch
        return max(host.info.slots, min(MAX_PREFETCH, int(host.rate * QUEUE_S)))

    def _spawn(self, coroutine: object) -> None:
        task = asyncio.ensure_future(coroutine)   # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, host: _Host, ref: object) -> None:
        import ray

        try:
            await _within(ref, TAKE_GRACE_S)
            return
        except asyncio.TimeoutError:
            self._lose(host, f"its actor did not answer for {TAKE_GRACE_S:.0f} s (jobs were sent to it)")
        except ray.exceptions.RayError as exc:   # the actor or its node is gone
            self._lose(host, f"{type(exc).__name__}: {_cause(exc)}")
        self._pump()   # its jobs, back in the queue, go to the other nodes

    async def _drain(self, host: _Host) -> None:
        """Feed the node and collect its finished jobs while it is up. A node that stops answering,
        or finishes nothing for longer than any job it holds may take (every attempt's limits),
        is lost and its jobs go elsewhere: jobs run ``slots`` at a time, so a live node finishes
        one at least that often."""
        while host.up:
            if not host.inflight:
                host.wake.clear()
                await host.wake.wait()
                continue
            got = await self._exchange(host)
            if got:
                self.traffic["results"] += len(got)
                now = time.monotonic()
                pace = len(got) / max(now - host.progress_at, 1e-3)
                host.rate = pace if not host.rate else 0.7 * host.rate + 0.3 * pace
                host.progress_at = now
            for tag, outcome in got or ():
                self._settle(host, tag, outcome)
            patience = max((item.patience_s for item in host.inflight.values()), default=0.0)
            if host.up and host.inflight and time.monotonic() - host.progress_at > patience:
                self._lose(host, f"it finished no job in {patience:.0f} s (the limits of the jobs it "
                                 "held, every retry included)")
            self._pump()

    async def _exchange(self, host: _Host) -> Optional[list[tuple[int, Outcome]]]:
        """One exchange with the node: its outbox goes, its finished jobs come back (None: it was lost).

        With jobs queued at the router, the host answers when half its prefetch has started, to be
        refilled; with none, it gathers results for up to TAKE_LINGER_S (the last of a batch comes
        at once: host.take)."""
        import ray

        low_water = self._prefetch(host) // 2 if self.queue else -1
        sent, host.outbox, host.taking = host.outbox, [], low_water
        self.traffic["node exchange"] += 1
        try:
            return await _within(host.handle.exchange.remote(sent, TAKE_WAIT_S, low_water, TAKE_LINGER_S),
                                 TAKE_WAIT_S + TAKE_LINGER_S + TAKE_GRACE_S)   # type: ignore[return-value]
        except asyncio.TimeoutError:
            self._lose(host, f"its actor did not answer for {TAKE_WAIT_S + TAKE_GRACE_S:.0f} s (asked for results)")
        except ray.exceptions.RayError as exc:
            self._lose(host, f"{type(exc).__name__}: {_cause(exc)}")
        finally:
            host.taking = None
        return None

    def _settle(self, host: _Host, tag: int, outcome: Outcome) -> None:
        """One job's outcome from ``host``: its result, or another try (elsewhere) or infra_error."""
        item = host.inflight.pop(tag, None)
        if item is None:   # the node was lost meanwhile and the job rerouted
            return
        item.tried.add(host.info.node_id)
        if isinstance(outcome, str):   # the host could not run it: a bug or a job it refused
            item.attempts += 1
            item.errors.append(f"{host.info.address}: {outcome}")
        elif outcome.infra_error:
            item.attempts += outcome.attempts
            item.errors.append(f"node {host.info.address}: {outcome.error}")
        else:
            item.attempts += outcome.attempts
            host.done += 1
            self._finish(item, outcome)
            return
        self._retry_or_fail(item)

    def _retry_or_fail(self, item: _Item) -> None:
        untried = [h for h in self.hosts if h.up and h.info.node_id not in item.tried]
        if item.reroutes > 0 and untried:
            item.reroutes -= 1
            self.queue.appendleft(item)   # it waited its turn once already
            return
        self._finish(item, infra_result("; ".join(item.errors) + ". The program was not judged: drop this "
                                        "sample; see the fleet's health (RaySandbox.health())", item.attempts))

    def _finish(self, item: _Item, result: Result) -> None:
        if item.claim is not None:
            self.cache.settle(item.claim, result)   # type: ignore[union-attr]
        _deliver(item.batch, item.index, result)

    def _lose(self, host: _Host, cause: str) -> None:
        """Mark ``host`` down and end its actor; each job it held gets another node or infra_error."""
        if not host.up:
            return
        host.up, host.cause = False, cause
        host.wake.set()   # its drain ends
        log.warning("sandbox fleet: node %s (%s) is lost: %s; its jobs go to the other nodes (%d up)",
                    host.info.address, host.info.node_id[:8], cause, sum(h.up for h in self.hosts))
        import ray

        ray.kill(host.handle)   # a hung actor on a live node must not keep containers running
        held, host.inflight, host.outbox = list(host.inflight.values()), {}, []
        for item in held:
            item.attempts += 1
            item.tried.add(host.info.node_id)
            item.errors.append(f"node {host.info.address}: {cause}")
            self._retry_or_fail(item)

    def _fail_queue(self) -> None:
        causes = "; ".join(f"{h.info.address}: {h.cause}" for h in self.hosts) or "none started"
        while self.queue:
            item = self.queue.popleft()
            item.errors.append(f"no sandbox node is up ({causes})")
            self._finish(item, infra_result("; ".join(item.errors) + ". The program was not judged: drop this "
                                            "sample; start sandbox nodes again", item.attempts))

    # ------------------------------------------------------------------ the rest of the Sandbox API
    async def warmup(self, languages: Sequence[str], limits: Optional[Limits]) -> None:
        """Start containers on every node that is up; NoHostAvailable when none could."""
        up = [h for h in self.hosts if h.up]
        answers = await asyncio.gather(*(h.handle.warmup.remote(list(languages), limits) for h in up),
                                       return_exceptions=True)
        errors = [f"{h.info.address}: {_cause(a)}" for h, a in zip(up, answers) if isinstance(a, BaseException)]
        if len(errors) == len(up):
            raise NoHostAvailable("warmup: no sandbox node started a container: " + ("; ".join(errors) or "none is up"))

    def session_host(self) -> tuple[object, HostInfo]:
        """The least loaded node that is up, for a new session (the client talks to its actor directly)."""
        up = [h for h in self.hosts if h.up]
        if not up:
            raise NoHostAvailable("no sandbox node of the fleet is up: " + "; ".join(
                f"{h.info.address}: {h.cause}" for h in self.hosts))
        host = min(up, key=lambda h: h.busy / h.info.slots)
        return host.handle, host.info

    async def stats(self) -> dict:
        return await self._ask_hosts(lambda handle: handle.stats.remote(), 30.0)

    async def images(self) -> dict:
        """Each node's images ({node: {image name: {present, ref}}}, or {"error": ...})."""
        return await self._ask_hosts(lambda handle: handle.images.remote(), 60.0)

    async def _ask_hosts(self, call: Callable[[object], object], timeout_s: float) -> dict:
        """{node label: what ``call(host actor)`` answered, or {"error": ...}} for every node up."""
        up = [h for h in self.hosts if h.up]
        answers = await asyncio.gather(*(_within(call(h.handle), timeout_s) for h in up),
                                       return_exceptions=True)
        return {h.info.label: (a if not isinstance(a, BaseException) else {"error": _cause(a)})
                for h, a in zip(up, answers)}

    async def shutdown(self) -> None:
        """Close every host (its sessions and containers), then end their actors."""
        import ray

        up = [h for h in self.hosts if h.up]
        await asyncio.gather(*(_within(h.handle.close.remote(), 60.0) for h in up), return_exceptions=True)
        for host in self.hosts:
            ray.kill(host.handle)
            host.up, host.cause = False, host.cause or "the fleet was shut down"
            host.wake.set()   # its drain ends


def _deliver(batch: _Batch, index: int, result: Result) -> None:
    if not batch.closed:
        batch.ready.append((index, result))
        batch.event.set()


async def _ready(batch: _Batch, count: int, wait_s: float) -> None:
    """Wait up to ``wait_s`` until ``batch`` has ``count`` results ready (or is closed)."""
    deadline = time.monotonic() + wait_s
    while len(batch.ready) < count and not batch.closed:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        batch.event.clear()
        try:
            await asyncio.wait_for(batch.event.wait(), left)
        except asyncio.TimeoutError:
            return


def _outcome(future: "asyncio.Future | object") -> Result:
    """A twin's result from the cache's future; a failed owner is this job's infra_error."""
    exc = future.exception()   # type: ignore[union-attr]
    if exc is not None:
        return infra_result(f"an identical job failed in the fleet: {exc}. The program was not judged", 0)
    return future.result()     # type: ignore[union-attr]


async def _within(ref: object, timeout_s: float) -> object:
    return await asyncio.wait_for(asyncio.ensure_future(ref), timeout_s)   # type: ignore[arg-type]


def _patience_s(job: Job, options: FleetOptions) -> float:
    """How long a node may run ``job`` without an answer: every attempt's limits, and slack."""
    return (options.retries + 1) * reply_timeout(job) + 30.0


def _cause(exc: BaseException) -> str:
    """The first line of what went wrong, without Ray's traceback."""
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1] if text else ''}"[:500]


__all__ = ["FleetRouter"]
