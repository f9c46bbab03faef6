#!/usr/bin/env python3
"""Proctor from another checkout, measured by sandbox_throughput.py's ProctorMode in a process of its own.

sandbox_throughput.py --baseline REV starts this worker over an export of REV, so that
the proctor of REV and the proctor of the working tree are measured side by side, in
one run, round by round. The worker imports ``proctor`` from CHECKOUT with that
checkout's own package layout (its pyproject's package-dir), builds REV's images if
they are missing (Sandbox(auto_build=True)), then answers one JSON line per request:

    {"n": N, "start": S}  -> {"rows": {row name: Chunk as a dict}}
    {"close": true}       -> exits

    python bench/baseline_worker.py CHECKOUT CONCURRENCY WARM
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import tomllib
from pathlib import Path


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds proctor's packages in a checkout, as its pyproject maps them (proctor.sandbox <- sandbox/ ...)."""

    def __init__(self, checkout: Path) -> None:
        config = tomllib.loads((checkout / "pyproject.toml").read_text())
        dirs = config["tool"]["setuptools"]["package-dir"]
        self.dirs = {name: checkout / path for name, path in dirs.items()}

    def find_spec(self, name, path, target=None):   # type: ignore[no-untyped-def]
        where = self.dirs.get(name)
        if where is None:
            return None
        init = where / "__init__.py"
        if init.exists():
            return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(where)])
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)   # a data-only package (images)
        spec.submodule_search_locations = [str(where)]
        return spec


def main() -> int:
    checkout, conc, warm = Path(sys.argv[1]).resolve(), int(sys.argv[2]), int(sys.argv[3])
    sys.meta_path.insert(0, CheckoutFinder(checkout))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import proctor.sandbox
    from sandbox_throughput import ProctorMode   # the same measuring code as for the working tree

    if not Path(proctor.sandbox.__file__).resolve().is_relative_to(checkout):
        sys.exit(f"baseline worker: proctor.sandbox came from {proctor.sandbox.__file__}, not {checkout}")
    mode = ProctorMode(conc, warm)
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("close"):
                break
            rows = mode.chunk(int(request["n"]), int(request["start"]))
            print(json.dumps({"rows": {k: dataclasses.asdict(v) for k, v in rows.items()}}), flush=True)
    finally:
        mode.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
