"""No import circle anywhere in the package, and the commands that need no torch import none.

Every import counts: at module level, inside functions (lazy) and under TYPE_CHECKING, since a
lazy import that closes a circle still ties the two modules into one (the order they load in
decides what works). ``from . import x`` depends on the module ``x``, not on the package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"proctor": "proctor", "proctor.sandbox": "sandbox", "proctor.envs": "envs",
            "proctor.trainer": "trainer", "proctor.images": "images"}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if package == "proctor" and parts and parts[0] in {"sandbox", "envs", "trainer", "images"}:
                continue   # links into the other folders (a worktree may hold them)
            out[".".join([package, *parts])] = path
    return out


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its file."""
    here = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            names = [f"{source}.{alias.name}" for alias in node.names]
            # ``from pkg import submodule`` needs the submodule; ``from pkg import name``, pkg
            targets += [n for n in names if n in known] or [source]
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != module:
            out.add(target)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle():
    known = modules()
    assert len(known) > 100 and "proctor.trainer.grpo" in known
    graph = {m: imported(m, p, known) for m, p in known.items()}
    assert "proctor.trainer.learn.learner" in graph["proctor.trainer.grpo"]   # the reader sees imports at all
    assert circles(graph) == []


def test_the_detector_finds_a_lazy_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_plan_from_a_run_config_runs_without_torch():
    # As if torch were not installed: `import torch` fails, find_spec("torch") is None.
    script = ("import runpy, sys\nsys.modules['torch'] = None\n"
              "sys.argv = ['proctor', 'plan', '-c', 'examples/train/arithmetic_tiny.yaml', '--json']\n"
              "runpy.run_module('proctor', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"grpo"' in done.stdout and "torch" not in done.stderr


def test_no_private_accelerate_or_transformers_api():
    """accelerate's and transformers' private members change without notice: the package uses their
    public API only (the learner tells DeepSpeed's engine the accumulation boundary through
    DeepSpeed's own API; the generator swaps an attention function through the public mapping)."""
    import re

    private = re.compile(r"\b(accelerator|gradient_state|AcceleratorState|PartialState|deepspeed_engine_wrapped"
                         r"|ALL_ATTENTION_FUNCTIONS|generation_config)\._[a-z]")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("trainer", "proctor", "envs", "sandbox")
             for path in (ROOT / folder).rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if private.search(line)]
    assert found == []
