"""Read the labelled (prediction, gold, expected) cases out of other projects' grader tests.

Only data is taken: the literal arguments of each test (``pytest.mark.parametrize``
rows, literal calls inside an ``assert``), read with ``ast`` and never executed.
The prediction is kept exactly as the test passes it (no boxing, no stripping).

    .venv/bin/python bench/math_peer_suites.py --regenerate math-verify=/path/to/Math-Verify ...

Most peers pass literals straight to a grader call; the ones added in round 3 (rllm,
TRL, SkyRL) have readers of their own in ``extract_round3.py``.

A source path is a checkout or a bare git directory (read with ``git show HEAD:``).
Rows whose label depends on a non-default option of the peer's grader (strict=False,
allow_set_relation_comp=True) or whose arguments are not literals are skipped and
counted.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

# suite -> (GitHub repository, test files, licence file)
SUITES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "math-verify": ("huggingface/Math-Verify",
                    ("tests/test_all.py", "tests/test_boxed.py", "tests/test_numina_cases.py",
                     "tests/test_open_thoughts.py", "tests/test_strict.py", "tests/test_yujianll.py"),
                    "LICENCE"),
    "nemo-skills": ("NVIDIA/NeMo-Skills", ("tests/test_math_equal.py",), "LICENSE"),
    "areal": ("inclusionAI/AReaL", ("tests/test_math_verify_reward.py",), "LICENSE"),
    "hendrycks-math": ("hendrycks/math", ("modeling/math_equivalence_test.py",), "LICENSE"),
    "lighteval": ("huggingface/lighteval", ("tests/unit/metrics/test_extractive_match.py",), "LICENSE"),
    # round 3 (issue 25): read by extract_round3.py
    "rllm": ("rllm-org/rllm", ("tests/rewards/test_math_reward.py",), "LICENSE"),
    "trl": ("huggingface/trl", ("tests/test_rewards.py",), "LICENSE"),
    "skyrl": ("NovaSky-AI/SkyRL", ("skyrl-gym/tests/test_aime.py",), "LICENSE"),
}
# Options of the peers' graders that change what a row means; a row using them is skipped.
_NON_DEFAULT = {"strict": False, "allow_set_relation_comp": True}
_PRED_NAMES = ("pred", "completions", "test_out", "response")
_GOLD_NAMES = ("gold", "answer", "test_in", "ground_truth")


class NotLiteral(Exception):
    """An argument that is not a plain literal (computed at test time)."""


@dataclass(frozen=True)
class Case:
    suite: str
    source: str        # file::test
    pred: str
    gold: str
    expected: bool


class Source:
    """A checkout directory or a bare git directory of one repository."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, rel: str) -> str:
        f = self.path / rel
        if f.is_file():
            return f.read_text(encoding="utf-8")
        out = subprocess.run(["git", "--git-dir", str(self.path), "show", f"HEAD:{rel}"],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise FileNotFoundError(f"{rel} not found in {self.path} (a checkout or a git dir): {out.stderr.strip()}")
        return out.stdout

    def commit(self) -> str:
        git_dir = self.path if not (self.path / ".git").exists() else self.path / ".git"
        out = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else "unknown"


def literal(node: ast.AST, env: Optional[dict[str, Any]] = None) -> Any:
    """The value of a literal expression; names from ``env``; ``Language.X`` as "X"."""
    env = env or {}
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return [literal(e, env) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {literal(k, env): literal(v, env) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = literal(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return literal(node.left, env) / literal(node.right, env)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    raise NotLiteral(ast.dump(node)[:80])


def _as_text(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _label(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    raise NotLiteral(f"label {v!r}")


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return ""


def _options(call: ast.Call, row: dict[str, Any]) -> dict[str, Any]:
    opts = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            opts[kw.arg] = literal(kw.value, row)
        except NotLiteral:
            continue
    for k in _NON_DEFAULT:
        if k in row:
            opts[k] = row[k]
    return opts


def _uses_non_default(opts: dict[str, Any]) -> bool:
    return any(opts.get(k) == v for k, v in _NON_DEFAULT.items())


def parametrized(tree: ast.AST) -> Iterator[tuple[ast.FunctionDef, list[dict[str, Any]], int]]:
    """(test function, rows as {argname: value}, rows skipped) for each parametrized test."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        for dec in fn.decorator_list:
            if _call_name(dec) != "parametrize" or len(dec.args) < 2:
                continue
            names = [n.strip() for n in literal(dec.args[0]).split(",")]
            rows, skipped = [], 0
            for elt in dec.args[1].elts:
                try:
                    values = literal(elt)
                except NotLiteral:
                    skipped += 1
                    continue
                values = values if len(names) > 1 else [values]
                rows.append(dict(zip(names, values)))
            yield fn, rows, skipped


def _first_call(fn: ast.FunctionDef, names: tuple[str, ...]) -> Optional[ast.Call]:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _call_name(node) in names:
            return node
    return None


def _pick(row: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in row:
            return row[k]
    raise NotLiteral(f"none of {keys} in {sorted(row)}")


def cases_from_parametrize(suite: str, rel: str, tree: ast.AST) -> tuple[list[Case], int]:
    """Rows of (gold, pred, expected) tests, and NeMo-style pairs checked both ways."""
    out: list[Case] = []
    skipped = 0
    for fn, rows, bad in parametrized(tree):
        skipped += bad
        call = _first_call(fn, ("compare_strings", "verify", "math_equal"))
        for row in rows:
            where = f"{rel}::{fn.name}"
            try:
                if "output_pair" in row:           # NeMo-Skills: checked in both directions
                    a, b = row["output_pair"]
                    if a is None or b is None:
                        skipped += 1
                        continue
                    expected = "incorrect" not in fn.name
                    out += [Case(suite, where, _as_text(b), _as_text(a), expected),
                            Case(suite, where, _as_text(a), _as_text(b), expected)]
                    continue
                if "pred" in row and isinstance(_pick(row, ("expected", "result")), list):
                    skipped += 1                   # extraction-only tests (lists of strings)
                    continue
                opts = _options(call, row) if call is not None else {}
                if _uses_non_default(opts):
                    skipped += 1
                    continue
                out.append(Case(suite, where, _as_text(row["pred"]), _as_text(row["gold"]),
                                _label(_pick(row, ("expected", "result")))))
            except (NotLiteral, KeyError):
                skipped += 1
    return out, skipped


def cases_from_asserts(suite: str, rel: str, tree: ast.AST) -> tuple[list[Case], int]:
    """Literal calls checked by an assert: ``assert compare_strings(g, p) == 1``,
    ``reward = fn(completions=p, answer=g); assert reward == 1.0``,
    ``assert worker.verify(p, g) == 0.0``, ``self.assertTrue(is_equiv(a, b))``."""
    out: list[Case] = []
    skipped = 0
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or any(_call_name(d) == "parametrize" for d in fn.decorator_list):
            continue
        env: dict[str, Any] = {}
        calls: dict[str, ast.Call] = {}
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if isinstance(stmt.value, ast.Call):
                    calls[name] = stmt.value
                else:
                    try:
                        env[name] = literal(stmt.value, env)
                    except NotLiteral:
                        pass
                continue
            found = _assert_case(stmt, env, calls)
            if found is None:
                continue
            call, expected = found
            try:
                pred, gold, opts = _call_args(call, env)
            except NotLiteral:
                skipped += 1
                continue
            if expected is None or _uses_non_default(opts) or gold is None:
                skipped += 1
                continue
            out.append(Case(suite, f"{rel}::{fn.name}", _as_text(pred), _as_text(gold), expected))
    return out, skipped


_GRADERS = ("compare_strings", "verify", "math_equal", "is_equiv", "gsm8k_reward_fn", "geometry3k_reward_fn")


def _assert_case(stmt: ast.stmt, env: dict[str, Any],
                 calls: dict[str, ast.Call]) -> Optional[tuple[ast.Call, Optional[bool]]]:
    """(grader call, expected) for one assert statement, or None when it is not one."""
    if isinstance(stmt, ast.Expr) and _call_name(stmt.value) in ("assertTrue", "assertFalse"):
        inner = stmt.value.args[0] if stmt.value.args else None
        if _call_name(inner) in _GRADERS:
            return inner, _call_name(stmt.value) == "assertTrue"
        return None
    if not isinstance(stmt, ast.Assert):
        return None
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left = test.left
        call = calls.get(left.id) if isinstance(left, ast.Name) else left
        if isinstance(call, ast.Call) and _call_name(call) in _GRADERS:
            try:
                return call, _label(literal(test.comparators[0], env))
            except NotLiteral:
                return call, None
        return None
    if isinstance(test, ast.Call) and _call_name(test) in _GRADERS:
        return test, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _call_name(test.operand) in _GRADERS:
        return test.operand, False
    if isinstance(test, (ast.Call, ast.BoolOp)):
        return None
    return None


def _call_args(call: ast.Call, env: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    name = _call_name(call)
    kw = {k.arg: literal(k.value, env) for k in call.keywords if k.arg is not None and _is_literal(k.value, env)}
    args = [literal(a, env) for a in call.args]
    if name in ("gsm8k_reward_fn", "geometry3k_reward_fn"):
        return kw["completions"], kw.get("answer"), kw
    if name == "verify":                 # AReaL worker.verify(response, ground_truth)
        return args[0], args[1], kw
    if name == "is_equiv":               # hendrycks is_equiv(test_in, test_out): symmetric
        return args[1], args[0], kw
    return args[1], args[0], kw          # compare_strings(gold, pred), math_equal(gt, pred)


def _is_literal(node: ast.AST, env: dict[str, Any]) -> bool:
    try:
        literal(node, env)
        return True
    except NotLiteral:
        return False


def extract_suite(suite: str, source: Source) -> tuple[list[Case], int]:
    """Every labelled case of one suite, deduplicated, in file order; and rows skipped."""
    _, files, _ = SUITES[suite]
    cases: list[Case] = []
    skipped = 0
    for rel in files:
        tree = ast.parse(source.read(rel).expandtabs(8))
        from extract_round3 import CUSTOM     # peers whose tests need a reader of their own

        extractors: tuple[Callable[..., tuple[list[Case], int]], ...] = (
            (CUSTOM[suite],) if suite in CUSTOM else (cases_from_parametrize, cases_from_asserts))
        for extractor in extractors:
            got, bad = extractor(suite, rel, tree)
            cases += got
            skipped += bad
    seen: set[tuple[str, str, bool]] = set()
    unique = []
    for c in cases:
        key = (c.pred, c.gold, c.expected)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique, skipped
