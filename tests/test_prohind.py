"""prohind: the surprise weighting against its definitions, calibration metrics against
closed forms and hand-made cases, episodes, and a smoke run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from data.confidence_tasks import (
    CONF0,
    EOS,
    VOCAB_SIZE,
    WRONG,
    ConfidencePrompt,
    attempts,
    graded_prompts,
)
from methods.prohind import (
    brier,
    episode_confidence,
    expected_calibration_error,
    miscalibration_modes,
    ph_advantages,
    prospective_confidence,
    run_episodes,
    surprise,
    zero_variance_group_fraction,
)
from models.lm.objectives import group_advantages, grpo_loss

from .conftest import run_failing, run_paper


def _tiny_policy(hidden: int = 32):
    """A random one-layer Llama over the confidence-task vocabulary."""
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=128, bos_token_id=None, eos_token_id=None,
        pad_token_id=24)).eval()


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(16, generator=gen) > 0.5).float()
    p = torch.rand(16, generator=gen, requires_grad=True)
    logps = torch.randn(16, 4, generator=gen, requires_grad=True)
    return rewards, p, logps, torch.ones(16, 4)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_lambda_zero_is_the_base_loss_bitwise(scale):
    rewards, p, logps, mask = _batch()
    base = group_advantages(rewards, 8, scale)
    shaped = ph_advantages(base, surprise(rewards, p), 0.0)
    assert torch.equal(grpo_loss(logps, logps.detach(), shaped, mask),
                       grpo_loss(logps, logps.detach(), base, mask))


@pytest.mark.parametrize("weighting", ["multiplicative", "additive", "normalized"])
def test_surprise_carries_no_gradient(weighting):
    rewards, p, logps, mask = _batch(1)
    shaped = ph_advantages(group_advantages(rewards, 8), surprise(rewards, p), 1.5, weighting)
    loss = grpo_loss(logps, logps.detach(), shaped, mask)
    grad_p, grad_logps = torch.autograd.grad(loss, [p, logps], allow_unused=True)
    assert grad_p is None or torch.all(grad_p == 0)
    assert grad_logps.abs().sum() > 0


def test_weightings_follow_their_definitions():
    adv = torch.tensor([1.0, -1.0, 0.0, 2.0])
    s = torch.tensor([0.5, 0.25, 1.0, 0.0])
    torch.testing.assert_close(ph_advantages(adv, s, 2.0), adv * (1 + 2 * s))
    torch.testing.assert_close(ph_advantages(adv, s, 2.0, "additive"), adv - 2 * s)
    torch.testing.assert_close(ph_advantages(adv, s, 2.0, "normalized"), adv * s / s.mean())
    assert ph_advantages(adv, s, 2.0)[2] == 0  # a tied group stays untouched (multiplicative)
    assert ph_advantages(adv, s, 2.0, "additive")[2] == -2.0  # the additive form acts on it


def test_surprise_forms_and_the_confidence_token():
    e, p = torch.tensor([1.0, 0.0]), torch.tensor([0.25, 0.25])
    torch.testing.assert_close(surprise(e, p), torch.tensor([0.75, 0.25]))
    torch.testing.assert_close(surprise(e, p, "squared"), torch.tensor([0.5625, 0.0625]))
    torch.testing.assert_close(surprise(e, p, "log"), -torch.log(torch.tensor([0.25, 0.75])))
    tokens = torch.tensor([CONF0, CONF0 + 9, CONF0 + 3, 5])
    torch.testing.assert_close(prospective_confidence(tokens),
                               torch.tensor([0.0, 1.0, 1 / 3, 0.5]))
    logits = torch.full((1, VOCAB_SIZE), -1e9)
    logits[0, CONF0 + 9] = 0.0  # all mass on <conf_9>
    assert prospective_confidence(tokens[:1], logits, "expected").item() == pytest.approx(1.0)


def test_ece_of_a_calibrated_predictor_is_near_zero_and_of_a_constant_one_is_the_gap():
    rng = np.random.default_rng(0)
    p = rng.random(200_000)
    y = (rng.random(200_000) < p).astype(float)
    assert expected_calibration_error(p, y) < 0.01
    assert expected_calibration_error(np.full(1000, 0.9), np.r_[np.ones(600), np.zeros(400)]) \
        == pytest.approx(0.3)
    rho = 0.3  # the constant p = rho minimises the expected Brier score (a proper rule)
    outcomes = (rng.random(100_000) < rho).astype(float)
    scores = {c: brier(np.full(len(outcomes), c), outcomes) for c in (0.1, 0.3, 0.5)}
    assert min(scores, key=scores.get) == 0.3


def test_miscalibration_modes_add_up_on_hand_made_arrays():
    p = np.array([0.9, 0.8, 0.2, 0.1, 0.6, 0.4])
    y = np.array([0, 1, 1, 0, 0, 1])
    over, under = miscalibration_modes(p, y)
    assert over == pytest.approx(2 / 6) and under == pytest.approx(2 / 6)
    threshold_errors = np.mean((p >= 0.5) != (y == 1))
    assert over + under == pytest.approx(threshold_errors)
    assert zero_variance_group_fraction(np.array([1, 1, 0, 1, 0, 0, 0, 0]), 4) == 0.5


def test_attempts_and_success_over_turns():
    task = ConfidencePrompt(prompt_ids=[], reference=7, digits=1)
    wrong, right = [6, 0, EOS], [7, 0, EOS]
    assert attempts([CONF0 + 4, *wrong, WRONG, *right]) == [wrong, right]
    assert task.correct([CONF0 + 4, *wrong, WRONG, *right])
    assert not task.correct([CONF0 + 4, *wrong])


def test_multi_turn_episodes_mask_the_environment_tokens():
    torch.manual_seed(0)
    model = _tiny_policy()
    tasks = [ConfidencePrompt([10, 3, 4, 22], 7, 1)] * 6  # a random model: mostly wrong
    episodes = run_episodes(model, tasks, 3, 1, torch.Generator().manual_seed(0))
    for completion, mask in zip(episodes.completions(), episodes.completion_mask,
                                strict=True):
        assert len(attempts(completion)) <= 3
        wrong_positions = [i for i, t in enumerate(completion) if t == WRONG]
        assert all(mask[i] == 0 for i in wrong_positions)
        assert int(mask.sum()) == len(completion) - len(wrong_positions)
    single = run_episodes(model, tasks, 1, 1, torch.Generator().manual_seed(0))
    assert all(WRONG not in c for c in single.completions())


def test_episode_confidence_reads_the_token_or_the_policy_expectation():
    torch.manual_seed(1)
    model = _tiny_policy()
    prompt = [10, 3, 4, 22]
    episodes = run_episodes(model, [ConfidencePrompt(prompt, 7, 1)] * 4, 1, 1,
                            torch.Generator().manual_seed(0))
    first = episodes.completion_ids[:, 0]
    expected_token = torch.where((first >= CONF0) & (first < CONF0 + 10),
                                 (first - CONF0).float() / 9, torch.tensor(0.5))
    torch.testing.assert_close(episode_confidence(model, episodes, "token"), expected_token)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1, CONF0:CONF0 + 10]
    direct = float(torch.softmax(logits, -1) @ (torch.arange(10) / 9))
    torch.testing.assert_close(episode_confidence(model, episodes, "expected"),
                               torch.full((4,), direct), atol=1e-5, rtol=0)


@pytest.mark.parametrize("predictor", ["token", "expected", "head"])
def test_prohind_smoke_run(run_dir, tmp_path, predictor):
    metrics = run_paper(["+paper=prohind", f"method.predictor={predictor}",
                         "dataset.train_examples=2000",
                         "dataset.digits=[1,2]", "model.steps=60",
                         "model.min_held_out_accuracy=null", "protocol.steps=3",
                         "protocol.lambdas=[1.0]", "protocol.eval_prompts=16",
                         "method.prompts_per_step=2", "method.group_size=4",
                         f"paths.cache_dir={tmp_path / 'cache'}"], run_dir)
    for key in ("ece_grpo", "ece_ph", "acc_grpo", "acc_ph", "overconf_fail_rate_single",
                "underconf_success_rate_multi", "zero_variance_group_frac"):
        assert key in metrics
    assert (run_dir / "figures" / "calibration_vs_lambda.png").is_file()


def test_real_models_are_refused_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=prohind", "model=qwen3-4b"], tmp_path / "run")
    assert "tiny-lm's token format" in failed["error"]


def test_head_confidence_is_the_sigmoid_of_the_head_on_the_last_prompt_state():
    from methods.prohind.surprise import prediction_features

    torch.manual_seed(2)
    model = _tiny_policy(hidden=16)
    tasks = graded_prompts([1, 2], 3, 2, np.random.default_rng(0))
    episodes = run_episodes(model, tasks, 1, 2, torch.Generator().manual_seed(0))
    head = torch.nn.Linear(16, 1)
    got = episode_confidence(model, episodes, "head", head)
    for i, task in enumerate(tasks):  # unpadded, one prompt at a time
        with torch.no_grad():
            h = model(torch.tensor([task.prompt_ids]), output_hidden_states=True
                      ).hidden_states[-1][0, -1]
            assert float(got[i]) == pytest.approx(float(torch.sigmoid(head(h))), abs=1e-5)
    assert prediction_features(model, episodes).shape == (len(tasks), 16)
    with pytest.raises(ValueError, match="trained success head"):
        episode_confidence(model, episodes, "head")
