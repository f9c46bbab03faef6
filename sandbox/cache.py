"""`VerdictCache`: judge each distinct program once.

In GRPO many completions of a group are the same program; a verdict depends only on
what runs (image, language, code, tests, cases, files, limits, the job's options) and
on the code that turns measurements into a verdict. The key is a sha256 over all of
that, so a changed image, limit or verdict rule is a different key, never a stale hit.

Layers, looked up in this order:

* identical jobs **in flight**: a second claim of a key that is running waits for the
  first run and shares its result (``shared`` in the stats);
* **memory**: a bounded LRU (entries and bytes of output held);
* **disk** (optional): one JSON file per key under ``directory``, written to a
  temporary file and renamed, so concurrent writers (threads, processes, machines on
  a shared file system) never leave a half-written entry; an entry that does not read
  back (truncated, edited, from an older format) is ignored and rewritten.

``infra_error`` results are never stored: they say nothing about the program.
A stored verdict is replayed as measured, timeouts included (identical programs then
get identical rewards within a step; a timeout is also the costliest verdict to repeat).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Optional, Union

from .errors import SandboxError
from .types import STATUSES, CaseResult, Job, Result

log = logging.getLogger("proctor.sandbox")

FORMAT = 1
_HERE = Path(__file__).resolve().parent
# The host-side rules that turn the server's measurements into a Result: editing any
# of them changes what a stored verdict would be. (The server's files are in the image ref.)
_RULE_FILES = (_HERE / "verdict.py", _HERE / "language_status.py", _HERE / "types.py", _HERE / "literal_tests.py",
               _HERE / "server" / "judge.py")


def _rules_version() -> str:
    h = hashlib.sha256()
    for path in _RULE_FILES:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


RULES_VERSION = _rules_version()


def job_key(job: Job, context: str) -> str:
    """sha256 over every field of ``job`` (limits as they apply) and ``context``.

    ``context``: what else decides the verdict outside the job: the image ref, the
    OCI runtime, the CPU share per job (the Sandbox supplies it).
    """
    doc: dict[str, object] = {}
    for f in fields(Job):
        doc[f.name] = getattr(job, f.name)
    doc["limits"] = asdict(job.effective_limits)
    doc["cases"] = [list(c) for c in (job.cases or ())]
    doc["files"] = sorted((path, base64.b64encode(c.encode() if isinstance(c, str) else c).decode())
                          for path, c in (job.files or {}).items())
    doc["_context"] = context
    doc["_rules"] = RULES_VERSION
    doc["_format"] = FORMAT
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _plain(value: object) -> object:
    """JSON for Job field values that are not JSON already (a field added later)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    # Never a repr: two different values with one repr would share a verdict.
    raise SandboxError(f"job_key: a Job field holds a {type(value).__name__}, which the verdict cache "
                       "cannot key; teach sandbox/cache.py:_plain about it")


def _result_bytes(result: Result) -> int:
    """About what a stored result holds in memory: its output text and fetched files."""
    size = len(result.stdout) + len(result.stderr) + len(result.error) + 256
    size += sum(len(path) + len(data or b"") + 64 for path, data in (result.files or {}).items())
    return size + sum(len(c.stdout) + len(c.stderr) + len(c.expected) + 128 for c in result.cases)


def result_to_json(result: Result, key: str) -> str:
    """A stored entry: the result's fields, fetched files' bytes as base64 (None stays null)."""
    raw = asdict(result)
    if result.files is not None:
        raw["files"] = {p: None if c is None else base64.b64encode(c).decode() for p, c in result.files.items()}
    return json.dumps({"format": FORMAT, "key": key, "result": raw}, ensure_ascii=False)


def result_from_json(text: str, key: str) -> Result:
    """A stored entry back as a Result; ValueError/TypeError/KeyError if it is not one."""
    doc = json.loads(text)
    if doc.get("format") != FORMAT or doc.get("key") != key:
        raise ValueError("entry of another format or key")
    raw = dict(doc["result"])
    raw["cases"] = tuple(CaseResult(**c) for c in raw["cases"])
    if raw.get("files") is not None:
        raw["files"] = {p: None if c is None else base64.b64decode(c, validate=True) for p, c in raw["files"].items()}
    result = Result(**raw)
    if result.status not in STATUSES or result.status == "infra_error":
        raise ValueError(f"status {result.status!r} is not a stored verdict")
    return replace(result, cached=False)


