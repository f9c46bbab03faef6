"""Where tasks come from: lists, JSONL, Parquet and Hugging Face `datasets`.

A source is anything with ``name``, ``len()`` and ``[i] -> Task``. File sources
turn each row into a ``Task`` with a ``row_to_task`` function; a row that does
not fit raises ``BadRow`` naming the file, the row and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from .types import Task

RowToTask = Callable[[Mapping[str, Any], str], Task]   # (row, row_id) -> Task


class BadRow(ValueError):
    """A row of a task file does not have what the environment needs."""

    def __init__(self, where: str, row: int | str, field: str, problem: str) -> None:
        self.where, self.row, self.field = where, row, field
        super().__init__(f"{where}, row {row}, field {field!r}: {problem}")


@runtime_checkable
class TaskSource(Protocol):
    name: str

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Task: ...


class ListSource:
    """Tasks held in memory."""

    def __init__(self, tasks: Iterable[Task], name: str = "list") -> None:
        self.tasks = list(tasks)
        self.name = name
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"source {name!r}: task id {dup!r} appears more than once; ids must be unique")

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> Task:
        return self.tasks[index]


def require(row: Mapping[str, Any], field: str, where: str, row_id: int | str, kind: type | tuple = str) -> Any:
    """``row[field]``, or BadRow saying it is missing or of the wrong type."""
    if field not in row or row[field] is None:
        present = ", ".join(sorted(map(str, row))) or "none"
        raise BadRow(where, row_id, field, f"missing (fields present: {present}); "
                     "map your column names with the env's field options")
    value = row[field]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BadRow(where, row_id, field, f"must be {names}, got {type(value).__name__}")
    return value


def rows_from_file(path: str | Path) -> tuple[list[dict[str, Any]], str]:
    """Rows of a .jsonl/.json/.parquet file, with the name to cite in errors."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"task file {path} does not exist")
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if suffix in (".jsonl", ".jsonl.gz", ".json"):
        return _json_rows(path), str(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist(), str(path)
    raise ValueError(f"{path}: unsupported task file type {suffix!r}; use .jsonl, .json or .parquet "
                     "(or load it with `datasets` and pass it as a source)")


def json_lines(text: str, where: str) -> list[tuple[int, Any]]:
    """(line number, value) for each non-blank line of JSON-lines ``text``; a bad line
    raises BadRow naming ``where`` and the line."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise BadRow(where, n, "(json)", f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    return out


def _json_rows(path: Path) -> list[dict[str, Any]]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRow(str(path), exc.lineno, "(json)", f"not valid JSON: {exc.msg}") from None
        if not isinstance(data, list):
            raise BadRow(str(path), 0, "(json)", "a .json task file must hold a list of objects")
        rows = data
    else:
        rows = [row for _, row in json_lines(text, str(path))]
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BadRow(str(path), n, "(row)", f"must be a JSON object, got {type(row).__name__}")
    return rows


class RowSource:
    """Tasks made from rows (a file, a `datasets.Dataset`, a list of dicts), converted eagerly
    so that a bad row fails at load time, not in the middle of training."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], row_to_task: RowToTask, name: str,
                 id_field: Optional[str] = "id") -> None:
        self.name = name
        tasks = []
        for i, row in enumerate(rows, 1):
            if not isinstance(row, Mapping):
                raise BadRow(name, i, "(row)", f"must be a mapping, got {type(row).__name__}")
            row_id = str(row[id_field]) if id_field and row.get(id_field) is not None else f"{Path(name).stem}/{i}"
            try:
                tasks.append(row_to_task(row, row_id))
            except BadRow as exc:
                raise BadRow(name, i, exc.field, str(exc).split(": ", 1)[-1]) from None
        self._inner = ListSource(tasks, name)

    @classmethod
    def from_file(cls, path: str | Path, row_to_task: RowToTask, **kw: Any) -> "RowSource":
        rows, name = rows_from_file(path)
        return cls(rows, row_to_task, name, **kw)

    @classmethod
    def from_dataset(cls, dataset: Any, row_to_task: RowToTask, name: Optional[str] = None, **kw: Any) -> "RowSource":
        """A `datasets.Dataset` (or anything iterable of dicts)."""
        label = name or getattr(getattr(dataset, "info", None), "dataset_name", None) or "dataset"
        return cls(list(dataset), row_to_task, label, **kw)

    def __len__(self) -> int:
        return len(self._inner)

    def __getitem__(self, index: int) -> Task:
        return self._inner[index]


def load_rows(spec: str, split: str = "train") -> tuple[list[dict[str, Any]], str]:
    """A path (.jsonl/.json/.parquet) or a Hugging Face dataset id (needs the hub or its cache)."""
    if Path(spec).exists() or spec.endswith((".jsonl", ".json", ".parquet", ".jsonl.gz")):
        return rows_from_file(spec)
    import datasets

    try:
        ds = datasets.load_dataset(spec, split=split)
    except Exception as exc:  # noqa: BLE001 - the hub's errors are many; say what to do
        raise ValueError(f"could not load dataset {spec!r} (split {split!r}): {exc}. Offline? Pass a local "
                         ".jsonl/.parquet file instead.") from None
    return list(ds), spec
