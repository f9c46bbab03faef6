"""Checkpoint state as plain data (a process's own state, the optimizer, scheduler and RNG
states): JSON values, plus tensors kept apart by name.

``encode(state)`` returns ``(plain, tensors)``: ``plain`` holds only what JSON holds (None,
bools, ints, finite floats, strings, lists, dicts with string keys); every tensor is replaced
by a reference to its name in ``tensors`` (which ``checkpoint`` writes as safetensors).
``decode(plain, tensors)`` gives the state back. Nothing is pickled and no Python module or
class path is written: a record is written as its fields by name under a kind name of its own
(``KINDS``), so a record class can move or be renamed without breaking resume (point its kind
at the new class here).

What JSON cannot say is written as a one-key object whose key starts with ``$``:

    {"$record": "rollout", "prompt_ids": [...], ...}   a record: its kind and its fields
    {"$tensor": "generation.batch.mask"}                a tensor, by its name in the tensors file
    {"$tuple": [...]}  {"$set": [...]}                  a tuple, a set
    {"$float": "nan" | "inf" | "-inf"}                  a float JSON has no number for
    {"$dict": [[key, value], ...]}                      a dict with keys that are not strings (or start with $)
    {"$bytes": "<base64>"}                              bytes
    {"$ndarray": {"dtype": "<u4", "shape": [...], "data": [...]}}   a numpy array (numpy scalars: numbers)

(``$record`` objects are the only ones with more than one key.) Anything else is refused at
save with the path to the value, never written in a form resume cannot read.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch

from proctor.envs import SuiteItem, Task, Verdict

from .algo.advantages import AdvantageStats
from .records import Generation, RowCount, Scored, TrainBatch
from .rollout.base import Rollout


@dataclass(frozen=True)
class Kind:
    """How one record class is written: ``out(record)`` → its fields by name (values may be any
    encodable value, records and tensors included); ``back(fields)`` → the record, from fields
    already decoded. ``back`` reads fields with defaults where a later field was added."""

    name: str
    cls: type
    out: Callable[[Any], dict[str, Any]]
    back: Callable[[dict[str, Any]], Any]


# ---------------------------------------------------------------- the records, field by field

def _task_out(t: Task) -> dict[str, Any]:
    return {"id": t.id, "prompt": t.prompt, "answer": t.answer, "data": dict(t.data), "source": t.source}


def _task_back(f: dict[str, Any]) -> Task:
    return Task(id=f["id"], prompt=f["prompt"], answer=f.get("answer"), data=f.get("data", {}),
                source=f.get("source", ""))


def _item_out(i: SuiteItem) -> dict[str, Any]:
    return {"env": i.env, "task": i.task}


def _item_back(f: dict[str, Any]) -> SuiteItem:
    return SuiteItem(f["env"], f["task"])


def _verdict_out(v: Verdict) -> dict[str, Any]:
    return {"reward": v.reward, "parts": dict(v.parts), "correct": v.correct, "status": v.status,
            "feedback": v.feedback, "info": dict(v.info), "bounded": v.bounded}


def _verdict_back(f: dict[str, Any]) -> Verdict:
    return Verdict(reward=f["reward"], parts=f.get("parts", {}), correct=f.get("correct", False),
                   status=f.get("status", "ok"), feedback=f.get("feedback"), info=f.get("info", {}),
                   bounded=f.get("bounded", True))


def _rollout_out(r: Rollout) -> dict[str, Any]:
    return {"prompt_ids": list(r.prompt_ids), "completion_ids": list(r.completion_ids), "logprobs": list(r.logprobs),
            "text": r.text, "finish_reason": r.finish_reason, "weight_version": r.weight_version,
            "extra": dict(r.extra), "learn_mask": list(r.learn_mask)}


def _rollout_back(f: dict[str, Any]) -> Rollout:
    return Rollout(prompt_ids=tuple(f["prompt_ids"]), completion_ids=tuple(f["completion_ids"]),
                   logprobs=tuple(f["logprobs"]), text=f["text"], finish_reason=f["finish_reason"],
                   weight_version=f.get("weight_version", 0), extra=f.get("extra", {}),
                   learn_mask=tuple(f.get("learn_mask", ())))


def _scored_out(s: Scored) -> dict[str, Any]:
    # Each prompt's item is repeated G times (the same object): written once, with an index per rollout.
    unique: list[SuiteItem] = []
    seen: dict[int, int] = {}
    index = []
    for item in s.items:
        if id(item) not in seen:
            seen[id(item)] = len(unique)
            unique.append(item)
        index.append(seen[id(item)])
    return {"items": unique, "item_of_rollout": index, "rollouts": list(s.rollouts), "verdicts": list(s.verdicts),
            "sizes": list(s.sizes), "turns": s.turns, "prompts_truncated": s.prompts_truncated, "prompts_dropped": s.prompts_dropped}


def _scored_back(f: dict[str, Any]) -> Scored:
    items = f["items"]
    return Scored([items[i] for i in f["item_of_rollout"]], list(f["rollouts"]), list(f["verdicts"]),
                  _sizes(f), f.get("turns", 1), f.get("prompts_truncated", 0), f.get("prompts_dropped", 0))


def _sizes(f: dict[str, Any]) -> tuple[int, ...]:
    """The group sizes; a checkpoint from before they were written: the runs of one item."""
    if "sizes" in f:
        return tuple(f["sizes"])
    runs: list[int] = []
    for i, item in enumerate(f["item_of_rollout"]):
        if i and item == f["item_of_rollout"][i - 1]:
            runs[-1] += 1
        else:
            runs.append(1)
    return tuple(runs)


def _row_count_out(c: RowCount) -> dict[str, Any]:
    return {"rows": c.rows, "tokens": c.tokens}


def _row_count_back(f: dict[str, Any]) -> RowCount:
    return RowCount(f["rows"], f["tokens"])


def _batch_out(b: TrainBatch) -> dict[str, Any]:
    return {**{name: getattr(b, name) for name in TrainBatch.TENSORS}, "inert": b.inert, "whole": b.whole}


def _batch_back(f: dict[str, Any]) -> TrainBatch:
    return TrainBatch(*(f[name] for name in TrainBatch.TENSORS), inert=f.get("inert", RowCount()),
                      whole=f.get("whole"))


def _advantages_out(a: AdvantageStats) -> dict[str, Any]:
    return {"advantages": a.advantages, "group_mean": a.group_mean, "group_std": a.group_std,
            "zero_signal": a.zero_signal, "valid": a.valid, "frac_zero_signal": a.frac_zero_signal}


def _advantages_back(f: dict[str, Any]) -> AdvantageStats:
    return AdvantageStats(f["advantages"], f["group_mean"], f["group_std"], f["zero_signal"], f["valid"],
                          f["frac_zero_signal"])


def _generation_out(g: Generation) -> dict[str, Any]:
    return {"scored": g.scored, "dropped": g.dropped, "advantages": g.advantages, "batch": g.batch,
            "num_items": g.num_items, "old_logp": g.old_logp, "steps": g.steps, "rounds": g.rounds, "lags": g.lags}


def _generation_back(f: dict[str, Any]) -> Generation:
    return Generation(f["scored"], f["dropped"], f["advantages"], f["batch"], f["num_items"], f.get("old_logp"),
                      f["steps"], f.get("rounds", 0), f.get("lags"))


# The names are the file format: keep them when a class moves or is renamed.
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("task", Task, _task_out, _task_back),
    Kind("suite_item", SuiteItem, _item_out, _item_back),
    Kind("verdict", Verdict, _verdict_out, _verdict_back),
    Kind("rollout", Rollout, _rollout_out, _rollout_back),
    Kind("scored", Scored, _scored_out, _scored_back),
    Kind("row_count", RowCount, _row_count_out, _row_count_back),
    Kind("train_batch", TrainBatch, _batch_out, _batch_back),
    Kind("advantage_stats", AdvantageStats, _advantages_out, _advantages_back),
    Kind("generation", Generation, _generation_out, _generation_back),
)}


def _kind_of(value: Any) -> Kind | None:
    cls = type(value)
    for kind in KINDS.values():
        if kind.cls is cls:
            return kind
    return None


# ---------------------------------------------------------------- encode / decode

class NotPlainData(TypeError):
    """A value in the state that a checkpoint cannot hold as plain data."""


def encode(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``state`` as (JSON-ready plain data, tensors by name); raises ``NotPlainData`` naming the
    path of a value it cannot write."""
    tensors: dict[str, torch.Tensor] = {}
    return _encode_dict(state, "", tensors), tensors


