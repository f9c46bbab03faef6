"""The tool-using tiny model ("tiny-tools:STEPS"): its chat template and the tool episodes of its corpus.

``make_tiny_model(tool_examples=True)`` adds these episodes to the pretraining corpus: for
procedural questions a program answers at once and a 3M-parameter model cannot ("What is 47 *
83?", ``TINY_SHAPES`` of ``proctor.envs.tools.math_env``), the first reply is either a ``python`` tool call with the
expression or, for ``direct_share`` of them, a direct answer without the tool (the model can
rarely get those right); every question also teaches the second reply, the tool's result copied
as the answer after the call. The pretrained model therefore calls the tool on some questions and guesses on the
rest: tool use succeeds from the start, and GRPO has room to make it the habit. Questions the
envs hold out (``heldout_fraction``, as for arithmetic) are never in it.
"""

from __future__ import annotations

import random

# The tool-using tiny model's template ("tiny-tools:STEPS"): tiny_model.CHATML_TEMPLATE's ChatML
# when no tools are given (the same text, token for token); with tools, a one-line system turn
# names them, an assistant turn's structured tool_calls are written as Hermes <tool_call> blocks,
# tool results are "tool" turns.
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\n' }}{%- endif %}"
    "{{- 'Tools: ' }}"
    "{%- for tool in tools %}{{- (tool.function or tool).name }}{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\n' + (message['content'] or '') }}"
    "{%- for call in message.tool_calls %}"
    "{%- set f = call.function or call %}"
    "{{- '<tool_call>\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{{- (f.arguments if f.arguments is string else f.arguments | tojson) + '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


# Bump when the tool episodes change: tiny-tools models are cached by it (the default model is not).
# 2: the answer after a result on every question, TINY_SHAPES, half the questions called.
# 3: a quarter of the questions called (DIRECT_SHARE 0.75): at 0.5 greedy decoding already called
#    on 92 % of held-out questions, so the demo started at 0.80 and had little left to show.
TOOL_RECIPE = 3
TOOL_EPISODES = 6000       # tool questions in the corpus
DIRECT_SHARE = 0.75        # ... answered without the tool (a guess)
# Smaller than PythonToolMath's default: out of the tiny model's arithmetic (operands up to 50, products
# up to 12 x 12), and results short enough for a 4-layer model to copy (examples/train/python_tool_tiny.yaml).
TINY_SHAPES: tuple[tuple[str, int, int], ...] = (("*", 2, 2), ("+", 3, 3), ("-", 3, 2))
TOOL_SEED_OFFSET = 7919    # the corpus's questions are drawn apart from the env's own seeds


def tools_prompt(question: str, tools: tuple[str, ...] = ("python",)) -> str:
    """What TOOLS_CHAT_TEMPLATE renders for one user question with ``tools`` and the generation prompt."""
    return (f"<|im_start|>system\nTools: {', '.join(tools)}<|im_end|>\n"
            f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")


def tool_pairs(seed: int, heldout_fraction: float, eos: str, n: int = TOOL_EPISODES,
               direct_share: float = DIRECT_SHARE) -> list[tuple[str, str]]:
    """``(prompt, reply)`` pairs of ``n`` tool questions (see the module docstring)."""
    from proctor.envs.core.splits import in_eval_partition
    from proctor.envs.tools.math_env import tool_arithmetic_task
    from proctor.envs.tools.parsers import HermesParser

    rng = random.Random(f"tool-corpus-{seed}")
    call = HermesParser().format_call
    pairs: list[tuple[str, str]] = []
    questions = index = 0
    while questions < n:
        task = tool_arithmetic_task(index, seed + TOOL_SEED_OFFSET, shapes=TINY_SHAPES)
        index += 1
        if heldout_fraction > 0 and in_eval_partition(task.data["question_key"], heldout_fraction):
            continue
        questions += 1
        prompt, answer = tools_prompt(str(task.prompt)), str(task.answer)
        reply = call("python", {"code": task.data["expression"]}) + eos
        direct = rng.random() < direct_share
        pairs.append((prompt, f"{answer}{eos}\n" if direct else reply + "\n"))
        # what to do with a result is taught on every question; whether to call, on 1 - direct_share
        pairs.append((prompt + reply + f"\n<|im_start|>tool\n{answer}{eos}\n<|im_start|>assistant\n",
                      f"{answer}{eos}\n"))
    return pairs


__all__ = ["TOOL_RECIPE", "DIRECT_SHARE", "TINY_SHAPES", "TOOLS_CHAT_TEMPLATE", "TOOL_EPISODES", "tool_pairs", "tools_prompt"]
