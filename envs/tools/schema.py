"""Tools as OpenAI-style function schemas: what a tool declares, what one call returns.

A `Tool` has a ``name``, a ``description`` and ``parameters`` (a JSON schema of type
``object``); ``schema()`` is the form chat templates take (``apply_chat_template(...,
tools=[...])``) and OpenAI's API uses::

    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}

``call(arguments, context)`` runs it once; ``context`` is the episode's (its task, the
tool's own state such as a sandbox session, the time this call may take). A plain Python
function becomes a tool with `FunctionTool` (its schema read from its signature and its
docstring's ``Args:`` section, as transformers' ``get_json_schema`` reads them).

Arguments are checked against the schema before a call (`check_arguments`): the subset
of JSON schema that function schemas use (type, properties, required,
additionalProperties, enum, items). A problem is a message the model reads, naming the
argument, never an exception.
"""

from __future__ import annotations

import inspect
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Optional, Union, get_args, get_origin, get_type_hints

from ..core.types import Task

ToolStatus = Literal["ok", "error", "timeout", "infra_error"]
TOOL_STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "infra_error")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")   # OpenAI's rule for function names

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
                               "array": (list, tuple), "object": Mapping, "null": type(None)}
_PY_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array",
                             tuple: "array", dict: "object", type(None): "null"}


@dataclass(frozen=True)
class ToolOutput:
    """What one call gave: ``content`` is what the model reads in the tool message.

    ``status``: "ok"; "error" (the tool ran and reports a failure, e.g. the code raised);
    "timeout" (the call ran out of time); "infra_error" (the machinery behind the tool
    failed: the episode is not judged, never scored wrong)."""

    content: str
    status: ToolStatus = "ok"

    def __post_init__(self) -> None:
        if self.status not in TOOL_STATUSES:
            raise ValueError(f"ToolOutput.status must be one of {', '.join(TOOL_STATUSES)}, got {self.status!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"ToolOutput.content must be a str, got {type(self.content).__name__}")


class ToolContext:
    """One episode's side of its tools: the task, each tool's own state, this call's time."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.state: dict[str, Any] = {}     # a tool's per-episode state, under its name
        self.timeout_s: float = 10.0        # what the current call may take (set before each call)


class Tool(ABC):
    """A function the model may call. Subclass and implement ``call``; ``end_episode`` frees
    what the tool holds for one episode (a session), ``close`` what it holds for good."""

    name: str = ""
    description: str = ""
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema (what ``apply_chat_template(tools=...)`` renders)."""
        check_tool(self)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}

    @abstractmethod
    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        """Run once with checked ``arguments``; within ``context.timeout_s``. Never raises for
        what the model wrote (that is an "error" output)."""

    def end_episode(self, context: ToolContext) -> None:
        """Release this episode's state (``context.state[self.name]``)."""

    def close(self) -> None:
        """Release what the tool holds across episodes (a sandbox it started)."""


def check_tool(tool: Tool) -> None:
    """A tool's declaration is usable: a valid name, a description, an object schema."""
    if not isinstance(tool.name, str) or not NAME_PATTERN.match(tool.name):
        raise ValueError(f"tool name {tool.name!r} must be 1-64 letters, digits, '_' or '-' (OpenAI's rule)")
    if not isinstance(tool.description, str):
        raise ValueError(f"tool {tool.name!r}: description must be a str")
    params = tool.parameters
    if not isinstance(params, Mapping) or params.get("type") != "object":
        raise ValueError(f"tool {tool.name!r}: parameters must be a JSON schema of type 'object' "
                         f"({{'type': 'object', 'properties': {{...}}, 'required': [...]}}), got {params!r:.120}")
    props = params.get("properties", {})
    missing = [r for r in params.get("required", []) if r not in props]
    if missing:
        raise ValueError(f"tool {tool.name!r}: required argument(s) {missing} are not in its properties")


def check_arguments(schema: Mapping[str, Any], arguments: Any, where: str = "arguments") -> Optional[str]:
    """None when ``arguments`` fit ``schema``; else what is wrong, naming the argument."""
    expected = schema.get("type")
    if expected is not None:
        kinds = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(arguments, k) for k in kinds):
            return f"{where} must be of type {' or '.join(kinds)}, got {_json_type(arguments)}"
    if "enum" in schema and arguments not in schema["enum"]:
        return f"{where} must be one of {list(schema['enum'])}, got {arguments!r:.80}"
    if isinstance(arguments, Mapping):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in arguments:
                return f"missing required argument {name!r}" + ("" if where == "arguments" else f" in {where}")
        if schema.get("additionalProperties") is False or (where == "arguments" and props):
            extra = sorted(set(arguments) - set(props))
            if extra:
                return f"unknown argument {extra[0]!r}; the arguments are {', '.join(props) or 'none'}"
        for name, value in arguments.items():
            if name in props:
                problem = check_arguments(props[name], value, repr(name) if where == "arguments" else f"{where}.{name}")
                if problem:
                    return problem
    if isinstance(arguments, (list, tuple)) and isinstance(schema.get("items"), Mapping):
        for i, value in enumerate(arguments):
            problem = check_arguments(schema["items"], value, f"{where}[{i}]")
            if problem:
                return problem
    return None


