"""Pull the program out of a model's completion.

Models wrap code in Markdown fences, think before answering, get cut off at the
token limit and sometimes answer with bare code. ``extract_code`` handles all of
these and never raises for anything the completion contains: a completion it
cannot read yields ``None`` (the verifier scores that 0 without running it).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import Optional

from proctor.pyast import parse

MODES = ("last", "first", "all", "longest")
FALLBACKS = ("parse", "whole", "none")

# Tags that name each language. A C++ task also takes ```c blocks (C is nearly always
# valid C++), but only after its own tags and untagged blocks.
_TAGS: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3", "py3"}),
    "cpp": frozenset({"cpp", "c++", "cxx", "cc", "hpp", "cplusplus"}),
    "c": frozenset({"c", "h"}),
    "java": frozenset({"java"}),
    "go": frozenset({"go", "golang"}),
    "rust": frozenset({"rust", "rs"}),
    "javascript": frozenset({"javascript", "js", "node", "nodejs", "mjs", "cjs"}),
}
_COMPATIBLE: dict[str, tuple[str, ...]] = {"python": (), "cpp": ("c",), "c": (), "java": (), "go": (), "rust": (),
                                           "javascript": ()}
_ALIASES = {"py": "python", "python3": "python", "c++": "cpp", "cxx": "cpp", "golang": "go", "rs": "rust",
            "js": "javascript", "node": "javascript", "nodejs": "javascript"}

_OPEN = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_THINK_END = "</think>"
# Bare C/C++ is accepted only when it opens like a source file: there is no parser to ask.
_C_START = re.compile(r"^\s*(#\s*(include|define|pragma)\b|using\s+namespace\b|int\s+main\s*\()")
_START = {"c": _C_START, "cpp": _C_START,
          "java": re.compile(r"^\s*(import\s+[\w.]+(\.\*)?\s*;"
                             r"|(public\s+|final\s+|abstract\s+)*(class|interface|record|enum)\s)"),
          "go": re.compile(r"^\s*package\s+\w+"),
          "rust": re.compile(r"^\s*(use\s+[\w:]+|(pub\s+)?fn\s+\w+|#!?\[|(pub\s+)?(struct|enum|impl|mod)\s)"),
          "javascript": re.compile(r"^\s*(['\"]use strict['\"]|(const|let|var|function|class|async\s+function)\s)")}


@dataclass(frozen=True)
class Block:
    """One fenced block: its tag (lower case, '' when untagged) and its text."""

    tag: str
    text: str
    closed: bool


def normalize_language(language: str) -> str:
    """'python', 'c', 'cpp', 'java', 'go', 'rust' or 'javascript' (also 'py', 'c++', 'js', ...); else ValueError."""
    key = str(language).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _TAGS:
        raise ValueError("language must be one of python, c, cpp, java, go, rust, javascript "
                         f"(or py, c++, golang, rs, js); got {language!r}")
    return key


def after_thinking(completion: str) -> str:
    """The answer part: text after the last ``</think>``, or all of it when there is none."""
    at = completion.rfind(_THINK_END)
    return completion if at < 0 else completion[at + len(_THINK_END):]


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block in order, CommonMark-style: a closing fence uses the same
    character, at least as many of it, and nothing else on its line. A block still open
    at the end (a truncated completion) counts, marked ``closed=False``."""
    blocks: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])   # no backtick after the tag: "```x```" is inline code
        if m is None:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        tag = _tag(m.group("info"))
        body: list[str] = []
        closed = False
        i += 1
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            # Some models glue the closing fence onto the last code line: `return x```.
            if fence[0] == "`" and line.rstrip().endswith(fence) and stripped != fence:
                body.append(line.rstrip()[: -len(fence)])
                closed = True
                break
            body.append(_dedent_fence(line, indent))
            i += 1
        i += 1
        blocks.append(Block(tag=tag, text=_trim(body), closed=closed))
    return blocks


def extract_code(completion: str, language: str = "python", mode: str = "last", *,
                 fallback: str = "parse") -> Optional[str]:
    """The program in ``completion``, or ``None`` when there is none.

    Blocks tagged with the task's language are preferred, then untagged ones (then,
    for C++, ``c`` blocks); blocks tagged with another language (``bash``, ``text``)
    are never taken. ``mode``: ``last`` (the final answer usually comes last),
    ``first``, ``all`` (every chosen block joined in order, for answers split into
    pieces) or ``longest``. With no fence at all, ``fallback`` decides: ``parse``
    takes the whole answer when it is code (Python: it parses and is more than a bare
    name or constant; other languages: it opens like a source file), ``whole`` takes it as is,
    ``none`` gives ``None``.
    """
    lang = normalize_language(language)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}; got {fallback!r}")
    if not isinstance(completion, str):
        return None
    text = after_thinking(completion)
    blocks = fenced_blocks(text)
    if not blocks:
        return _fallback(text, lang, fallback)
    for tier in _tiers(lang):
        chosen = [b.text for b in blocks if b.tag in tier and b.text.strip()]
        if chosen:
            return _pick(chosen, mode)
    return None


def python_parses(source: str) -> bool:
    """Whether ``source`` is valid Python, without printing warnings or raising."""
    return _parse_python(source) is not None


# --------------------------------------------------------------------------- helpers

def _tag(info: str) -> str:
    # Info strings come as "python", "Python3 title=x", "{.python}", "py:main.py".
    word = re.split(r"[\s,:;{}]+", info.strip().lstrip("{").lstrip("."), maxsplit=1)[0]
    return word.lower().lstrip(".")


def _tiers(lang: str) -> list[frozenset[str]]:
    tiers = [_TAGS[lang], frozenset({""})]
    tiers.extend(_TAGS[other] for other in _COMPATIBLE[lang])
    return tiers


def _dedent_fence(line: str, indent: int) -> str:
    # An indented fence (inside a list item) indents its content by as much; undo only that.
    cut = 0
    while cut < indent and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


def _trim(lines: list[str]) -> str:
    # Leading blank lines go, leading indentation stays: a function body continuation
    # starts indented and must keep it.
    while lines and not lines[0].strip():
        lines = lines[1:]
    return "\n".join(lines).rstrip() + ("\n" if any(x.strip() for x in lines) else "")


def _pick(texts: list[str], mode: str) -> str:
    if mode == "first":
        return texts[0]
    if mode == "all":
        return "\n\n".join(t.rstrip("\n") for t in texts) + "\n"
    if mode == "longest":
        # Ties go to the later block, as in "last".
        return max(reversed(texts), key=lambda t: len(t.strip()))
    return texts[-1]


def _fallback(text: str, lang: str, fallback: str) -> Optional[str]:
    if not text.strip() or fallback == "none":
        return None
    if fallback == "whole":
        return text
    if lang == "python":
        tree = _parse_python(text)
        if tree is None or not tree.body or all(_trivial(stmt) for stmt in tree.body):
            return None   # "Sure" or "42" parse, but they are prose, not a program
        return text
    return text if _START[lang].match(text) else None


def _trivial(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Name, ast.Constant, ast.Attribute))


def _parse_python(source: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # SyntaxWarning for "\d" and the like
            return parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


__all__ = ["Block", "MODES", "FALLBACKS", "after_thinking", "extract_code", "fenced_blocks",
           "normalize_language", "python_parses"]
