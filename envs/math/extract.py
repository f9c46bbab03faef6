"""Find the final answer in a free-form completion.

Cascade (mode ``"auto"``), on the text after the last ``</think>`` and before the
first end-of-turn token (``<|im_end|>``, ``</s>``, ...):

1. the last ``\\boxed{}``/``\\fbox{}``/``\\boxed X`` (also a misspelt box command a reader
   still reads, ``\\beginboxed{5}``), unless a final statement ("Final Answer: The
   largest $n$ is 34.", "答案：...", "Réponse : ...") comes after it;
2. the last ``<answer>...</answer>``;
3. the last final statement ("the (final) answer is X", "Answer: X", "#### X", and
   their French, German, Spanish, Russian and Chinese forms), reduced to its value;
4. the whole text when it is a bare answer (short, no prose: ``x^2+2x+1``, ``$[0,1)$``);
5. the later of the last math segment and the last number (long prose only).

Each named mode runs just that one step. ``choice=True`` (a multiple-choice gold)
reads the option letter instead (``prose.choice``).

Why the LAST answer: models revise themselves ("\\boxed{31}. Wait, that is wrong ...
\\boxed{28}") and repeat themselves (a run of boxes, then the final one); Math-Verify
joins every box into one set and so fails correct final answers. Boxes written as parts
of one sentence, joined by a connective ("\\boxed{1} and \\boxed{2}", "\\boxed{3} or
\\boxed{4}", "y_1 = \\boxed{..}, y_2 = \\boxed{..}"), are one answer and are joined into a
list, so a hedge between two values never matches a single gold. Boxes with nothing
but space or delimiters between them are separate attempts: the last one is the
answer. ``Extraction.group`` keeps every box of that run joined, and is what a gold of
several values (a list, tuple or set) is compared with (``matcher.extract_for``).

``<think>`` without ``</think>`` is an unfinished reasoning (no answer), unless a
complete ``<answer>...</answer>`` follows it: tags are an answer position.
``strict=True`` accepts only an answer in the mode's format at the very end of the
completion (``strict.py``).

Nothing here parses mathematics: this runs for every completion and must stay cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Optional

from .bignum import big_number
from .normalize import scan_group
from .prose import (bare, choice, cut_turn, decimal_comma, first_choice, last_math_segment, last_number_at,
                    looks_like_code, statement_value)
from .strict import answer_line, chat_debris, ends_text, model_turn, tag_content_ok

MODES = ("auto", "boxed", "tags", "answer_is", "last_number")
MAX_ANSWER_CHARS = 1000   # longer "answers" are garbage or attacks: too_complex
MAX_DEPTH = 64            # bracket nesting deeper than this is too_complex

# \\boxed, \\fbox, and a box command with letters glued in front (\\beginboxed{..}).
_BOX_RE = re.compile(r"\\(?:[A-Za-z]*boxed|fbox)(?![A-Za-z])")
# Between two boxes that form one answer: little text, no revision ("wait", "no"), and
# either nothing but punctuation or a connective ("and", ",", "y_2 =", "for part (a) and").
_GAP_MAX = 60
_REVISION_RE = re.compile(r"\b(?:wait|wrong|actually|no|not|but|however|mistake|instead|sorry|hmm|oops|"
                          r"recheck|re-check|correct(?:ion|ed)?|redo|double-check)\b", re.IGNORECASE)
_CONNECTIVE_RE = re.compile(r"[,;&=]|\b(?:and|or|maybe|perhaps|possibly|equivalently|i\.e)\b", re.IGNORECASE)
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_ANSWER_IS_RE = re.compile(
    r"(?:answer\s*(?:is\b|:)|answer\s*\**\s*:|####|答案\s*(?:是|为|為)?\s*[:：]?|"
    r"r[ée]ponse\s*(?:est\b|:)|antwort\s*(?:ist\b|:)|respuesta\s*(?:es\b|:)|risposta\s*(?:è\b|:)|"
    r"ответ\s*(?:[:：]|—|-)?)\s*\**\s*[:：]?\s*(?:is\b\s*:?)?\s*",
    re.IGNORECASE)
_DIGITS_RE = re.compile(r"\d+")
_SENTENCE_END_RE = re.compile(r"\.(?=\s|$)|\n|。")


@dataclass(frozen=True)
class Extraction:
    """What was found. ``answer`` is None when there is nothing usable; ``reason`` says
    why ("no_answer", "truncated", "unclosed_think", "too_complex")."""

    answer: Optional[str]
    source: str = "none"      # boxed | tags | answer_is | bare | math | last_number | choice | none
    reason: str = ""          # no_answer | truncated | unclosed_think | too_complex | format
    group: Optional[str] = None   # every box of the final run joined, when there are several


def extract_answer(completion: str, mode: str = "auto") -> Optional[str]:
    """The final answer of ``completion`` as a string, or None (see ``extract`` for why)."""
    return extract(completion, mode).answer


def extract(completion: str, mode: str = "auto", *, choice: bool = False, strict: bool = False) -> Extraction:
    """Find the final answer; never raises for any completion text. ``strict``: only an
    answer in the mode's format that ends the completion counts (``strict.py``)."""
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}: use one of {', '.join(MODES)}")
    if strict and mode == "last_number":
        raise ValueError("strict extraction needs an answer format: use mode auto, boxed, tags or answer_is "
                         "with strict=True ('last_number' has no format to check)")
    if not isinstance(completion, str):
        completion = "" if completion is None else str(completion)
    text = _after_think(completion)
    if text is None or (strict and "<think>" in completion and "</think>" not in completion):
        # The reasoning never finished (cut at the length limit): a box inside it is
        # a draft, not the model's final answer.
        return Extraction(None, "none", "unclosed_think")
    if strict:
        turn = model_turn(text)
        return Extraction(None, "none", "format") if chat_debris(turn) else _capped(_strict(turn, mode))
    text = cut_turn(text)
    if mode != "auto":
        steps = {"boxed": _boxed, "tags": _tags, "answer_is": _answer_is, "last_number": _last_number}
        found = steps[mode](text)
        return _capped(found) if found is not None else Extraction(None, "none", "no_answer")
    if choice:
        return _choice(text)
    for step in (_box_or_statement, _tags, _answer_is, _bare, _prose_tail):
        found = step(text)
        if found is not None:
            return _capped(found)
    return Extraction(None, "none", "no_answer")


