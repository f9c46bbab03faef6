"""Tool episodes in the trainer, token in / token out: the episode is the chat template's rendering of
the conversation (tools included), tool results are context with no gradient, tools of a batch run at
once, a tool's infra failure is never a wrong answer, and the step and eval rows carry the tool columns.

A scripted generator 'samples' known replies (chosen from the conversation so far), so every episode's
course is known; the Qwen2.5 template (tests/data/chat_templates) renders the tools."""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.envs import EnvSuite, ListSource, SuiteItem, Task, VerifiableEnv, Verifier, exact_verdict  # noqa: E402
from proctor.envs.tools import HermesParser, Tool, ToolEnv, ToolLimits, ToolOutput  # noqa: E402
from proctor.trainer.rollout import Rollout, SamplingParams  # noqa: E402
from proctor.tiny_model import TOOLS_CHAT_TEMPLATE  # noqa: E402
from proctor.trainer.rollout.tool_turns import ToolTurns, tool_episodes, tool_metrics  # noqa: E402

QWEN = (Path(__file__).parent / "data" / "chat_templates" / "qwen2_5.jinja").read_text()
CALL = HermesParser().format_call


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def nap(seconds: float) -> str:
    """Sleep a while."""
    time.sleep(seconds)
    return "rested"


class Broken(Tool):
    name, description = "broken", "its machinery is down"
    parameters = {"type": "object", "properties": {}}

    def call(self, arguments, context):
        return ToolOutput("sandbox engine unreachable", "infra_error")


class Answer(Verifier):
    def verify(self, task, completion):
        return exact_verdict(completion.strip() == task.answer)


def tasks(n: int) -> ListSource:
    return ListSource([Task(f"t{i}", [{"role": "user", "content": f"What is {i} + 40?"}], str(i + 40))
                       for i in range(n)])


def tool_env(n: int = 4, **limits) -> ToolEnv:
    return ToolEnv(tasks(n), Answer(), tools=[add, nap, Broken()], limits=ToolLimits(**{"max_turns": 4, **limits}))


def qwen_tokenizer():
    from transformers import AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path(pretrain_steps=0))
    tok.chat_template = QWEN
    return tok


def ids_of(tok, messages, generation_prompt: bool, **kwargs) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def standard(i: int, turn: int) -> str:
    """Episode i: call add, then answer with what it said; i == 3 answers at once; i == 2 hits a broken tool."""
    if i == 3:
        return str(i + 40)
    if i == 2:
        return CALL("broken", {})
    return CALL("add", {"a": i, "b": 40}) if turn == 0 else str(i + 40)


class Scripted:
    """A generator whose reply is ``script(question number, replies so far)``: its ids, then ``end``."""

    weight_version = 0
    last_sync = None

    def __init__(self, tok, script=standard) -> None:
        self.tok, self.script, self.calls = tok, script, []
        self.end = tok.convert_tokens_to_ids("<|im_end|>")

    def one(self, prompt) -> Rollout:
        text = self.tok.decode(prompt)
        question = int(re.findall(r"What is (\d+) \+ 40", text)[-1])
        reply = self.script(question, text.count("<|im_start|>assistant") - 1)
        ids = tuple(self.tok.encode(reply, add_special_tokens=False)) + (self.end,)
        return Rollout(tuple(prompt), ids, (-0.5,) * len(ids), reply, "stop")

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        return [[self.one(p) for _ in range(params.n)] for p in prompts]

    def greedy_rollouts(self, prompts, max_new_tokens, *, stop=(), repetition_penalty=1.0):
        return [self.one(p) for p in prompts]


def play(tok, env, indices, gen=None, **kw):
    suite = EnvSuite({"calc": env})
    items = [SuiteItem("calc", env.source[i]) for i in indices]
    gen = gen or Scripted(tok)
    prompts = [ids_of(tok, suite.prompt_of(it), True, tools=env.tool_schemas()) for it in items]
    first = [g[0] for g in gen.generate(prompts, SamplingParams(n=1))]
    turns = ToolTurns(suite, tok, **kw)
    rollouts, verdicts, n = turns.run(items, first, lambda ps: [g[0] for g in gen.generate(ps, SamplingParams(n=1))])
    return suite, items, rollouts, verdicts, n, gen


