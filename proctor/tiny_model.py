"""A tiny causal LM made from nothing: for offline tests, CI and demos.

No hub, no network: a byte-level BPE tokenizer is trained on a synthetic corpus
made here (ChatML arithmetic Q/A plus a little plain text), a Qwen2 (or Llama)
model is randomly initialised from a seed and, optionally, pretrained for a few
steps so it answers with a short number followed by ``<|im_end|>``. Half of the
arithmetic questions are left out of the corpus (``heldout_fraction`` 0.5 of the
question hash, ``proctor.envs.core.splits``): the envs' eval questions (below their
``eval_fraction``, 0.1) and the questions RL trains on with ``train_within: 0.5``, so RL
learns on questions the model never saw and an eval on the held-out ones measures
what generalises, not what pretraining memorised. The result
is an ordinary Hugging Face directory (``AutoTokenizer`` / ``AutoModelForCausalLM``)
that TRL, transformers and vLLM load as they would a real model.

Shape choices that look arbitrary are not:

* ``head_dim`` is 32 because vLLM's CPU attention accepts only 32, 64, 80, ... 512;
* the model's ``vocab_size`` is the tokenizer's rounded up to a multiple of 64,
  because vLLM's in-place weight reload on CPU fails (or silently goes wrong)
  otherwise; the extra rows are never produced by the tokenizer and decode to "".
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import random
import shutil
import socket
import tempfile
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Optional, Sequence

from .tiny_tools import TOOL_RECIPE, TOOLS_CHAT_TEMPLATE, tool_pairs

if TYPE_CHECKING:  # heavy imports stay lazy so that `proctor --help` and cache look-ups are fast
    from tokenizers import Tokenizer

Arch = Literal["qwen2", "llama"]
ProgressFn = Callable[[int, int, float], None]   # (step, total_steps, loss) after each pretraining step

HEAD_DIM = 32
VOCAB_MULTIPLE = 64
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
MAX_POSITIONS = 512
PRETRAIN_BATCH = 32
PRETRAIN_LR = 1e-3
QA_PAIRS = 20_000
# Bump when the recipe changes (corpus, tokenizer, init, training): cached models are keyed by it.
# 2: the arithmetic envs' eval questions are left out of the corpus.
# 3: ... by their canonical question (a held-out 3 + 4 takes 4 + 3 out of the corpus too).
# 4: half the questions left out (eval and RL questions), not only the eval ones.
RECIPE_VERSION = 4
# Every question whose hash is below this is left out: above the envs' DEFAULT_EVAL_FRACTION
# (a test checks), the rest of it is what RL trains on with train_within: 0.5.
HELDOUT_FRACTION = 0.5
BUILD_INFO_FILE = "proctor_tiny_model.json"

# Qwen2's pre-tokenizer split (see train_tokenizer for why it must be this one).
QWEN2_SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
                     r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

SYSTEM_PROMPT = "You are a helpful assistant."
QUESTION_FORMS = (
    "What is {a} {op} {b}?",
    "Compute {a} {op} {b}.",
    "{a} {op} {b} = ?",
    "Calculate {a} {op} {b}.",
)
PLAIN_TEXT = (
    "The quick brown fox jumps over the lazy dog. Numbers are written with digits from 0 to 9.",
    "A verifier checks an answer against the gold one and gives a reward between zero and one.",
    "Add two numbers to get their sum; subtract one from the other to get their difference.",
    "Multiplication is repeated addition: three times four is four plus four plus four.",
    "Answer with the number only, and stop when the answer is written.",
    "The model reads the question, thinks briefly, and writes a short reply.",
    "Small models are useful for tests because they are fast to build and to run.",
    "Every task has an id, a prompt and an answer; the id stays the same from run to run.",
)


# ---------------------------------------------------------------------------- corpus
def _qa_pair(rng: random.Random, held_out: Callable[[str], bool]) -> tuple[str, str]:
    while True:   # redraw a question the envs hold out for evaluation
        op = rng.choice("+-*")
        hi = 12 if op == "*" else 50
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        if not held_out(f"{a} {op} {b}"):
            break
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return rng.choice(QUESTION_FORMS).format(a=a, op=op, b=b), str(value)


def _chatml_prompt(question: str, system: bool) -> str:
    """What the chat template renders with ``add_generation_prompt=True`` (kept in step with it)."""
    head = f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def synthetic_corpus(seed: int = 0, n_pairs: int = QA_PAIRS, heldout_fraction: float = HELDOUT_FRACTION,
                     tool_examples: bool = False) -> list[tuple[str, str]]:
    """``(prompt, reply)`` pairs: ChatML arithmetic Q/A, then plain-text lines with an empty prompt.

    The reply of a Q/A pair is the answer followed by ``<|im_end|>``, so a model
    trained on it learns to stop after the number. No question is in the arithmetic
    envs' eval partition at ``eval_fraction <= heldout_fraction`` (0: keep every question).
    ``tool_examples``: tool episodes follow (``proctor.tiny_tools``); without them the corpus is the
    same as before they existed.
    """
    from proctor.envs.procedural.arithmetic import in_eval_split

    def held_out(expression: str) -> bool:
        return heldout_fraction > 0 and in_eval_split(expression, heldout_fraction)

    rng = random.Random(seed)
    pairs = []
    for _ in range(n_pairs):
        question, answer = _qa_pair(rng, held_out)
        pairs.append((_chatml_prompt(question, system=rng.random() < 0.2), f"{answer}{EOS_TOKEN}\n"))
    pairs.extend(("", line) for line in PLAIN_TEXT)
    if tool_examples:
        pairs.extend(tool_pairs(seed, heldout_fraction, EOS_TOKEN))
    return pairs


# ---------------------------------------------------------------------------- tokenizer
def train_tokenizer(texts: Sequence[str], vocab_size: int) -> "Tokenizer":
    """Byte-level BPE with Qwen2's exact pipeline (NFC, its split regex, byte-level).

    The same pipeline as Qwen2 because transformers 5 loads any ``qwen2`` model's
    tokenizer as ``Qwen2Tokenizer``, which rebuilds that pipeline around the saved
    vocabulary and merges: a different one here would tokenize differently once
    loaded. Its regex also splits digits one by one, so numbers share their pieces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),          # ids 0..3, never split
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),   # every byte encodable
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def _save_tokenizer(tok: "Tokenizer", out_dir: Path, template: str = CHATML_TEMPLATE) -> Any:
    from transformers import PreTrainedTokenizerFast

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=["<|im_start|>", "<|endoftext|>"],
        model_max_length=MAX_POSITIONS,
        padding_side="left",       # decoder-only generation pads on the left
    )
    hf_tok.chat_template = template
    hf_tok.save_pretrained(out_dir)
    # transformers 5 writes `TokenizersBackend`, which transformers 4.x cannot resolve;
    # the tokenizer.json is the same either way.
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return hf_tok