def _is_type(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(kind, object))


def _json_type(value: Any) -> str:
    return _PY_TYPES.get(type(value), "object" if isinstance(value, Mapping) else type(value).__name__)


# ---------------------------------------------------------------------------- plain functions as tools

class FunctionTool(Tool):
    """A Python function as a tool (TRL's ``tools=[fn]``): it runs in this process, in a thread
    of its own, given ``timeout_s``; a call past it is answered "timeout" (the thread is left to
    finish: a function tool must not hold anything another episode needs). What it returns is
    shown as ``str(value)``; an exception it raises is an "error" output."""

    def __init__(self, fn: Callable[..., Any], name: Optional[str] = None,
                 description: Optional[str] = None, parameters: Optional[Mapping[str, Any]] = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionTool takes a function, got {type(fn).__name__}")
        self.fn = fn
        read = function_schema(fn) if parameters is None or description is None else None
        self.name = name or fn.__name__
        self.description = description if description is not None else read["description"]  # type: ignore[index]
        self.parameters = parameters if parameters is not None else read["parameters"]  # type: ignore[index]
        check_tool(self)

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = self.fn(**arguments)
            except Exception as exc:  # noqa: BLE001 - the model's call failed: it reads why
                box["error"] = f"{type(exc).__name__}: {exc}"

        worker = threading.Thread(target=run, name=f"proctor-tool-{self.name}", daemon=True)
        worker.start()
        worker.join(context.timeout_s)
        if worker.is_alive():
            return ToolOutput(f"Error: {self.name} did not finish within {context.timeout_s:g} s", "timeout")
        if "error" in box:
            return ToolOutput(f"Error: {box['error']}", "error")
        value = box.get("value")
        return ToolOutput(value if isinstance(value, str) else str(value))


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{"description", "parameters"}`` of ``fn``: types from its annotations, the description from
    its docstring's first paragraph, each argument's from the docstring's ``Args:`` lines."""
    doc = inspect.getdoc(fn) or ""
    head, _, rest = doc.partition("\nArgs:")
    arg_docs = dict(re.findall(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", rest, re.M))
    hints = get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name not in hints:
            raise ValueError(f"tool function {fn.__name__}: argument {name!r} has no type annotation; annotate "
                             "it (str, int, float, bool, list, dict) so its JSON schema can be written")
        prop = _type_schema(hints[name], f"{fn.__name__}({name})")
        if name in arg_docs:
            prop["description"] = arg_docs[name].strip()
        props[name] = prop
        if param.default is param.empty:
            required.append(name)
    return {"description": " ".join(head.split("\n\n")[0].split()),
            "parameters": {"type": "object", "properties": props, "required": required}}


def _type_schema(hint: Any, where: str) -> dict[str, Any]:
    origin = get_origin(hint)
    if origin is Union:
        kinds = [a for a in get_args(hint) if a is not type(None)]
        if len(kinds) == 1:
            return _type_schema(kinds[0], where)
    if origin in (list, tuple):
        items = get_args(hint)
        return {"type": "array", **({"items": _type_schema(items[0], where)} if items else {})}
    if origin is dict:
        return {"type": "object"}
    if origin is Literal:
        return {"type": _PY_TYPES[type(get_args(hint)[0])], "enum": list(get_args(hint))}
    if hint in _PY_TYPES:
        return {"type": _PY_TYPES[hint]}
    raise ValueError(f"tool function {where}: type {hint!r} has no JSON schema here; use str, int, float, bool, "
                     "list[...], dict, Literal[...] or Optional[...] of these")


def as_tool(tool: Union[Tool, Callable[..., Any]]) -> Tool:
    """A `Tool` as is; a plain function as a `FunctionTool`."""
    return tool if isinstance(tool, Tool) else FunctionTool(tool)


__all__ = ["FunctionTool", "Tool", "ToolContext", "ToolOutput", "ToolStatus", "TOOL_STATUSES", "as_tool",
           "check_arguments", "check_tool", "function_schema"]
