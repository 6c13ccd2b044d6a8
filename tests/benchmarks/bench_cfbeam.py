"""cfbeam: our exhaustive beam search (KV cache reordered with the beams, logits of the last
position only) vs transformers' generate(num_beams=4) on the same tiny Llama, side by side in
one process, one thread; both return the same beams (tests/test_cfbeam.py)."""

from __future__ import annotations

import numpy as np
import torch
from _timing import best_of
from transformers import LlamaConfig, LlamaForCausalLM

from methods.cfbeam import CausalLMPolicy, beam_search


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()
    prompt, beams = list(range(1, 9)), 4
    print(f"beam search, B = {beams}, batch 1 prompt of {len(prompt)} tokens, 1 thread")
    for steps in (16, 64, 160):
        ours = best_of(3, lambda steps=steps: beam_search(
            CausalLMPolicy(model, prompt, None), beams, None, steps, lambda y: 0.0,
            np.random.default_rng(0)))
        with torch.no_grad():
            theirs = best_of(3, lambda steps=steps: model.generate(
                torch.tensor([prompt]), num_beams=beams, num_return_sequences=beams,
                do_sample=False, max_new_tokens=steps, length_penalty=0.0,
                early_stopping="never", eos_token_id=None, pad_token_id=0))
        tokens = beams * steps
        print(f"  L = {steps:3d}: ours {tokens / ours:8.0f} tok/s, generate {tokens / theirs:8.0f}"
              f" tok/s, ours/generate speed {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