@dataclass(frozen=True)
class CacheStats:
    """Counters since the cache was made (or last cleared).

    ``lookups`` = ``hits + disk_hits + shared + misses``; every lookup but a miss is
    a job that did not run.
    """

    hits: int = 0           # answered from memory
    disk_hits: int = 0      # answered from the directory
    shared: int = 0         # an identical job was running: waited for it
    misses: int = 0         # had to run
    stores: int = 0         # verdicts stored
    not_stored: int = 0     # infra errors (and failed runs): never stored
    corrupt: int = 0        # disk entries that did not read back; rewritten when the job reruns
    evictions: int = 0      # memory entries dropped for the bounds
    entries: int = 0        # in memory now
    bytes: int = 0          # output text held in memory now (approximate)

    @property
    def lookups(self) -> int:
        return self.hits + self.disk_hits + self.shared + self.misses

    @property
    def saved(self) -> int:
        """Jobs answered without running."""
        return self.hits + self.disk_hits + self.shared


class Claim:
    """What `VerdictCache.claim` hands out: a future for the result, and whether to run it.

    ``owner`` True: the caller must run the job and call `VerdictCache.settle` (or
    `VerdictCache.abandon` on an exception); every other claim of the key waits for it.
    """

    __slots__ = ("key", "future", "owner")

    def __init__(self, key: str, future: "Future[Result]", owner: bool) -> None:
        self.key, self.future, self.owner = key, future, owner


