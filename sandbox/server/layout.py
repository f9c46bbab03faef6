"""Where a job's files live inside a sandbox container, and how each job gets them fresh.

Stdlib only: copied into the images beside the fork server.

Three tmpfs mounts, all owned by root, so a job can change neither a mount's own
directory nor anything the server keeps there (container.py mounts them):

    /job           root 0755, noexec: the job's places, made anew for every job
      work         the job's work dir and HOME (uid 1000, 0750: the judge reads it by group)
      jtmp         the judge's temp dir (uid 1001, 0700; Python and JavaScript tests)
    /tmp           root 1777, noexec: a job may add files, never change the directory itself
                   (its times are reset after every job)
    /run/proctor   root 0711, exec: the server's own
      bin          compiled programs (root; 0711 under runc, so not readable; 0755 under gVisor)
      build        compile outputs while the compilers run (uid 1000), gone before any run

The image makes /work a symlink to /job/work, so programs see the usual path. Every
job gets new directories (new inodes: no mode, ACL, xattr or timestamp of an earlier
job's can survive), and the job's sources, inputs, binaries and the tests live where
the job cannot write (and, for the tests, cannot read).
"""

from __future__ import annotations

import os
import stat

from confine import JOB_GID, JOB_UID, JUDGE_GID, JUDGE_UID

JOB_ROOT = "/job"
WORK = "/job/work"
TMP = "/tmp"
JUDGE_TMP = "/job/jtmp"
PRIVATE = "/run/proctor"
BIN = "/run/proctor/bin"
BUILD = "/run/proctor/build"
SHM = "/dev/shm"
MQUEUE = "/dev/mqueue"

# (path, uid, gid, mode) of what every job gets, made in this order.
JOB_DIRS = (
    (WORK, JOB_UID, JOB_GID, 0o750),
    (JUDGE_TMP, JUDGE_UID, JUDGE_GID, 0o700),
    (BIN, 0, 0, 0o711),
)
# The roots whose own metadata must never change: (path, mode, uid) as the container made them.
ROOTS = ((JOB_ROOT, 0o755, 0), (PRIVATE, 0o711, 0), (TMP, 0o1777, 0), (SHM, 0o1777, 0))
# Roots a job can add files to: their mtime moves, so it is reset after every job.
SHARED_ROOTS = (TMP, SHM)
# A deterministic time for those roots: an earlier job's timing never shows in a later one.
EPOCH = 0


def make_dir(path: str, uid: int, gid: int, mode: int) -> None:
    os.mkdir(path, 0o700)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def prepare_job() -> None:
    """Fresh directories for one job. Raises OSError if the previous job's are still there."""
    for path, uid, gid, mode in JOB_DIRS:
        make_dir(path, uid, gid, mode)


def reopen_work() -> None:
    """Before each run of a job: its work dir as the server made it (an earlier run may have
    chmod-ed it shut, which must cost that program its verdict, not the sandbox a start)."""
    os.chmod(WORK, 0o750)


def make_build_dir() -> str:
    """The compilers' output dir, owned by the job's uid (compilers run as the job)."""
    make_dir(BUILD, JOB_UID, JOB_GID, 0o700)
    return BUILD


def root_problems() -> list[str]:
    """How the roots differ from what the container made: mode, owner, xattrs (ACLs are xattrs)."""
    problems = []
    for path, mode, uid in ROOTS:
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != mode or st.st_uid != uid:
                problems.append(f"{path}: mode {oct(stat.S_IMODE(st.st_mode))} uid {st.st_uid}, "
                                f"expected {oct(mode)} uid {uid}")
            names = xattrs(path)
            if names:
                problems.append(f"{path}: extended attributes {names[:5]}")
        except OSError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def xattrs(path: str) -> list[str]:
    try:
        return os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (95, 38):   # EOPNOTSUPP, ENOSYS: no xattrs here at all
            return []
        raise


def reset_times(path: str) -> None:
    os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
