"""Checkpoints as plain data: each process's state is JSON plus safetensors, never a pickle, and
the records in it (tasks, rollouts, verdicts, a generation batch in flight) are written by kind
and field name, so a class that moves or is renamed does not break resume. So are the weights,
the optimizer, the scheduler and the RNGs that accelerate's save_state used to pickle."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import pickle
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from safetensors import safe_open

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from test_grpo_trainer import fresh_accelerator_state, tiny, trainer_for  # noqa: E402,F401

from proctor.envs import SuiteItem, Task, Verdict, Verifier  # noqa: E402
from proctor.trainer import checkpoint, state_codec  # noqa: E402
from proctor.trainer.records import Generation, RowCount, Scored, TrainBatch  # noqa: E402
from proctor.trainer.rollout import base as rollout_base  # noqa: E402
from proctor.trainer.rollout.base import Rollout  # noqa: E402

# What accelerate's save_state wrote with torch.save (a pickle inside) before: the optimizer, the
# scheduler (registered for checkpointing) and the global RNGs.
ACCELERATE_PICKLES = {"optimizer.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl"}
# A one-process checkpoint now, every file of it.
PLAIN_FILES = {"model.safetensors", "training_state.json", "training_state.safetensors", "rng_state.json",
               "proctor_state.json", "proctor_state.safetensors"}


class Mixed(Verifier):
    """Every third task always right (zero-signal groups: skipped and resampled), some completions
    not judged (NaN rewards), the rest a dense reward with a tuple in the verdict's info."""

    def verify(self, task, completion):
        if int(task.id[1:]) % 3 == 0:
            return Verdict(reward=1.0, parts={"correct": 1.0}, correct=True)
        if len(completion) % 5 == 0:
            return Verdict.infra("sandbox gone (simulated)", attempt=(1, 2))
        share = sum(c.isalnum() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5, info={"chars": len(completion)})


SETTINGS = dict(steps_per_generation=2, save_every=1, skip_predicted_zero_signal=True, skip_after=1,
                skip_reweight=True, dynamic_sampling=True, max_resample_rounds=1)


def is_pickle(path: Path) -> bool:
    """A pickle stream (protocol 2+: PROTO opcode first, STOP last), or torch.save's zip with one inside."""
    data = path.read_bytes()
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") and data.endswith(b"."):
        return True
    return zipfile.is_zipfile(path) and any(n.endswith(".pkl") for n in zipfile.ZipFile(path).namelist())


