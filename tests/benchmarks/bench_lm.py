"""The post-training core, side by side in one process on one thread: rollout sampling vs
transformers' generate(do_sample=True) (same model, batch and length, untruncated
sampling), and one GRPO step (rollouts, rewards, loss, backward, optimizer) vs TRL's
GRPOTrainer on the same tiny model and batch."""

from __future__ import annotations

import time

import torch
from _timing import best_of
from transformers import LlamaConfig, LlamaForCausalLM

from models.lm.rollout import Sampling, sample_rollouts

VOCAB, PROMPT, BATCH, NEW = 64, 8, 16, 64


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()


def rollout_speed(model) -> None:
    prompts = [[1 + (i + j) % (VOCAB - 1) for j in range(PROMPT)] for i in range(BATCH)]
    ours = best_of(3, lambda: sample_rollouts(model, prompts, NEW, Sampling(),
                                              generator=torch.Generator().manual_seed(0)))
    ids = torch.tensor(prompts)
    with torch.no_grad():
        theirs = best_of(3, lambda: model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
            top_k=0, top_p=1.0, max_new_tokens=NEW, min_new_tokens=NEW, eos_token_id=None,
            pad_token_id=0))
    tokens = BATCH * NEW
    print(f"rollouts, batch {BATCH} x {NEW} new tokens: ours {tokens / ours:.0f} tok/s, "
          f"generate {tokens / theirs:.0f} tok/s, ours/generate speed {theirs / ours:.2f}x")


def grpo_step_time(steps: int = 6) -> None:
    """Seconds per GRPO step, ours vs TRL's GRPOTrainer: 2 prompts x 8 completions of up to
    16 tokens, EOS = 63, reward = completion length mod 3, one thread."""
    import os
    import tempfile
    from types import SimpleNamespace

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from models.lm.post_training import GRPOConfig, GRPOModule, RolloutConfig, post_train

    prompts = [[1 + (i + j) % 62 for j in range(PROMPT)] for i in range(64)]

    def source(step, generator):
        return [SimpleNamespace(prompt_ids=prompts[(2 * step + k) % 64]) for k in range(2)]

    module = GRPOModule(tiny_llama(), source, lambda task, c: float(len(c) % 3),
                        RolloutConfig(prompts_per_step=2, group_size=8, max_new_tokens=16,
                                      eos_id=63, warmup_steps=1), GRPOConfig())
    post_train(module, 1, progress_bar=False)  # warm-up
    start = time.perf_counter()
    post_train(module, steps, progress_bar=False)
    ours = (time.perf_counter() - start) / steps

    tokenizer = Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="t0",
                                        eos_token="t63")
    data = Dataset.from_dict({"prompt": [" ".join(f"t{t}" for t in p) for p in prompts]})

    def reward(prompts, completions, **kwargs):
        return [float(len(c.split()) % 3) for c in completions]

    with tempfile.TemporaryDirectory() as out:
        args = TRLConfig(output_dir=out, per_device_train_batch_size=16, num_generations=8,
                         generation_batch_size=16, max_completion_length=16,
                         max_steps=steps + 1, use_cpu=True, report_to=[], save_strategy="no",
                         logging_steps=1000, learning_rate=1e-4, temperature=1.0, top_k=0,
                         top_p=1.0, disable_tqdm=True)
        trainer = GRPOTrainer(model=tiny_llama(), reward_funcs=reward, args=args,
                              train_dataset=data, processing_class=tokenizer)
        start = time.perf_counter()
        trainer.train()
        theirs = (time.perf_counter() - start) / (steps + 1)
    print(f"one GRPO step, 2 prompts x 8 completions x <= 16 tokens: ours {1e3 * ours:.0f} ms, "
          f"TRL GRPOTrainer {1e3 * theirs:.0f} ms (ours/TRL speed {theirs / ours:.2f}x)")


def main() -> None:
    torch.set_num_threads(1)
    rollout_speed(tiny_llama())
    grpo_step_time()


if __name__ == "__main__":
    main()
