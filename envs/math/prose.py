"""Reading answers out of prose: bare answers, final statements, choices, math segments.

Helpers of ``extract.py``; like it, nothing here parses mathematics.

* A *bare* answer is a short text that is all answer (``x^2+2x+1``, ``$[0,1)$``,
  ``(11,7)or(7,11)``, ``odd``): it is read whole, as Math-Verify does, so the
  last-number fallback never turns ``\\frac{1+\\sqrt5}{2}`` into ``2``.
* A *final statement* ("Final Answer: The largest $n$ is 34.", "答案：...") is reduced
  to the value it states: the whole statement when it is bare, else what follows
  its last "is"/"="/"est"/..., else its first math segment or first number.
* A *choice* is the option letter of a multiple-choice answer ("D. it can't be A or
  B" chose D; "... therefore I think it's B" chose B).
* *Code* (``print(4)``, ``__import__('os').system('ls') or 4``) is not an answer, and
  neither is the number it ends in: ``looks_like_code`` keeps such text out of the
  bare and last-number readings, which have no answer marker to rely on.
"""

from __future__ import annotations

import re
from typing import Optional

# Chat-template tokens that end a turn: what follows is not the model's answer.
END_OF_TURN = ("<|im_end|>", "<|im_start|>", "<|eot_id|>", "<|endoftext|>", "</s>", "<|end|>",
               "<end_of_turn>", "<｜end▁of▁sentence｜>")
BARE_MAX_CHARS = 240
# Words of three or more letters that are prose, not math: outside commands and \text{}.
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_TEXT_ARG_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname|textit|mathbf)\s*\{[^{}]*\}")
_BEGIN_END_RE = re.compile(r"\\(?:begin|end)\s*\{[A-Za-z*]+\}")
_MATH_WORDS = {"and", "or", "sqrt", "frac", "pmatrix", "bmatrix", "matrix", "infty", "sin", "cos", "tan",
               "cot", "sec", "csc", "log", "exp", "mod", "bmod", "pmod", "gcd", "lcm", "max", "min", "lim",
               "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "deg", "det", "dfrac", "tfrac",
               "percent", "percentage", "pct", "per", "cent"}      # 50 percent is a value (notation.percent_word)
# An escaped \$ is a dollar sign, not a delimiter.
_MATH_SEGMENT_RE = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]",
                              re.S)
# Letters of other scripts (CJK, Arabic, Cyrillic, ...) are prose; Greek letters are math.
_FOREIGN_RE = re.compile(r"[^\W\d_A-Za-z\u0370-\u03ff]+")
_FOREIGN_TAIL_RE = re.compile(r"\s*[^\W\d_A-Za-z\u0370-\u03ff]+[\s.。]*$")     # "(\\frac{2}{5}) 吨"
_LETTERS_RE = re.compile(r"[^\W\d_]")
_SINGLE_BRACKET_RE = re.compile(r"\[([^\[\],;]*)\]")
# "is", "=", and their counterparts in the languages Math-Verify's users grade in.
_STATES_RE = re.compile(r"(?:\s(?:is|are|equals|est|sont|ist|sind|es|son|é|è|равно|равен|равна)\s|=|是|为|為|：|:)",
                        re.IGNORECASE)
_NUMBER_RUN_RE = re.compile(r"[-+]?(?:\\[A-Za-z]+|[\d{}()^_./+\-*]|\s)*\d(?:\\[A-Za-z]+|[\d{}()^_./+\-*]|,\d)*")
# A multiple-choice option with its text: "(D) Alina", "C Cecile".
OPTION_RE = re.compile(r"\s*\(?([A-J])\)?[.:)]?\s+[A-Z][^\n]*(?:\n.*)?", re.S)
_LEAD_CHOICE_RE = re.compile(r"^\s*\(?([A-J])\)?(?:[.:)\]。，,:\s]|(?=[^\x00-\x7f])|$)")
# A capital letter standing alone, or any letter in parentheses: "D", "(D)", "(c)".
_CHOICE_RE = re.compile(r"\(([A-Ja-j])\)|(?<![A-Za-z'])([A-J])(?![A-Za-z'])")


