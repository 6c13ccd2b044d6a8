"""cfbeam: beam search against transformers' generate, coverage and Best-of-N against the
tree's closed forms, budget counters, the model loader, and a smoke run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from common.errors import UserError
from methods.cfbeam import (
    CausalLMPolicy,
    beam_search,
    best_of_n,
    coverage,
    hard_instance,
    sample_sequences,
)
from methods.cfbeam.search import Budget

from .conftest import run_paper


def _tiny_llama(vocab=50, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
                         pad_token_id=0)
    return LlamaForCausalLM(config).eval()


def test_exhaustive_beam_search_equals_generate_num_beams():
    model, prompt, B, L = _tiny_llama(), [3, 17, 8, 41], 4, 6
    ours = beam_search(CausalLMPolicy(model, prompt, eos_id=None), B, None, L,
                       reward=lambda y: 0.0, rng=np.random.default_rng(0))
    out = model.generate(torch.tensor([prompt]), num_beams=B, num_return_sequences=B,
                         do_sample=False, max_new_tokens=L, length_penalty=0.0,
                         early_stopping="never", eos_token_id=None, pad_token_id=0,
                         output_scores=True, return_dict_in_generate=True)
    theirs = {tuple(seq[len(prompt):].tolist()): float(score)
              for seq, score in zip(out.sequences, out.sequences_scores, strict=True)}
    mine = {b.tokens: b.score for b in ours.finals}
    assert set(mine) == set(theirs)
    for tokens, score in mine.items():
        assert score == pytest.approx(theirs[tokens], abs=1e-4)


def test_width_one_full_expansion_is_greedy():
    model, prompt = _tiny_llama(seed=1), [5, 9, 2]
    ours = beam_search(CausalLMPolicy(model, prompt, eos_id=None), 1, None, 8,
                       reward=lambda y: 0.0, rng=np.random.default_rng(0))
    greedy = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=8,
                            eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    assert list(ours.best) == greedy


def test_left_padded_batches_match_single_prefixes():
    model = _tiny_llama(seed=2)
    policy = CausalLMPolicy(model, [4, 4, 7], eos_id=None)
    prefixes = [(), (1,), (1, 2, 3)]
    batched = policy.log_probs(prefixes)
    for i, p in enumerate(prefixes):
        np.testing.assert_allclose(batched[i], policy.log_probs([p])[0], atol=1e-5)


@pytest.mark.parametrize("c,steps", [(4, 2), (8, 3)])
def test_teacher_forced_coverage_equals_the_table(c, steps):
    policy, ystar = hard_instance(c, steps)
    c_star, c_seq = coverage(policy, ystar)
    assert c_star == pytest.approx(c) and c_seq == pytest.approx(c**steps)


def test_best_of_n_success_rate_matches_closed_form():
    policy, ystar = hard_instance(4, 2)
    rng = np.random.default_rng(0)
    n, trials = 8, 3000
    wins = sum(best_of_n(policy, n, 2, lambda y: float(y == ystar), rng).best == ystar
               for _ in range(trials))
    expected = 1 - (1 - 1 / 16) ** n
    assert abs(wins / trials - expected) < 4 * np.sqrt(expected * (1 - expected) / trials)


def test_budget_counters_add_up():
    policy, ystar = hard_instance(8, 4)
    rng = np.random.default_rng(1)
    res = beam_search(policy, 1, 5, 4, lambda y: float(y == ystar), rng)
    assert res.budget.sampled_tokens == 4 * 5 and res.budget.forward_calls == 4
    budget = Budget()
    seqs = sample_sequences(policy, 6, 4, rng, budget)
    assert budget.sampled_tokens == sum(len(s) for s in seqs) == 24


def test_sampling_matches_the_table_probabilities():
    policy, _ = hard_instance(4, 1)
    rng = np.random.default_rng(2)
    seqs = sample_sequences(policy, 20000, 1, rng, Budget())
    freq = np.bincount([s[0] for s in seqs], minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.25, 0.375, 0.375], atol=0.015)


def test_loader_local_round_trip_and_offline_error(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from models.lm.loader import load_pretrained

    model = _tiny_llama()
    vocab = {f"t{i}": i for i in range(50)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")))
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded, _ = load_pretrained(str(tmp_path / "m"))
    x = torch.tensor([[1, 2, 3]])
    assert torch.allclose(loaded(x).logits, model(x).logits)
    with pytest.raises(UserError, match="not in the local Hugging Face cache"):
        load_pretrained("Qwen/Qwen3-4B")


def test_cfbeam_smoke_run(run_dir):
    metrics = run_paper(["+paper=cfbeam", "dataset.train_examples=400", "model.steps=20",
                         "model.min_held_out_accuracy=null", "dataset.max_digits=2",
                         "dataset.horizons=[2]",
                         "dataset.prompts_per_horizon=3", "protocol.tree.coverages=[4,8]",
                         "protocol.tree.trials=20", "protocol.tree.reward_noise=[0.0]"],
                        run_dir)
    assert metrics["tree_budget_slope_vanilla"] > 1
    assert "lm_accuracy_cfbeam_longest_L" in metrics
    assert (run_dir / "figures" / "budget_and_horizon.png").is_file()


@pytest.mark.slow
def test_smollm2_runs_offline(run_dir):
    metrics = run_paper(["+paper=cfbeam", "model=smollm2-135m", "dataset=addition_text",
                         "dataset.horizons=[1]", "dataset.prompts_per_horizon=2",
                         "dataset.max_new_tokens=12", "method.beam_width=2",
                         "method.samples_per_beam=2", "protocol.tree.coverages=[4,8]",
                         "protocol.tree.trials=10"], run_dir)
    assert "lm_accuracy_beam_longest_L" in metrics


@pytest.mark.gpu
def test_cfbeam_on_gpu(run_dir):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    metrics = run_paper(["+paper=cfbeam", "device=cuda", "model.steps=50",
                         "dataset.prompts_per_horizon=3", "protocol.tree.trials=20"], run_dir)
    assert "lm_accuracy_cfbeam_longest_L" in metrics