def _after_think(text: str) -> Optional[str]:
    """The text after the last ``</think>``; the text from the last ``<answer>`` when a
    ``<think>`` never closes but a complete ``<answer>...</answer>`` follows it; None
    when the reasoning never finished and no answer follows."""
    end_think = text.rfind("</think>")
    if end_think >= 0:
        return text[end_think + len("</think>"):]
    think = text.find("<think>")
    if think < 0:
        return text
    tag = text.rfind(_ANSWER_OPEN)
    if tag > think and text.find(_ANSWER_CLOSE, tag) > 0:
        return text[tag:]
    return None


def _strict(text: str, mode: str) -> Extraction:
    """The answer in the mode's format at the very end of ``text`` (auto: any of the
    three), or reason "format" (or the box's own "truncated"/"too_complex")."""
    if mode in ("auto", "boxed"):
        found = _boxed_at(text)
        if found is not None and (found[0].answer is None or ends_text(text, found[1])):
            if found[0].answer is not None or mode == "boxed":
                return found[0]
    if mode in ("auto", "tags"):
        close = text.rfind(_ANSWER_CLOSE)
        open_at = text.rfind(_ANSWER_OPEN, 0, max(close, 0))
        if 0 <= open_at < close and ends_text(text, close + len(_ANSWER_CLOSE)):
            inner = text[open_at + len(_ANSWER_OPEN):close]
            found = _tags(text[open_at:])
            if found is not None and found.answer is not None and tag_content_ok(inner, _BOX_RE):
                return found
    if mode in ("auto", "answer_is"):
        value = answer_line(text)
        boxed = _boxed_at(value) if value else None
        if boxed is not None:           # Answer: \boxed{5}: the box must end the line too
            cleaned = boxed[0].answer if ends_text(value, boxed[1]) else None
        else:
            cleaned = _clean(decimal_comma(value)) if value else None
        if cleaned:
            return Extraction(cleaned, "answer_is")
    return Extraction(None, "none", "format")


def gold_text(gold: str) -> str:
    """The answer inside a gold written as prose or boxed; a plain gold is kept as is."""
    s = gold.strip()
    whole = bare(s)
    if whole is not None and "\\boxed" not in s and "\\fbox" not in s:
        return decimal_comma(whole) if whole == s else whole
    if len(s) > MAX_ANSWER_CHARS and big_number(s) is not None:
        return s                   # a long number: the prose scans below would only cost time
    found = extract(s)
    if found.answer:
        return found.group or found.answer     # a gold's boxes are all part of it
    if found.reason == "truncated" and found.source == "boxed":
        # A gold is never cut by a length limit: an unclosed box runs to the end.
        start = [m.end() for m in _BOX_RE.finditer(s)][-1]
        return s[start:].strip().lstrip("{").strip()
    return s


