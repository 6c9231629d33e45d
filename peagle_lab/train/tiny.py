"""Tiny stand-ins that let the whole training path run on a CPU in seconds.

``CharTokenizer`` is a character-level tokenizer with a ChatML-like template, sized for
``peagle_lab.testing.tiny_target`` (96 ids), so ``synthesize`` and the CLI's ``--tiny``
runs exercise the same code as SmolLM2 does: chat templates, Magpie prefixes, responses,
shards. The texts it decodes from a random model are noise; the filters reject most of
them, which is itself worth testing.
"""
from __future__ import annotations

import torch

from .data import Example, generate_responses

_SPECIAL = {0: "<pad>", 1: "<|im_start|>", 2: "<|im_end|>"}
_FIRST_CHAR, _LAST_CHAR = 32, 32 + 93  # printable ASCII ' '..'|' → ids 3..95


class CharTokenizer:
    """Characters ``' '..'|'`` ↔ ids 3..95; ids 1/2 are the turn markers, 0 is padding.

    >>> tok = CharTokenizer()
    >>> ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    >>> tok.decode(ids)
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    chat_template = "chatml-like (peagle_lab.train.tiny)"
    eos_token_id = 2

    def _encode(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for tid, s in _SPECIAL.items():
                if tid and text.startswith(s, i):
                    out.append(tid)
                    i += len(s)
                    break
            else:
                ch = ord(text[i]) if text[i] != "\n" else ord("|")  # newline shares the last id
                out.append(3 + min(max(ch, _FIRST_CHAR), _LAST_CHAR - 1) - _FIRST_CHAR)
                i += 1
        return out

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self._encode(text)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        parts = []
        for t in ids:
            t = int(t)
            if t in _SPECIAL:
                parts.append("" if skip_special_tokens else _SPECIAL[t])
            else:
                ch = chr(_FIRST_CHAR + t - 3)
                parts.append("\n" if ch == "|" else ch)
        return "".join(parts)

    def apply_chat_template(self, messages, tokenize: bool = True, add_generation_prompt: bool = False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self._encode(text) if tokenize else text


def tiny_examples(target, num: int, seed: int = 0, prompt_len: tuple[int, int] = (4, 12),
                  max_new_tokens: int = 24) -> list[Example]:
    """Random token prompts and ``target``'s greedy responses: quick data for tiny targets."""
    g = torch.Generator().manual_seed(seed)
    V = target.config.vocab_size
    prompts = []
    for i in range(num):
        n = int(torch.randint(prompt_len[0], prompt_len[1] + 1, (1,), generator=g))
        ids = torch.randint(3, V, (n,), generator=g).tolist()
        prompts.append((f"tiny-{seed}-{i}", "tiny", f"tiny-{seed}-{i}", ids))
    return generate_responses(target, prompts, temperature=0.0, max_new_tokens=max_new_tokens, concurrency=64,
                              seed=seed, progress=False)