# Signs of program text that math prose does not have: a code fence, a dunder name, an
# import or def, a lambda, a call of a Python builtin or of a dotted name written the way
# code writes it (no space before the parenthesis), an augmented assignment.
_CODE_RE = re.compile(
    r"```|__[A-Za-z]\w*__|^\s*(?:import\s+\w|from\s+[\w.]+\s+import\b|def\s+\w+\s*\()|\blambda\b[^:\n]{0,40}:"
    r"|\b(?:print|exec|eval|open|input|exit|quit|compile|getattr|setattr|globals|locals|breakpoint)\("
    r"|(?<![\\\w.])[A-Za-z_]\w*\.[A-Za-z_]\w*\(|\w\s*(?:\+=|-=|\*=|//=)", re.MULTILINE)


def looks_like_code(text: str) -> bool:
    """True when ``text`` reads as program code rather than an answer or math prose."""
    return _CODE_RE.search(text) is not None


def cut_turn(text: str) -> str:
    """``text`` up to the first end-of-turn token that follows some content."""
    best = len(text)
    for tok in END_OF_TURN:
        at = text.find(tok)
        while at >= 0 and not text[:at].strip():
            at = text.find(tok, at + len(tok))
        if 0 <= at < best:
            best = at
    return text[:best]


def math_only(s: str) -> Optional[str]:
    """The content when ``s`` is exactly one math segment ($..$, $$..$$, \\(..\\), \\[..\\])."""
    s = s.strip()
    m = _MATH_SEGMENT_RE.fullmatch(s)
    if m is None:
        return None
    inner = next(g for g in m.groups() if g is not None)
    if (m.group(2) is not None or m.group(3) is not None) and "\n" in inner:
        return None           # inline math never spans lines: "$ \n 9 \n $" is not a formula
    return inner.strip()


def prose_words(s: str) -> int:
    """How many prose words ``s`` holds (math commands, \\text{} and short names not counted)."""
    s = _BEGIN_END_RE.sub(" ", _TEXT_ARG_RE.sub(" ", s))
    foreign = sum(len(w) for w in _FOREIGN_RE.findall(s))
    return sum(1 for w in _WORD_RE.findall(s) if w.lower() not in _MATH_WORDS) + foreign


def bare(text: str) -> Optional[str]:
    """The whole text when it is nothing but an answer, else None."""
    s = text.strip()
    if not s or len(s) > BARE_MAX_CHARS:
        return None
    single = _SINGLE_BRACKET_RE.fullmatch(s)
    if single is not None and single.group(1).strip():
        s = single.group(1).strip()      # "[45 degrees]": one value in brackets (Geometry3K style)
    if s.startswith("**") and s.endswith("**"):
        s = s.strip("*").strip()         # markdown bold: **42**
    inner = math_only(s)
    if inner is not None:
        return inner or None
    if "$" in s and s.count("$") % 2 == 0 and not s.startswith("$"):
        return None           # prose with a formula in it: "Therefore $x > 5$ is the solution"
    words = prose_words(s) if _LETTERS_RE.search(s) else 0
    if "\n" in s or words > 1:
        return None
    if words == 1 and len(s.split()) > 1:
        return None           # "no idea", "12 apples": a word among others is prose (or a unit)
    return s.rstrip(".")


def last_math_segment(text: str) -> Optional[tuple[int, str]]:
    """(end position, content) of the last math segment in ``text``."""
    found = None
    for m in _MATH_SEGMENT_RE.finditer(text):
        raw = next(g for g in m.groups() if g is not None)
        inline = m.group(2) is not None or m.group(3) is not None
        if raw.strip() and not (inline and "\n" in raw) and prose_words(raw) <= 1:
            found = (m.end(), raw.strip())
    return found


