"""What the fork server uses to measure a job and to leave nothing of it behind.

Stdlib only: copied into the images beside the fork server.
"""

from __future__ import annotations

import os
import resource
import signal
import time

import layout

# The container tells its server that it runs under gVisor (container.py); jobs never see it.
GVISOR = os.environ.get("PROCTOR_GVISOR") == "1"
# Every place a job or its build can write to; each is emptied after every job (the
# job's own directories go with it: the next job gets new ones, layout.prepare_job).
SCRUB_DIRS = (layout.JOB_ROOT, layout.PRIVATE, layout.TMP, layout.SHM, layout.MQUEUE)

_CPU_FILES = ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage",
              "/sys/fs/cgroup/cpu.stat")
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def _first_existing(paths):
    for path in paths:
        if os.path.exists(path):
            return path
    return None


CPU_FILE = _first_existing(_CPU_FILES)
OOM_FILE = _first_existing(_OOM_FILES)


def cgroup_cpu_s() -> float | None:
    """CPU seconds used by the whole container: every process a job started counts."""
    if CPU_FILE is None:
        return None
    try:
        with open(CPU_FILE) as f:
            text = f.read()
    except OSError:
        return None
    if CPU_FILE.endswith("cpu.stat"):
        for line in text.splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
        return None
    return int(text) / 1e9


def cpu_reading(pid: int) -> float | None:
    """CPU seconds so far: the container's (every process in it), or where no cgroup counter
    can be read (gVisor), process ``pid``'s own: its threads and the children it waited for.
    For work done by a resident server (a session's kernel, the Java compile server)."""
    total = cgroup_cpu_s()
    if total is not None:
        return total
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After ")": state is field 3 of stat(5); utime, stime, cutime, cstime are fields 14-17.
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def oom_kills() -> int:
    if OOM_FILE is None:
        return 0
    try:
        with open(OOM_FILE) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- processes

REAPED: dict[int, tuple[int, object]] = {}   # pid -> (wait status, rusage) of reaped children
# The server's own processes that outlive jobs (javacd.py's compile server), pid -> the
# uid it runs as, which no job has: no sweep kills them. The uid is checked on every
# sweep, so a job's process that got a dead resident's pid is swept like any other.
RESIDENT: dict[int, int] = {}


def reap() -> None:
    """Collect every exited descendant (orphans re-parent to PID 1, i.e. to us)."""
    while True:
        try:
            pid, status, rusage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = (status, rusage)


def other_pids(keep: tuple[int, ...] = ()) -> list[int]:
    """Every process but this one, ``keep`` and RESIDENT."""
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc")
            if p.isdigit() and int(p) != me and int(p) not in keep and not _resident(int(p))]


def _resident(pid: int) -> bool:
    uid = RESIDENT.get(pid)
    if uid is None:
        return False
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return all(int(u) == uid for u in line.split()[1:])
    except (OSError, ValueError):
        pass
    return False


def sweep(keep: tuple[int, ...] = (), deadline_s: float = 2.0) -> int:
    """Kill every process but this one (and ``keep``); return how many were found.

    One job per container, so anything alive here belongs to the job that just
    ended: daemons that double-forked out of its session included.
    """
    found = 0
    end = time.monotonic() + deadline_s
    while True:
        pids = other_pids(keep)
        if not pids:
            return found
        found = max(found, len(pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            try:
                # Our own children die at once after SIGKILL: wait for exactly that.
                _, status, rusage = os.wait4(pid, 0)
                REAPED[pid] = (status, rusage)
            except ChildProcessError:
                pass   # a grandchild: it re-parents to us when its parent dies
        reap()
        if time.monotonic() > end:
            raise RuntimeError(f"processes survived the sweep: {other_pids(keep)}")
        if other_pids(keep):
            time.sleep(0.0002)


# --------------------------------------------------------------------------- files

def _empty_dir(root: str) -> None:
    """Delete everything below root without recursion and without long paths.

    A job can leave a tree thousands of levels deep (os.walk would overflow the
    stack, absolute paths would pass PATH_MAX) and directories without permissions.
    """
    os.chdir(root)
    names: list[str] = []   # the path from root to the current directory
    try:
        while True:
            subdir = None
            with os.scandir(".") as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        subdir = entry.name
                        break
                    os.unlink(entry.name)
            if subdir is not None:
                os.chmod(subdir, 0o700)   # a job may have made it unreadable
                os.chdir(subdir)
                names.append(subdir)
                continue
            if not names:
                return
            os.chdir("..")
            os.rmdir(names.pop())
    finally:
        os.chdir("/")


def scrub() -> list[str]:
    """Empty every writable place and check the roots; return what could not be made clean.

    Anything returned retires the container (the host replaces it): a later job must
    never meet what an earlier one left, not even in metadata.
    """
    problems = []
    for root in SCRUB_DIRS:
        if not os.path.isdir(root):
            continue
        try:
            _empty_dir(root)
            left = os.listdir(root)
            if left:
                problems.append(f"{root} not empty: {left[:5]}")
        except (OSError, RecursionError) as exc:
            problems.append(f"{root}: {exc}")
    for root in layout.SHARED_ROOTS:
        try:
            layout.reset_times(root)   # a job could add files here: the directory's mtime moved
        except OSError as exc:
            problems.append(f"{root}: {exc}")
    problems.extend(layout.root_problems())
    # SysV IPC objects outlive processes and have no path: report them, and the
    # host replaces the container.
    problems.extend(f"SysV {kind} objects left" for kind, n in sysv_counts().items() if n)
    return problems


def sysv_counts() -> dict[str, int]:
    """How many SysV shm segments, message queues and semaphore sets exist here.

    From /proc/sysvipc; where that is missing (gVisor), from the kernel's own
    counters (shmctl SHM_INFO, msgctl MSG_INFO, semctl SEM_INFO).
    """
    counts = {}
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                counts[kind] = len(f.read().splitlines()) - 1
        except OSError:
            counts[kind] = _sysv_info_count(kind)
    return counts


def _sysv_info_count(kind: str) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    info = (ctypes.c_int * 32)()   # larger than struct shm_info / msginfo / seminfo
    if kind == "shm":
        rc, used = libc.shmctl(0, 14, info), 0          # SHM_INFO: shm_info.used_ids
    elif kind == "msg":
        rc, used = libc.msgctl(0, 12, info), 0          # MSG_INFO: msginfo.msgpool (queues in use)
    else:
        rc, used = libc.semctl(0, 0, 19, info), 7       # SEM_INFO: seminfo.semusz (sets in use)
    if rc < 0:
        # Unknown means unclean: the container is replaced rather than trusted.
        return 1
    return info[used]


# --------------------------------------------------------------------------- limits

def set_limit(which: int, soft: int, hard: int | None = None) -> None:
    """Only ever lower limits: raising a hard limit fails inside containers."""
    cur_soft, cur_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
    soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _load_prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:
        return None


# Loaded once here, so forked children do not pay for dlopen.
_PRCTL = _load_prctl()


def set_dumpable(flag: int) -> None:
    """Non-dumpable: no ptrace, no /proc/PID/mem, fd or environ for other processes of our uid.

    The flag survives fork (not exec), so the mother and its runners inherit it.
    """
    if _PRCTL is not None:
        _PRCTL(4, flag, 0, 0, 0)   # PR_SET_DUMPABLE
