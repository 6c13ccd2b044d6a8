"""mpopd: the geometric mixture against its probability-space definition and its two
optimality readings, the trust-region bisection against its budget, the lockstep proposal
against the student's / teacher's own rollouts and against enumerated sequence
probabilities (V = 3, L = 3), importance weighting by enumeration, and runs."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from data import arithmetic
from methods.mpopd import (
    MixtureProposal,
    ProposalConfig,
    geometric_mixture,
    kl,
    trust_region_beta,
)
from models.lm.objectives import sampled_token_opd_loss
from models.lm.rollout import (
    completion_logits,
    given_completions,
    sample_rollouts,
    teacher_forced_logprobs,
)
from models.lm.text_statistics import repetition_rate

from .conftest import run_failing, run_paper
from .smoke import SMOKE


def _tiny(vocab=12, seed=0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()


def _logits(rows=64, vocab=7, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(rows, vocab, generator=gen),
            scale * torch.randn(rows, vocab, generator=gen))


PROMPTS = [[3, 4, 5], [7], [9, 2], [1, 1, 1, 1], [6, 6]]


# -- the mixture ----------------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_mixture_normalizes_and_equals_the_probability_space_definition(beta):
    zs, zt = _logits()
    log_q = geometric_mixture(zs, zt, beta)
    torch.testing.assert_close(log_q.exp().sum(-1), torch.ones(len(zs)))
    ps, pt = torch.softmax(zs, -1).double(), torch.softmax(zt, -1).double()
    unnormalized = ps ** (1 - beta) * pt ** beta
    torch.testing.assert_close(log_q.exp().double(),
                               unnormalized / unnormalized.sum(-1, keepdim=True),
                               atol=1e-6, rtol=1e-5)


def test_mixture_satisfies_the_weighted_reverse_kl_identity_and_minimises_it():
    """(1 - l) KL(q || pi_s) + l KL(q || pi_T) = KL(q || q_l) - log Z_l for every q, so q_l
    is the unique minimiser and the minimum is -log Z_l."""
    zs, zt = _logits(rows=1, vocab=6, seed=1)
    log_s, log_t = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    gen = torch.Generator().manual_seed(2)
    for lam in (0.2, 0.5, 0.9):
        log_mix = geometric_mixture(zs, zt, lam)
        log_z = torch.logsumexp((1 - lam) * log_s + lam * log_t, -1)

        def objective(log_q, lam=lam):
            return (1 - lam) * kl(log_q, log_s) + lam * kl(log_q, log_t)

        for _ in range(20):
            log_q = torch.log_softmax(3 * torch.randn(1, 6, generator=gen), -1)
            torch.testing.assert_close(objective(log_q), kl(log_q, log_mix) - log_z)
            assert objective(log_q) >= objective(log_mix) - 1e-6
        torch.testing.assert_close(objective(log_mix), -log_z)


def test_mixture_maximises_the_kl_regularised_relative_teacher_support():
    """q_eta = argmax_q E_q[log pi_T - log pi_s] - KL(q || pi_s) / eta (small perturbations
    of q_eta on the simplex never do better)."""
    zs, zt = _logits(rows=1, vocab=5, seed=3)
    log_s, log_t = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    gen = torch.Generator().manual_seed(4)
    for eta in (0.25, 0.6):
        def value(log_q, eta=eta):
            return (log_q.exp() * (log_t - log_s)).sum(-1) - kl(log_q, log_s) / eta

        best = geometric_mixture(zs, zt, eta)
        for _ in range(30):
            nearby = torch.log_softmax(best + 0.3 * torch.randn(1, 5, generator=gen), -1)
            assert value(nearby) <= value(best) + 1e-6


def test_trust_region_beta_meets_the_budget_or_is_one():
    zs, zt = _logits(rows=200, vocab=9, seed=5)
    log_s = torch.log_softmax(zs, -1)
    teacher_inside = kl(torch.log_softmax(zt, -1), log_s) <= 0.3
    beta = trust_region_beta(zs, zt, epsilon=0.3)
    spent = kl(geometric_mixture(zs, zt, beta), log_s)
    assert teacher_inside.any() and not teacher_inside.all()  # both cases are exercised
    assert torch.all(beta[teacher_inside] == 1)
    torch.testing.assert_close(spent[~teacher_inside], torch.full_like(spent[~teacher_inside],
                                                                       0.3), atol=1e-5, rtol=0)
    assert torch.all(spent <= 0.3 + 1e-5)


def test_trust_region_mixture_is_the_closest_feasible_distribution_to_the_teacher():
    """q_lambda = argmin KL(q || pi_T) subject to KL(q || pi_s) <= epsilon: no feasible random
    distribution is closer to the teacher."""
    zs, zt = _logits(rows=1, vocab=5, seed=6)
    log_s, log_t = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    epsilon = 0.2
    best = geometric_mixture(zs, zt, trust_region_beta(zs, zt, epsilon))
    gen = torch.Generator().manual_seed(7)
    feasible = 0
    for _ in range(4000):
        log_q = torch.log_softmax(best + torch.randn(1, 5, generator=gen), -1)
        if kl(log_q, log_s) <= epsilon:
            feasible += 1
            assert kl(log_q, log_t) >= kl(best, log_t) - 1e-6
    assert feasible > 100


def test_annealing_scales_beta_linearly_to_zero():
    proposal = ProposalConfig("mixture", 0.5, anneal_steps=10)
    assert [proposal.scale(s) for s in (0, 5, 10, 20)] == [1.0, 0.5, 0.0, 0.0]
    assert ProposalConfig("mixture", 0.5).scale(99) == 1.0
    with pytest.raises(ValueError, match="exactly one"):
        MixtureProposal()


# -- lockstep rollouts -----------------------------------------------------------------------

def _roll(models, combine=None, seed=0, use_cache=True, max_new_tokens=6):
    return sample_rollouts(models, PROMPTS, max_new_tokens, eos_id=2,
                           generator=torch.Generator().manual_seed(seed),
                           use_cache=use_cache, combine=combine)


def test_beta_zero_is_the_student_on_policy_and_beta_one_the_teacher():
    student, teacher = _tiny(seed=1), _tiny(seed=2)
    for beta, alone in ((0.0, student), (1.0, teacher)):
        mixed = _roll([student, teacher], MixtureProposal(beta=beta))
        own = _roll(alone)
        assert torch.equal(mixed.sequences, own.sequences)
        torch.testing.assert_close(mixed.logprobs, own.logprobs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("proposal", [MixtureProposal(beta=0.4), MixtureProposal(epsilon=0.1)])
def test_cached_lockstep_decoding_equals_uncached_recomputation(proposal):
    student, teacher = _tiny(seed=3), _tiny(seed=4)
    cached = _roll([student, teacher], proposal, seed=5)
    plain = _roll([student, teacher], proposal, seed=5, use_cache=False)
    assert torch.equal(cached.sequences, plain.sequences)
    torch.testing.assert_close(cached.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    with torch.no_grad():  # the stored log-probs are the proposal's, recomputed from scratch
        forced = proposal([completion_logits(student, cached), completion_logits(teacher, cached)])
    expected = forced.gather(-1, cached.completion_ids[..., None]).squeeze(-1)
    torch.testing.assert_close(expected * cached.completion_mask, cached.logprobs, atol=1e-5,
                               rtol=0)


def test_lockstep_sequence_frequencies_match_the_enumerated_mixture():
    """V = 3, L = 3: the probability of each of the 27 sequences under the proposal is the
    product of the per-prefix mixtures (computed by teacher forcing on every sequence); the
    empirical frequencies of lockstep sampling match it."""
    student, teacher = _tiny(vocab=3, seed=6), _tiny(vocab=3, seed=7)
    sequences = [list(y) for y in itertools.product(range(3), repeat=3)]
    forced = given_completions([[1]] * 27, sequences, pad_id=0)
    with torch.no_grad():
        log_q = geometric_mixture(completion_logits(student, forced),
                                  completion_logits(teacher, forced), 0.5)
    exact = log_q.gather(-1, forced.completion_ids[..., None]).squeeze(-1).sum(-1).exp()
    torch.testing.assert_close(exact.sum(), torch.tensor(1.0))
    draws = 20000
    out = sample_rollouts([student, teacher], [[1]] * draws, 3,
                          generator=torch.Generator().manual_seed(8),
                          combine=MixtureProposal(beta=0.5))
    codes = (out.completion_ids * torch.tensor([9, 3, 1])).sum(-1)
    freq = torch.bincount(codes, minlength=27).double() / draws
    sd = (exact.double() * (1 - exact.double()) / draws).sqrt()
    assert torch.all((freq - exact.double()).abs() <= 5 * sd + 1e-3)


def test_importance_weights_recover_the_student_token_distribution_by_enumeration():
    """Tabular student, teacher and proposal q (their geometric mixture), V = 3, L = 3:
    the expected gradient over y ~ q of the surrogate with per-token weights pi_s / q equals
    the gradient of sum_t E_{prefix ~ q} KL(pi_s || pi_T); without weights it does not."""
    vocab, length = 3, 3
    prefixes = [p for t in range(length) for p in itertools.product(range(vocab), repeat=t)]
    index = {p: i for i, p in enumerate(prefixes)}
    gen = torch.Generator().manual_seed(9)
    theta = torch.randn(len(prefixes), vocab, generator=gen, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(len(prefixes), vocab, generator=gen), -1)
    student = torch.log_softmax(theta, -1)
    proposal = geometric_mixture(theta.detach(), teacher, 0.6)

    def q_prob(y):
        return float(np.exp(sum(proposal[index[y[:t]], y[t]].item() for t in range(len(y)))))

    exact = sum(q_prob(p) * kl(student[index[p]], teacher[index[p]]) for p in prefixes)
    (g_exact,) = torch.autograd.grad(exact, theta, retain_graph=True)

    def expected_gradient(weighted: bool):
        total = 0
        for y in itertools.product(range(vocab), repeat=length):
            rows = [index[y[:t]] for t in range(length)]
            s = torch.stack([student[r, tok] for r, tok in zip(rows, y, strict=True)])[None]
            t = torch.stack([teacher[r, tok] for r, tok in zip(rows, y, strict=True)])[None]
            q = torch.stack([proposal[r, tok] for r, tok in zip(rows, y, strict=True)])[None]
            weights = torch.exp(s.detach() - q) if weighted else None
            loss = sampled_token_opd_loss(s, t, torch.ones(1, length), weights, "dr_grpo")
            total = total + q_prob(y) * loss * length
        return torch.autograd.grad(total, theta, retain_graph=True)[0]

    torch.testing.assert_close(expected_gradient(True), g_exact, atol=1e-6, rtol=1e-5)
    assert (expected_gradient(False) - g_exact).abs().max() > 1e-2


def test_rollout_logprobs_are_the_proposal_not_the_student():
    student, teacher = _tiny(seed=10), _tiny(seed=11)
    mixed = _roll([student, teacher], MixtureProposal(beta=0.7), seed=12)
    with torch.no_grad():
        own = teacher_forced_logprobs(student, mixed)
    assert (own - mixed.logprobs).abs().max() > 1e-2


# -- metrics and runs ------------------------------------------------------------------------

def test_repetition_rate_counts_repeated_four_grams():
    assert repetition_rate([1, 2, 3, 4, 5, 6]) == 0.0
    assert repetition_rate([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)
    assert repetition_rate([7] * 8) == pytest.approx(4 / 5)
    assert repetition_rate([1, 2]) == 0.0


def _small(cache, steps=3):
    return [*SMOKE["mpopd"], f"protocol.steps={steps}", "method.anneal=false",
            f"paths.cache_dir={cache}"]


def test_mpopd_smoke_run(smoke_run):
    metrics, run_dir = smoke_run("mpopd")
    for key in ("acc_opd", "acc_mpopd", "len_mpopd_over_opd", "repetition_opd",
                "repetition_mpopd", "teacher_nll_mpopd", "acc_seqkd", "acc_gkd",
                "acc_mpopd_trust_region", "acc_mpopd_head", "acc_curve_mean_opd",
                "length_curve_mean_mpopd"):
        assert key in metrics and np.isfinite(metrics[key])
    # OPD's teacher scores what the student sampled; the exact mixture also decodes with it
    assert metrics["teacher_tokens_opd"] == metrics["sampled_tokens_opd"]
    assert metrics["teacher_tokens_mpopd"] == 2 * metrics["sampled_tokens_mpopd"]
    assert metrics["teacher_tokens_seqkd"] == 2 * metrics["sampled_tokens_seqkd"]
    curves = list(csv.DictReader((run_dir / "tables" / "curves.csv").open()))
    opd = [row for row in curves if row["variant"] == "opd"]
    assert [int(row["step"]) for row in opd] == [0, 2, 3]  # start, every 2 updates, end
    assert float(opd[-1]["sampled_tokens"]) == metrics["sampled_tokens_opd"]
    assert (run_dir / "figures" / "variants.png").is_file()
    assert (run_dir / "figures" / "curves.png").is_file()


# -- the long-answer task --------------------------------------------------------------------

def test_verbose_scratchpad_encodes_the_sum_and_copies_the_operands():
    rng = np.random.default_rng(0)
    for digits in (1, 5, 12):
        for a, b in arithmetic.addition_problems(30, digits, rng):
            pad = arithmetic.scratchpad(a, b, digits, verbose=True)
            assert len(pad) == 4 * digits + 1 and pad[-1] == arithmetic.EOS
            assert arithmetic.answer_of(pad, verbose=True) == a + b
            assert pad[0:-1:4] == [int(c) for c in reversed(str(a).zfill(digits))]
            assert pad[1:-1:4] == [int(c) for c in reversed(str(b).zfill(digits))]
            assert arithmetic.answer_of(arithmetic.scratchpad(a, b, digits)) == a + b
    assert arithmetic.scratchpad(57, 68, 2) == [5, 1, 2, 1, arithmetic.EOS]  # 57 + 68 = 125
    assert arithmetic.answer_of(arithmetic.scratchpad(123, 456, 3), verbose=True) is None


def test_a_loop_to_the_limit_repeats_one_step_and_never_ends():
    rng = np.random.default_rng(1)
    target = arithmetic.scratchpad(4321, 8765, 4, verbose=True)
    looped = arithmetic.loop(target, 1, 4, rng, until=40)
    assert len(looped) == 40 and arithmetic.EOS not in looped
    assert looped[:8] == target[:8]
    assert all(looped[i:i + 4] == target[4:8] for i in range(8, 40, 4))
    short = arithmetic.loop(target, 1, 4, rng)  # 1-3 extra repeats, then the rest
    assert short[-1] == arithmetic.EOS and (len(short) - len(target)) // 4 in (1, 2, 3)


@pytest.mark.parametrize("verbose,loop_until", [(False, None), (True, None), (True, 64)])
def test_training_sequences_fill_the_model_context(verbose, loop_until):
    data = arithmetic.training_dataset(200, 12, 0.0, np.random.default_rng(2), 0.5, verbose,
                                       loop_until)
    length = arithmetic.padded_length(12, verbose, 0.5, loop_until)
    assert {len(ids) for ids in data["input_ids"]} == {length}
    longest = max(sum(t != -100 for t in labels) for labels in data["labels"])
    assert longest <= length - 26  # the prompt takes 26 tokens
    if loop_until:
        assert longest == loop_until


@pytest.mark.slow  # over 5 s: make test-slow
def test_long_answer_run_and_its_length_check(run_dir, tmp_path):
    long = ["dataset.verbose=true", "dataset.student_loops_to_limit=true",
            "dataset.min_digits=2", "method.max_new_tokens=12"]
    metrics = run_paper([*_small(tmp_path / "cache", steps=2), *long, "protocol.variants=[opd]"],
                        run_dir)
    for name in ("teacher", "student_start", "opd"):
        assert 1 <= metrics[f"length_{name}"] <= 12
    _, failed = run_failing([*_small(tmp_path / "cache"), *long[:-1], "method.max_new_tokens=8"],
                            tmp_path / "short")
    assert "9 tokens" in failed["error"]


def test_sampled_objective_without_importance_weights_runs(smoke_run, run_dir):
    _, smoke_dir = smoke_run("mpopd")  # its teacher and student, from the smoke run's cache
    metrics = run_paper(_small(smoke_dir.parent / "cache", steps=2)
                        + ["method.objective=sampled", "method.importance_clip=null",
                           "protocol.variants=[mpopd]"], run_dir)
    assert "acc_mpopd" in metrics and "acc_opd" not in metrics


def test_real_models_compose_and_fail_offline_with_one_line(tmp_path):
    code, failed = run_failing(["+paper=mpopd", "model=qwen3-8b", "model@student=qwen3-0.6b",
                                "dataset=gsm8k", f"paths.cache_dir={tmp_path / 'cache'}"],
                               tmp_path / "run")
    assert code == 2
    assert "Qwen/Qwen3-8B" in failed["error"] and "\n" not in failed["error"]


def test_tiny_teacher_rejects_other_datasets(tmp_path):
    _, failed = run_failing(["+paper=mpopd", "dataset=gsm8k"], tmp_path / "run")
    assert "looping_addition" in failed["error"]


@pytest.mark.slow
def test_smollm2_teacher_and_student_run_offline(run_dir):
    metrics = run_paper(["+paper=mpopd", "model=smollm2-135m", "model@student=smollm2-135m",
                         "dataset=addition_text", "dataset.horizons=[1]",
                         "dataset.prompts_per_horizon=6", "dataset.max_new_tokens=8",
                         "protocol.eval_prompts=2", "protocol.steps=1",
                         "protocol.variants=[opd,mpopd]", "method.prompts_per_step=2",
                         "method.group_size=2"], run_dir)
    assert metrics["acc_teacher"] == metrics["acc_student_start"]  # the same model
    assert np.isfinite(metrics["len_mpopd_over_opd"])
