"""Canonical strings for answers: the cheapest tier of the matcher.

Two answers whose canonical strings are equal are equal. The rules only remove
notation that never changes a value: display commands (``\\dfrac``, ``\\left``),
spacing (``\\,`` ``\\!`` ``~``), thousands separators (``{,}``, ``1,000``), wrappers
(``\\text{}``, ``\\mathrm{}``, ``$``), degree signs, dollar signs and trailing unit
words. A percent sign (or the word: ``50 percent``) is kept as a trailing ``%`` so the
number tier can apply its policy (see ``numbers.py``). Python's notation (``2**10``,
``sqrt(2)``, ``pi``) is written in LaTeX first (``notation.py``).
"""

from __future__ import annotations

import re

from .notation import percent_word, python_notation

# Commands whose argument is the answer itself (\text{north} is north).
_WRAPPERS = ("text", "textbf", "textit", "textrm", "textsf", "texttt", "textup", "textnormal",
             "mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathnormal", "mbox", "hbox",
             "operatorname", "boldsymbol", "bm", "emph", "underline", "fbox", "boxed")
_WRAPPER_RE = re.compile(r"\\(" + "|".join(_WRAPPERS) + r")\s*\{")
_SIZING_RE = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|big|Big|bigg|Bigg)"
                        r"(?![A-Za-z])\s*")
_INVISIBLE_DELIM_RE = re.compile(r"\\(?:left|right)\s*\.")
_SPACING_RE = re.compile(r"\\\\|\\[,;:! ]|\\(?:quad|qquad|thinspace|enspace|medspace|thickspace|negthinspace)"
                         r"(?![A-Za-z])|~")
_DROP_RE = re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![A-Za-z])")
_DEGREE_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ(?![A-Za-z])|°|\\degree(?![A-Za-z])")
_SYNONYMS = [
    (re.compile(r"\\(?:d|t|c)frac(?![A-Za-z])"), r"\\frac"),
    (re.compile(r"\\(?:d|t)binom(?![A-Za-z])"), r"\\binom"),
    (re.compile(r"\\le(?![A-Za-z])|\\leqslant(?![A-Za-z])"), r"\\leq"),
    (re.compile(r"\\ge(?![A-Za-z])|\\geqslant(?![A-Za-z])"), r"\\geq"),
    (re.compile(r"\\ne(?![A-Za-z])"), r"\\neq"),
    (re.compile(r"\\lt(?![A-Za-z])"), "<"),
    (re.compile(r"\\gt(?![A-Za-z])"), ">"),
    (re.compile(r"\\lbrace(?![A-Za-z])"), r"\\{"),
    (re.compile(r"\\rbrace(?![A-Za-z])"), r"\\}"),
    (re.compile(r"\\lbrack(?![A-Za-z])"), "["),
    (re.compile(r"\\rbrack(?![A-Za-z])"), "]"),
    (re.compile(r"\\(?:lvert|rvert|vert)(?![A-Za-z])"), "|"),
    (re.compile(r"\\(?:varnothing)(?![A-Za-z])|\\\{\s*\\\}"), r"\\emptyset"),
    (re.compile(r"\\infinity(?![A-Za-z])"), r"\\infty"),
    (re.compile(r"\\(?:ldots|cdots|dots)(?![A-Za-z])"), "..."),
    (re.compile(r"\\colon(?![A-Za-z])"), ":"),
    (re.compile(r"\\mathbb\s*\{?\s*R\s*\}?|\\R(?![A-Za-z])"), r"(-\\infty,\\infty)"),   # all reals
    (re.compile(r"(?<![A-Za-z\\])(?:infinity|inf)(?![A-Za-z])"), r"\\infty"),
    (re.compile(r"\u2212"), "-"),
    (re.compile(r"\u2264"), r"\\leq "),
    (re.compile(r"\u2265"), r"\\geq "),
    (re.compile(r"\u2260"), r"\\neq "),
    (re.compile(r"\\wedge(?![A-Za-z])"), r"\\land "),
    (re.compile(r"\u00d7"), r"\\times"),
    (re.compile(r"\u03c0"), r"\\pi"),
    (re.compile(r"\u221e"), r"\\infty"),
]
_INFINITY_RE = re.compile(r"(?<![A-Za-z\\])(?:infinity|inf)(?![A-Za-z])")
_UNICODE_SYNONYMS = [(p, r) for p, r in _SYNONYMS if p.pattern.startswith("\\u")]
# The text each LaTeX synonym's regex cannot match without (an ``in`` test costs far
# less than a regex pass that finds nothing). A synonym missing here fails at import.
_SYNONYM_TRIGGERS = {
    r"\\(?:d|t|c)frac(?![A-Za-z])": ("frac",),
    r"\\(?:d|t)binom(?![A-Za-z])": ("binom",),
    r"\\le(?![A-Za-z])|\\leqslant(?![A-Za-z])": ("\\le",),
    r"\\ge(?![A-Za-z])|\\geqslant(?![A-Za-z])": ("\\ge",),
    r"\\ne(?![A-Za-z])": ("\\ne",),
    r"\\lt(?![A-Za-z])": ("\\lt",),
    r"\\gt(?![A-Za-z])": ("\\gt",),
    r"\\lbrace(?![A-Za-z])": ("\\lbrace",),
    r"\\rbrace(?![A-Za-z])": ("\\rbrace",),
    r"\\lbrack(?![A-Za-z])": ("\\lbrack",),
    r"\\rbrack(?![A-Za-z])": ("\\rbrack",),
    r"\\(?:lvert|rvert|vert)(?![A-Za-z])": ("vert",),
    r"\\(?:varnothing)(?![A-Za-z])|\\\{\s*\\\}": ("\\varnothing", "\\{"),
    r"\\infinity(?![A-Za-z])": ("\\infinity",),
    r"\\(?:ldots|cdots|dots)(?![A-Za-z])": ("dots",),
    r"\\colon(?![A-Za-z])": ("\\colon",),
    r"\\mathbb\s*\{?\s*R\s*\}?|\\R(?![A-Za-z])": ("\\mathbb", "\\R"),
    r"\\wedge(?![A-Za-z])": ("\\wedge",),
}
_LATEX_SYNONYMS = [(p, r, _SYNONYM_TRIGGERS[p.pattern]) for p, r in _SYNONYMS
                   if not p.pattern.startswith("\\u") and "infinity|inf" not in p.pattern]
