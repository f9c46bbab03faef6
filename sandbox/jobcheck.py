"""What makes a Job well-formed beyond its types: checked when the Job is made, so a bad one never reaches a sandbox.

A malformed job is the caller's mistake, not the program's and not the sandbox's: it
must be a `BadJob` naming the field, never an ``infra_error`` after three containers
tried to write it, and never a verdict.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from .errors import BadJob

MAX_JOB_BYTES = 64 << 20       # code, tests, cases and files together
MAX_FILES = 10_000
MAX_NAME_BYTES = 255           # one path component, as the kernel allows
MAX_PATH_BYTES = 1024
MAX_FETCH_FILES = 64           # Job.fetch_files: paths read back after the job
# Names the server writes into the work dir for the program itself.
RESERVED = {"python": ("main.py",)}


def check_text(field: str, value: str) -> int:
    """The UTF-8 size of ``value``; BadJob if it cannot be written as UTF-8 (a lone surrogate)."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadJob(f"{field} holds a lone surrogate ({value[exc.start]!r} at index {exc.start}), which no file "
                     "or program can hold as UTF-8; decode its source with errors='replace', or fix it") from None


def check_relative_path(path: object, where: str) -> None:
    """A relative path of plain names: no '', '.', '..', no leading or trailing '/', no control characters.

    ``where`` names the field in the BadJob's message (``Job.files['a/b']``).
    """
    if not isinstance(path, str) or not path:
        raise BadJob(f"{where} must be a non-empty relative path (e.g. 'out/result.txt'), got {path!r:.80}")
    if path.startswith("/") or path.endswith("/"):
        raise BadJob(f"{where}: a file path must be relative to the work dir and name a file "
                     "(no leading or trailing '/')")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise BadJob(f"{where}: control characters (NUL, newline, ...) are not allowed in file names")
    size = check_text(f"{where} (the path)", path)
    if size > MAX_PATH_BYTES:
        raise BadJob(f"{where}: the path is {size} bytes long; at most {MAX_PATH_BYTES}")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise BadJob(f"{where}: every part of the path must be a name (no empty part, '.' or '..'); "
                         "write it as 'dir/file'")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise BadJob(f"{where}: the name {part[:40]!r}... is longer than {MAX_NAME_BYTES} bytes")


def check_file_path(path: object, language: str) -> None:
    """A key of Job.files: a relative path of plain names (check_relative_path), not a reserved name."""
    if not isinstance(path, str) or not path:
        raise BadJob(f"Job.files keys must be non-empty relative paths, got {path!r}")
    where = f"Job.files[{path!r}]"
    check_relative_path(path, where)
    if path.split("/")[0] in RESERVED.get(language, ()):
        raise BadJob(f"{where}: that name is reserved for the program itself; rename the file")


def check_fetch_files(paths: Sequence[object]) -> None:
    """Job.fetch_files: at most MAX_FETCH_FILES relative paths of plain names (the program's own
    main.py included: reading it back shows nothing the caller did not send)."""
    if len(paths) > MAX_FETCH_FILES:
        raise BadJob(f"Job.fetch_files has {len(paths)} paths; at most {MAX_FETCH_FILES}: fetch fewer files, "
                     "or have the program bundle them into one (a tar or zip archive)")
    for i, path in enumerate(paths):
        check_relative_path(path, f"Job.fetch_files[{i}]")


def check_files(files: Mapping[object, object], language: str, disk_mb: int) -> int:
    """Paths, contents and sizes of Job.files; returns their total size in bytes."""
    if len(files) > MAX_FILES:
        raise BadJob(f"Job.files has {len(files)} files; at most {MAX_FILES}")
    total = 0
    for path, content in files.items():
        check_file_path(path, language)
        if isinstance(content, str):
            total += check_text(f"Job.files[{path!r}]", content)
        elif isinstance(content, bytes):
            total += len(content)
        else:
            raise BadJob(f"Job.files[{path!r}] must be str or bytes, got {type(content).__name__}")
    paths = set(files)
    for path in paths:
        parts = str(path).split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in paths:
                raise BadJob(f"Job.files has both {parent!r} (a file) and {path!r} (inside it, so {parent!r} "
                             "would have to be a directory); rename one")
    if total > disk_mb << 20:
        raise BadJob(f"Job.files hold {total / 2**20:.1f} MiB, more than the work dir's Limits.disk_mb = {disk_mb}; "
                     "raise disk_mb or send less")
    return total


def check_python_tests(tests: str) -> None:
    """The tests must parse: a broken test is the task's fault, never a verdict on the program."""
    try:
        compile(tests, "<tests>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise BadJob(f"Job.tests is not valid Python ({exc.msg}, line {exc.lineno}): the tests belong to the "
                     "task, not the program; fix the task") from None
    except ValueError as exc:
        raise BadJob(f"Job.tests cannot be compiled: {exc}") from None


def check_job(language: str, code: str, tests: Optional[str], cases: Sequence[tuple[str, str]],
              files: Optional[Mapping[object, Union[str, bytes]]], disk_mb: int,
              fetch_files: Sequence[object] = ()) -> None:
    """Everything beyond types (types.Job checks those first)."""
    check_fetch_files(fetch_files)
    total = check_text("Job.code", code)
    if tests is not None:
        total += check_text("Job.tests", tests)
        if language == "python":
            check_python_tests(tests)
    for i, (stdin, expected) in enumerate(cases):
        total += check_text(f"Job.cases[{i}][0] (stdin)", stdin)
        total += check_text(f"Job.cases[{i}][1] (expected stdout)", expected)
    if files:
        total += check_files(files, language, disk_mb)
    if total > MAX_JOB_BYTES:
        raise BadJob(f"the job is {total / 2**20:.1f} MiB (code, tests, cases and files); at most "
                     f"{MAX_JOB_BYTES >> 20} MiB")
