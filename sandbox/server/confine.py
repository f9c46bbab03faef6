"""What every process of a job gives up before any of its code runs, and the files it owns.

Stdlib only: copied into the images beside the fork server.

The server (PID 1) and the mother of Python runs run as root, without supplementary groups, with
only the capabilities they need to clean up after a job (container.py: KILL, SETUID,
SETGID, DAC_OVERRIDE, FOWNER); every job process runs as JOB_UID with none. A process
may signal only processes of its own uid, so a job's kill(1, ...) is refused with
EPERM under every runtime: Linux already drops such signals for a namespace's init,
gVisor delivers SIGKILL and SIGSTOP to it.

The tests of a Python or JavaScript job run in a judge process of their own uid
(JUDGE_UID), with the job's group as a supplementary group so that it can read the
job's work dir: the program cannot read, trace or signal it, and the judge's files
are its own (umask 077).

POSIX message queues outlive their creator. Under runc the server empties
/dev/mqueue after each job; gVisor mounts no mqueue filesystem (and ignores
RLIMIT_MSGQUEUE), so a queue would outlive its job unseen. Jobs therefore get no
message queues at all: a seccomp filter, which needs no privilege once
no_new_privs is set, makes mq_open fail with EPERM, under both runtimes alike.
The same filter refuses memfd_create: with /job and /dev/shm mounted noexec, a job
then has no file it wrote that it could execute or map as code (a native library
loaded into a JVM, say).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
from typing import Iterator

JOB_UID = 1000     # the image's `sandbox` user: the program's processes
JOB_GID = 1000
JUDGE_UID = 1001   # the image's `judge` user: the tests' process, where tests run apart
JUDGE_GID = 1001

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_NR, _ARCH = 0, 4   # offsets in struct seccomp_data

# (audit arch, refused syscall numbers: mq_open, memfd_create) for every ABI a process
# of this machine can call the kernel with: a 64-bit program can still enter through
# int 0x80 (i386) or x32.
_X32 = 0x40000000
_REFUSED = {
    "x86_64": ((0xC000003E, (240, 319, _X32 | 240, _X32 | 319)), (0x40000003, (277, 356))),
    "aarch64": ((0xC00000B7, (180, 279)), (0x40000028, (274, 385))),
}


def _filter_program(abis: tuple) -> bytes:
    """A classic BPF program: EPERM for the refused calls in each ABI, everything else allowed."""
    insns: list[tuple[int, int, int, int]] = []
    for arch, numbers in abis:
        # if arch != this ABI: skip this block (load nr + one compare per number)
        insns.append((_LD_W_ABS, 0, 0, _ARCH))
        insns.append((_JEQ_K, 0, 1 + len(numbers), arch))
        insns.append((_LD_W_ABS, 0, 0, _NR))
        for nr in numbers:
            insns.append((_JEQ_K, -1, 0, nr))   # -1: to the EPERM return at the end, patched below
    insns.append((_RET_K, 0, 0, _RET_ALLOW))
    insns.append((_RET_K, 0, 0, _RET_EPERM))
    deny = len(insns) - 1
    out = bytearray()
    for pc, (code, jt, jf, k) in enumerate(insns):
        if jt == -1:
            jt = deny - pc - 1
        out += struct.pack("HBBI", code, jt, jf, k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


# Built once in the server, so a forked child only makes two prctl calls.
_ABIS = _REFUSED.get(platform.machine())
_CODE = _filter_program(_ABIS) if _ABIS else b""
_PROGRAM = ctypes.create_string_buffer(_CODE, len(_CODE))
_FPROG = _SockFprog(len(_CODE) // 8, ctypes.addressof(_PROGRAM)) if _ABIS else None
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl
_PRCTL.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]


def problem() -> str | None:
    """Why jobs could not be confined here (checked once, when the server starts), or None."""
    if os.geteuid() != 0 or os.getgroups():
        return (f"the sandbox server runs as uid {os.geteuid()} (groups {os.getgroups()}), not as root "
                f"without groups: it cannot run jobs under uid {JOB_UID}; start the container as "
                "user 0:0 (proctor's Sandbox does)")
    if _FPROG is None:
        return f"no seccomp filter for machine {platform.machine()!r}: jobs' POSIX message queues are not contained"
    return None


def confine_job(uid: int = JOB_UID, gid: int = JOB_GID, groups: tuple[int, ...] = ()) -> None:
    """In a forked child of the server: become ``uid`` for good, then lose the refused calls.

    setuid from root clears every capability; the filter is inherited by every
    child and kept across exec. Raises OSError if either step fails.
    """
    os.setgroups(list(groups))
    os.setgid(gid)
    os.setuid(uid)
    if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3:
        raise OSError(f"could not drop to uid {uid}")
    if _PRCTL(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0 or \
            _PRCTL(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(_FPROG), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"could not install the job's seccomp filter: {os.strerror(err)}")


# --------------------------------------------------------------------------- the job's files

def confine_judge() -> None:
    """Become the judge: its own uid, the job's group to read the work dir, private files."""
    confine_job(JUDGE_UID, JUDGE_GID, (JOB_GID,))
    os.umask(0o077)


@contextlib.contextmanager
def as_job(uid: int = JOB_UID, gid: int = JOB_GID) -> Iterator[None]:
    """Run the block with the job's effective uid and gid, then become root again.

    The server writes a job's files this way: they belong to the job, and a link a
    job left behind (into a place only root may write) leads nowhere the job could
    not go itself. No process may be forked inside the block.
    """
    os.setegid(gid)
    os.seteuid(uid)   # clears the effective capabilities; seteuid(0) restores them
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def makedirs(path: str) -> None:
    """os.makedirs as the job's user."""
    with as_job():
        os.makedirs(path, exist_ok=True)


def write(path: str, data: bytes) -> None:
    """Write a file for the job (and its directories) as the job's user."""
    with as_job():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