def nesting_depth(s: str) -> int:
    """Deepest bracket nesting in ``s`` ({[( counted alike; escaped \\{ counts too)."""
    openers = s.count("{") + s.count("[") + s.count("(")
    if openers <= 1:
        return openers             # no nesting possible: skip the character loop
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
    """True when an answer is too long or too deeply nested to be worth parsing. A plain
    decimal literal may be longer (``bignum.py`` compares it exactly in linear time)."""
    if len(answer) > MAX_ANSWER_CHARS:
        return big_number(answer) is None
    return too_deep(answer)


def too_deep(s: str) -> bool:
    """``nesting_depth(s) > MAX_DEPTH``, without the character loop when ``s`` has too
    few opening brackets to nest that deep (nearly every answer)."""
    if s.count("{") + s.count("[") + s.count("(") <= MAX_DEPTH:
        return False
    return nesting_depth(s) > MAX_DEPTH


def _capped(found: Extraction) -> Extraction:
    if found.answer is not None and too_complex(found.answer):
        return Extraction(None, found.source, "too_complex")
    return found


# --- boxes and final statements ---------------------------------------------------

def _box_or_statement(text: str) -> Optional[Extraction]:
    found = _boxed_at(text)
    if found is None:
        return None
    box, box_end = found
    said = _answer_is_at(text, after=box_end)
    if said is not None:
        return said[0]            # a final statement after the last box is the answer
    return box


def _boxed(text: str) -> Optional[Extraction]:
    found = _boxed_at(text)
    return found[0] if found is not None else None


def _boxed_at(text: str) -> Optional[tuple[Extraction, int]]:
    """The answer of the final boxes, and where they end: the last box, joined with the
    boxes before it that a connective ties to it (one answer in parts, or a hedge);
    ``group`` joins every box of the final run when untied boxes precede it."""
    marks = [(m.start(), m.end()) for m in _BOX_RE.finditer(text)]
    if not marks:
        return None
    spans: list[tuple[int, int, str, bool]] = []   # (start, end, content, tied to the next), last first
    for start, pos in reversed(marks):
        got = _box_content(text, pos)
        if got is None:
            if not spans:
                # The last box never closes: the completion was cut mid-answer.
                return Extraction(None, "boxed", "truncated"), len(text)
            break
        content, end = got
        if content == "__too_deep__":
            if spans:
                break
            return Extraction(None, "boxed", "too_complex"), end
        if spans and end > spans[-1][0]:
            break                # \boxed{\boxed{5}}: the inner box already is the answer
        tie = _tie(text[end:spans[-1][0]]) if spans else 2
        if not tie:
            break
        spans.append((start, end, content.strip(), tie == 2))
        if len(spans) >= 16:
            break
    tied = 1
    while tied < len(spans) and spans[tied][3]:
        tied += 1
    answer = ", ".join(c for _, _, c, _ in reversed(spans[:tied]) if c)
    every = ", ".join(c for _, _, c, _ in reversed(spans) if c)
    if not answer:
        return Extraction(None, "boxed", "no_answer"), spans[0][1]
    return Extraction(answer, "boxed", group=every if every != answer else None), spans[0][1]


def _tie(gap: str) -> int:
    """How ``gap``, the text between two boxes, ties them: 2 a connective ("and", ",",
    "y_2 =": parts of one answer, or a hedge), 1 nothing but space and delimiters
    (separate attempts, the later one counts), 0 not at all (prose, a revision)."""
    if len(gap) > _GAP_MAX or "\n\n" in gap or _REVISION_RE.search(gap):
        return 0
    if _CONNECTIVE_RE.search(gap):
        return 2
    plain = re.sub(r"\\[A-Za-z]+|\\.|[${}()\s.+]|\\", "", gap)
    return 0 if plain else 1


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
    found = _answer_is_at(text)
    return found[0] if found is not None else None


