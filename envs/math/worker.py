"""The main loop of one symbolic worker process (started by ``pool.py``).

Importing this module imports SymPy and latex2sympy: the fork server preloads it
once so each new worker starts in milliseconds. The worker caps its own address
space (RLIMIT_AS) at start and its CPU time (RLIMIT_CPU) before every task, so
the C-level big-integer work that no signal can interrupt ends in a MemoryError
or SIGXCPU at worst; the parent's wall-clock deadline (SIGKILL) covers the rest.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
from typing import Any

from .symbolic import match_symbolic


# One of each kind of work the symbolic tier does: its first run imports and builds
# parser and solver tables (1-2 s each), which every forked worker would repeat.
_WARM_UP = ((r"\sum_{k=0}^{n-1} F_k F_{n-k-1}", r"\sum_{k=0}^{n-1} F_{n-k-1} F_k"), ("x^2+2x+1", "(x+1)^2"),
            (r"x \in [1,2]", r"1 \le x \le 2"), (r"\int_0^1 x\,dx", r"\frac{1}{2}"),
            (r"\begin{pmatrix}1\\2\end{pmatrix}+\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix}2\\4\end{pmatrix}"),
            (r"\frac{\sqrt{2}}{2}+\pi", r"\frac{1}{\sqrt{2}}+\pi"), ("2x+4y=3", "y=-x/2+3/4"),
            (r"\sin^2 x + \cos^2 x", "1"))


def warm_up() -> None:
    """Run ``_WARM_UP`` once (in the fork server, so workers start warm); never raises."""
    for pred, gold in _WARM_UP:
        try:
            match_symbolic(pred, gold)
        except Exception:   # noqa: BLE001 - a warm-up failure only costs time later
            pass


def serve(conn: Any, memory_bytes: int) -> None:
    """Answer (pred, gold, cpu_seconds) requests with (equal, tier, reason, retire)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is for the parent, which kills us
    # Math-Verify warns that its timeout is off: here the pool's deadline is the timeout.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _limit(resource.RLIMIT_AS, memory_bytes)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return                                   # the parent is gone
        if msg is None:
            return
        pred, gold, cpu_seconds = msg
        used = resource.getrusage(resource.RUSAGE_SELF)
        _limit(resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime) + int(cpu_seconds) + 1)
        try:
            r = match_symbolic(pred, gold)
            reply = (r.equal, r.tier, r.reason, False)
        except MemoryError:
            reply = (False, "symbolic", "too_complex", True)     # heap may be fragmented: retire
        except RecursionError:
            reply = (False, "symbolic", "too_complex", False)
        except Exception as exc:   # noqa: BLE001 - a bug of the matcher: not judged (infra_error)
            reply = (False, "error", f"internal_error:{type(exc).__name__}: {exc}"[:300], False)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return
        if reply[3]:
            return


def _limit(which: int, soft: int) -> None:
    try:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))
    except (ValueError, OSError):
        pass   # a platform without the limit: the parent's deadline still holds
