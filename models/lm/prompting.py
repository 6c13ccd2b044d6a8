"""Prompts as token ids (chat templates)."""

from __future__ import annotations


def pad_id(tokenizer) -> int:
    """The tokenizer's pad token, or its EOS when it has none (masked out either way)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
        else tokenizer.eos_token_id


def encode_prompt(tokenizer, text: str, chat_template: bool) -> list[int]:
    """Token ids of a user prompt; with ``chat_template`` wrapped as one user turn followed
    by the assistant's generation prompt."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])