_LETTER_RE = re.compile(r"[A-Za-z]")
# Malformed but common: \frac12, \frac1{x}, \sqrt2.
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_HALF_RE = re.compile(r"\\frac\s*(\d)\s*\{")
_FRAC_DEN_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*(\d+|[A-Za-z](?![A-Za-z]))")
_MIXED_SPACE_RE = re.compile(r"(?<![\d.])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])")
_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# "or" between values, also unspaced next to brackets or digits: (11,7)or(7,11), W(x)=1orW(x)=-1.
_OR_RE = re.compile(r"\s+(?i:or)\s+|(?<=[)\]\d])\s*or(?=[(\[A-Z])")
# MATH's thousands separator: 1,\!000 and 11,\! 111 (also {,}\!).
_MATH_THOUSANDS_RE = re.compile(r"(\d)(?:\{,\}|,)\\!\s*(?=\d{3}(?!\d))")
_TRAILING_BACKSLASH_RE = re.compile(r"(?<!\\)\\\s*$")
# A command written with a doubled backslash (\\frac, from JSON escaped twice).
_DOUBLED_RE = re.compile(r"\\\\(?=(?:d|t)?frac|sqrt|left|right|le|ge|leq|geq|neq|pi|cdot|times|text|boxed|infty"
                         r"|in|cup|cap|pm|mathrm|mathbf|circ|dots|ldots)(?![a-z]*\s*&)")
# "and" lists values (roots 1 and 2) but intersects inequalities (x > 1 and x < 3):
# it becomes its own separator so the matcher can tell the two apart.
_AND_RE = re.compile(r"\s+and\s+", re.IGNORECASE)
_SPACE_RE = re.compile(r"\s")

# Units that may follow any math (4\pi cm^2). One-letter units (m, s, h) are only
# dropped after a plain number: after other math they are usually variables.
_UNITS = ("cm|mm|km|meters?|metres?|centimeters?|millimeters?|kilometers?|inch|inches|ft|feet|foot|"
          "yd|yards?|miles?|kg|grams?|kilograms?|mg|lbs?|pounds?|oz|ounces?|tons?|sec|secs|seconds?|"
          "mins?|minutes?|hrs?|hours?|days?|weeks?|months?|years?|mph|kmph|kph|km/h|m/s|"
          "dollars?|cents?|euros?|degrees?|deg|radians?|units?|liters?|litres?|ml|mL|gallons?|"
          "cups?|square|sq|cubic|percent|people|persons?|students?")