def test_episode_ids_are_the_templates_rendering_of_the_tool_conversation():
    tok = qwen_tokenizer()
    env = tool_env()
    suite, items, rollouts, verdicts, turns, gen = play(tok, env, [0])
    r, v = rollouts[0], verdicts[0]
    assert turns == 2 and v.correct and r.extra["turns"] == 2 and r.extra["tools"]["calls"] == 1
    call = CALL("add", {"a": 0, "b": 40})
    tools = env.tool_schemas()
    prompt = list(suite.prompt_of(items[0]))
    tool_msg = {"role": "tool", "name": "add", "tool_call_id": "call_1_0", "content": "40"}
    raw = prompt + [{"role": "assistant", "content": call}, tool_msg, {"role": "assistant", "content": "40"}]
    structured = prompt + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 0, "b": 40}}}]}, tool_msg,
        {"role": "assistant", "content": "40"}]
    ids = list(r.prompt_ids) + list(r.completion_ids)
    for messages in (raw, structured):   # one transcript, rendered once: no re-tokenisation drift between turns
        full = ids_of(tok, messages, False, tools=tools)
        assert ids == full[:len(ids)] and tok.decode(full[len(ids):]).strip() == ""
    text = tok.decode(ids)
    assert text.count("# Tools") == 1 and text.count("<tool_response>\n40\n</tool_response>") == 1
    # sampled ids kept as sampled and learned; the template's tokens (the tool result) are context
    learned = [t for t, keep in zip(r.completion_ids, r.learned()) if keep]
    assert learned == list(gen.one(first_prompt := ids[:len(r.prompt_ids)]).completion_ids) + \
        list(tok.encode("40", add_special_tokens=False)) + [gen.end]
    env_text = tok.decode([t for t, keep in zip(r.completion_ids, r.learned()) if not keep])
    assert env_text == "\n<|im_start|>user\n<tool_response>\n40\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert len(r.logprobs) == len(r.completion_ids) and all(
        lp == 0.0 for lp, keep in zip(r.logprobs, r.learned()) if not keep)
    assert first_prompt == ids_of(tok, prompt, True, tools=tools)


def test_the_env_and_the_trainer_play_the_same_episode():
    tok = qwen_tokenizer()
    env = tool_env()
    _, _, rollouts, verdicts, _, _ = play(tok, env, [1])
    obs, _ = env.reset(options={"index": 1})
    obs, *_ = env.step(standard(1, 0))
    _, reward, terminated, _, info = env.step(standard(1, 1))
    assert terminated and reward == verdicts[0].reward == 1.0
    same = lambda tools: {k: v for k, v in tools.items() if k not in ("end", "time_s")}  # noqa: E731
    assert same(info["verdict"].info["tools"]) == same(rollouts[0].extra["tools"])
    # the trainer's episode is the env's observation rendered by the template
    ids = list(rollouts[0].prompt_ids) + list(rollouts[0].completion_ids)
    whole = obs + [{"role": "assistant", "content": standard(1, 1)}]
    assert ids == ids_of(tok, whole, False, tools=env.tool_schemas())[:len(ids)]


def test_every_end_of_an_episode_in_one_batch():
    tok = qwen_tokenizer()

    def script(i, turn):
        return {0: CALL("add", {"a": 0, "b": 40}) if turn == 0 else "40",     # a tool, then the answer
                1: "<tool_call>{oops</tool_call>" if turn == 0 else "41",      # malformed, then answers
                2: CALL("broken", {}),                                        # infra failure
                3: "43",                                                      # no tool
                4: CALL("add", {"a": 1, "b": 1})}[i]                          # never answers
    env = tool_env(5, max_turns=3)
    _, _, rollouts, verdicts, turns, gen = play(tok, env, range(5), Scripted(tok, script))
    ends = [r.extra["tools"]["end"] for r in rollouts]
    assert ends == ["answer", "answer", "infra_error", "answer", "turn_limit"] and turns == 3
    assert [v.correct for v in verdicts] == [True, True, False, True, False]
    assert verdicts[2].status == "infra_error" and math.isnan(verdicts[2].reward)
    assert rollouts[1].extra["tools"]["error_kinds"] == {"malformed": 1}
    assert gen.calls == [5, 3, 1]            # each later turn samples only the episodes still playing
    row = tool_metrics(tool_episodes(rollouts, verdicts))
    assert row["tool_episodes"] == 5 and row["tool_infra_errors"] == 1 and row["tool_errors_malformed"] == 1
    assert row["tool_use_frac"] == 0.8 and row["reward_without_tools"] == 1.0
    assert row["reward_with_tools"] == pytest.approx(2 / 3)   # 0 and 1 right, 4 wrong; 2 not judged
    assert row["tool_calls_per_episode"] == pytest.approx((1 + 1 + 1 + 0 + 2) / 5)


def test_a_cut_off_reply_ends_the_episode_without_running_its_calls():
    tok = qwen_tokenizer()

    class Cut(Scripted):
        def one(self, prompt):
            r = super().one(prompt)
            return Rollout(r.prompt_ids, r.completion_ids[:-1], r.logprobs[:-1], r.text, "length")

    _, _, rollouts, verdicts, turns, _ = play(tok, tool_env(), [0], Cut(tok))
    assert turns == 1 and rollouts[0].extra["tools"]["end"] == "cut_off" and rollouts[0].extra["tools"]["calls"] == 0
    assert verdicts[0].scored and not verdicts[0].correct


