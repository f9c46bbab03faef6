"""The tiered matcher: string -> exact rational -> structure inline, symbolic in the pool.

The first three tiers (``answer.decide``) run in the caller in microseconds and
decide most answers (integers, fractions, decimals, tuples of them, text, letters).
Only what they cannot tell goes to a worker process, behind an LRU cache keyed on
the two canonical strings, because a GRPO group often repeats one answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional, Sequence, Union

from .answer import Answer, MatchResult, ParsedGold, _prepare, canonical, decide, prepare
from .extract import MAX_ANSWER_CHARS, Extraction, extract, gold_text, too_complex
from .notation import malformed
from .pool import get_pool

DEFAULT_TIMEOUT_S = 2.0
CACHE_SIZE = 65536


class _LRU:
    """A small thread-safe LRU (functools.lru_cache cannot hold results computed
    outside the cached call, and must not block other threads while a worker runs)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[tuple[str, str], MatchResult] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: tuple[str, str]) -> Optional[MatchResult]:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
                self.hits += 1
            return value

    def put(self, key: tuple[str, str], value: MatchResult) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_CACHE = _LRU(CACHE_SIZE)


def parse_gold(gold: Union[str, ParsedGold]) -> ParsedGold:
    """Prepare a gold answer once for a whole group of completions (cached by string).
    A gold written as a solution (boxed, or prose ending in "The final answer is X")
    is reduced to its answer first (``extract.gold_text``)."""
    if isinstance(gold, Answer):
        return gold
    return prepare(gold_text(gold if isinstance(gold, str) else str(gold)), gold=True)


def extract_for(completion: str, gold: Union[str, ParsedGold], mode: str = "auto", *,
                strict: bool = False) -> Extraction:
    """The answer of ``completion`` to compare with ``gold``: ``extract``'s (an option
    letter for a letter gold), or every box of the final run joined when the gold has
    several values and the completion boxed them one by one."""
    g = parse_gold(gold)
    ex = extract(completion if isinstance(completion, str) else str(completion), mode,
                 choice=g.mcq is not None, strict=strict)
    if ex.group is not None and several(g):
        return Extraction(ex.group, ex.source, ex.reason)
    return ex


def several(g: Answer) -> bool:
    """True when the gold is several values: a list, set, tuple or interval of two or
    more (also as an assignment's value: ``(x, y) = (1, 2)``), not a matrix."""
    a = g.value if g.rel == "assign" and g.value is not None else g
    return a.shape is not None and a.shape.kind != "matrix" and len(a.items) >= 2


def match(pred: str, gold: Union[str, ParsedGold], timeout_s: float = DEFAULT_TIMEOUT_S) -> MatchResult:
    """Compare an extracted answer with the gold; never raises for odd input.
    Raises ``PoolError`` only if the symbolic worker pool cannot start."""
    return match_many([pred], [gold], timeout_s)[0]


def answers_equal(pred: str, gold: Union[str, ParsedGold], timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when ``pred`` (an extracted answer) equals ``gold`` mathematically."""
    return match(pred, gold, timeout_s).equal


def match_many(preds: Sequence[str], golds: Sequence[Union[str, ParsedGold]],
               timeout_s: float = DEFAULT_TIMEOUT_S) -> list[MatchResult]:
    """``match`` for many pairs: fast tiers inline, the rest spread over the pool."""
    results: list[Optional[MatchResult]] = []
    pending: dict[tuple[str, str], list[int]] = {}
    payloads: dict[tuple[str, str], tuple[str, str]] = {}
    for i, (pred, gold) in enumerate(zip(preds, golds)):
        r, key = fast_match(pred, gold)
        results.append(r)
        if r is None and key is not None:
            pending.setdefault(key, []).append(i)
            payloads.setdefault(key, (pred, parse_gold(gold).raw))
    if pending:
        keys = list(pending)
        raw = get_pool().map([payloads[k] for k in keys], timeout_s)
        for key, (equal, tier, reason) in zip(keys, raw):
            r = MatchResult(equal, tier, reason)
            if tier != "error":
                _CACHE.put(key, r)
            for i in pending[key]:
                results[i] = r
        if len(raw) != len(keys):    # zip would shift every later result onto the wrong pair
            raise RuntimeError(f"the math worker pool answered {len(raw)} of {len(keys)} comparisons")
    # Every pair was either decided inline or sent to the pool: a gap is a bug here,
    # and an unjudged pair must never become a silent 0.
    return [r if r is not None else MatchResult(False, "error", "internal_error:no_result") for r in results]


def fast_match(pred: str, gold: Union[str, ParsedGold]) -> tuple[Optional[MatchResult], Optional[tuple[str, str]]]:
    """The inline tiers and the cache: (result, None), or (None, key) when the pair
    needs a worker (``key``: the canonical strings, for the cache; the worker is sent
    the raw strings and prepares them itself)."""
    try:
        g = parse_gold(gold)
        if (not g.reason and len(pred) <= MAX_ANSWER_CHARS and not too_complex(pred)
                and canonical(pred) == g.norm and not malformed(g.norm)):
            return MatchResult(True, "string", "equal"), None      # no need to take pred apart
        p = prepare(pred)
        r = decide(p, g)
    except (RecursionError, MemoryError):
        return MatchResult(False, "guard", "too_complex"), None
    except Exception as exc:   # noqa: BLE001 - a bug must not stall training: not judged, never a 0
        return MatchResult(False, "error", f"internal_error:{type(exc).__name__}: {exc}"[:300]), None
    if r is not None:
        return r, None
    key = (p.norm, g.norm)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached, None
    return None, key


def clear_cache() -> None:
    """Forget cached results: symbolic verdicts and prepared answers (tests, benches)."""
    _CACHE.clear()
    _prepare.cache_clear()
    canonical.cache_clear()
