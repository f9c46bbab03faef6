"""Find the final answer in a free-form completion.

Cascade (mode ``"auto"``): the last ``\\boxed{}``/``\\fbox{}``/``\\boxed X`` after the
last ``</think>``; else the last ``<answer>...</answer>``; else the last "the (final)
answer is X" / "Answer: X" / "#### X"; else the last number. Each named mode runs
just that one step.

Why the LAST answer: models revise themselves ("\\boxed{31}. Wait, that is wrong ...
\\boxed{28}"); Math-Verify joins every box into one set and so fails correct final
answers. Boxes written back to back ("\\boxed{2} and \\boxed{3}") are one answer and are
joined into a list, so a hedge between two values never matches a single gold.

Nothing here parses mathematics: this runs for every completion and must stay cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .normalize import scan_group

MODES = ("auto", "boxed", "tags", "answer_is", "last_number")
MAX_ANSWER_CHARS = 1000   # longer "answers" are garbage or attacks: too_complex
MAX_DEPTH = 64            # bracket nesting deeper than this is too_complex

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Between two boxes that form one answer: spaces, punctuation, $, "and"/"or".
_BOX_JOINER_RE = re.compile(
    r"^(?:\s|[$,;.&=~]|\\[,;:!]|\\quad|\\qquad|\\text\{|\}|\\\(|\\\)|\\\[|\\\]"
    r"|\b(?:and|or|maybe|perhaps|possibly|equivalently|i\.e)\b)*$", re.IGNORECASE)
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_ANSWER_IS_RE = re.compile(
    r"(?:answer\s*(?:is\b|:)|answer\s*\**\s*:|####)\s*\**\s*:?\s*(?:is\b\s*:?)?\s*",
    re.IGNORECASE)
# A minus sign counts only where it cannot be subtraction ("3-5" ends in 5, not -5).
_NUMBER_RE = re.compile(r"(?:(?<![\w)\]}])-)?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)|\n")


@dataclass(frozen=True)
class Extraction:
    """What was found. ``answer`` is None when there is nothing usable; ``reason`` says
    why ("no_answer", "truncated", "unclosed_think", "too_complex")."""

    answer: Optional[str]
    source: str = "none"      # boxed | tags | answer_is | last_number | none
    reason: str = ""


def extract_answer(completion: str, mode: str = "auto") -> Optional[str]:
    """The final answer of ``completion`` as a string, or None (see ``extract`` for why)."""
    return extract(completion, mode).answer


def extract(completion: str, mode: str = "auto") -> Extraction:
    """Find the final answer; never raises for any completion text."""
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}: use one of {', '.join(MODES)}")
    if not isinstance(completion, str):
        completion = "" if completion is None else str(completion)
    text = completion
    end_think = text.rfind("</think>")
    if end_think >= 0:
        text = text[end_think + len("</think>"):]
    elif "<think>" in text:
        # The reasoning never finished (cut at the length limit): a box inside it is
        # a draft, not the model's final answer.
        return Extraction(None, "none", "unclosed_think")

    steps = {"boxed": _boxed, "tags": _tags, "answer_is": _answer_is, "last_number": _last_number}
    order = ["boxed", "tags", "answer_is", "last_number"] if mode == "auto" else [mode]
    for name in order:
        found = steps[name](text)
        if found is not None:
            return _capped(found)
    return Extraction(None, "none", "no_answer")


def nesting_depth(s: str) -> int:
    """Deepest bracket nesting in ``s`` ({[( counted alike; escaped \\{ counts too)."""
    depth = best = 0
    for ch in s:
        if ch in "{[(":
            depth += 1
            if depth > best:
                best = depth
        elif ch in "}])" and depth > 0:
            depth -= 1
    return best


def too_complex(answer: str) -> bool:
    """True when an answer is too long or too deeply nested to be worth parsing."""
    return len(answer) > MAX_ANSWER_CHARS or nesting_depth(answer) > MAX_DEPTH


def _capped(found: Extraction) -> Extraction:
    if found.answer is not None and too_complex(found.answer):
        return Extraction(None, found.source, "too_complex")
    return found


# --- boxes -------------------------------------------------------------------------

def _boxed(text: str) -> Optional[Extraction]:
    starts = [m.end() for m in _BOX_RE.finditer(text)]
    if not starts:
        return None
    spans: list[tuple[int, int, str]] = []   # (box start, box end, content), last first
    for i in range(len(starts) - 1, -1, -1):
        got = _box_content(text, starts[i])
        if got is None:
            if not spans:
                # The last box never closes: the completion was cut mid-answer.
                return Extraction(None, "boxed", "truncated")
            break
        content, end = got
        if content == "__too_deep__":
            if spans:
                break
            return Extraction(None, "boxed", "too_complex")
        box_start = starts[i] - len("\\boxed") if text[starts[i] - 1] == "d" else starts[i] - len("\\fbox")
        if spans and end > spans[-1][0]:
            break                # \boxed{\boxed{5}}: the inner box already is the answer
        if spans and not _BOX_JOINER_RE.match(text[end:spans[-1][0]]):
            break
        spans.append((box_start, end, content.strip()))
        if len(spans) >= 16:
            break
    parts = [c for _, _, c in reversed(spans) if c]
    if not parts:
        return Extraction(None, "boxed", "no_answer")
    return Extraction(", ".join(parts), "boxed")


def _box_content(text: str, pos: int) -> Optional[tuple[str, int]]:
    """Content of the box whose command ends at ``pos`` and the index after it;
    None when the braces never close. ``\\boxed 5`` takes one token."""
    n = len(text)
    i = pos
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return None
    if text[i] != "{":
        m = re.match(r"[^\s$]+", text[i:])
        if not m:
            return None
        return m.group(0).rstrip(".,;"), i + m.end()
    close, deepest = scan_group(text, i)
    if close < 0:
        return None
    # Deeper than MAX_DEPTH: the box is skipped whole without keeping its content.
    return ("__too_deep__" if deepest > MAX_DEPTH else text[i + 1:close]), close + 1


# --- <answer> tags -----------------------------------------------------------------

def _tags(text: str) -> Optional[Extraction]:
    open_at = text.rfind(_ANSWER_OPEN)
    if open_at < 0:
        return None
    close_at = text.find(_ANSWER_CLOSE, open_at)
    if close_at < 0:
        return Extraction(None, "tags", "truncated")
    inner = text[open_at + len(_ANSWER_OPEN):close_at]
    boxed = _boxed(inner)
    if boxed is not None and boxed.answer is not None:
        return Extraction(boxed.answer, "tags")
    said = _answer_is(inner)
    answer = said.answer if said is not None else _strip_math(inner)
    if not answer:
        return Extraction(None, "tags", "no_answer")
    return Extraction(answer, "tags")


# --- "the answer is X" -------------------------------------------------------------

def _answer_is(text: str) -> Optional[Extraction]:
    # Only the tail can hold the final statement; scanning all of a 30k-char
    # reasoning trace for every completion would cost more than the match itself.
    tail = text[-4000:]
    matches = list(_ANSWER_IS_RE.finditer(tail))
    for m in reversed(matches):
        answer = _answer_after(tail, m.end())
        if answer:
            return Extraction(answer, "answer_is")
    return None


def _answer_after(text: str, pos: int) -> Optional[str]:
    rest = text[pos:pos + 2 * MAX_ANSWER_CHARS]
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(open_):
            end = rest.find(close, len(open_))
            if end < 0:
                return None   # cut inside the formula: truncated
            return _clean(rest[len(open_):end])
    m = _SENTENCE_END_RE.search(rest)
    return _clean(rest[:m.start()] if m else rest)


def _clean(s: str) -> Optional[str]:
    s = _strip_math(s).strip().strip("*").strip()
    s = s.rstrip(".,;:!").strip()
    return s or None


def _strip_math(s: str) -> str:
    s = s.strip()
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_) and s.endswith(close) and len(s) >= len(open_) + len(close):
            return s[len(open_):len(s) - len(close)].strip()
    return s


# --- last number -------------------------------------------------------------------

def _last_number(text: str) -> Optional[Extraction]:
    # Look at a growing tail so a long trace is not scanned when the end has a number.
    size = 512
    while True:
        tail = text[-size:]
        found = None
        for m in _NUMBER_RE.finditer(tail):
            found = m.group(0)
        if found is not None and (size >= len(text) or tail.rfind(found) > 64):
            return Extraction(found.rstrip("."), "last_number")
        if size >= len(text):
            return None
        size *= 4
