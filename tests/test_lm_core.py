"""The language-model post-training core: rollouts against teacher forcing, GRPO against
TRL's formulas, generalized JSD against TRL's GKD, the sampled-token OPD surrogate against
the exact gradient by enumeration, and short GRPO / OPD / SFT runs on tiny models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from models.lm.objectives import (
    LOSS_TYPES,
    generalized_jsd,
    geometric_consensus,
    group_advantages,
    grpo_loss,
    reverse_kl,
    sampled_token_opd_loss,
)
from models.lm.rollout import Sampling, sample_rollouts, teacher_forced_logprobs
from models.lm.training import sft_examples


def _tiny(vocab=20, seed=0, layers=1):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)).eval()


# -- rollouts -----------------------------------------------------------------------------

@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.7, top_k=5),
                                      Sampling(top_p=0.8)])
def test_rollout_logprobs_equal_teacher_forcing_and_the_cache_changes_nothing(sampling):
    model = _tiny(seed=1)
    prompts = [[3, 4, 5], [7], [9, 2], [1, 1, 1, 1]]
    cached = sample_rollouts(model, prompts, 6, sampling, eos_id=2,
                             generator=torch.Generator().manual_seed(0))
    plain = sample_rollouts(model, prompts, 6, sampling, eos_id=2,
                            generator=torch.Generator().manual_seed(0), use_cache=False)
    assert torch.equal(cached.sequences, plain.sequences)
    torch.testing.assert_close(cached.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    with torch.no_grad():
        forced = teacher_forced_logprobs(model, cached, sampling)
    torch.testing.assert_close(forced, cached.logprobs, atol=1e-5, rtol=0)
    for completion in cached.completions():  # stops at the first EOS, includes it
        assert 2 not in completion[:-1]


def test_top_k_sampling_never_leaves_the_top_k():
    model = _tiny(vocab=30, seed=2)
    out = sample_rollouts(model, [[1, 2]] * 64, 1, Sampling(top_k=3),
                          generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        top3 = torch.topk(model(torch.tensor([[1, 2]])).logits[0, -1], 3).indices.tolist()
    assert set(out.completion_ids[:, 0].tolist()) <= set(top3)


def test_rollout_frequencies_match_the_model_distribution():
    model = _tiny(vocab=6, seed=3)
    out = sample_rollouts(model, [[1]] * 4000, 1, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([[1]])).logits[0, -1], -1).numpy()
    freq = np.bincount(out.completion_ids[:, 0].numpy(), minlength=6) / 4000
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(p * (1 - p) / 4000).max() + 1e-3)


# -- GRPO against TRL's formulas (grpo_trainer.py, _compute_loss) --------------------------

def _trl_advantages(r: np.ndarray, g: int, mode: str) -> np.ndarray:
    grouped = r.reshape(-1, g)
    centered = (grouped - grouped.mean(1, keepdims=True)).ravel()
    if mode == "none":
        return centered
    std = (np.repeat(grouped.std(1, ddof=1), g) if mode == "group"
           else np.full(r.shape, r.std(ddof=1)))
    return centered / (std + 1e-4)


@pytest.mark.parametrize("mode", ["group", "batch", "none"])
def test_group_advantages_equal_trl(mode):
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 3, 24).astype(float)
    rewards[:6] = 1.0  # a tied group: advantages 0
    ours = group_advantages(torch.tensor(rewards), 6, mode).numpy()
    np.testing.assert_allclose(ours, _trl_advantages(rewards, 6, mode), atol=1e-12)
    assert np.all(ours[:6] == 0)
    weights = torch.tensor(rng.random(24))
    np.testing.assert_allclose(group_advantages(torch.tensor(rewards), 6, mode, weights),
                               ours * weights.numpy(), atol=1e-12)


def _trl_loss(logp, old, adv, mask, ref, loss_type, beta, eps_low, eps_high, max_len):
    """TRL's per-token loss and aggregation, written out element by element."""
    batch, length = logp.shape
    rows = []
    for i in range(batch):
        row = []
        for t in range(length):
            ratio = torch.exp(logp[i, t] - old[i, t])
            clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
            value = -torch.min(ratio * adv[i], clipped * adv[i])
            if beta:
                value = value + beta * (torch.exp(ref[i, t] - logp[i, t])
                                        - (ref[i, t] - logp[i, t]) - 1)
            row.append(value * mask[i, t])
        rows.append(torch.stack(row))
    per = torch.stack(rows)
    if loss_type == "grpo":
        return torch.stack([per[i].sum() / mask[i].sum().clamp(min=1)
                            for i in range(batch)]).mean()
    if loss_type in ("bnpo", "dapo"):
        return per.sum() / mask.sum().clamp(min=1)
    return per.sum() / (batch * max_len)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_loss_and_gradient_equal_trl(loss_type, beta):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 5, generator=gen, requires_grad=True)
    old = torch.randn(4, 5, generator=gen) * 0.1 - 1.0
    ref = torch.randn(4, 5, generator=gen) * 0.1 - 1.0
    adv = torch.randn(4, generator=gen)
    mask = (torch.rand(4, 5, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    ours = grpo_loss(logits - 1.0, old, adv, mask, 0.2, 0.28, beta, ref, loss_type, 7)
    (g_ours,) = torch.autograd.grad(ours, logits)
    theirs = _trl_loss(logits - 1.0, old, adv, mask, ref, loss_type, beta, 0.2, 0.28, 7)
    (g_theirs,) = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(g_ours, g_theirs)


# -- distillation --------------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_generalized_jsd_equals_trl_gkd(beta):
    from trl.experimental.gkd import GKDTrainer

    gen = torch.Generator().manual_seed(2)
    student, teacher = torch.randn(3, 4, 11, generator=gen), torch.randn(3, 4, 11, generator=gen)
    labels = torch.randint(0, 11, (3, 4), generator=gen)
    labels[0, :2] = -100
    theirs = GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=beta,
                                             temperature=0.9)
    ours = generalized_jsd(student, teacher, (labels != -100).float(), beta, temperature=0.9)
    torch.testing.assert_close(ours, theirs)


def test_jsd_endpoints_are_the_two_kls():
    gen = torch.Generator().manual_seed(3)
    s, t = torch.randn(2, 3, 7, generator=gen), torch.randn(2, 3, 7, generator=gen)
    torch.testing.assert_close(generalized_jsd(s, t, beta=1.0), reverse_kl(s, t).mean())
    torch.testing.assert_close(generalized_jsd(s, t, beta=0.0), reverse_kl(t, s).mean())


def test_sampled_token_surrogate_is_unbiased_by_enumeration():
    """Vocabulary 3, length 3, tabular student and teacher: the expectation over y ~ pi_s of
    the surrogate's gradient equals the gradient of sum_t E_prefix[KL(pi_s || pi_T)] with
    the prefix distribution held fixed (what a rollout batch estimates)."""
    vocab, length = 3, 3
    prefixes = [p for t in range(length) for p in itertools.product(range(vocab), repeat=t)]
    index = {p: i for i, p in enumerate(prefixes)}
    gen = torch.Generator().manual_seed(4)
    theta = torch.randn(len(prefixes), vocab, generator=gen, requires_grad=True)
    teacher = torch.log_softmax(torch.randn(len(prefixes), vocab, generator=gen), -1)
    student = torch.log_softmax(theta, -1)

    def path_prob(prefix):
        return float(np.exp(sum(student[index[prefix[:t]], prefix[t]].item()
                                for t in range(len(prefix)))))

    exact = sum(path_prob(p) * (student[index[p]].exp()
                                * (student[index[p]] - teacher[index[p]])).sum()
                for p in prefixes)
    (g_exact,) = torch.autograd.grad(exact, theta, retain_graph=True)
    expected = 0
    for y in itertools.product(range(vocab), repeat=length):
        rows = [index[y[:t]] for t in range(length)]
        s = torch.stack([student[r, tok] for r, tok in zip(rows, y, strict=True)])[None]
        tt = torch.stack([teacher[r, tok] for r, tok in zip(rows, y, strict=True)])[None]
        surrogate = sampled_token_opd_loss(s, tt, torch.ones(1, length), loss_type="dr_grpo")
        expected = expected + path_prob(y) * surrogate * length  # dr_grpo divides by length
    (g_expected,) = torch.autograd.grad(expected, theta)
    torch.testing.assert_close(g_expected, g_exact, atol=1e-6, rtol=1e-5)


def test_geometric_consensus_minimises_the_weighted_reverse_kl():
    gen = torch.Generator().manual_seed(5)
    teachers = [torch.randn(6, generator=gen) for _ in range(3)]
    weights = [0.2, 0.5, 0.3]
    g = geometric_consensus(teachers, weights)

    def objective(q_logits):
        return sum(w * reverse_kl(q_logits[None], t[None])[0]
                   for w, t in zip(weights, teachers, strict=True))

    logz = torch.logsumexp(sum(w * torch.log_softmax(t, -1)
                               for w, t in zip(weights, teachers, strict=True)), -1)
    torch.testing.assert_close(objective(g), -logz)  # the minimum is -log Z >= 0
    for _ in range(20):
        assert objective(torch.randn(6, generator=gen)) >= objective(g) - 1e-6


def test_geometric_consensus_with_unnormalized_weights_is_the_brute_force_minimiser():
    """Weights (1, 1, 0.5): the target must still minimise sum_k w_k KL(q || pi_k), found
    here by gradient descent on q's logits from a uniform start."""
    gen = torch.Generator().manual_seed(7)
    teachers = [torch.randn(5, generator=gen) * 2 for _ in range(3)]
    weights = [1.0, 1.0, 0.5]
    g = geometric_consensus(teachers, weights)

    def objective(q_logits):
        return sum(w * reverse_kl(q_logits[None], t[None])[0]
                   for w, t in zip(weights, teachers, strict=True))

    q = torch.zeros(5, requires_grad=True)
    opt = torch.optim.LBFGS([q], lr=0.5, max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-14)

    def closure():
        opt.zero_grad()
        loss = objective(q)
        loss.backward()
        return loss

    opt.step(closure)
    torch.testing.assert_close(objective(g), objective(q.detach()), atol=1e-5, rtol=0)
    torch.testing.assert_close(g.exp(), torch.softmax(q.detach(), -1), atol=1e-4, rtol=0)
    torch.testing.assert_close(geometric_consensus(teachers, [2.0, 2.0, 1.0]), g)


def test_sft_examples_learn_only_the_response():
    data = sft_examples([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_id=0)
    assert data["labels"][0] == [-100, -100, -100, 1, 2]
    assert data["labels"][1] == [-100, 3, 4, 9, -100]
    assert data["attention_mask"][1] == [1, 1, 1, 1, 0]


# -- short post-training runs on addition (make test-slow: the model trains for 14 s) -------

@pytest.fixture(scope="module")
def addition_lm():
    """tiny-lm after 500 SFT steps on 1-2 digit addition (noise-free): one-digit sums right
    about a third of the time when sampled, so GRPO has something to improve."""
    from omegaconf import OmegaConf

    from data.lm_tasks import AdditionTask
    from models.lm.tiny import train_tiny_lm

    cfg = OmegaConf.create({"layers": 2, "hidden": 64, "heads": 4, "steps": 500,
                            "batch_size": 32, "lr": 0.003, "warmup_fraction": 0.05,
                            "weight_decay": 0.1, "seed": 0})
    task = AdditionTask(max_digits=2, train_examples=3000, noise=0.0, horizons=[2])
    model, _ = train_tiny_lm(cfg, task)
    return model, task


def _addition_prompts(step, generator, count=8):
    from data.lm_tasks import scratchpad_prompts

    seed = int(torch.randint(0, 2**31, (1,), generator=generator))
    return scratchpad_prompts([1], count, np.random.default_rng(seed))


def _mean_reward(model, tasks, rollout, samples=8, sampling=None):
    from models.lm.rewards import ExactVerifier

    repeated = [t for t in tasks for _ in range(samples)]
    out = sample_rollouts(model, [t.prompt_ids for t in repeated], rollout.max_new_tokens,
                          sampling=sampling, eos_id=rollout.eos_id,
                          generator=torch.Generator().manual_seed(9))
    verify = ExactVerifier()
    return float(np.mean([verify(t, c) for t, c in
                          zip(repeated, out.completions(), strict=True)]))


@pytest.mark.slow  # its trained model takes 14 s: make test-slow
def test_one_grpo_step_moves_probability_towards_rewarded_completions(addition_lm):
    import copy

    from data.arithmetic import EOS
    from models.lm.rewards import ExactVerifier

    model, _ = addition_lm
    policy = copy.deepcopy(model)
    tasks = [t for t in _addition_prompts(0, torch.Generator().manual_seed(5)) for _ in range(8)]
    rollouts = sample_rollouts(policy, [t.prompt_ids for t in tasks], 3, eos_id=EOS,
                               generator=torch.Generator().manual_seed(6))
    rewards = torch.tensor([ExactVerifier()(t, c) for t, c in
                            zip(tasks, rollouts.completions(), strict=True)])
    advantages = group_advantages(rewards, 8)
    assert advantages.abs().sum() > 0  # some groups are not tied
    logps = teacher_forced_logprobs(policy, rollouts)
    loss = grpo_loss(logps, logps.detach(), advantages, rollouts.completion_mask)
    loss.backward()
    with torch.no_grad():
        for p in policy.parameters():
            p -= 0.01 * p.grad
        new = teacher_forced_logprobs(policy, rollouts)
        change = (new - logps).sum(-1)
        assert grpo_loss(new, logps, advantages, rollouts.completion_mask) < loss
    # rewarded completions gained probability, unrewarded ones lost it (on balance)
    assert float((advantages * change).sum()) > 0
    assert change[advantages > 0].mean() > change[advantages < 0].mean()


@pytest.fixture(scope="module")
def accurate_addition_lm():
    """tiny-lm after 1200 SFT steps: one-digit sums right almost always when sampled at
    temperature 1, a starting point that does not depend on how a shorter run happens to
    land (500 steps give a one-digit reward between 0.08 and 0.28 by the CPU's kernels)."""
    from omegaconf import OmegaConf

    from data.lm_tasks import AdditionTask
    from models.lm.tiny import train_tiny_lm

    cfg = OmegaConf.create({"layers": 2, "hidden": 64, "heads": 4, "steps": 1200,
                            "batch_size": 32, "lr": 0.003, "warmup_fraction": 0.05,
                            "weight_decay": 0.1, "seed": 0})
    return train_tiny_lm(cfg, AdditionTask(max_digits=2, train_examples=3000, noise=0.0,
                                           horizons=[2]))[0]


@pytest.mark.slow
def test_grpo_improves_the_exact_verifier_reward(accurate_addition_lm):
    """Sampled at temperature 3 the accurate model is right about a sixth of the time; 200
    GRPO steps at that temperature (8 prompts x 8 completions, lr 3e-4) raise it to about a
    half (0.17 -> 0.47 with AVX2 kernels, 0.16 -> 0.47 with the scalar ones)."""
    import copy

    from data.arithmetic import EOS
    from models.lm.post_training import GRPOConfig, GRPOModule, RolloutConfig, post_train
    from models.lm.rewards import ExactVerifier
    from models.lm.rollout import Sampling

    hot = Sampling(temperature=3.0)
    rollout = RolloutConfig(prompts_per_step=8, group_size=8, max_new_tokens=3, eos_id=EOS,
                            lr=3e-4, sampling=hot)
    held_out = _addition_prompts(0, torch.Generator().manual_seed(123), count=64)
    before = _mean_reward(accurate_addition_lm, held_out, rollout, sampling=hot)
    module = GRPOModule(copy.deepcopy(accurate_addition_lm), _addition_prompts,
                        ExactVerifier(), rollout, GRPOConfig())
    post_train(module, 200, progress_bar=False)
    after = _mean_reward(module.policy, held_out, rollout, sampling=hot)  # same uniforms
    assert after > before + 0.15, (before, after)


@pytest.mark.slow  # its trained model takes 14 s: make test-slow
def test_opd_reduces_the_reverse_kl_to_the_teacher(addition_lm):
    from data.arithmetic import EOS, VOCAB_SIZE
    from models.lm.post_training import OPDConfig, OPDModule, RolloutConfig, post_train
    from models.lm.rollout import completion_logits
    from models.lm.tiny import build_tiny_llama

    teacher, _ = addition_lm
    from omegaconf import OmegaConf

    student = build_tiny_llama(OmegaConf.create({"layers": 1, "hidden": 32, "heads": 4,
                                                 "seed": 3}), VOCAB_SIZE, 24, 64).eval()
    rollout = RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=5, eos_id=EOS,
                            lr=3e-3)
    held_out = [t.prompt_ids for t in _addition_prompts(0, torch.Generator().manual_seed(7),
                                                        count=32)]

    def held_out_kl(model):
        out = sample_rollouts(model, held_out, 5, eos_id=EOS,
                              generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            kl = reverse_kl(completion_logits(model, out), completion_logits(teacher, out))
        return float((kl * out.completion_mask).sum() / out.completion_mask.sum())

    before = held_out_kl(student)
    module = OPDModule(student, _addition_prompts, [teacher], rollout, OPDConfig())
    post_train(module, 50, progress_bar=False)
    after = held_out_kl(module.policy)
    assert after < 0.5 * before, (before, after)


def test_split_held_out_keeps_the_first_for_evaluation_and_needs_training_prompts():
    from common.errors import UserError
    from data.lm_tasks import split_held_out

    assert split_held_out("abcde", 2, "x") == (["a", "b"], ["c", "d", "e"])
    with pytest.raises(UserError, match="dataset=gsm8k has 3 prompts, none left"):
        split_held_out([1, 2, 3], 3, "gsm8k")
