"""Reading back files a job or a session left in its work dir, for the host.

Stdlib only: copied into the images beside the fork server.

Every file is opened as the job's user (confine.as_job), one path component at a
time relative to the directory before it, with O_NOFOLLOW on each: a symlink the
program made, anywhere on the path, reads as "no file" and never leads to a file of
the server's (its sources, /proc/1/...), not even one the job itself could read.
O_NONBLOCK keeps a fifo from blocking the open; only a regular file is read.
"""

from __future__ import annotations

import base64
import os
import stat

import confine
import layout

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# All files of one job's reply together (a frame is at most 256 MiB of base64, steps' output included).
MAX_TOTAL_BYTES = 96 << 20


class TooLarge(Exception):
    """A regular file longer than the caller's limit: it was not read to its end."""

    def __init__(self, rel: str, size: int, limit: int) -> None:
        super().__init__(f"{rel!r} is {size} bytes, more than {limit}")
        self.rel, self.size, self.limit = rel, size, limit


def _open_as_job(rel: str) -> int | None:
    """An fd of work-dir path ``rel`` opened as the job's user, or None (missing, a link, not allowed)."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None   # the host checks paths; a bad one never leaves the work dir either way
    with confine.as_job():
        try:
            dir_fd = os.open(layout.WORK, _DIR_FLAGS)
        except OSError:
            return None
        try:
            for part in parts[:-1]:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
                os.close(dir_fd)
                dir_fd = next_fd
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError:   # ENOENT, ELOOP (a symlink), ENOTDIR, EACCES, ...
            return None
        finally:
            os.close(dir_fd)


def read(rel: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file at work-dir path ``rel``, read as the job's user.

    None where no regular file is there: missing, a directory, a symlink (at the end or
    anywhere on the path), a fifo or socket, or one the job's user may not read. Raises
    TooLarge when it holds more than ``max_bytes``: a file is returned whole or not at all.
    """
    fd = _open_as_job(rel)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > max_bytes:
            raise TooLarge(rel, st.st_size, max_bytes)
        chunks, got = [], 0
        while got <= max_bytes:   # one byte past the limit tells a file that grew since the fstat
            chunk = os.read(fd, min(max_bytes + 1 - got, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if got > max_bytes:
        raise TooLarge(rel, got, max_bytes)
    return b"".join(chunks)


def fetch(paths: list, max_bytes: int, total_bytes: int = MAX_TOTAL_BYTES) -> tuple[dict, dict]:
    """A job's fetch_files: ({path: base64, or None where no regular file is}, {path: size} of
    the files left out (None in the first) because one is over ``max_bytes`` or all of them
    together would be over ``total_bytes``)."""
    files: dict[str, str | None] = {}
    too_large: dict[str, int] = {}
    left = total_bytes
    for rel in paths:
        rel = str(rel)
        try:
            data = read(rel, min(max_bytes, left))
        except TooLarge as exc:
            files[rel], too_large[rel] = None, exc.size
            continue
        if data is not None:
            left -= len(data)
        files[rel] = None if data is None else base64.b64encode(data).decode()
    return files, too_large