_UNIT_TAIL_RE = re.compile(r"^(?P<body>.*?\S)\s+(?P<unit>(?:(?:square|sq\.?|cubic)\s+)?(?:" + _UNITS +
                           r")(?:\s*\^\s*\{?\s*[23]\s*\}?)?(?:\s*(?:per|/)\s*[A-Za-z]+)?)\s*\.?$")
_ONE_LETTER_UNITS = {"m", "s", "h", "g", "l"}
_WORDS_TAIL_RE = re.compile(r"^(?P<body>.*?[^\s])\s+(?P<words>[A-Za-z][A-Za-z'\-]*(?:\^\{?\d\}?)?"
                            r"(?:\s+[A-Za-z][A-Za-z'\-]*(?:\^\{?\d\}?)?)*)\s*\.?$")
_MATH_WORDS = {"or", "and", "pi", "i", "e", "sqrt", "infty", "to", "x", "y", "z", "n", "k", "ln", "log",
               "sin", "cos", "tan", "mod", "is", "are"}
_WS_RE = re.compile(r"(\\[A-Za-z]+)?\s+(?=([A-Za-z])?)")


def normalize(answer: str) -> str:
    """The canonical string of an answer (idempotent; never raises for a str).

    Each family of rules runs only when its trigger character is present: most
    answers are plain numbers, and this runs twice for every completion."""
    s = answer.strip()
    if "**" in s or "sqrt" in s or "pi" in s:
        s = python_notation(s)
    if "\\" in s:
        s = _latex_rules(s)
    elif "~" in s:
        s = s.replace("~", " ")
    s = _strip_delimiters(s) if "$" in s or "\\" in s else s
    if "$" in s or "\\" in s:
        s = s.replace("\\$", "").replace("$", "").replace("\\%", "%").replace("\\#", "")
    if not s.isascii():
        s = _DEGREE_RE.sub("", s)
        for pattern, repl in _UNICODE_SYNONYMS:
            s = pattern.sub(repl, s)
    if "inf" in s.lower():
        s = _INFINITY_RE.sub(r"\\infty", s)
    if "\\" in s:
        s = latex_synonyms(s)
        if "\\frac" in s:
            s = _FRAC_SHORT_RE.sub(r"\\frac{\1}{\2}", s)
            s = _FRAC_HALF_RE.sub(r"\\frac{\1}{", s)
            s = _FRAC_DEN_RE.sub(r"\\frac{\1}{\2}", s)
        if "\\sqrt" in s:
            s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
    if "/" in s:
        s = _MIXED_SPACE_RE.sub(r"\1\\frac{\2}{\3}", s)
    if _LETTER_RE.search(s):
        s = percent_word(s.strip())
        spaced = _SPACE_RE.search(s) is not None
        if spaced:            # a unit or word tail follows whitespace
            s = strip_units(s)
        if "or" in s.lower():
            s = _OR_RE.sub(",", s)
        if spaced:            # " and " needs its spaces
            s = _AND_RE.sub(r"\\land ", s)
    if "," in s and _THOUSANDS_RE.fullmatch(s.rstrip(".")):
        s = s.replace(",", "")      # 1,000 is a number; "2, 500" (with a space) stays a list
    s = _WS_RE.sub(_space, s)
    s = s.rstrip(".").strip()
    return _strip_outer_braces(s) if s.startswith("{") else s


def latex_synonyms(s: str) -> str:
    """``\\dfrac`` -> ``\\frac``, ``\\le`` -> ``\\leq``, ...: each synonym in turn, on the
    output of the ones before it, where its trigger text is present."""
    for pattern, repl, triggers in _LATEX_SYNONYMS:
        for trigger in triggers:
            if trigger in s:
                s = pattern.sub(repl, s)
                break
    return s