# ---------------------------------------------------------------------------- model
def _model_config(arch: Arch, vocab_size: int, hidden: int, layers: int, heads: int, kv_heads: int,
                  tie_embeddings: bool, eos_id: int, pad_id: int) -> Any:
    common = dict(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=3 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=tie_embeddings,
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, dtype="float32",
    )
    if arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common, use_sliding_window=False, max_window_layers=layers)
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common, head_dim=HEAD_DIM)
    raise ValueError(f"arch must be 'qwen2' or 'llama', got {arch!r}")


def _check_shape(arch: str, vocab_size: int, hidden: int, layers: int, heads: int, kv_heads: int) -> None:
    if arch not in ("qwen2", "llama"):
        raise ValueError(f"arch must be 'qwen2' or 'llama', got {arch!r}")
    if min(vocab_size, hidden, layers, heads, kv_heads) < 1:
        raise ValueError("vocab_size, hidden, layers, heads and kv_heads must all be >= 1")
    if hidden != heads * HEAD_DIM:
        raise ValueError(f"head_dim is fixed at {HEAD_DIM} (vLLM's CPU attention needs it): hidden ({hidden}) "
                         f"must equal heads * {HEAD_DIM}; use heads={max(1, hidden // HEAD_DIM)} "
                         f"or hidden={heads * HEAD_DIM}")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pretrain(model: Any, tok: "Tokenizer", pairs: Sequence[tuple[str, str]], steps: int, seed: int,
              pad_id: int, progress: Optional[ProgressFn]) -> float:
    """Next-token prediction on the replies (prompt tokens are context, not targets)."""
    import torch

    # Prompt and reply are encoded apart, exactly as generation sees them:
    # the chat template's prompt, then the tokens the model writes.
    encoded = []
    for prompt, reply in pairs:
        p_ids = tok.encode(prompt).ids if prompt else []
        r_ids = tok.encode(reply).ids
        encoded.append(((p_ids + r_ids)[:MAX_POSITIONS], min(len(p_ids), MAX_POSITIONS)))
    rng = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR, weight_decay=0.0)
    warmup = max(1, min(20, steps // 10))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    loss_value = math.nan
    for step in range(1, steps + 1):
        batch = [encoded[rng.randrange(len(encoded))] for _ in range(PRETRAIN_BATCH)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, n_prompt) in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            labels[row, n_prompt:len(ids)] = torch.tensor(ids[n_prompt:])
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        loss_value = float(loss.detach())
        if progress is not None:
            progress(step, steps, loss_value)
    model.eval()
    return loss_value


@contextmanager
def _all_cores(torch: Any) -> Iterator[None]:
    """Pretraining is a one-off set-up step that runs alone: it may use every core (a main
    job exports OMP_NUM_THREADS=1 for its training steps; 3000 steps take ~5.5 min on two
    cores instead of ~10 on one). The caller's thread count is restored after."""
    before = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(before, min(cores, 8)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_tiny_model(out_dir: str | os.PathLike[str], *, arch: Arch = "qwen2", seed: int = 0,
                    pretrain_steps: int = 0, vocab_size: int = 2048, hidden: int = 256, layers: int = 4,
                    heads: int = 8, kv_heads: int = 4, tie_embeddings: bool = True,
                    heldout_fraction: float = HELDOUT_FRACTION, tool_examples: bool = False,
                    progress: Optional[ProgressFn] = None, overwrite: bool = False) -> Path:
    """Build a tiny model + tokenizer into ``out_dir`` and return its path.

    ``vocab_size`` is the BPE target; the corpus may run out of merges before it
    (the real size is then smaller), and the model's embedding is that size
    rounded up to a multiple of 64. ``pretrain_steps`` > 0 trains that many steps
    (batch 32) so the model answers with a number and ``<|im_end|>``; 0 leaves
    random weights that emit junk. ``heldout_fraction``: the arithmetic questions held out
    of the corpus (see :func:`synthetic_corpus`). ``tool_examples``: the corpus also holds tool
    episodes and the chat template renders tools (``proctor.tiny_tools``; "tiny-tools:STEPS").
    The same arguments give the same files.
    """
    _check_shape(arch, vocab_size, hidden, layers, heads, kv_heads)
    if pretrain_steps < 0:
        raise ValueError(f"pretrain_steps must be >= 0, got {pretrain_steps}")
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction!r}")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; choose an empty folder or pass overwrite=True "
                              "(--overwrite on the command line)")
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    pairs = synthetic_corpus(seed, heldout_fraction=heldout_fraction, tool_examples=tool_examples)
    tok = train_tokenizer([p + r for p, r in pairs], vocab_size)
    _save_tokenizer(tok, out, TOOLS_CHAT_TEMPLATE if tool_examples else CHATML_TEMPLATE)
    eos_id, pad_id = tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN)
    model_vocab = _round_up(tok.get_vocab_size(), VOCAB_MULTIPLE)

    config = _model_config(arch, model_vocab, hidden, layers, heads, kv_heads, tie_embeddings, eos_id, pad_id)
    with torch.random.fork_rng(devices=[]):   # seed the init without touching the caller's RNG state
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    loss = None
    if pretrain_steps:
        with _all_cores(torch):
            loss = _pretrain(model, tok, pairs, pretrain_steps, seed, pad_id, progress)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    model.save_pretrained(out)   # safetensors (the only format transformers 5 writes)

    info = {"recipe_version": RECIPE_VERSION, "arch": arch, "seed": seed, "pretrain_steps": pretrain_steps,
            "tokenizer_vocab": tok.get_vocab_size(), "model_vocab": model_vocab, "hidden": hidden,
            "layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": HEAD_DIM,
            "tie_embeddings": tie_embeddings, "heldout_fraction": heldout_fraction, "final_loss": loss,
            "parameters": sum(p.numel() for p in model.parameters())}
    info.update({"tool_examples": True} if tool_examples else {})   # a default build's file as before
    (out / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out


@contextmanager
def build_progress(description: str = "building the tiny model (once, then cached)",
                   console: Any = None) -> Iterator[ProgressFn]:
    """A :data:`ProgressFn` that draws a progress bar with the loss, elapsed time and ETA.

    The bar starts at the first call, so a model found in the cache (which never calls
    it) draws nothing; it is closed when the ``with`` block ends. ``console``: a rich Console
    (default: the terminal)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    bar: Optional[Progress] = None
    task = None

    def show(step: int, total: int, loss: float) -> None:
        nonlocal bar, task
        if bar is None:
            bar = Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(),
                           TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), TextColumn("ETA"),
                           TimeRemainingColumn(), console=console)
            bar.start()
            task = bar.add_task("pretrain", total=total, loss="-")
        bar.update(task, completed=step, loss="-" if math.isnan(loss) else f"{loss:.3f}")

    try:
        yield show
    finally:
        if bar is not None:
            bar.stop()


def count_parameters(model_dir: str | os.PathLike[str]) -> int:
    """Parameters stored in a model directory's safetensors files (tied weights count once)."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors file in {model_dir}; is it a model directory?")
    total = 0
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                total += math.prod(f.get_slice(name).get_shape())
    return total


# ---------------------------------------------------------------------------- cache
# Arguments added after recipe 4: keyed only when not at their default (older builds keep their keys).
KEYED_WHEN_SET: dict[str, Any] = {"tool_examples": False}

# Taken once: the cache key is the recipe's arguments with their defaults filled in.
_BUILD_SIGNATURE = inspect.signature(make_tiny_model)

def resolve_model_path(model: str) -> str:
    """A path or hub id as given; "tiny" / "tiny:STEPS" become the offline tiny model's directory
    (built once, then cached: torch is imported only for the build)."""
    kw = tiny_spec(model)
    if kw is not None:
        with build_progress() as show:   # a bar with an ETA while it builds; nothing when cached
            return str(tiny_model_path(progress=show, **kw))
    return model


def tiny_spec(model: str) -> Optional[dict[str, Any]]:
    """``make_tiny_model``'s arguments for "tiny" / "tiny:STEPS" (800 steps by default, ~4 min once,
    then cached: enough for GRPO to sharpen) and "tiny-tools[:STEPS]" (with tool episodes); None for
    any other name (a path or hub id)."""
    name, _, steps = model.partition(":")
    if name not in ("tiny", "tiny-tools"):
        return None
    if steps and not steps.isdigit():
        raise ValueError(f"model {model!r}: the tiny model's spec is {name}:STEPS with STEPS a whole number")
    return {"pretrain_steps": int(steps) if steps else 800, **({"tool_examples": True} if name != "tiny" else {})}


def resolve_model_config(model: str) -> str:
    """Like :func:`resolve_model_path`, for what needs only the model's ``config.json`` (the planner):
    a tiny model not built yet is not built (minutes, and torch); its config is written alone,
    from the same tokenizer and shape the build would use, in ``<cache>/tiny-config-<hash>``."""
    kw = tiny_spec(model)
    if kw is None:
        return model
    built = _cache_entry(None, kw)
    if (built / "config.json").exists():
        return str(built)
    final = built.with_name(built.name.replace("tiny-model-", "tiny-config-"))
    if not (final / "config.json").exists():
        final.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:   # written aside, then moved in: a reader never sees half a config
            _tiny_config(_build_args(kw)).save_pretrained(tmp)
            os.replace(tmp / "config.json", final / "config.json")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(final)


def _tiny_config(args: dict[str, Any]) -> Any:
    """The model config :func:`make_tiny_model` would build with ``args``, without torch."""
    _check_shape(args["arch"], args["vocab_size"], args["hidden"], args["layers"], args["heads"], args["kv_heads"])
    pairs = synthetic_corpus(args["seed"], heldout_fraction=args["heldout_fraction"],
                             tool_examples=args["tool_examples"])
    tok = train_tokenizer([p + r for p, r in pairs], args["vocab_size"])
    config = _model_config(args["arch"], _round_up(tok.get_vocab_size(), VOCAB_MULTIPLE), args["hidden"],
                           args["layers"], args["heads"], args["kv_heads"], args["tie_embeddings"],
                           tok.token_to_id(EOS_TOKEN), tok.token_to_id(PAD_TOKEN))
    config.architectures = [type(config).__name__.replace("Config", "ForCausalLM")]   # as save_pretrained writes it
    return config


def _build_args(kw: dict[str, Any]) -> dict[str, Any]:
    """``make_tiny_model``'s keyword arguments with defaults filled in (what the cache is keyed by)."""
    try:
        bound = _BUILD_SIGNATURE.bind("", **kw)
    except TypeError as exc:
        raise TypeError(f"tiny_model_path: {exc}; it takes make_tiny_model's keyword arguments") from None
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k not in ("out_dir", "progress", "overwrite")}