def statement_value(statement: str) -> Optional[str]:
    """The value a final statement states ("The largest $n$ is 34." -> "34")."""
    s = statement.strip().strip("*\"'`\u201c\u201d").strip()
    if s.endswith('\\') or s.startswith('\\"'):
        s = s.strip('\\"').strip()       # \"$12$ and $13$\": quotes escaped in a JSON dump
    whole = bare(s)
    if whole is not None:
        return whole
    if OPTION_RE.fullmatch(s):
        return s
    states = list(_STATES_RE.finditer(s[:4 * BARE_MAX_CHARS]))
    for m in reversed(states[-4:]):        # the value follows one of the last few "is"
        rest = bare(_FOREIGN_TAIL_RE.sub("", s[m.end():].strip().rstrip(".")))
        if rest is not None and rest.strip():
            return rest
    seg = _MATH_SEGMENT_RE.search(s)
    if seg is not None:
        inner = next(g for g in seg.groups() if g is not None).strip()
        if inner:
            return inner
    run = _NUMBER_RUN_RE.search(s)
    return run.group(0).strip().lstrip(")]}").strip() if run else None


def choice(text: str) -> Optional[str]:
    """The option letter a completion chose, or None."""
    m = _LEAD_CHOICE_RE.match(text)
    if m:
        return m.group(1)
    letters = [a or b for a, b in _CHOICE_RE.findall(text[-2000:])]
    return letters[-1].upper() if letters else None


def first_choice(statement: str) -> Optional[str]:
    """The first option letter of a final statement ("for sure D, it can't be A")."""
    m = _CHOICE_RE.search(statement)
    return (m.group(1) or m.group(2)).upper() if m else None


# --- numbers in prose ------------------------------------------------------------

# A minus sign counts only where it cannot be subtraction ("3-5" ends in 5, not -5).
NUMBER_RE = re.compile(r"(?:(?<![\w)\]}])-)?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?(?:,\d{1,2}(?![\d,]))?")
# 2,74 / 0,111 / 1000,99: a decimal comma; 1,2 and 7,425,000 are not.
DECIMAL_COMMA_RE = re.compile(r"[-+]?(?:0,\d{2,}|\d+,\d{2}|\d{4,},\d+)")


def decimal_comma(s: str) -> str:
    """``2,74`` / ``0,111`` / ``1000,99`` in plain text are decimals (1,2 stays a list);
    callers pass only text that was not inside math delimiters."""
    return s.replace(",", ".") if DECIMAL_COMMA_RE.fullmatch(s) else s


def _blank_broken_inline(text: str) -> str:
    """``text`` with every inline formula that spans a line break ($..$, \\(..\\)) blanked
    out, same length. One linear pass: a regex for this backtracks quadratically."""
    if "\n" not in text or ("$" not in text and "\\(" not in text):
        return text
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("$$", i):
            close = text.find("$$", i + 2)
            i = n if close < 0 else close + 2           # display math may span lines
            continue
        if text[i] == "$" and (i == 0 or text[i - 1] != "\\"):
            close, end = _inline_close(text, i + 1, "$"), 1
        elif text.startswith("\\(", i):
            close, end = text.find("\\)", i + 2), 2
        else:
            i += 1
            continue
        if close < 0:
            return "".join(out)
        if "\n" in text[i:close]:
            out[i:close + end] = " " * (close + end - i)
        i = close + end
    return "".join(out)


def _inline_close(text: str, start: int, mark: str) -> int:
    """Index of the next unescaped ``mark`` from ``start``, or -1."""
    j = text.find(mark, start)
    while j > 0 and text[j - 1] == "\\":
        j = text.find(mark, j + 1)
    return j


def last_number_at(text: str) -> Optional[tuple[str, int]]:
    """(the last number written in ``text``, the index where it ends), or None."""
    # Look at a growing tail so a long trace is not scanned when the end has a number.
    # Inline math broken across lines ("$ \n 9 \n $") is not read (Math-Verify's rule too).
    text = _blank_broken_inline(text)
    size = 512
    while True:
        tail = text[-size:]
        found = None
        for found in NUMBER_RE.finditer(tail):
            pass
        if found is not None and (size >= len(text) or found.start() > 64):
            end = len(text) - len(tail) + found.end()
            return decimal_comma(found.group(0).rstrip(".")), end
        if size >= len(text):
            return None
        size *= 4
