"""``module:attr`` and ``path/to/file.py:attr`` references: how configs and the command line
name user code (an env factory, a reward function)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any


class RefError(ValueError):
    """A ``module:attr`` reference that cannot be loaded; the message says why and what to do."""


def is_ref(text: str) -> bool:
    """``module:attr`` or ``file.py:attr`` whose attr is a Python name (``pkg:MyEnv-v0`` is a Gymnasium id)."""
    if ":" not in text:
        return False
    module, attr = text.rsplit(":", 1)
    return bool(module) and attr.isidentifier()


def load_object(ref: str, what: str = "object") -> Any:
    """The attribute a reference names; ``what`` ("env factory", "reward function") goes in errors.

    A module is imported with the current directory on the path; a ``.py`` file is
    executed once per resolved path and kept in ``sys.modules`` (so what it defines pickles).
    """
    if not is_ref(ref):
        raise RefError(f"{what} {ref!r}: expected module:name or path/to/file.py:name")
    module_name, attr = ref.rsplit(":", 1)
    module = _load_file(module_name, ref, what) if module_name.endswith(".py") else _import(module_name, ref, what)
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        defined = ", ".join(public[:20]) or "nothing"
        raise RefError(f"{what} {ref!r}: {module_name} has no {attr!r} (it defines: {defined})")
    return getattr(module, attr)


def _import(module_name: str, ref: str, what: str) -> Any:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise RefError(f"{what} {ref!r}: no module named {exc.name!r} (searched the current directory "
                           "and the Python path; for a file write path/to/file.py:name)") from None
        raise


def _load_file(path_text: str, ref: str, what: str) -> Any:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise RefError(f"{what} {ref!r}: {path} does not exist")
    name = f"proctor_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RefError(f"{what} {ref!r}: Python cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
