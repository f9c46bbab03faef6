"""A tiny fork server for math workers (run as a subprocess by ``pool.py``).

Why not ``multiprocessing``'s forkserver or spawn: both re-import the caller's
``__main__`` in every worker, which breaks (or re-runs) any training script that
lacks an ``if __name__ == "__main__"`` guard and drags its imports (torch, ...)
into each worker. Forking the caller itself is unsafe once it has threads. So a
single-threaded helper imports SymPy once, then forks one worker per request; the
request carries the worker's end of a fresh socket pair (SCM_RIGHTS).

Protocol on the control socket: request = b"F" + 8-byte memory limit, with one fd;
reply = 8-byte pid. The helper exits when the control socket closes (parent gone);
a worker exits when its own socket closes.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys


def main(control_fd: int) -> None:
    from . import worker   # SymPy, latex2sympy, math_verify: imported once, shared by fork

    worker.warm_up()       # and their lazy tables built once, not in every worker

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the kernel reaps dead workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=control_fd)
    control.sendall(b"R")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(control, 9, 1)
        except OSError:
            return
        if not msg or len(msg) != 9 or len(fds) != 1:
            return
        memory_bytes = struct.unpack("<q", msg[1:])[0]
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            from multiprocessing.connection import Connection

            code = 0
            try:
                worker.serve(Connection(fds[0]), memory_bytes)
            except BaseException:   # noqa: BLE001 - a worker must never return into this loop
                code = 1
            os._exit(code)
        os.close(fds[0])
        control.sendall(struct.pack("<q", pid))


if __name__ == "__main__":
    main(int(sys.argv[1]))