def _latex_rules(s: str) -> str:
    """Display commands, spacing, wrappers and separators of a LaTeX answer."""
    # Each rule runs only when a substring it needs is present: a regex pass costs
    # about a microsecond even when it finds nothing, and this runs for every answer.
    if "\\\\" in s:
        s = undouble(s)
    if s.rstrip().endswith("\\"):
        s = _TRAILING_BACKSLASH_RE.sub("", s)
    if "\\!" in s:
        s = _MATH_THOUSANDS_RE.sub(r"\1", s)
    if "\\left" in s or "\\right" in s:
        s = _INVISIBLE_DELIM_RE.sub("", s)
    if "\\left" in s or "\\right" in s or "\\big" in s or "\\Big" in s:
        s = _SIZING_RE.sub("", s)
    s = _strip_delimiters(s)
    if "style" in s or "limits" in s:
        s = _DROP_RE.sub("", s)
    s = _SPACING_RE.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", s)
    s = s.replace("{,}", "")
    if "{" in s:              # every wrapper is \name{...}
        s = unwrap(s)
    if "circ" in s or "degree" in s or "\u00b0" in s:
        s = _DEGREE_RE.sub("", s)
    return s


def undouble(s: str) -> str:
    """``\\\\frac{1}{2}`` -> ``\\frac{1}{2}`` when every command is written doubled
    (never inside a matrix, where ``\\\\`` ends a row)."""
    if "\\begin" in s or not _DOUBLED_RE.search(s):
        return s
    return s.replace("\\\\", "\\")


def unwrap(s: str) -> str:
    """Replace ``\\text{X}`` (and the other wrappers) by `` X `` at every depth."""
    for _ in range(32):   # nested wrappers: each pass removes one level
        m = _WRAPPER_RE.search(s)
        if not m:
            return s
        out: list[str] = []
        pos = 0
        for m in _WRAPPER_RE.finditer(s):
            if m.start() < pos:
                continue
            end = matching_brace(s, m.end() - 1)
            if end < 0:
                break
            out.append(s[pos:m.start()])
            out.append(" " + s[m.end():end] + " ")
            pos = end + 1
        out.append(s[pos:])
        new = "".join(out)
        if new == s:
            return s
        s = new
    return s


def strip_units(s: str) -> str:
    """Drop trailing unit words: ``5 \\text{ cm}^2`` -> ``5``; ``18 apples`` -> ``18``.

    Any trailing words are dropped after a plain number; after other math only
    known units are, so ``2 x`` or ``5 or 6`` keep their meaning.
    """
    for _ in range(3):
        m = _UNIT_TAIL_RE.match(s)
        if m and _has_math(m.group("body")):
            s = m.group("body").rstrip()
            continue
        m = _WORDS_TAIL_RE.match(s)
        if m and _is_plain_number(m.group("body")):
            words = [w.split("^")[0].lower() for w in m.group("words").split()]
            if not any(w in _MATH_WORDS or (len(w) == 1 and w not in _ONE_LETTER_UNITS) for w in words):
                s = m.group("body").rstrip()
                continue
        break
    return s


def scan_group(s: str, i: int) -> tuple[int, int]:
    """(index of the ``}`` closing the ``{`` at ``i`` or -1, deepest nesting seen).

    Escaped braces (``\\{``, ``\\}``) are literal characters, not groups.
    """
    depth = deepest = 0
    n = len(s)
    j = i
    while j < n:
        ch = s[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j, deepest
        j += 1
    return -1, deepest


def matching_brace(s: str, i: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``i`` (escaped braces skipped), or -1."""
    return scan_group(s, i)[0]


def _strip_delimiters(s: str) -> str:
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_) and s.endswith(close) and len(s) >= len(open_) + len(close):
            return s[len(open_):len(s) - len(close)].strip()
    return s


def _strip_outer_braces(s: str) -> str:
    while len(s) >= 2 and s[0] == "{" and matching_brace(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def _space(m: re.Match) -> str:
    # Keep one space where removing it would glue a command to a letter (\pi r).
    cmd = m.group(1)
    if cmd is None:
        return ""
    return cmd + " " if m.group(2) else cmd


_PLAIN_NUMBER_RE = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:/\d+)?%?|[-+]?\\frac\{\d+\}\{\d+\}")


def _is_plain_number(body: str) -> bool:
    return bool(_PLAIN_NUMBER_RE.fullmatch(body.replace(" ", "")))


def _has_math(body: str) -> bool:
    """A unit can follow this body: it holds a digit or a math command (4\\pi cm)."""
    return any(ch.isdigit() for ch in body) or "\\" in body
