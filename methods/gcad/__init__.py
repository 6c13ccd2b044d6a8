"""Gated Cropped Attention-Delta steering (abstract 19): steer a chat model through the
system prompt's contribution to self-attention, gated per token, on the assistant's tokens
only, so that the KV cache of the conversation is never written by a steered user turn."""

from methods.gcad.attention import (
    attention_with_side_keys,
    gcad_attention,
    register,
    split_attention,
)
from methods.gcad.dialogue import ChatFormat, Dialogue, run_dialogue
from methods.gcad.metrics import continuation_logprobs, score_dialogue, summarize
from methods.gcad.steering import (
    Controller,
    Signals,
    Variant,
    attached,
    extract_signals,
    side_cache,
)

__all__ = [
    "ChatFormat", "Controller", "Dialogue", "Signals", "Variant", "attached",
    "attention_with_side_keys", "extract_signals", "gcad_attention", "register",
    "continuation_logprobs", "run_dialogue", "score_dialogue", "side_cache", "split_attention",
    "summarize",
]