class VerdictCache:
    """Verdicts of jobs already judged, in memory (LRU) and optionally on disk.

    ``max_entries`` / ``max_bytes``: memory bounds (output text held; a result can
    carry up to two MiB of output). ``directory``: also keep verdicts there across
    runs and processes (created if missing; never pruned: delete it to start over).
    Thread-safe; one cache may serve several `Sandbox` objects.
    """

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 256 << 20,
                 directory: Union[str, os.PathLike, None] = None) -> None:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise SandboxError(f"VerdictCache(max_entries=) must be an integer >= 1, got {max_entries!r}")
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise SandboxError(f"VerdictCache(max_bytes=) must be an integer >= 1, got {max_bytes!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.directory = Path(directory).expanduser() if directory is not None else None
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SandboxError(f"VerdictCache(directory={str(directory)!r}): cannot create it ({exc}); "
                                   "pass a writable directory or none") from None
        self._lock = threading.Lock()
        self._memory: "OrderedDict[str, tuple[Result, int]]" = OrderedDict()
        self._inflight: dict[str, "Future[Result]"] = {}
        self._counts = CacheStats()

    # ------------------------------------------------------------------ lookups
    def claim(self, key: str) -> Claim:
        """A stored result (done future), a running twin's future, or ownership of the run."""
        with self._lock:
            found = self._from_memory(key)
            if found is not None:
                self._count(hits=1)
                return Claim(key, _done(found), owner=False)
            running = self._inflight.get(key)
            if running is not None:
                self._count(shared=1)
                return Claim(key, _chained(running), owner=False)
            # Reserve the key before the (slower) disk read so a twin arriving meanwhile waits.
            future: "Future[Result]" = Future()
            self._inflight[key] = future
        stored = self._from_disk(key)
        if stored is not None:
            with self._lock:
                self._remember(key, stored)
                self._inflight.pop(key, None)
                self._count(disk_hits=1)
            future.set_result(stored)
            return Claim(key, _done(replace(stored, cached=True)), owner=False)
        with self._lock:
            self._count(misses=1)
        return Claim(key, future, owner=True)

    def get(self, key: str) -> Optional[Result]:
        """The stored result (marked ``cached``) or None; does not wait for running twins."""
        with self._lock:
            found = self._from_memory(key)
        if found is None:
            found = self._from_disk(key)
            if found is not None:
                with self._lock:
                    self._remember(key, found)
        return None if found is None else replace(found, cached=True)

    # ------------------------------------------------------------------ settling
    def settle(self, claim: Claim, result: Result) -> None:
        """The owner's run finished: store it (unless infra_error) and release the waiters."""
        if not claim.owner:
            raise SandboxError("VerdictCache.settle: only the owner of a claim settles it")
        self.put(claim.key, result)
        with self._lock:
            self._inflight.pop(claim.key, None)
        claim.future.set_result(result)

    def abandon(self, claim: Claim, exc: BaseException) -> None:
        """The owner's run raised: nothing is stored; waiters get the same exception."""
        with self._lock:
            self._inflight.pop(claim.key, None)
            self._count(not_stored=1)
        claim.future.set_exception(exc)

    def put(self, key: str, result: Result) -> bool:
        """Store a verdict; False (and nothing stored) for an infra_error."""
        if result.infra_error:
            with self._lock:
                self._count(not_stored=1)
            return False
        result = replace(result, cached=False)
        with self._lock:
            self._remember(key, result)
            self._count(stores=1)
        if self.directory is not None:
            self._write(key, result)
        return True

    def clear(self, disk: bool = False) -> None:
        """Forget what memory holds and reset the counters; ``disk=True`` also empties the directory."""
        with self._lock:
            self._memory.clear()
            self._counts = CacheStats()
        if disk and self.directory is not None:
            for path in self.directory.glob("*/*.json"):
                path.unlink(missing_ok=True)

    def stats(self) -> CacheStats:
        with self._lock:
            return self._counts

    def __len__(self) -> int:
        with self._lock:
            return len(self._memory)

    # ------------------------------------------------------------------ internals (lock held)
    def _count(self, **deltas: int) -> None:
        c = self._counts
        self._counts = replace(c, **{k: getattr(c, k) + v for k, v in deltas.items()})

    def _from_memory(self, key: str) -> Optional[Result]:
        entry = self._memory.get(key)
        if entry is None:
            return None
        self._memory.move_to_end(key)
        return replace(entry[0], cached=True)

    def _remember(self, key: str, result: Result) -> None:
        size = _result_bytes(result)
        old = self._memory.pop(key, None)
        held = self._counts.bytes - (old[1] if old else 0) + size
        self._memory[key] = (result, size)
        evicted = 0
        while len(self._memory) > 1 and (len(self._memory) > self.max_entries or held > self.max_bytes):
            _, (_, dropped) = self._memory.popitem(last=False)
            held -= dropped
            evicted += 1
        self._counts = replace(self._counts, entries=len(self._memory), bytes=held,
                               evictions=self._counts.evictions + evicted)

    # ------------------------------------------------------------------ disk (no lock held)
    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / key[:2] / f"{key}.json"

    def _from_disk(self, key: str) -> Optional[Result]:
        if self.directory is None:
            return None
        path = self._path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("verdict cache: cannot read %s (%s); the job runs again", path, exc)
            with self._lock:
                self._count(corrupt=1)
            return None
        try:
            return result_from_json(text, key)
        except (ValueError, TypeError, KeyError, AttributeError, SandboxError) as exc:
            log.warning("verdict cache: %s does not read back (%s); the job runs again and rewrites it",
                        path, exc)
            with self._lock:
                self._count(corrupt=1)
            return None

    def _write(self, key: str, result: Result) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(exist_ok=True)
            # A private temporary file, then an atomic rename: readers and other writers
            # see either no entry or a whole one, never a partial write.
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(result_to_json(result, key))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("verdict cache: cannot write %s (%s); the verdict stays in memory only", path, exc)


def _done(result: Result) -> "Future[Result]":
    future: "Future[Result]" = Future()
    future.set_result(result)
    return future


def _chained(source: "Future[Result]") -> "Future[Result]":
    """A future that resolves with ``source``'s result, marked ``cached``."""
    out: "Future[Result]" = Future()

    def copy(done: "Future[Result]") -> None:
        exc = done.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(replace(done.result(), cached=True))

    source.add_done_callback(copy)
    return out


__all__ = ["CacheStats", "Claim", "VerdictCache", "job_key", "result_from_json", "result_to_json",
           "RULES_VERSION"]
