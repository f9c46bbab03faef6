"""The tiny offline model: builds in seconds, loads with Auto* classes, generates, is deterministic."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")   # a shared 2-core box slows >10x with 2 threads

import pytest
import typer
from safetensors.torch import load_file
from typer.testing import CliRunner

from proctor.cli.tiny_model_cmd import tiny_model
from proctor import tiny_model as tm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.make_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0)


def _cli() -> typer.Typer:
    # A group with the one command, registered as app.py does (`proctor tiny-model ...`).
    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("tiny-model")(tiny_model)
    return app


def test_loads_with_auto_classes_and_generates(model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|pad|>"
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    inputs = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    assert tok.decode(inputs["input_ids"][0]).endswith("<|im_start|>assistant\n")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0]), str)


def test_tokenizer_round_trips_text(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    for text in ("What is 12 - 7?", "Compute 3 × (4 + 5). Put it in \\boxed{}.", "héllo  wörld\n\tend"):
        assert tok.decode(tok(text)["input_ids"]) == text
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"   # readable by transformers 4.x too


def test_shape_vocab_multiple_of_64_and_head_dim_32(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert config.model_type == "qwen2"
    assert config.vocab_size % 64 == 0 and len(tok) <= config.vocab_size < len(tok) + 64
    assert config.hidden_size // config.num_attention_heads == 32
    assert config.tie_word_embeddings is True
    assert tm.count_parameters(model_dir) > 1_000_000


def test_same_seed_same_weights_other_seed_differs(model_dir: Path, tmp_path: Path) -> None:
    again = tm.make_tiny_model(tmp_path / "again", seed=0)
    other = tm.make_tiny_model(tmp_path / "other", seed=1)
    a, b, c = (load_file(str(p / "model.safetensors")) for p in (model_dir, again, other))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert (model_dir / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    assert any(not a[k].equal(c[k]) for k in a if a[k].shape == c[k].shape)


def test_llama_untied(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    path = tm.make_tiny_model(tmp_path / "llama", arch="llama", tie_embeddings=False, layers=1)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.head_dim == 32 and model.config.vocab_size % 64 == 0
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_pretraining_steps_report_progress_and_change_weights(model_dir: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int, float]] = []
    path = tm.make_tiny_model(tmp_path / "pre", pretrain_steps=2, progress=lambda s, n, loss: seen.append((s, n, loss)))
    assert [(s, n) for s, n, _ in seen] == [(1, 2), (2, 2)] and all(loss > 0 for *_, loss in seen)
    info = json.loads((path / tm.BUILD_INFO_FILE).read_text())
    assert info["pretrain_steps"] == 2 and info["final_loss"] == pytest.approx(seen[-1][2])
    random_init, trained = (load_file(str(p / "model.safetensors")) for p in (model_dir, path))
    assert any(not random_init[k].equal(trained[k]) for k in random_init)


def test_bad_arguments_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="heads="):
        tm.make_tiny_model(tmp_path / "x", hidden=256, heads=4)
    with pytest.raises(ValueError, match="arch"):
        tm.make_tiny_model(tmp_path / "x", arch="gpt2")  # type: ignore[arg-type]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="overwrite"):
        tm.make_tiny_model(tmp_path / "full")


def test_cache_builds_once_and_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_CACHE", str(tmp_path / "cache"))
    first = tm.tiny_model_path(layers=1)
    assert first.parent == tmp_path / "cache" and first.name.startswith("tiny-model-")
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]   # no temp folders left

    def must_not_build(*a: object, **k: object) -> None:
        raise AssertionError("cached model was rebuilt")

    monkeypatch.setattr(tm, "make_tiny_model", must_not_build)
    assert tm.tiny_model_path(layers=1) == first
    assert tm.tiny_model_path(cache_dir=tmp_path / "cache", layers=1, seed=0) == first  # defaults hash the same
    with pytest.raises(AssertionError):
        tm.tiny_model_path(layers=1, seed=5)    # other arguments: another model
    with pytest.raises(TypeError, match="make_tiny_model"):
        tm.tiny_model_path(colour="red")


def test_a_build_killed_by_a_signal_leaves_nothing_once_the_next_build_runs(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL skips the build's own clean-up; the next build of that model removes the dead
    builder's folder and leaves a live builder's (or another host's) alone."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    cache = tmp_path / "cache"
    code = ("import proctor.tiny_model as tm, time\n"
            "def slow(out, **k):\n    open(f'{out}/started', 'w').close(); time.sleep(60)\n"
            "tm.make_tiny_model = slow\n"
            f"tm.tiny_model_path(cache_dir={str(cache)!r}, layers=1)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not list(cache.glob(".tiny-model-*/started")):
        assert proc.poll() is None and time.monotonic() < deadline, "the build did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    dead = [p.name for p in cache.iterdir() if p.name.startswith(".")]
    assert len(dead) == 1 and f".{socket.gethostname()}.{proc.pid}." in dead[0]   # left behind
    entry = dead[0].split(".")[1]
    live = cache / f".{entry}.{socket.gethostname()}.{os.getpid()}.live"   # this test's process: alive
    elsewhere = cache / f".{entry}.other-host.{proc.pid}.x"                # a pid of another host's
    live.mkdir()
    elsewhere.mkdir()
    first = tm.tiny_model_path(cache_dir=cache, layers=1)
    left = sorted(p.name for p in first.parent.iterdir() if p.name.startswith("."))
    assert left == sorted([live.name, elsewhere.name])


def test_config_for_planning_matches_the_build_without_building(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner reads a tiny model's config.json: one not built yet is not built for it (minutes,
    and torch), and the config written alone is the one the build writes."""
    monkeypatch.setenv("PROCTOR_CACHE", str(tmp_path / "cache"))
    real = tm.make_tiny_model
    monkeypatch.setattr(tm, "make_tiny_model", lambda *a, **k: pytest.fail("planning built the model"))
    alone = Path(tm.resolve_model_config("tiny:0"))
    assert alone.name.startswith("tiny-config-") and not [p for p in alone.parent.iterdir() if p.name[0] == "."]
    monkeypatch.setattr(tm, "make_tiny_model", real)
    built = Path(tm.resolve_model_path("tiny:0"))
    keep = lambda d: {k: v for k, v in json.loads((d / "config.json").read_text()).items()
                      if k != "transformers_version"}
    assert keep(alone) == keep(built)
    assert tm.resolve_model_config("tiny:0") == str(built)   # once built, the model's own config
    assert tm.resolve_model_config("org/name") == "org/name"


def test_cli_help() -> None:
    result = CliRunner().invoke(_cli(), ["tiny-model", "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output and "--pretrain-steps" in result.output and "--arch" in result.output


def test_cli_builds_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "cli-model"
    result = CliRunner().invoke(_cli(), ["tiny-model", str(out), "--seed", "3", "--arch", "llama"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "parameters" in result.output
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    again = CliRunner().invoke(_cli(), ["tiny-model", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output
