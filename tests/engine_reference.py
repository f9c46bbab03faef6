"""What transformers computes on the same weights: the reference every rollout engine's
output (greedy text, sampler log-probs) is compared with."""

from __future__ import annotations

import torch


def chat_prompt(tok, text: str) -> list[int]:
    """One user turn through the chat template, as the token ids a rollout engine is given."""
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def hf_greedy(model, tok, prompts, n=8):
    out = []
    for p in prompts:
        with torch.no_grad():
            ids = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id)
        out.append(tok.decode(ids[0, len(p):].tolist(), skip_special_tokens=True))
    return out


def hf_logprobs(model, rollout, temperature):
    """The model's log-prob of each completion token of ``rollout``, at the sampling temperature."""
    ids = torch.tensor([list(rollout.prompt_ids) + list(rollout.completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(rollout.prompt_ids) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(rollout.completion_ids).unsqueeze(-1)).squeeze(-1)