def strings_in(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *strings_in(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []


def kinds_in(value) -> set[str]:
    if isinstance(value, dict):
        own = {value["$record"]} if "$record" in value else set()
        return own.union(*(kinds_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(kinds_in(v) for v in value))
    return set()


def assert_same(a, b, where="state"):
    """Equal, types included: tensors bit for bit (dtype and shape), NaN equal to NaN, tuples
    not lists, records field by field."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.cpu().reshape(-1).view(torch.uint8), b.cpu().reshape(-1).view(torch.uint8)), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}.{i}")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """A 3-step run (2 steps per generation) checkpointing every step, with each state saved as
    handed to ``checkpoint.save`` (a deep copy)."""
    from accelerate.state import AcceleratorState

    handed: dict[str, dict] = {}
    real_save = checkpoint.save

    def spy(path, state, rank=0):
        handed[Path(path).name] = copy.deepcopy(state)
        return real_save(path, state, rank)

    AcceleratorState._reset_state(reset_partial_state=True)
    out = tmp_path_factory.mktemp("straight")
    checkpoint.save = spy
    try:
        trainer = trainer_for(tiny, out, Mixed(), max_steps=3, **SETTINGS)
        rows = trainer.train()
    finally:
        checkpoint.save = real_save
        AcceleratorState._reset_state(reset_partial_state=True)
    return trainer, rows, out / "run" / "checkpoints", handed


def test_a_checkpoint_holds_json_and_safetensors_never_a_pickle(straight):
    trainer, _, root, _ = straight
    step1 = root / "step-1"
    ours = sorted(p.name for p in step1.iterdir() if p.name.startswith("proctor_state"))
    assert ours == ["proctor_state.json", "proctor_state.safetensors"]
    with open(step1 / "proctor_state.json") as f:   # strict JSON: NaN or Infinity would fail here
        doc = json.load(f, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    with safe_open(str(step1 / "proctor_state.safetensors"), framework="pt") as f:
        assert "generation.batch.input_ids" in f.keys()
    assert {p.name for p in step1.iterdir()} == PLAIN_FILES   # no .pkl, no .bin, nothing else
    for p in step1.iterdir():   # every file strict JSON or safetensors, none a pickle
        assert not is_pickle(p), p.name
        if p.suffix == ".json":
            json.loads(p.read_text(), parse_constant=lambda c, p=p: pytest.fail(f"{p.name}: non-standard constant {c}"))
        else:
            safe_open(str(p), framework="pt").keys()
    assert doc["format"] == "proctor-state" and doc["tensors_file"] == "proctor_state.safetensors"
    # Stopped mid-generation: the rest of the batch is in the state, with every kind of record.
    assert kinds_in(doc["state"]) == set(state_codec.KINDS)
    # A fresh interpreter that imports nothing of proctor reads it.
    code = f"import json; d = json.load(open({str(step1 / 'proctor_state.json')!r})); print(d['state']['step'])"
    assert subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True).stdout.strip() == "1"
    # No module or class path anywhere: what names a record is its kind.
    texts = strings_in(doc)
    for kind in state_codec.KINDS.values():
        assert not any(kind.cls.__module__ in s or s == kind.cls.__qualname__ for s in texts), kind.name
    assert not any("proctor." in s or "__main__" in s or "<class" in s for s in texts)
    assert trainer.parts.drawer.memory.skipped > 0   # the pass-rate memory did skip in this run


def test_optimizer_scheduler_and_rngs_are_plain_data_too(straight):
    """What accelerate pickled (optimizer.bin, custom_checkpoint_0.pkl, random_states_0.pkl): the
    optimizer's tensors by name in safetensors, the rest strict JSON without a class path."""
    _, _, root, _ = straight
    for step in (1, 2, 3):
        doc = json.loads((root / f"step-{step}" / "training_state.json").read_text())
        # the learner steps the schedule once per optimizer step (one per trainer step here)
        assert doc["state"]["schedulers"][0]["last_epoch"] == step
        assert doc["state"]["scaler"] is None and doc["tensors_file"] == "training_state.safetensors"
    texts = strings_in(doc) + strings_in(json.loads((root / "step-3" / "rng_state.json").read_text()))
    assert not any("proctor." in s or "torch." in s or "numpy." in s or "<class" in s for s in texts)
    with safe_open(str(root / "step-3" / "training_state.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert {"optimizers.0.state.0.exp_avg", "optimizers.0.state.0.exp_avg_sq", "optimizers.0.state.0.step"} <= names
    group = doc["state"]["optimizers"][0]["param_groups"][0]
    assert group["betas"] == {"$tuple": [0.9, 0.999]} and group["params"][:2] == [0, 1]


class Tied(torch.nn.Module):
    """An output layer sharing the embedding's weight (as tied LM heads do)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(self.embed(x))


def test_weights_optimizer_scheduler_and_rngs_come_back_bit_for_bit(tmp_path):
    from accelerate import Accelerator

    from proctor.trainer.learn.learner import Trainable
    from proctor.trainer.learn.placement import adamw, lr_schedule

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    assert checkpoint.plain_training_state(acc)
    model = Tied()
    optimizer = adamw(list(model.parameters()), 1e-2, weight_decay=0.1)
    scheduler = lr_schedule(optimizer, "cosine", 1, 10)
    model, optimizer = acc.prepare(model, optimizer)
    parts = [Trainable(model, optimizer, scheduler)]

    def train(n):
        for _ in range(n):
            model(torch.tensor([1, 2, 4])).square().sum().backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

    def draws():
        return random.random(), float(np.random.rand()), torch.rand(3)

    train(2)
    checkpoint.save_training(tmp_path, acc, parts)
    saved = copy.deepcopy((model.state_dict(), optimizer.state_dict(), scheduler.state_dict()))
    expected = draws()
    train(1)   # everything moves on
    draws()
    checkpoint.load_training(tmp_path, acc, parts)
    assert_same(model.state_dict(), saved[0], "weights")
    assert_same(optimizer.state_dict(), saved[1], "optimizer")
    assert_same(scheduler.state_dict(), saved[2], "scheduler")
    assert model.out.weight is model.embed.weight   # still tied
    assert_same(draws(), expected, "draws")
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        assert len(list(f.keys())) == 1   # the shared weight written once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors", "rng_state.json",
                                                         "training_state.json", "training_state.safetensors"]


def test_accelerate_pickles_and_a_launch_mismatch_are_refused(tmp_path):
    from types import SimpleNamespace

    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    from proctor.trainer.learn.learner import Trainable

    model = torch.nn.Linear(2, 2)
    parts = [Trainable(model, torch.optim.AdamW(model.parameters()))]
    old = checkpoint.checkpoint_dir(tmp_path, 2)   # as proctor wrote it before (accelerate's save_state)
    checkpoint.save(old, {"step": 2})
    for name in ACCELERATE_PICKLES:
        (old / name).write_bytes(pickle.dumps({"step": 2}))
    with pytest.raises(checkpoint.OldCheckpointFormat, match=r"pickled \(custom_checkpoint_0.pkl, .*start afresh"):
        checkpoint.load_training(old, Accelerator(cpu=True), parts)
    # A DeepSpeed launch cannot read a plain checkpoint (and says so rather than failing inside accelerate).
    plain = checkpoint.checkpoint_dir(tmp_path, 3)
    checkpoint.save_training(plain, Accelerator(cpu=True), parts)
    deepspeed = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=object()), device=torch.device("cpu"),
                                distributed_type=DistributedType.DEEPSPEED,
                                load_state=lambda path: pytest.fail("handed to accelerate"))
    assert not checkpoint.plain_training_state(deepspeed)
    with pytest.raises(ValueError, match="launch that saved it"):
        checkpoint.load_training(plain, deepspeed, parts)


def test_ppo_resumes_policy_and_critic_bit_identical(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.envs import EnvSuite, ListSource, VerifiableEnv
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.ppo import PPOTrainer, ValueModel

    path = tiny_model_path(pretrain_steps=0)
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
             for i in range(8)]

    def ppo(out, **extra):
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
        cfg = GRPOConfig.from_flat(model=str(path), algorithm="ppo", group_size=1, prompts_per_step=4,
                                   max_new_tokens=6, max_steps=2, save_every=1, learning_rate=1e-3,
                                   critic_learning_rate=1e-3, output_dir=str(out), **extra)
        return PPOTrainer(cfg, EnvSuite({"a": VerifiableEnv(ListSource(tasks), Mixed())}),
                          AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                          ValueModel.from_pretrained(path))

    straight = ppo(tmp_path / "a")
    rows_a = straight.train()
    step1 = tmp_path / "a" / "checkpoints" / "step-1"
    # the critic's weights beside the policy's (PPO's own state has no tensors: no proctor_state.safetensors)
    assert {p.name for p in step1.iterdir()} == PLAIN_FILES - {"proctor_state.safetensors"} | {"model_1.safetensors"}
    assert not any(is_pickle(p) for p in step1.iterdir())
    resumed = ppo(tmp_path / "b", resume_from=str(step1))
    rows_b = resumed.train()
    assert [r["step"] for r in rows_b] == [2]
    for key in ("reward_mean", "loss", "value_loss", "grad_norm", "lr"):
        assert_same(rows_a[1][key], rows_b[0][key], key)
    for a, b in ((straight.model, resumed.model), (straight.critic, resumed.critic)):
        for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
            assert torch.equal(x, y), name


def test_every_state_comes_back_as_it_was_handed_to_save(straight):
    _, _, root, handed = straight
    assert sorted(handed) == ["step-1", "step-2", "step-3"]
    for name, state in handed.items():
        assert_same(state, checkpoint.load(root / name), name)
    generation = checkpoint.load(root / "step-1")["generation"]
    assert isinstance(generation, Generation) and generation.old_logp is not None and generation.dropped.rollouts
    assert handed["step-2"]["generation"] is None   # the generation's last step: nothing left in flight


def test_resume_mid_generation_is_bit_identical(tiny, straight, tmp_path):
    _, rows_a, root, _ = straight
    trainer_a = straight[0]
    resumed = trainer_for(tiny, tmp_path, Mixed(), max_steps=3, resume_from=str(root / "step-1"), **SETTINGS)
    assert resumed.start_step == 1 and resumed.generation is not None
    rows_b = resumed.train()
    assert [r["step"] for r in rows_b] == [2, 3]
    for a, b in zip(rows_a[1:], rows_b):
        for key in a:
            if not key.startswith(("time_", "memory_")) and key not in ("step_s", "tokens_per_s", "peak_memory_bytes"):
                assert_same(a[key], b[key], key)
    for (name, a), (_, b) in zip(trainer_a.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), name
    assert resumed.parts.drawer.memory.skipped == trainer_a.parts.drawer.memory.skipped


def test_a_renamed_record_class_still_resumes(straight, monkeypatch):
    """Rollout moved and renamed: the old class path is gone (a pickle of one can no longer be
    read), the codec's kind "rollout" points at the new class, and the checkpoint loads."""
    _, _, root, _ = straight
    old = pickle.dumps(Rollout((1,), (2,), (-0.5,), "x", "stop"))

    @dataclasses.dataclass(frozen=True)
    class Sample(Rollout):   # the same fields, another name in another module
        pass

    Sample.__module__, Sample.__qualname__ = "proctor.trainer.samples", "Sample"
    monkeypatch.delattr(rollout_base, "Rollout")
    with pytest.raises(AttributeError):
        pickle.loads(old)   # what a class move did to the pickled checkpoints
    tuples = ("prompt_ids", "completion_ids", "logprobs", "learn_mask")
    kind = dataclasses.replace(state_codec.KINDS["rollout"], cls=Sample,
                               back=lambda f: Sample(**{**f, **{k: tuple(f[k]) for k in tuples}}))
    monkeypatch.setitem(state_codec.KINDS, "rollout", kind)
    generation = checkpoint.load(root / "step-1")["generation"]
    assert generation.scored.rollouts and all(type(r) is Sample for r in generation.scored.rollouts)


def test_values_of_every_kind_round_trip(tmp_path):
    """Random and numpy states, tuples, non-string keys, NaN and inf, bytes, sets, numpy arrays,
    empty and bool tensors, pending async batches of real records."""
    rng = random.Random(7)
    rng.random()
    gen = np.random.default_rng(3)
    task = Task("t1", [{"role": "user", "content": "1 + 1?"}], "2", data={"cases": [["1", "2"]], "pair": (1, 2)})
    item = SuiteItem("digits", task)
    rollout = Rollout((1, 2), (3, 4), (-0.25, -math.inf), "ab", "length", 2, {"turns": 2}, (1, 0))
    scored = Scored([item, item], [rollout, rollout], [Verdict.infra("gone", host="h"), Verdict(0.5, {"c": 0.5})], (2,))
    batch = TrainBatch(*(torch.rand(2, 3) for _ in range(6)), inert=RowCount(1, 2.5), whole=RowCount(3, 4.0))
    state = {"rng": rng.getstate(), "np": gen.bit_generator.state, "weights": {("digits", "t1"): 0.5},
             "floats": [math.nan, math.inf, -math.inf, 0.1 + 0.2, -0.0], "bytes": b"\x00\xff", "set": {3},
             "array": np.arange(4, dtype=np.uint32).reshape(2, 2), "scalar": np.float64(1.5), "$odd": {"$k": 1},
             "empty": torch.zeros(0, 2, dtype=torch.bool), "bf16": torch.ones(2, dtype=torch.bfloat16),
             "pending_batches": [[item, item], [item]], "scored": scored, "batch": batch, "big": 2 ** 127 + 1}
    checkpoint.save(tmp_path, state, rank=1)
    (tmp_path / checkpoint.STATE_FILE).write_text("{}")   # rank 0's file marks the checkpoint complete
    back = checkpoint.load(tmp_path, rank=1)
    assert (tmp_path / "proctor_state.rank1.json").exists() and (tmp_path / "proctor_state.rank1.safetensors").exists()
    assert back["rng"] == rng.getstate() and back["np"] == gen.bit_generator.state
    np.testing.assert_array_equal(back.pop("array"), state.pop("array"))
    assert back.pop("scalar") == state.pop("scalar") == 1.5   # a numpy scalar comes back a Python number
    assert back["$odd"] == {"$k": 1}
    assert_same(state, back)
    assert back["scored"].items[0] is back["scored"].items[1]   # one item per group, written once


def test_unwritable_values_old_checkpoints_and_mixed_files_are_refused(tmp_path):
    with pytest.raises(state_codec.NotPlainData, match=r"generation\.info\.handle: a object"):
        checkpoint.save(tmp_path / "a", {"generation": {"info": {"handle": object()}}})
    assert not (tmp_path / "a").exists()   # refused before anything was written
    old = checkpoint.checkpoint_dir(tmp_path, 4)
    old.mkdir(parents=True)
    (old / "proctor_state.pkl").write_bytes(pickle.dumps({"step": 4}))
    assert checkpoint.latest_checkpoint(tmp_path) == old   # "latest" reaches the message below
    with pytest.raises(checkpoint.OldCheckpointFormat, match="earlier proctor.*start afresh"):
        checkpoint.load(old)
    new = checkpoint.checkpoint_dir(tmp_path, 5)
    checkpoint.save(new, {"t": torch.ones(2)})
    assert checkpoint.latest_checkpoint(tmp_path) == new
    tensors = new / "proctor_state.safetensors"
    kept = tensors.read_bytes()
    checkpoint.save(new, {"t": torch.zeros(2)})
    tensors.write_bytes(kept)   # the tensors of another save beside this JSON
    with pytest.raises(ValueError, match="not the one"):
        checkpoint.load(new)
    assert checkpoint.prune(tmp_path, 1) == [old]
