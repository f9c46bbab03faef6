"""Math answer verification: extract the final answer, compare it with the gold.

    from proctor.envs.math import verify, MathVerifier
    verify(r"... so the answer is \\boxed{\\dfrac{1}{2}}", "0.5")      # True

Tiers: canonical string -> exact rational -> structure (tuples, sets, intervals,
matrices, lists) run inline in microseconds; only the rest goes to the symbolic
tier (latex2sympy + SymPy) in a pool of killable worker processes with a per-task
deadline, so no input can hang the caller. See ``numbers.py`` for the percent and
decimal-approximation policies, ``extract.py`` for where an answer is read (the last
box; boxes tied by a connective are one answer), ``strict.py`` for ``strict=True``
(the answer must be in the configured format and end the completion) and
``bignum.py`` for numbers of up to 250,000 characters compared exactly.
"""

from .answer import Answer, MatchResult, ParsedGold
from .extract import Extraction, extract, extract_answer
from .matcher import answers_equal, clear_cache, extract_for, match, match_many, parse_gold
from .pool import PoolError, shutdown_pool
from .verifier import MatchError, MathVerifier, verify

__all__ = [
    "Answer", "Extraction", "MatchError", "MatchResult", "MathVerifier", "ParsedGold", "PoolError",
    "answers_equal", "clear_cache", "extract", "extract_answer", "extract_for", "match", "match_many",
    "parse_gold", "shutdown_pool", "verify",
]
