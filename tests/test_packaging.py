"""pyproject.toml ships every Python package of the source tree.

A package missing from ``[tool.setuptools] packages`` works in an editable install (the
folder is on the path) and is absent from a wheel: `pip install proctor` then fails on
import. This test reads the package list and the folder map and compares them with the
folders that hold an ``__init__.py``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> tuple[dict[str, str], set[str]]:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return tool["package-dir"], set(tool["packages"])


def _on_disk(package_dir: dict[str, str]) -> set[str]:
    found: set[str] = set()
    for name, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found.add(".".join((name, *rel.parts)))
    return found


def test_every_package_folder_is_declared() -> None:
    package_dir, declared = _declared()
    missing = sorted(_on_disk(package_dir) - declared)
    assert not missing, (f"pyproject.toml [tool.setuptools] packages lacks {missing}: a wheel would ship "
                         "without them; add each name to the list")


def test_every_declared_package_exists() -> None:
    package_dir, declared = _declared()
    bases = sorted(package_dir.items(), key=lambda kv: -len(kv[0]))
    for name in sorted(declared):
        prefix, folder = next((p, f) for p, f in bases if name == p or name.startswith(p + "."))
        path = ROOT / folder / name[len(prefix):].lstrip(".").replace(".", "/")   # "" for the mapped package itself
        assert path.is_dir(), f"pyproject.toml declares {name}, but {path} is not a folder: remove the name or add it"
