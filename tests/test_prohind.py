"""prohind: the surprise weighting against its definitions, calibration metrics against
closed forms and hand-made cases, episodes, and a smoke run."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from data.confidence_tasks import (
    CALL,
    CONF0,
    EOS,
    VOCAB_SIZE,
    WRONG,
    ConfidenceAdditionTask,
    ConfidencePrompt,
    attempts,
    graded_prompts,
    make_prompt,
)
from data.lm_tasks import last_number
from methods.prohind import (
    brier,
    episode_confidence,
    expected_calibration_error,
    expected_confidence,
    miscalibration_modes,
    ph_advantages,
    probe_confidence,
    run_episodes,
    stated_confidence,
    surprise,
    text_format,
    tiny_format,
    zero_variance_group_fraction,
)
from models.lm.objectives import (
    group_advantages,
    grpo_loss,
    opd_token_advantages,
    sampled_token_opd_loss,
)
from models.lm.rollout import given_completions

from .conftest import run_failing, run_paper
from .smoke import SMOKE


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
    tasks = [ConfidencePrompt([10, 3, 4, 22], 7, 1)] * 4
    episodes = given_completions([t.prompt_ids for t in tasks],
                                 [[CONF0, 7], [CONF0 + 9], [CONF0 + 3, 7, 0], [5, 0]], 24)
    torch.testing.assert_close(stated_confidence(tasks, episodes),
                               torch.tensor([0.0, 1.0, 1 / 3, 0.5]))
    logits = torch.full((1, VOCAB_SIZE), -1e9)
    logits[0, CONF0 + 9] = 0.0  # all mass on <conf_9>
    assert expected_confidence(logits).item() == pytest.approx(1.0)


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


def test_a_calibrated_teacher_learns_only_calibrated_confidences_but_sees_every_one():
    task = ConfidenceAdditionTask(4, 400, 0.02, (2, 9), tool_fraction=0.3, calibrated=True)
    data = task.training_data(np.random.default_rng(0))
    learned, seen = set(), set()
    for ids, labels in zip(data["input_ids"], data["labels"], strict=True):
        conf = [(i, t) for i, t in enumerate(ids) if CONF0 <= t < CONF0 + 10]
        seen.update(t - CONF0 for _, t in conf)
        learned.update(t - CONF0 for i, t in conf if labels[i] == t)
    calibrated = {round(9 * task.success_chance(d)) for d in range(1, 5)}
    assert learned == calibrated == {8, 9}
    assert seen == set(range(2, 10))  # the student's range, in the context only


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
    episodes = run_episodes(model, tasks, 3, tiny_format(1), torch.Generator().manual_seed(0))
    for completion, mask in zip(episodes.completions(), episodes.completion_mask,
                                strict=True):
        assert len(attempts(completion)) <= 3
        wrong_positions = [i for i, t in enumerate(completion) if t == WRONG]
        assert all(mask[i] == 0 for i in wrong_positions)
        assert int(mask.sum()) == len(completion) - len(wrong_positions)
    single = run_episodes(model, tasks, 1, tiny_format(1), torch.Generator().manual_seed(0))
    assert all(WRONG not in c for c in single.completions())


def test_episode_confidence_reads_the_token_or_the_policy_expectation():
    torch.manual_seed(1)
    model = _tiny_policy()
    prompt = [10, 3, 4, 22]
    episodes = run_episodes(model, [ConfidencePrompt(prompt, 7, 1)] * 4, 1, tiny_format(1),
                            torch.Generator().manual_seed(0))
    first = episodes.completion_ids[:, 0]
    expected_token = torch.where((first >= CONF0) & (first < CONF0 + 10),
                                 (first - CONF0).float() / 9, torch.tensor(0.5))
    tasks, fmt = [ConfidencePrompt(prompt, 7, 1)] * 4, tiny_format(1)
    torch.testing.assert_close(episode_confidence(model, tasks, episodes, fmt, "token"),
                               expected_token)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1, CONF0:CONF0 + 10]
    direct = float(torch.softmax(logits, -1) @ (torch.arange(10) / 9))
    torch.testing.assert_close(episode_confidence(model, tasks, episodes, fmt, "expected"),
                               torch.full((4,), direct), atol=1e-5, rtol=0)


def test_tool_episode_format_and_success():
    task = make_prompt(37, 45, 2, 2, tool=True)
    assert task.prompt_ids[2] != 5 and task.tool_result == [11, 7, 5, 3, 4, 22]
    right, wrong = [2, 1, 8, 0, EOS], [3, 1, 8, 0, EOS]
    call = [CALL, *task.tool_result, CONF0 + 5]  # the environment repeats the stated k
    assert task.correct([CONF0 + 5, *call, *right])
    assert task.correct([CONF0 + 5, *call, *wrong, WRONG, *right])
    assert attempts([CONF0 + 5, *call, *wrong], task.tool_result) == [wrong]
    assert not task.correct([CONF0 + 5, *right])  # no tool call: a malformed episode
    assert attempts([CONF0 + 5, *right], task.tool_result) == []


def test_tool_episodes_mask_the_tool_result_and_end_without_a_call():
    torch.manual_seed(3)
    model = _tiny_policy()
    head = torch.nn.Linear(32, VOCAB_SIZE)  # a bias makes the call likely, not certain
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[CALL] = 3.5
    model.lm_head = head
    tasks = [make_prompt(3, 4, 1, 1, tool=True)] * 16
    episodes = run_episodes(model, tasks, 2, tiny_format(1, tool=True),
                            torch.Generator().manual_seed(0))
    called = 0
    for task, completion, mask in zip(tasks, episodes.completions(),
                                      episodes.completion_mask, strict=True):
        flags = mask[:len(completion)].tolist()
        if completion[1:2] == [CALL]:
            called += 1
            response = [*task.tool_result, completion[0]]
            assert completion[2:2 + len(response)] == response
            assert not any(flags[2:2 + len(response)]) and flags[:2] == [1, 1]
            env = [i for i, t in enumerate(completion) if t == WRONG]
            assert all(flags[i] == 0 for i in env)
            assert sum(flags) == len(completion) - len(response) - len(env)
        else:  # a malformed action ends the episode after two tokens
            assert len(completion) <= 2 and not task.correct(completion)
    assert 0 < called < len(tasks)


def test_yes_probability_is_the_probe_answer_of_each_unpadded_prompt():
    from data.confidence_tasks import NO, PROBE, YES

    torch.manual_seed(4)
    model = _tiny_policy()
    tasks = graded_prompts([1, 2], 3, 2, np.random.default_rng(1))
    tasks[1] = ConfidencePrompt(tasks[1].prompt_ids[:4], 0, 1)  # a shorter prompt: padded
    episodes = run_episodes(model, tasks, 1, tiny_format(2), torch.Generator().manual_seed(0))
    got = probe_confidence(model, tasks, YES, NO, 24)
    for i, task in enumerate(tasks):
        with torch.no_grad():
            logits = model(torch.tensor([[*task.prompt_ids, PROBE]])).logits[0, -1]
        direct = torch.softmax(logits[[YES, NO]], -1)[0]
        assert float(got[i]) == pytest.approx(float(direct), abs=1e-5)
    assert torch.equal(episode_confidence(model, tasks, episodes, tiny_format(2),
                                          "yes_probability"), got)


def test_opd_advantage_in_the_surrogate_has_the_sampled_opd_gradient():
    gen = torch.Generator().manual_seed(5)
    student = torch.randn(6, 5, generator=gen).log_softmax(-1).requires_grad_()
    teacher = torch.randn(6, 5, generator=gen).log_softmax(-1)
    mask = (torch.rand(6, 5, generator=gen) > 0.2).float()
    advantages = opd_token_advantages(student, teacher)
    surrogate = grpo_loss(student, student.detach(), advantages, mask, loss_type="bnpo")
    (g1,) = torch.autograd.grad(surrogate, student)
    (g2,) = torch.autograd.grad(sampled_token_opd_loss(student, teacher, mask), student)
    torch.testing.assert_close(g1, g2)
    s = torch.rand(6, generator=gen)
    assert torch.equal(ph_advantages(advantages, s[:, None], 0.0), advantages)
    torch.testing.assert_close(ph_advantages(advantages, s[:, None], 2.0),
                               advantages * (1 + 2 * s)[:, None])


def test_multiplicative_ph_pushes_an_uninformative_confidence_token_down():
    """With outcomes independent of the stated k (success probability q), the expected
    multiplicative PH advantage of <conf_k> is lambda q (1 - q) (1 - 2 p_k) / sigma in
    the large-group limit: it favours low confidence whatever q is (the mechanism behind
    the README's 'not reproduced')."""
    rng = np.random.default_rng(6)
    q, lam, groups, size = 0.7, 1.0, 20000, 64
    rewards = torch.tensor((rng.random(groups * size) < q).astype(np.float32))
    k = torch.tensor(rng.integers(0, 10, groups * size))
    p = k.float() / 9
    shaped = ph_advantages(group_advantages(rewards, size), surprise(rewards, p), lam)
    sigma = np.sqrt(q * (1 - q))
    for value in range(10):
        closed = lam * q * (1 - q) * (1 - 2 * value / 9) / sigma
        assert float(shaped[k == value].mean()) == pytest.approx(closed, abs=0.02)


@pytest.mark.parametrize("predictor", ["token", "expected", "yes_probability", "head"])
def test_prohind_smoke_run(smoke_run, tmp_path, predictor):
    metrics, run_dir = smoke_run("prohind")  # the smoke configuration: predictor=token
    if predictor != "token":  # the same base model, from the smoke run's cache
        cache, run_dir = run_dir.parent / "cache", tmp_path / "run"
        metrics = run_paper([*SMOKE["prohind"], f"method.predictor={predictor}",
                             f"paths.cache_dir={cache}"], run_dir)
    with open(run_dir / "tables" / "calibration.csv") as f:
        rows = {(r["regime"], r["variant"]): r for r in csv.DictReader(f)}
    for regime, suffix in (("single", ""), ("multi", "_multi")):
        for arm, variant in (("grpo", "lambda=0"), ("ph", "lambda=1")):
            row = rows[(regime, variant)]
            for stat in ("ece", "acc", "brier"):
                assert metrics[f"{stat}_{arm}{suffix}"] == pytest.approx(float(row[stat]))
            assert 0 <= float(row["ece"]) <= 1
            assert (float(row["acc"]) * 16) == pytest.approx(round(float(row["acc"]) * 16))
    assert 0 <= metrics["zero_variance_group_frac"] <= 1
    assert (run_dir / "figures" / "calibration_vs_lambda.png").is_file()


@pytest.mark.parametrize("method", ["ph_opd", "ph_grpo_opd"])
def test_prohind_on_distillation_smoke_run(smoke_run, run_dir, method):
    _, smoke_dir = smoke_run("prohind")  # its student, from the smoke run's cache
    metrics = run_paper([*SMOKE["prohind"], f"method={method}", "protocol.steps=2",
                         "protocol.eval_prompts=8", "method.group_size=2",
                         f"paths.cache_dir={smoke_dir.parent / 'cache'}"], run_dir)
    assert {"ece_grpo", "ece_ph", "acc_grpo", "acc_ph"} <= set(metrics)
    import csv

    with open(run_dir / "tables" / "calibration.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["variant"] for r in rows} >= {"sft", "teacher", "lambda=0", "lambda=1"}
    assert {r["base"] for r in rows} == {method.removeprefix("ph_")}


def test_real_model_path_composes_and_fails_offline_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=prohind", "model=qwen3-4b", "dataset=gsm8k"],
                            tmp_path / "run")
    assert "Qwen/Qwen3-4B" in failed["error"] and "\n" not in failed["error"]
    local = f"model.hub_id={tmp_path}"  # a folder: past the offline check, to the config's
    _, failed = run_failing(["+paper=prohind", "model=qwen3-4b", local], tmp_path / "run2")
    assert "needs a text dataset" in failed["error"]
    _, failed = run_failing(["+paper=prohind", "model=qwen3-4b", local, "dataset=gsm8k",
                             "method=ph_opd"], tmp_path / "run3")
    assert "+model@teacher=" in failed["error"]
    _, failed = run_failing(["+paper=prohind", "model=qwen3-1.7b", "+model@teacher=qwen3-8b",
                             "dataset=gsm8k", "method=ph_opd"], tmp_path / "run4")
    assert "Qwen/Qwen3-1.7B" in failed["error"]  # composes; fails where it needs weights


def test_text_episodes_feedback_confidence_and_success():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from methods.prohind.episodes import FEEDBACK_TEXT, TextConfidencePrompt

    bpe = ByteLevelBPETokenizer()  # a byte-level tokenizer trained here (offline)
    bpe.train_from_iterator([f"Confidence: 7 so 13 then 12 {FEEDBACK_TEXT} Yes No"],
                            vocab_size=300, special_tokens=["<eos>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<eos>")
    fmt = text_format(tokenizer, chat_template=False, max_new_tokens=8)
    assert tokenizer.decode(list(fmt.feedback)).strip() == FEEDBACK_TEXT
    task = TextConfidencePrompt([1, 2], [1, 3], "12", last_number,
                                lambda ids: tokenizer.decode(list(ids)))
    first, second = tokenizer.encode("Confidence: 7 so 13"), tokenizer.encode(" then 12")
    assert task.stated_confidence(first) == pytest.approx(7 / 9)
    assert not task.correct(first)
    assert task.correct([*first, *fmt.feedback, *second])
    assert task.stated_confidence(tokenizer.encode("13")) is None
    later = [*tokenizer.encode("13"), *fmt.feedback, *tokenizer.encode("Confidence: 7")]
    assert task.stated_confidence(later) is None  # stated after feedback: not prospective


@pytest.mark.slow
def test_smollm2_runs_the_text_episodes_offline(run_dir):
    metrics = run_paper(["+paper=prohind", "model=smollm2-135m", "dataset=addition_text",
                         "dataset.horizons=[1]", "dataset.prompts_per_horizon=6",
                         "dataset.max_new_tokens=12", "protocol.steps=1",
                         "protocol.lambdas=[1.0]", "protocol.eval_prompts=2",
                         "method.prompts_per_step=1", "method.group_size=2",
                         "method.predictor=yes_probability"], run_dir)
    assert 0 <= metrics["ece_ph"] <= 1 and 0 <= metrics["acc_ph_multi"] <= 1


def test_head_confidence_is_the_sigmoid_of_the_head_on_the_last_prompt_state():
    from methods.prohind.surprise import prediction_features

    torch.manual_seed(2)
    model = _tiny_policy(hidden=16)
    tasks = graded_prompts([1, 2], 3, 2, np.random.default_rng(0))
    episodes = run_episodes(model, tasks, 1, tiny_format(2), torch.Generator().manual_seed(0))
    head = torch.nn.Linear(16, 1)
    got = episode_confidence(model, tasks, episodes, tiny_format(2), "head", head)
    for i, task in enumerate(tasks):  # unpadded, one prompt at a time
        with torch.no_grad():
            h = model(torch.tensor([task.prompt_ids]), output_hidden_states=True
                      ).hidden_states[-1][0, -1]
            assert float(got[i]) == pytest.approx(float(torch.sigmoid(head(h))), abs=1e-5)
    assert prediction_features(model, episodes).shape == (len(tasks), 16)
    with pytest.raises(ValueError, match="trained success head"):
        episode_confidence(model, tasks, episodes, tiny_format(2), "head")


@pytest.mark.gpu
def test_prohind_on_gpu(run_dir):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    metrics = run_paper(["+paper=prohind", "device=cuda", "method=ph_grpo_opd",
                         "protocol.steps=10", "protocol.lambdas=[1.0]",
                         "protocol.eval_prompts=64"], run_dir)
    assert 0 <= metrics["ece_ph"] <= 1 and 0 <= metrics["acc_ph_multi"] <= 1
