"""Jobs, results and session cells as JSON: the one wire format of the service and `RemoteSandbox`.

A `Job` travels as an object of its fields: ``files`` values are text, or
``{"base64": "..."}`` for bytes; ``limits`` is an object of `Limits` fields (missing
ones take their defaults); ``cases`` a list of ``[stdin, expected]`` pairs. Decoding is
strict: an unknown field, a wrong type or a bad value is a `BadJob` whose message names
the field (``jobs[3].limits.cpu_s``), because a job the service guessed at would be
judged on something its sender never asked for.

A `Result` travels as its fields; bytes (fetched files) as base64 text.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import asdict, fields
from typing import Any, Mapping, Optional

from .errors import BadJob
from .session import CellResult, SessionLimits
from .types import CaseResult, Job, Limits, Result

JOB_FIELDS = tuple(f.name for f in fields(Job))
LIMIT_FIELDS = tuple(f.name for f in fields(Limits))
SESSION_LIMIT_FIELDS = tuple(f.name for f in fields(SessionLimits))


# --------------------------------------------------------------------------- jobs

def job_to_dict(job: Job) -> dict:
    """The job as JSON-ready data; `job_from_dict` gives it back equal."""
    out: dict[str, Any] = {"language": job.language, "code": job.code}
    if job.tests is not None:
        out["tests"] = job.tests
    if job.cases is not None:
        out["cases"] = [list(c) for c in job.cases]
    if job.files is not None:
        out["files"] = {p: c if isinstance(c, str) else {"base64": base64.b64encode(c).decode()}
                        for p, c in job.files.items()}
    if job.limits is not None:
        out["limits"] = asdict(job.limits)
    if job.stop_on_first_failure:
        out["stop_on_first_failure"] = True
    for name in JOB_FIELDS:   # fields added to Job later travel as they are (plain data)
        if name not in out and name not in ("tests", "cases", "files", "limits", "stop_on_first_failure"):
            value = getattr(job, name)
            if value is not None:
                out[name] = list(value) if isinstance(value, tuple) else value
    return out


def job_from_dict(data: object, where: str = "job") -> Job:
    """A `Job` from its JSON form; `BadJob` naming ``where`` and the field for anything wrong."""
    if not isinstance(data, Mapping):
        raise BadJob(f"{where} must be an object with the fields of a Job, got {type(data).__name__}")
    unknown = sorted(set(data) - set(JOB_FIELDS))
    if unknown:
        raise BadJob(f"{where}.{unknown[0]} is not a Job field; the fields are {', '.join(JOB_FIELDS)}")
    for name in ("language", "code"):
        if name not in data:
            raise BadJob(f"{where}.{name} is missing: a job needs a language and its code")
    kwargs = dict(data)
    if kwargs.get("files") is not None:
        kwargs["files"] = _files(kwargs["files"], f"{where}.files")
    if kwargs.get("limits") is not None:
        kwargs["limits"] = limits_from_dict(kwargs["limits"], f"{where}.limits")
    try:
        return Job(**kwargs)
    except BadJob as exc:
        raise BadJob(f"{where}: {exc}") from None
    except TypeError as exc:
        raise BadJob(f"{where}: {exc}") from None


def limits_from_dict(data: object, where: str) -> Limits:
    return _record(Limits, LIMIT_FIELDS, data, where)


def session_limits_from_dict(data: object, where: str) -> SessionLimits:
    return _record(SessionLimits, SESSION_LIMIT_FIELDS, data, where)


def _record(cls: Any, names: tuple[str, ...], data: object, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise BadJob(f"{where} must be an object of {cls.__name__} fields, got {type(data).__name__}")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise BadJob(f"{where}.{unknown[0]} is not a {cls.__name__} field; the fields are {', '.join(names)}")
    try:
        return cls(**data)
    except BadJob as exc:
        raise BadJob(f"{where}: {exc}") from None


def _files(data: object, where: str) -> dict[str, object]:
    if not isinstance(data, Mapping):
        raise BadJob(f"{where} must be an object of path -> text or {{\"base64\": ...}}, got {type(data).__name__}")
    out: dict[str, object] = {}
    for path, content in data.items():
        if isinstance(content, Mapping) and set(content) == {"base64"}:
            out[path] = b64decode(content["base64"], f"{where}[{path!r}].base64")
        elif isinstance(content, str):
            out[path] = content
        else:
            raise BadJob(f"{where}[{path!r}] must be text or {{\"base64\": ...}}, got {type(content).__name__}")
    return out


def b64decode(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise BadJob(f"{where} must be base64 text, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadJob(f"{where} is not valid base64: encode the file's bytes with base64") from None


# --------------------------------------------------------------------------- results

def result_to_dict(result: Result) -> dict:
    out = asdict(result)
    if out.get("files") is not None:
        out["files"] = {p: None if c is None else base64.b64encode(c).decode() for p, c in out["files"].items()}
    return out


def result_from_dict(data: Mapping[str, Any]) -> Result:
    """A `Result` from `result_to_dict`'s form; KeyError/TypeError/ValueError when it is not one."""
    raw = dict(data)
    raw["cases"] = tuple(CaseResult(**c) for c in raw.get("cases") or ())
    if raw.get("files") is not None:
        raw["files"] = {p: None if c is None else base64.b64decode(c) for p, c in raw["files"].items()}
    return Result(**raw)


def cell_to_dict(cell: CellResult) -> dict:
    return asdict(cell)


def cell_from_dict(data: Mapping[str, Any]) -> CellResult:
    return CellResult(**dict(data))


def optional_str(value: object, where: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise BadJob(f"{where} must be a string, got {type(value).__name__}")
    return value


__all__ = ["job_to_dict", "job_from_dict", "limits_from_dict", "session_limits_from_dict", "result_to_dict",
           "result_from_dict", "cell_to_dict", "cell_from_dict", "b64decode", "JOB_FIELDS"]
