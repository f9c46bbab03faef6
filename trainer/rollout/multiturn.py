"""Multi-turn rollouts, token in / token out.

After a wrong answer with feedback (a failing test's output), the env's feedback turn is
appended as *tokens* to the very ids that were sampled, and the model continues from
there. Nothing sampled is decoded and re-encoded, so the learner trains on exactly the ids
the sampler produced (no re-tokenization drift), and the env's tokens are context with a
learn mask of 0: the model is not trained to write the feedback.

Whether an episode goes on is the env's decision (``VerifiableEnv.continues``, which its
``step()`` follows too); the trainer adds one condition of its own: a reply cut off at
``max_new_tokens`` (``finish_reason != "stop"``) ends its episode.

The feedback tokens are what the chat template puts between the end of the sampled reply
and the start of the next one (``ChatTurns``): the whole conversation is rendered (the
prompt messages, each reply, each feedback turn, the generation prompt), with a
placeholder for each reply's text, and the inserted text is what follows the latest
placeholder. For ChatML (Qwen2.5) that is ``<|im_end|>\\n<|im_start|>user\\n…<|im_end|>\\n
<|im_start|>assistant\\n``; for Llama 3.1 ``<|eot_id|><|start_header_id|>user…``; never a
second system prompt or BOS, which a template adds only at the start of a conversation.
The sampled reply ends with the model's end-of-turn token; when it is the special token
the template's suffix starts with, it is not repeated, otherwise (a reply ended by a stop
string or another stop token) the template's end of turn is inserted as an env token.

Two checks make sure the episode is the template's rendering of the conversation: the
prompt ids that were sampled are the tokens of the rendered prompt (or their end, for a
prompt cut by ``truncate_left``), and the rendering of the conversation before each reply
is the text that reply was sampled after. A template that fails them (one that moves the
system prompt into the last user turn, or renders earlier turns differently once more
follow) raises ``TemplateSplitError``. One difference is allowed: the generation prompt may
carry text the template does not render for a past assistant turn, such as Qwen3's empty
``<think>\\n\\n</think>\\n\\n`` with ``enable_thinking=False``; that text was context the
reply was sampled after, so the episode keeps it (as sampled) and the rest follows the
template.

Text-mode envs (a plain-text prompt, no chat template) join turns as their observations
do: the feedback turn is ``TEXT_TURN_SEPARATOR + feedback``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.envs import EnvSuite, SuiteItem, Verdict
from proctor.envs.core.env import TEXT_TURN_SEPARATOR
from proctor.envs.core.types import Message

from .base import Generator, Rollout, SamplingParams

ScoreFn = Callable[[list[SuiteItem], list[Rollout]], list[Verdict]]

# Stands for the text of the n-th reply while the template renders the turns around it.
REPLY_PLACEHOLDER = "PROCTOR_REPLY_{}_c0ffee"


class TemplateSplitError(ValueError):
    """The chat template cannot be split into feedback turns appended to the sampled ids."""


@dataclass
class Conversation:
    """One episode as the chat template sees it: the messages so far (each reply a
    placeholder) and the rendered text the latest reply was sampled after."""

    messages: list[Message]
    context: str
    replies: int = 0


class ChatTurns:
    """Feedback turns as tokens of the conversation the chat template renders."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> None:
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        special = set(getattr(tokenizer, "all_special_ids", None) or [])
        special |= {i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
                    if getattr(t, "special", False)}
        self.special = special

    def render(self, messages: Sequence[Message]) -> str:
        """The conversation with the generation prompt, as text (what the prompts are tokenized from)."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                                  **self.kwargs)
        return text if isinstance(text, str) else text[0]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def start(self, messages: Sequence[Message], prompt_ids: Sequence[int]) -> Conversation:
        """The conversation of a prompt; checks that ``prompt_ids`` are its rendering's tokens."""
        context = self.render(messages)
        rendered = self.encode(context)
        n = len(prompt_ids)
        if n == 0 or n > len(rendered) or list(prompt_ids) != rendered[-n:]:
            raise TemplateSplitError(
                "the sampled prompt ids are not the chat template's tokens of the prompt messages "
                f"({n} prompt ids, {len(rendered)} rendered; chat_template_kwargs={self.kwargs}): the prompts "
                "must be tokenized with the same template and chat_template_kwargs as the feedback turns")
        return Conversation([dict(m) for m in messages], context)

    def feedback_ids(self, conversation: Conversation, completion_ids: Sequence[int],
                     feedback: Message | Sequence[Message]) -> list[int]:
        """The ids that follow ``completion_ids`` (the latest reply, as sampled) up to where the
        next reply begins: the end of the assistant turn, the ``feedback`` turn (or the ``tool``
        messages that answer the reply's calls) and the generation prompt, as the template
        renders them. Advances ``conversation``."""
        number = conversation.replies + 1
        reply = REPLY_PLACEHOLDER.format(number)
        following = [dict(feedback)] if isinstance(feedback, Mapping) else [dict(m) for m in feedback]
        messages = conversation.messages + [{"role": "assistant", "content": reply}, *following]
        text = self.render(messages)
        if text.count(reply) != 1:
            raise TemplateSplitError(
                f"the chat template renders the content of assistant turn {number} {text.count(reply)} times, "
                "not once as given: it drops, rewrites or repeats past replies, so the sampled reply cannot "
                "stand in its place")
        at = text.index(reply)
        head, after = text[:at], text[at + len(reply):]
        if not conversation.context.startswith(head):
            raise TemplateSplitError(
                f"the chat template renders the conversation before assistant turn {number} differently once "
                "a feedback turn follows (it moves the system prompt or some turn, or renders earlier turns "
                "by the number that follow): appending the feedback as tokens would not give the template's "
                f"conversation. Sampled after: ...{conversation.context[-160:]!r}; "
                f"rendered before the reply: ...{head[-160:]!r}")
        ids = self.encode(after)
        # The reply's own end-of-turn token is the one the template closes the turn with.
        if completion_ids and ids and completion_ids[-1] == ids[0] and ids[0] in self.special:
            ids = ids[1:]
        conversation.messages, conversation.context, conversation.replies = messages, text, number
        return ids


