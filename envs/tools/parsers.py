"""Reading tool calls out of what a model wrote; the parser is chosen per model family.

    parser = get_parser("hermes")          # Qwen2.5/3, Hermes, many others: <tool_call>{json}</tool_call>
    parsed = parser.parse(reply)           # ParsedReply(content=..., calls=(ToolCall(...), ...))
    parser.format_call("python", {"code": "1 + 1"})   # how this family writes a call

``hermes`` reads every ``<tool_call>...</tool_call>`` block: a JSON object with ``name`` and
``arguments`` (an object, or a JSON string of one, as OpenAI sends them); an unclosed block or
one that is not such an object is a *malformed* call (``ToolCall.error`` says why) that the
episode answers with an error message. ``openai`` reads a reply that is itself JSON in
OpenAI's shapes: ``{"name", "arguments"}``, a list of those, or ``{"tool_calls": [{"id",
"type": "function", "function": {"name", "arguments"}}]}`` (optionally in a ```json fence);
a reply that starts like one but does not parse is malformed. `register_parser` adds a family.

A reply with no call is the episode's final answer; its ``content`` is what the verifier reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Union, runtime_checkable

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.S)


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it. ``error``: set when it could not be read (malformed)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""
    error: Optional[str] = None
    raw: str = ""

    @property
    def malformed(self) -> bool:
        return self.error is not None

    def openai(self) -> dict[str, Any]:
        """The call in OpenAI's message form (``arguments`` as a JSON string)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(dict(self.arguments), ensure_ascii=False)}}


@dataclass(frozen=True)
class ParsedReply:
    """A reply split into its text (``content``) and its tool calls, in the order written."""

    content: str
    calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class ToolCallParser(Protocol):
    """What an env needs of a model family's tool-call format."""

    name: str

    def parse(self, text: str) -> ParsedReply:
        """The calls in ``text`` (malformed ones with ``error`` set) and the text around them."""
        ...

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """A well-formed call as this family writes it (reference episodes, corpora, tests)."""
        ...


def read_call(obj: Any, raw: str) -> ToolCall:
    """A call from a decoded JSON object (``{"name", "arguments"}`` or OpenAI's ``{"function": {...}}``)."""
    if isinstance(obj, Mapping) and isinstance(obj.get("function"), Mapping):
        call_id = obj.get("id") if isinstance(obj.get("id"), str) else ""
        obj = {**obj["function"], "id": call_id}
    if not isinstance(obj, Mapping):
        return ToolCall("", error=f"a tool call must be a JSON object, got {type(obj).__name__}", raw=raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", error='a tool call needs a "name" (a string)', raw=raw)
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(name, error=f'"arguments" is a string that is not JSON ({exc.msg})', raw=raw)
    if not isinstance(args, Mapping):
        return ToolCall(name, error=f'"arguments" must be a JSON object, got {type(args).__name__}', raw=raw)
    call_id = obj.get("id") if isinstance(obj.get("id"), str) else ""
    return ToolCall(name, dict(args), call_id, raw=raw)


def _loads(text: str) -> tuple[Any, Optional[str]]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen2.5, Qwen3)."""

    name = "hermes"

    def parse(self, text: str) -> ParsedReply:
        calls: list[ToolCall] = []
        for match in _BLOCK.finditer(text):
            body = match.group(1).strip()
            obj, error = _loads(body)
            calls.append(ToolCall("", error=error, raw=match.group(0)) if error else read_call(obj, match.group(0)))
        rest = _BLOCK.sub("", text)
        if OPEN in rest:   # opened and never closed: a call the model did not finish
            at = rest.index(OPEN)
            calls.append(ToolCall("", error=f"{OPEN} was opened but never closed with {CLOSE}", raw=rest[at:]))
            rest = rest[:at]
        return ParsedReply(rest.strip(), tuple(calls))

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
        return f"{OPEN}\n{body}\n{CLOSE}"


class OpenAIJsonParser:
    """A reply that is OpenAI-shaped JSON: one call, a list of calls, or ``{"tool_calls": [...]}``."""

    name = "openai"

    def parse(self, text: str) -> ParsedReply:
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        if not body.startswith(("{", "[")):
            return ParsedReply(text.strip())
        obj, error = _loads(body)
        if error:
            looks_like_call = re.match(r'^[\[{]\s*(\{\s*)?"(name|tool_calls|function|type|id)"', body)
            if not looks_like_call:
                return ParsedReply(text.strip())
            return ParsedReply("", (ToolCall("", error=error, raw=body),))
        if isinstance(obj, Mapping) and isinstance(obj.get("tool_calls"), list):
            items = obj["tool_calls"]
            content = obj.get("content") if isinstance(obj.get("content"), str) else ""
        elif isinstance(obj, Mapping) and ("name" in obj or "function" in obj):
            items, content = [obj], ""
        elif isinstance(obj, list) and obj and all(isinstance(o, Mapping) and ("name" in o or "function" in o)
                                                   for o in obj):
            items, content = obj, ""
        else:
            return ParsedReply(text.strip())   # JSON, but an answer, not a call
        return ParsedReply(content.strip(), tuple(read_call(o, json.dumps(o, ensure_ascii=False)) for o in items))

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        return json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)


ParserFactory = Callable[[], ToolCallParser]
PARSERS: dict[str, ParserFactory] = {"hermes": HermesParser, "qwen": HermesParser, "openai": OpenAIJsonParser}


def register_parser(name: str, factory: ParserFactory) -> None:
    """Make ``get_parser(name)`` return ``factory()`` (a model family's own format)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a parser name must be a non-empty str, got {name!r}")
    PARSERS[name] = factory


def get_parser(spec: Union[str, ToolCallParser]) -> ToolCallParser:
    """The parser named ``spec`` (``hermes``, ``qwen``, ``openai``, or one registered), or ``spec`` itself."""
    if isinstance(spec, str):
        if spec not in PARSERS:
            raise ValueError(f"unknown tool-call parser {spec!r}; known: {', '.join(sorted(PARSERS))} "
                             "(register_parser(name, factory) adds one)")
        return PARSERS[spec]()
    if not isinstance(spec, ToolCallParser):
        raise TypeError(f"parser must be a name or have parse(text) and format_call(name, arguments), "
                        f"got {type(spec).__name__}")
    return spec


__all__ = ["HermesParser", "OpenAIJsonParser", "PARSERS", "ParsedReply", "ToolCall", "ToolCallParser", "get_parser",
           "read_call", "register_parser"]
