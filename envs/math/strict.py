"""Strict answer formats: what ``extract(..., strict=True)`` accepts.

Some reward functions pay only for an answer written in one format, at the end: a box
(DAPO's strict box, SkyRL), ``<answer>`` tags (R1-style templates), or a final
``Answer: X`` line (Minerva, lm-eval). With ``strict=True`` the answer must be in the
mode's format (auto: any of the three) and end the model's turn: only closing math
delimiters, ``**`` and a full stop may follow it. The turn ends at its first complete
end-of-turn token (``<|im_end|>``, ``</s>``, ``<|eot_id|>``, ...), as a chat template
ends it; template tokens it starts with are dropped. Anything else is rejected with the
reason "format": trailing text, a broken token (``im_end|>``, ``<|eot_id``), another
special token inside the turn, a ``<think>`` that never closes.

These helpers only test strings; ``extract._strict`` applies them to the boxes and
tags it finds.
"""

from __future__ import annotations

import re
from typing import Optional, Pattern

from .normalize import scan_group
from .prose import bare, cut_turn

# <|im_end|>, <|endoftext|>, <｜end▁of▁sentence｜>, </s>, <eos>, <end_of_turn>: any special
# token a chat template or tokenizer writes, not just the end-of-turn ones.
_CHAT_TOKEN_RE = re.compile(r"<\|[^|<>\n]{1,40}\|>|<｜[^｜<>\n]{1,40}｜>|</?s>|<eos>|<pad>|<(?:start|end)_of_turn>")
_LEADING_TOKEN_RE = re.compile(r"\s*(?:" + _CHAT_TOKEN_RE.pattern + r")")
# What may follow the answer: space, closing $ / \] / \), markdown bold, a full stop.
_TAIL_RE = re.compile(r"(?:\s|\$|\\\]|\\\)|\*\*|\.|。)*")
_ANSWER_LINE_RE = re.compile(r"(?:\*\*)?(?:final\s+)?answer\s*(?:\*\*)?\s*[:：]\s*(.+?)|#{4}\s*(.+?)", re.IGNORECASE)


def model_turn(text: str) -> str:
    """``text`` up to its first complete end-of-turn token, without the template
    tokens it starts with (``<|im_start|>``)."""
    turn = cut_turn(text)
    while True:
        m = _LEADING_TOKEN_RE.match(turn)
        if m is None:
            return turn
        turn = turn[m.end():]


def chat_debris(text: str) -> bool:
    """True when ``text`` (a model turn) holds a chat-template or tokenizer special token."""
    return _CHAT_TOKEN_RE.search(text) is not None


def ends_text(text: str, end: int) -> bool:
    """True when nothing but closing delimiters, space and a full stop follows ``end``."""
    return _TAIL_RE.fullmatch(text, end) is not None


def answer_line(text: str) -> Optional[str]:
    """The value of the completion's last non-empty line when that line is
    ``Answer: X`` (also ``Final Answer:``, ``**Answer:**``, ``答案：``-style colon) or
    ``#### X``, and X is an answer alone (no prose); else None."""
    stripped = text.rstrip()
    last = stripped[stripped.rfind("\n") + 1:].strip()
    m = _ANSWER_LINE_RE.fullmatch(last)
    if m is None:
        return None
    value = (m.group(1) or m.group(2)).strip().strip("*").strip().rstrip(".").strip()
    return bare(value) if value else None


def tag_content_ok(inner: str, box_re: Pattern[str]) -> bool:
    """True when the content of ``<answer>...</answer>`` is the answer alone: a bare
    answer, or one box with nothing but math delimiters around it."""
    s = inner.strip()
    while s.startswith(("$", "\\[", "\\(")):
        s = s[2:].lstrip() if s.startswith(("\\[", "\\(")) else s[1:].lstrip()
    m = box_re.match(s)
    if m is None:
        return bare(inner) is not None
    brace = m.end() + len(s[m.end():]) - len(s[m.end():].lstrip())
    if brace >= len(s) or s[brace] != "{":
        return False
    close, _ = scan_group(s, brace)
    return close >= 0 and ends_text(s, close + 1)