def continue_turns(suite: EnvSuite, generator: Generator, tokenizer: Any, sampling: SamplingParams,
                   items: Sequence[SuiteItem], rollouts: list[Rollout], verdicts: list[Verdict],
                   score: ScoreFn, chat_template_kwargs: Optional[Mapping[str, Any]] = None
                   ) -> tuple[list[Rollout], list[Verdict], int]:
    """Run further turns for the rollouts whose env continues them; returns (rollouts, verdicts,
    turns run). The feedback turns go through the chat template with ``chat_template_kwargs``,
    as the prompts did (module docstring)."""
    rollouts, verdicts = list(rollouts), list(verdicts)
    one = replace(sampling, n=1)
    chat = ChatTurns(tokenizer, chat_template_kwargs)
    conversations: dict[int, Conversation] = {}
    started: dict[tuple, Conversation] = {}     # a group's rollouts share their prompt's check
    live = range(len(rollouts))
    max_turns = max(env.max_turns for env in suite.envs.values())
    turns = 1
    for turn in range(2, max_turns + 1):
        live = [i for i in live if rollouts[i].finish_reason == "stop"
                and suite.envs[items[i].env].continues(verdicts[i], turn - 1)]
        if not live:
            break
        turns = turn
        inserted = {}
        prompts = []
        for i in live:
            env, r = suite.envs[items[i].env], rollouts[i]
            message = env.feedback_turn(verdicts[i])
            prompt = suite.prompt_of(items[i])
            if isinstance(prompt, str):
                inserted[i] = list(tokenizer.encode(TEXT_TURN_SEPARATOR + message["content"], add_special_tokens=False))
            else:
                if i not in conversations:
                    key = (items[i].env, r.prompt_ids)
                    if key not in started:
                        started[key] = chat.start(prompt, r.prompt_ids)
                    first = started[key]
                    conversations[i] = Conversation(list(first.messages), first.context)
                inserted[i] = chat.feedback_ids(conversations[i], r.completion_ids, message)
            prompts.append(list(r.prompt_ids) + list(r.completion_ids) + inserted[i])
        answers = [group[0] for group in generator.generate(prompts, one)]
        for i, answer in zip(live, answers):
            r, env_ids = rollouts[i], inserted[i]
            rollouts[i] = replace(
                r, completion_ids=r.completion_ids + tuple(env_ids) + answer.completion_ids,
                logprobs=r.logprobs + (0.0,) * len(env_ids) + answer.logprobs,
                learn_mask=r.learned() + (0,) * len(env_ids) + (1,) * len(answer.completion_ids),
                text=answer.text, finish_reason=answer.finish_reason, weight_version=answer.weight_version,
                extra={**r.extra, "turns": turn})
        # The episode's reward is the verdict on the latest answer.
        new = score([items[i] for i in live], [rollouts[i] for i in live])
        for i, v in zip(live, new):
            verdicts[i] = v
    return rollouts, verdicts, turns