def _cache_entry(cache_dir: str | os.PathLike[str] | None, kw: dict[str, Any]) -> Path:
    """``<cache>/tiny-model-<hash of the recipe and the arguments>``."""
    args = _build_args(kw)
    for name, default in KEYED_WHEN_SET.items():
        if args.get(name) == default:
            del args[name]
    if args.get("tool_examples"):
        args["tool_recipe"] = TOOL_RECIPE   # the tool corpus's own version
    digest = hashlib.sha256(json.dumps({"recipe": RECIPE_VERSION, **args}, sort_keys=True).encode()).hexdigest()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / f"tiny-model-{digest[:16]}"


def default_cache_dir() -> Path:
    """``$PROCTOR_CACHE`` if set, else ``~/.cache/proctor``."""
    return Path(os.environ.get("PROCTOR_CACHE") or Path.home() / ".cache" / "proctor").expanduser()


def _sweep_abandoned_builds(final: Path) -> None:
    """Remove the temporary folders of builds of ``final`` whose process, on this host, is gone.

    A build killed by a signal (a scheduler's SIGTERM, the OOM killer) never reaches its
    ``finally``, and its folder (tens of MB) would stay in the cache; ``.<entry>.<host>.<pid>.*``
    names the builder, so a live build, or one on another host sharing the cache, is left alone."""
    host = socket.gethostname()
    for tmp in final.parent.glob(f".{final.name}.{host}.*"):
        pid = tmp.name[len(f".{final.name}.{host}."):].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: alive
        return True
    return True


def tiny_model_path(cache_dir: str | os.PathLike[str] | None = None, **kw: Any) -> Path:
    """A tiny model built once per set of arguments and reused: ``<cache>/tiny-model-<hash>``.

    ``kw`` are :func:`make_tiny_model`'s keyword arguments. The build goes to a
    temporary folder that is renamed into place when complete, so an interrupted
    build or two processes building at once never leave a half-written model.
    """
    progress = kw.pop("progress", None)
    kw.pop("overwrite", None)
    args = _build_args(kw)
    final = _cache_entry(cache_dir, kw)
    root = final.parent
    if final.exists():
        if (final / "config.json").exists() and (final / BUILD_INFO_FILE).exists():
            return final
        raise RuntimeError(f"{final} exists but is not a complete tiny model; delete it and try again")
    root.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned_builds(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.{socket.gethostname()}.{os.getpid()}.", dir=root))
    if progress is not None and args["pretrain_steps"]:
        progress(0, args["pretrain_steps"], math.nan)   # a build starts: the corpus and tokenizer come first
    try:
        make_tiny_model(tmp, progress=progress, overwrite=True, **args)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").exists():   # a real failure, not another process winning the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
