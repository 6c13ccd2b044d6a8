"""cfbeam: our exhaustive beam search vs transformers' generate(num_beams=...) on the same
tiny Llama, side by side (generated tokens per second; both produce the same beams)."""

from __future__ import annotations

import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from methods.cfbeam import CausalLMPolicy, beam_search


def main() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()
    prompt, beams, steps, repeats = list(range(1, 9)), 8, 24, 3
    start = time.perf_counter()
    for _ in range(repeats):
        beam_search(CausalLMPolicy(model, prompt, None), beams, None, steps, lambda y: 0.0,
                    np.random.default_rng(0))
    ours = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        model.generate(torch.tensor([prompt]), num_beams=beams, num_return_sequences=beams,
                       do_sample=False, max_new_tokens=steps, length_penalty=0.0,
                       early_stopping="never", eos_token_id=None, pad_token_id=0)
    theirs = time.perf_counter() - start
    tokens = repeats * beams * steps
    print(f"beam search B={beams}, {steps} steps: ours {tokens / ours:.0f} tok/s, "
          f"generate {tokens / theirs:.0f} tok/s, ratio ours/generate {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
