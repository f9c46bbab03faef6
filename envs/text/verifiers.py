"""Text tasks: exact match, regex match, multiple choice; and format reward parts."""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, Optional, Sequence

from ..core.types import Task, Verdict
from ..core.verifier import Verifier, exact_verdict

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_THINK_END = "</think>"


def final_text(completion: str) -> str:
    """The part of a completion that carries the answer: after the last ``</think>``,
    inside the last ``<answer>`` tags when there are any, else the last non-empty line."""
    text = completion.rsplit(_THINK_END, 1)[-1]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def normalize_text(text: str, *, case: bool = False, punctuation: bool = False) -> str:
    """Unicode NFKC, folded white space; case and trailing punctuation ignored unless asked."""
    text = unicodedata.normalize("NFKC", text).strip()
    text = re.sub(r"\s+", " ", text)
    if not punctuation:
        text = text.strip(" .!?;:,\"'`")
    return text if case else text.casefold()


class ExactMatchVerifier(Verifier):
    """Correct when the final text equals the gold (``task.answer``) or one of
    ``task.data["aliases"]`` after normalization."""

    def __init__(self, *, case_sensitive: bool = False, extract: Callable[[str], str] = final_text) -> None:
        self.case_sensitive = case_sensitive
        self.extract = extract

    def verify(self, task: Task, completion: str) -> Verdict:
        golds = [task.answer, *task.data.get("aliases", ())]
        golds = [g for g in golds if g is not None]
        if not golds:
            raise ValueError(f"task {task.id}: an exact-match task needs `answer` (or data['aliases'])")
        got = self.extract(completion)
        norm = normalize_text(got, case=self.case_sensitive)
        ok = any(norm == normalize_text(g, case=self.case_sensitive) for g in golds)
        return exact_verdict(ok, info={"extracted": got})


class RegexVerifier(Verifier):
    """Correct when the final text fully matches the task's pattern
    (``task.data["pattern"]``, else ``task.answer`` read as a regex)."""

    def __init__(self, *, flags: int = re.IGNORECASE, extract: Callable[[str], str] = final_text) -> None:
        self.flags = flags
        self.extract = extract
        self._compiled: dict[str, re.Pattern[str]] = {}

    def verify(self, task: Task, completion: str) -> Verdict:
        pattern = task.data.get("pattern", task.answer)
        if not pattern:
            raise ValueError(f"task {task.id}: a regex task needs data['pattern'] or `answer`")
        regex = self._compiled.get(pattern)
        if regex is None:
            try:
                regex = self._compiled[pattern] = re.compile(pattern, self.flags)
            except re.error as exc:
                raise ValueError(f"task {task.id}: bad regex {pattern!r}: {exc}") from None
        got = self.extract(completion)
        return exact_verdict(regex.fullmatch(got.strip()) is not None, info={"extracted": got})


_CHOICE_PATTERNS = (
    re.compile(r"\\boxed\{\s*\(?([A-Z])\)?\s*\}"),
    re.compile(r"<answer>\s*\(?([A-Z])\)?[\s.:)]*(?:[^<]*)</answer>", re.IGNORECASE),
    re.compile(r"(?:final\s+)?answer\s*(?:is|:)\s*\**\s*\(?([A-Z])\)?(?![A-Za-z])", re.IGNORECASE),
    re.compile(r"^\s*\(?([A-Z])\)?[.:)]?\s*$", re.MULTILINE),
)


def extract_choice(completion: str, letters: str) -> Optional[str]:
    """The letter a completion picks: the last match of the most explicit pattern that matches."""
    text = completion.rsplit(_THINK_END, 1)[-1]
    for pattern in _CHOICE_PATTERNS:
        picks = [m.group(1).upper() for m in pattern.finditer(text) if m.group(1).upper() in letters]
        if picks:
            return picks[-1]
    return None


class ChoiceVerifier(Verifier):
    """Multiple choice: ``task.data["choices"]`` (a list, lettered A, B, ...) and the gold
    letter in ``task.answer`` (or the gold choice's text)."""

    def verify(self, task: Task, completion: str) -> Verdict:
        choices: Sequence[str] = task.data.get("choices") or ()
        letters = "".join(chr(ord("A") + i) for i in range(len(choices))) or "ABCD"
        gold = (task.answer or "").strip()
        if gold not in letters and gold in choices:
            gold = letters[list(choices).index(gold)]
        if len(gold) != 1 or gold not in letters:
            raise ValueError(f"task {task.id}: answer must be one of the letters {letters} (or a choice's text), "
                             f"got {task.answer!r}")
        picked = extract_choice(completion, letters)
        return exact_verdict(picked == gold, info={"extracted": picked})


def format_choices(question: str, choices: Sequence[str]) -> str:
    lines = [question, ""] + [f"{chr(ord('A') + i)}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines)


# ------------------------------------------------------------------ format reward parts

_THINK_ANSWER = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def think_answer_format(task: Task, completion: str) -> float:
    """1.0 when the completion is exactly ``<think>…</think><answer>…</answer>`` (DeepSeek-R1 style)."""
    return 1.0 if _THINK_ANSWER.match(completion) and completion.count("<think>") == 1 else 0.0


def answer_tag_format(task: Task, completion: str) -> float:
    """1.0 when there is exactly one ``<answer>…</answer>``."""
    return 1.0 if len(_ANSWER_TAG.findall(completion)) == 1 else 0.0


def length_penalty(max_chars: int, soft_chars: Optional[int] = None) -> Callable[[Task, str], float]:
    """1.0 up to ``soft_chars``, falling linearly to 0.0 at ``max_chars`` (DAPO's overlong shaping)."""
    soft = soft_chars if soft_chars is not None else max_chars // 2
    if not 0 <= soft < max_chars:
        raise ValueError(f"length_penalty needs 0 <= soft_chars < max_chars, got {soft}, {max_chars}")

    def part(task: Task, completion: str) -> float:
        n = len(completion)
        if n <= soft:
            return 1.0
        return max(0.0, 1.0 - (n - soft) / (max_chars - soft))

    return part