def test_tools_of_a_batch_run_at_once():
    tok = qwen_tokenizer()

    def script(i, turn):
        return CALL("nap", {"seconds": 0.4}) if turn == 0 else str(i + 40)

    start = time.perf_counter()
    _, _, _, verdicts, _, _ = play(tok, tool_env(8), range(8), Scripted(tok, script), workers=8)
    assert all(v.correct for v in verdicts)
    assert time.perf_counter() - start < 8 * 0.4 / 2   # 8 naps of 0.4 s side by side, not in a row


@pytest.fixture()
def trainer(tmp_path):
    from accelerate.state import AcceleratorState
    from transformers import AutoModelForCausalLM

    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.grpo import GRPOTrainer

    AcceleratorState._reset_state(reset_partial_state=True)
    tok = qwen_tokenizer()
    tok.chat_template = TOOLS_CHAT_TEMPLATE   # the tiny tool template: short prompts for a 512-position model
    path = tiny_model_path(pretrain_steps=0)
    plain = VerifiableEnv(tasks(4), Answer())
    suite = EnvSuite({"calc": tool_env(), "plain": plain})
    cfg = GRPOConfig.from_flat(model=str(path), prompts_per_step=4, group_size=2, max_new_tokens=8, max_steps=1,
                               micro_batch_size=8, output_dir=str(tmp_path / "run"))
    try:
        t = GRPOTrainer(cfg, suite, AutoModelForCausalLM.from_pretrained(path), tok)
        gen = Scripted(tok)
        t.generator.generate, t.generator.greedy_rollouts = gen.generate, gen.greedy_rollouts
        yield t
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def test_tool_tokens_carry_no_gradient(trainer):
    from proctor.trainer.batch import build_batch
    from proctor.trainer.metrics import Stopwatch

    items = [SuiteItem("calc", tasks(4)[0]), SuiteItem("calc", tasks(4)[1])]
    scored = trainer.rollout(items, Stopwatch())
    assert all(0 in r.learned() for r in scored.rollouts)
    batch = build_batch(scored.rollouts, [1.0, -1.0, 1.0, -1.0], [True] * 4, trainer.tokenizer.pad_token_id)
    for i, r in enumerate(scored.rollouts):   # the learner trains on exactly the sampled ids
        assert batch.targets[i][batch.mask[i] > 0].tolist() == [t for t, k in zip(r.completion_ids, r.learned()) if k]
    logits = []
    head = trainer.model.get_output_embeddings()

    def keep(module, inputs, output):
        if output.requires_grad:
            output.retain_grad()
            logits.append(output)

    hook = head.register_forward_hook(keep)
    try:
        trainer.learn(batch, Stopwatch())
    finally:
        hook.remove()
    grads = [o.grad for o in logits if o.grad is not None]
    assert len(grads) == 1
    grad, width = grads[0], batch.input_ids.shape[1]
    first = width - grad.shape[1]          # logits_to_keep: the last positions only
    per_position = grad.abs().sum(-1)      # [B, kept]: position p predicts token p + 1 (mask column p)
    mask = batch.mask[:, first:first + grad.shape[1]]
    mask = torch.nn.functional.pad(mask, (0, grad.shape[1] - mask.shape[1]))
    tool_positions = torch.zeros_like(mask, dtype=torch.bool)
    for i, r in enumerate(scored.rollouts):
        p = len(r.prompt_ids)
        for k, keep in enumerate(r.learned()):
            if not keep and p - 1 + k >= first:
                tool_positions[i, p - 1 + k - first] = True
    assert tool_positions.any() and (per_position[tool_positions] == 0).all()
    assert (per_position[mask > 0] > 0).all()


def test_a_step_and_an_evaluation_with_tool_and_plain_envs(trainer):
    from proctor.trainer.metric_schema import metric_of

    row = trainer.step(1)
    assert row["turns_max"] == 2 and row["tool_episodes"] > 0 and row["tool_calls_per_episode"] > 0
    undeclared = [k for k in row if metric_of(k) is None]
    assert not undeclared
    from proctor.trainer.evaluation import EvalSettings, eval_items, evaluate
    from proctor.trainer.parts import tokenize, tool_turns_of

    suite = trainer.parts.rollouts.tool_turns.suite
    values = evaluate(trainer.generator, lambda item: tokenize(suite, trainer.tokenizer, item), suite,
                      eval_items(suite), EvalSettings(greedy=True, k=(2,), sampling=trainer.parts.sampling),
                      tools=tool_turns_of(suite, trainer.tokenizer, None))
    # the plain env has no tools: its replies are judged as they are (only question 3 answers at once)
    assert values["eval_calc_greedy_pass_rate"] == 1.0 and values["eval_plain_greedy_pass_rate"] == 0.25
    assert values["eval_calc_pass@2"] == 1.0
    # the broken-tool question (index 2) is not judged, never wrong; the others called add or answered at once
    assert values["eval_infra"] == 1.0 + 2.0 and values["eval_greedy_tool_episodes"] == 4.0
    assert values["eval_greedy_tool_use_frac"] == 0.75