def decode(plain: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """``encode``'s output back: records rebuilt by kind, tensor references filled from ``tensors``."""
    return _decode(plain, tensors, "")


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _encode_dict(d: Mapping[Any, Any], path: str, tensors: dict[str, torch.Tensor]) -> Any:
    if all(isinstance(k, str) and not k.startswith("$") for k in d):
        return {k: _encode(v, _join(path, k), tensors) for k, v in d.items()}
    return {"$dict": [[_encode(k, _join(path, f"key{n}"), tensors), _encode(v, _join(path, n), tensors)]
                      for n, (k, v) in enumerate(d.items())]}


def _encode(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        value = float(value)
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, torch.Tensor):
        name = path
        while name in tensors:
            name += "'"
        # its own contiguous CPU storage (safetensors refuses views that share one)
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
        return {"$tensor": name}
    kind = _kind_of(value)
    if kind is not None:
        fields = kind.out(value)
        return {"$record": kind.name, **{k: _encode(v, _join(path, k), tensors) for k, v in fields.items()}}
    if isinstance(value, list):
        return [_encode(v, _join(path, i), tensors) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, _join(path, i), tensors) for i, v in enumerate(value)]}
    if isinstance(value, Mapping):
        return _encode_dict(value, path, tensors)
    if isinstance(value, (set, frozenset)):
        return {"$set": [_encode(v, _join(path, i), tensors) for i, v in enumerate(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise NotPlainData(f"checkpoint state at {path or '(top)'}: a numpy array of dtype {value.dtype} "
                               "cannot be written as plain data (only bool, integer and float arrays)")
        return {"$ndarray": {"dtype": value.dtype.str, "shape": list(value.shape),
                             "data": _encode(value.reshape(-1).tolist(), path, tensors)}}
    if isinstance(value, np.generic):
        return _encode(value.item(), path, tensors)
    raise NotPlainData(
        f"checkpoint state at {path or '(top)'}: a {type(value).__name__} cannot be written as plain data. "
        "Checkpoints hold None, bools, numbers, strings, lists, tuples, dicts, bytes, tensors, numpy arrays and "
        f"the records of trainer/state_codec.py KINDS ({', '.join(KINDS)}); if it comes from a task's data or a "
        "verdict's info, keep those to such values (or add a kind for a new record class)")


_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _decode(value: Any, tensors: Mapping[str, torch.Tensor], path: str) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, _join(path, i)) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "$record" in value:
        name = value["$record"]
        if name not in KINDS:
            raise ValueError(f"checkpoint state at {path}: unknown record kind {name!r} (known: {', '.join(KINDS)}); "
                             "was it written by a newer proctor?")
        fields = {k: _decode(v, tensors, _join(path, k)) for k, v in value.items() if k != "$record"}
        return KINDS[name].back(fields)
    tags = [k for k in value if k.startswith("$")]
    if not tags:
        return {k: _decode(v, tensors, _join(path, k)) for k, v in value.items()}
    if len(value) != 1:
        raise ValueError(f"checkpoint state at {path}: a tagged value must have one key, got {sorted(value)}")
    tag, body = tags[0], value[tags[0]]
    if tag == "$tensor":
        if body not in tensors:
            raise ValueError(f"checkpoint state at {path}: tensor {body!r} is not in the checkpoint's tensors file")
        return tensors[body]
    if tag == "$tuple":
        return tuple(_decode(v, tensors, _join(path, i)) for i, v in enumerate(body))
    if tag == "$set":
        return {_decode(v, tensors, _join(path, i)) for i, v in enumerate(body)}
    if tag == "$float":
        return _FLOATS[body]
    if tag == "$dict":
        return {_decode(k, tensors, path): _decode(v, tensors, _join(path, n)) for n, (k, v) in enumerate(body)}
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$ndarray":
        data = _decode(body["data"], tensors, path)
        return np.array(data, dtype=np.dtype(body["dtype"])).reshape(body["shape"])
    raise ValueError(f"checkpoint state at {path}: unknown tag {tag!r}; was it written by a newer proctor?")


def dumps(plain: Any, indent: int = 0) -> str:
    """Strict JSON (no NaN), indented by object, each list of scalars on one line (token ids, RNG
    words): readable without being a number per line."""
    pad, inner = " " * indent, " " * (indent + 1)
    if isinstance(plain, dict):
        if not plain:
            return "{}"
        parts = [f"{inner}{_scalar(k)}: {dumps(v, indent + 1)}" for k, v in plain.items()]
        return "{\n" + ",\n".join(parts) + "\n" + pad + "}"
    if isinstance(plain, list):
        if all(not isinstance(v, (dict, list)) for v in plain):
            return _scalar(plain)
        return "[\n" + ",\n".join(f"{inner}{dumps(v, indent + 1)}" for v in plain) + "\n" + pad + "]"
    return _scalar(plain)


def _scalar(value: Any) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False)


__all__ = ["KINDS", "Kind", "NotPlainData", "decode", "dumps", "encode"]
