"""Greedy decoding with transformers: the reference every engine's output is compared with."""

from __future__ import annotations

import torch


def hf_greedy(model, tok, prompts, n=8):
    out = []
    for p in prompts:
        with torch.no_grad():
            ids = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id,
                                 eos_token_id=tok.eos_token_id)
        out.append(tok.decode(ids[0, len(p):].tolist(), skip_special_tokens=True))
    return out
