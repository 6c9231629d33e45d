"""Chat-template helpers: messages in, token ids out (the template comes from the model)."""
from __future__ import annotations


def encode_chat(tokenizer, messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of ``messages`` (a string = one user turn) under the tokenizer's chat template.

    Raises:
        ValueError: empty input, or a tokenizer without a chat template.
    """
    if isinstance(messages, str):
        if not messages.strip():
            raise ValueError("the prompt is empty; give at least one non-blank character")
        messages = [{"role": "user", "content": messages}]
    if not messages:
        raise ValueError("messages is empty; give at least one {'role': ..., 'content': ...} turn")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template; pass token ids instead")
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    ids = out["input_ids"] if not isinstance(out, list) else out
    return [int(t) for t in ids]
