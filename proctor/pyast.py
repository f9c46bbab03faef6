"""``ast.parse`` behind one process-wide lock.

CPython 3.11 keeps the AST builder's recursion counter in interpreter-wide state and
sets it from the calling thread's stack depth. When a garbage collection inside one
thread's parse runs a finalizer and the interpreter switches threads, a second
thread's parse overwrites that counter, and one of them fails with ``SystemError: AST
constructor recursion depth mismatch`` (cpython gh-106905; reproduced here with four
threads parsing HumanEval tests while cyclic garbage with finalizers is collected).
`Sandbox.run_many` parses tests in its job threads, and rollouts are verified in
thread pools, so every ``ast.parse`` in Proctor goes through `parse`. SymPy's own
parsing runs in worker processes (``envs/math/pool.py``), out of reach of the race.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)``, one thread at a time (the same exceptions)."""
    with _LOCK:
        return ast.parse(source, mode=mode)