def _answer_is_at(text: str, after: int = 0) -> Optional[tuple[Extraction, str]]:
    """The last final statement that starts at or after ``after`` and states a value:
    (its answer, the statement's raw text)."""
    # Only the tail can hold the final statement; scanning all of a 30k-char
    # reasoning trace for every completion would cost more than the match itself.
    offset = max(0, len(text) - 4000, after)
    tail = text[offset:]
    for tried, m in enumerate(_markers_last_first(tail)):
        if tried >= _MAX_MARKERS:
            return None           # "answer is" repeated without a value: garbage, not worth a scan
        statement = _statement_after(tail, m.end())     # None: cut inside a formula
        answer = _stated(statement) if statement is not None else None
        if answer:
            return Extraction(answer, "answer_is"), statement
    return None


_MAX_MARKERS = 8
_MARKER_WORDS = ("answer", "####", "答案", "réponse", "reponse", "antwort", "respuesta", "risposta", "ответ")


def _markers_last_first(tail: str) -> Iterator[re.Match]:
    """The answer markers of ``tail``, last first. ``str.rfind`` finds the candidates
    (a regex scan of 4k chars with this many alternatives costs ~20x more)."""
    low = tail.lower()
    if len(low) != len(tail):          # a character whose lower case is longer: positions shift
        yield from reversed(list(_ANSWER_IS_RE.finditer(tail)))
        return
    pos = len(low) + 1
    while True:
        best = -1
        for k in _MARKER_WORDS:            # a plain loop: no generator per completion
            at = low.rfind(k, 0, pos - 1 + len(k))
            if at > best:
                best = at
        pos = best
        if pos < 0:
            return
        m = _ANSWER_IS_RE.match(tail, pos)
        if m is not None:
            yield m


def _statement_after(text: str, pos: int) -> Optional[str]:
    """The final statement that starts at ``pos``: to its sentence end or closing math
    delimiter, within 2,000 characters (a run of digits may go on: a long number)."""
    rest = text[pos:pos + 2 * MAX_ANSWER_CHARS]
    if len(rest) == 2 * MAX_ANSWER_CHARS and rest[-1].isdigit():
        more = _DIGITS_RE.match(text, pos + len(rest))
        rest += more.group(0) if more else ""
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(open_):
            end = rest.find(close, len(open_))
            return None if end < 0 else rest[:end + len(close)]   # None: cut inside the formula
    m = _SENTENCE_END_RE.search(rest)
    return rest[:m.start()] if m else rest


def _stated(statement: str) -> Optional[str]:
    """The cleaned value of a final statement (a decimal comma only outside math)."""
    value = statement_value(statement)
    if not value:
        return None
    return _clean(decimal_comma(value) if "$" not in statement and "\\" not in statement else value)


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


# --- bare answers, prose, choices --------------------------------------------------

def _bare(text: str) -> Optional[Extraction]:
    whole = bare(text)
    if not whole or looks_like_code(whole):
        return None               # print(4), os.system('ls') or 4: code, not an answer
    return Extraction(decimal_comma(whole) if whole == text.strip().rstrip(".") else whole, "bare")


def _prose_tail(text: str) -> Optional[Extraction]:
    """Long prose: the later of its last math segment and its last number. Text that
    reads as code is not prose: a number it ends in is no answer position."""
    if looks_like_code(text[-2000:]):
        return None
    number = last_number_at(text)
    seg = last_math_segment(text[-4000:])
    if seg is not None:
        seg_end = len(text) - min(len(text), 4000) + seg[0]
        if number is None or seg_end >= number[1]:
            return Extraction(seg[1], "math")
    if number is None:
        return None
    return Extraction(number[0], "last_number")


def _choice(text: str) -> Extraction:
    """The option letter (a multiple-choice gold): boxed, stated, bare, or written alone."""
    box = _boxed(text)
    if box is not None and box.answer:
        return Extraction(box.answer, "boxed")
    tail = text[-4000:]
    last = next(_markers_last_first(tail), None)
    if last is not None:
        statement = _statement_after(tail, last.end()) or tail[last.end():]
        letter = first_choice(statement)
        if letter:
            return Extraction(letter, "choice")
    whole = bare(text)
    if whole:
        return Extraction(whole, "bare")         # "\\mathrm{E}*2" is not the choice E
    letter = choice(text.strip())
    return Extraction(letter, "choice") if letter else Extraction(None, "none", "no_answer")


# --- last number -------------------------------------------------------------------

def _last_number(text: str) -> Optional[Extraction]:
    found = last_number_at(text)
    return Extraction(found[0], "last_number") if found is not None else None
