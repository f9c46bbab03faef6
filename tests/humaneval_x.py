"""The vendored HumanEval-X sample (tests/data/humaneval_x_sample.jsonl, Apache-2.0, see its NOTICE)
as sandbox jobs, for the language and adversarial tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from proctor.sandbox import Job, Limits

DATA = Path(__file__).parent / "data" / "humaneval_x_sample.jsonl"
LANGUAGES = ("java", "go", "rust", "javascript")


@dataclass(frozen=True)
class Problem:
    language: str
    task_id: str
    prefix: str               # the prompt the solutions complete
    canonical_solution: str
    wrong_solution: str
    tests: str

    def job(self, solution: Optional[str] = None, *, after: str = "", limits: Optional[Limits] = None) -> Job:
        """The prefix completed by `solution` (default: the canonical one), then `after`."""
        body = self.canonical_solution if solution is None else solution
        return Job(language=self.language, code=self.prefix + body + after, tests=self.tests,  # type: ignore[arg-type]
                   limits=limits)


def problems(language: str) -> list[Problem]:
    out = []
    with open(DATA) as f:
        for n, line in enumerate(f, 1):
            row = json.loads(line)
            if row["language"] == language:
                try:
                    out.append(Problem(**row))
                except TypeError as exc:
                    raise ValueError(f"{DATA}:{n}: {exc}") from None
    if not out:
        raise ValueError(f"{DATA} has no problem in {language!r}")
    return out


def first(language: str) -> Problem:
    return problems(language)[0]
