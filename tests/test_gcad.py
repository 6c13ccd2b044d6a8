"""gcad: the attention split against per-head brute force (GQA, causal masks), the
prompt-activation duality (side-cached system prompt == the run with the prompt), gate 0 ==
the plain model with and without a cache, cache isolation of user turns, hook removal, the
chat template pieces, the scores against unbatched forwards, and protocol runs."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from methods.gcad import (
    ChatFormat,
    Controller,
    Variant,
    attached,
    attention_with_side_keys,
    continuation_logprobs,
    extract_signals,
    gcad_attention,
    register,
    run_dialogue,
    side_cache,
    split_attention,
)
from methods.gcad.judge import judge_scores
from methods.gcad.metrics import at_level, common_level, drift
from methods.gcad.steering import Signals
from models.lm.rollout import Sampling
from models.lm.text_statistics import distinct_n

from .conftest import run_failing, run_paper

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _chat_tokenizer():
    """A character-level tokenizer with ChatML special tokens and a chat template."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {c: i for i, c in enumerate(chars)} | {"<unk>": len(chars)}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE(vocab, [],
                                                                       unk_token="<unk>")),
                                        unk_token="<unk>", eos_token="<|im_end|>",
                                        pad_token="<pad>",
                                        additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = CHATML
    return tokenizer


def _tiny_llama(vocab: int, seed: int = 0, layers: int = 2):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=2048,
                         attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def chat_model():
    tokenizer = _chat_tokenizer()
    return _tiny_llama(len(tokenizer)), tokenizer


def _brute_force_heads(q, k, v, allowed):
    """Per batch, head and query, a plain softmax over the allowed keys (GQA by index)."""
    b_, h_, q_, d_ = q.shape
    groups = h_ // k.shape[1]
    out = torch.zeros(b_, h_, q_, d_, dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            for i in range(q_):
                keys = [j for j in range(k.shape[2]) if allowed[b, i, j]]
                if not keys:
                    continue
                s = torch.tensor([float(q[b, h, i] @ k[b, h // groups, j]) / math.sqrt(d_)
                                  for j in keys], dtype=torch.float64)
                w = torch.softmax(s, 0)
                out[b, h, i] = sum(w[n] * v[b, h // groups, j].double()
                                   for n, j in enumerate(keys))
    return out


def test_split_attention_matches_per_head_brute_force_with_gqa_and_causal_mask():
    torch.manual_seed(0)
    batch, heads, kv_heads, length, dim, n_sys = 2, 4, 2, 7, 8, 3
    q = torch.randn(batch, heads, length, dim)
    k, v = torch.randn(batch, kv_heads, length, dim), torch.randn(batch, kv_heads, length, dim)
    causal = torch.ones(length, length).tril().bool()[None].expand(batch, -1, -1).clone()
    causal[1, :, 0] = False  # row 1: the first key is padding
    mask = torch.zeros(batch, 1, length, length).masked_fill(~causal[:, None],
                                                            torch.finfo(torch.float32).min)
    system = torch.zeros(batch, length, dtype=torch.bool)
    system[:, :n_sys] = True
    out, alpha, o_sys, o_rest = split_attention(q, k, v, mask, dim ** -0.5, system, groups=2)
    full = _brute_force_heads(q, k, v, causal)
    only_sys = _brute_force_heads(q, k, v, causal & system[:, None, :])
    only_rest = _brute_force_heads(q, k, v, causal & ~system[:, None, :])
    torch.testing.assert_close(out.double(), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o_sys.double(), only_sys, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o_rest.double(), only_rest, atol=1e-5, rtol=1e-5)
    # the cropped delta: output with the system keys minus output without them
    torch.testing.assert_close(out - o_rest, alpha[..., None] * (o_sys - o_rest), atol=1e-6,
                               rtol=1e-5)
    # queries that see no system key (row 1, query 0 sees nothing; queries see S first)
    assert float(alpha[1, :, 0].abs().max()) == 0.0
    assert bool(((alpha >= 0) & (alpha <= 1)).all())


def test_side_keys_put_the_prompt_back_exactly():
    torch.manual_seed(1)
    q = torch.randn(1, 4, 5, 8)
    k, v = torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    causal = torch.ones(5, 9).tril(diagonal=4).bool()
    mask = torch.zeros(1, 1, 5, 9).masked_fill(~causal, torch.finfo(torch.float32).min)
    system = torch.zeros(1, 9, dtype=torch.bool)
    system[:, :4] = True
    with_prompt, *_ = split_attention(q, k, v, mask, 8 ** -0.5, system, groups=2)
    crop = mask[..., 4:]
    rebuilt = attention_with_side_keys(q, k[:, :, 4:], v[:, :, 4:], crop, 8 ** -0.5,
                                       k[:, :, :4], v[:, :, :4],
                                       torch.ones(1, 4, dtype=torch.bool), groups=2)
    torch.testing.assert_close(rebuilt, with_prompt, atol=1e-6, rtol=1e-5)


def test_mean_states_are_the_layer_outputs_the_residual_hook_shifts():
    """The residual direction's per-layer means (a padded batch) are each decoder layer's
    output before the final norm (the tensor ``residual_hook`` adds to), measured here row by
    row without padding, the last layer included, where ``hidden_states[-1]`` is normed."""
    from methods.gcad.steering import _mean_states

    model = _tiny_llama(40, layers=2)
    rows, system_length = [[1, 5, 7, 9, 11], [1, 6, 8, 10]], 2
    _, _, hidden = _mean_states(model, rows, system_length, 0)
    outputs = {layer: [] for layer in range(2)}
    handles = [block.register_forward_hook(
        lambda m, a, o, layer=layer: outputs[layer].append(
            (o[0] if isinstance(o, tuple) else o)[0, system_length:]))
        for layer, block in enumerate(model.model.layers)]
    normed = []
    with torch.no_grad():
        for row in rows:
            out = model(input_ids=torch.tensor([row]), output_hidden_states=True)
            normed.append(out.hidden_states[-1][0, system_length:])
    for handle in handles:
        handle.remove()
    for layer in range(2):
        torch.testing.assert_close(hidden[layer], torch.cat(outputs[layer]).mean(0),
                                   atol=1e-5, rtol=1e-5)
    assert not torch.allclose(hidden[-1], torch.cat(normed).mean(0), atol=1e-3)


def _exact_signals(model, system_ids):
    keys, values = side_cache(model, system_ids)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    layers = cfg.num_hidden_layers
    return Signals(direction=torch.zeros(layers, cfg.num_attention_heads, head_dim),
                   mean_mass=torch.zeros(layers, cfg.num_attention_heads),
                   residual=torch.zeros(layers, cfg.hidden_size), side_keys=keys,
                   side_values=values)


def test_exact_delta_at_every_position_is_the_system_prompt(chat_model):
    """Prompt-activation duality: with the exact per-token delta on every layer and token,
    the conversation without the prompt reproduces the run with it (first layer and logits)."""
    model, tokenizer = chat_model
    chat = ChatFormat(tokenizer)
    system = chat.system("Talk like a pirate.")
    user, header = chat.user("How are you?")
    conversation = user + header
    captured = []

    def capture(module, args, out):
        captured.append(out[0].detach())

    hook = model.model.layers[0].self_attn.register_forward_hook(capture)
    with torch.no_grad():
        reference = model(torch.tensor([system + conversation])).logits[0, len(system):]
        controller = Controller([Variant("attention", 1.0, "all", "exact")],
                                [_exact_signals(model, system)], 0, "cpu")
        with attached(model, controller):
            steered = model(torch.tensor([conversation])).logits[0]
    hook.remove()
    torch.testing.assert_close(captured[-1][0], captured[0][0, len(system):], atol=1e-5,
                               rtol=1e-4)
    torch.testing.assert_close(steered, reference, atol=1e-4, rtol=1e-4)


def _decode(model, ids, steps: int, controller=None):
    """Logits of a prefill and ``steps`` cached one-token steps (greedy), optionally steered
    at every position (``controller.response`` all True)."""
    from transformers import DynamicCache

    cache, outs, tokens = DynamicCache(), [], torch.tensor([ids])
    for step in range(steps + 1):
        chunk = tokens if step == 0 else tokens[:, -1:]
        if controller is not None:
            controller.response = torch.ones_like(chunk, dtype=torch.bool)
        logits = model(input_ids=chunk, cache=cache, use_cache=True).logits[:, -1]
        outs.append(logits)
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
    return torch.cat(outs)


@pytest.mark.parametrize("gate", ["mass", "constant", "exact"])
def test_gate_zero_is_the_plain_model_with_and_without_cache(chat_model, gate):
    model, tokenizer = chat_model
    chat = ChatFormat(tokenizer)
    system = chat.system("Answer in French.")
    ids = sum(chat.user("Hello there"), [])
    signals = _exact_signals(model, system)
    signals.direction.normal_()
    signals.mean_mass.fill_(0.5)
    with torch.no_grad():
        plain_full = model(torch.tensor([ids])).logits
        plain_cached = _decode(model, ids, 4)
        controller = Controller([Variant("attention", 0.0, "response", gate)], [signals], 0,
                                "cpu")
        with attached(model, controller):
            controller.response = torch.ones(1, len(ids), dtype=torch.bool)
            steered_full = model(torch.tensor([ids])).logits
            steered_cached = _decode(model, ids, 4, controller)
        nonzero = Controller([Variant("attention", 1.0, "response", gate)], [signals], 0, "cpu")
        with attached(model, nonzero):
            moved = _decode(model, ids, 4, nonzero)
    assert torch.equal(steered_full, plain_full)
    assert torch.equal(steered_cached, plain_cached)
    assert not torch.allclose(moved, plain_cached)  # the test can fail: steering moves logits


def test_custom_attention_without_steering_equals_eager(chat_model):
    model, _ = chat_model
    ids = torch.randint(0, 90, (2, 11))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    register()
    with torch.no_grad():
        eager = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation("gcad")
        try:
            custom = model(input_ids=ids, attention_mask=mask).logits
        finally:
            model.set_attn_implementation("eager")
    assert torch.equal(custom, eager)
    assert gcad_attention.__name__ == "gcad_attention"


def test_hooks_removed_restore_the_model_bitwise(chat_model):
    model, tokenizer = chat_model
    chat = ChatFormat(tokenizer)
    ids = torch.tensor([sum(chat.user("Hi"), [])])
    signals = _exact_signals(model, chat.system("Be terse."))
    signals.residual.normal_()
    before_state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(ids).logits
        controller = Controller([Variant("residual", 3.0, "all")], [signals], 0, "cpu")
        with attached(model, controller):
            during = model(ids).logits
        after = model(ids).logits
    assert not torch.allclose(during, before)
    assert torch.equal(after, before)
    assert model.config._attn_implementation == "eager"
    assert all(not layer._forward_hooks for layer in model.model.layers)
    assert not any(hasattr(layer.self_attn, "gcad_controller") for layer in model.model.layers)
    assert all(torch.equal(before_state[k], v) for k, v in model.state_dict().items())


def test_chat_format_pieces_rebuild_the_template(chat_model):
    _, tokenizer = chat_model
    chat = ChatFormat(tokenizer)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"}, {"role": "user", "content": "ok?"}]
    full = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False,
                                                   add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]
    first, header = chat.user("hi")
    second, header2 = chat.user("ok?")
    pieces = (chat.system("S") + first + header + tokenizer("yo", add_special_tokens=False)[
        "input_ids"] + chat.close() + second + header2)
    assert pieces == list(full)


def _dialogue_rows(model, tokenizer, variants):
    chat = ChatFormat(tokenizer)
    system = chat.system("Talk like a pirate.")
    signals = _exact_signals(model, system)
    signals.residual.normal_()
    signals.direction.normal_()
    controller = Controller(variants, [None if v.kind in ("none", "prompt") else signals
                                       for v in variants], 0, "cpu")
    prompts = ["Talk like a pirate." if v.kind == "prompt" else None for v in variants]
    return run_dialogue(model, tokenizer, controller, prompts, ["Hi!", "More?", "Bye."], 6,
                        Sampling(temperature=1.0), torch.Generator().manual_seed(0))


def test_user_turn_cache_is_untouched_by_gcad_and_written_by_residual_steering(chat_model):
    model, tokenizer = chat_model
    variants = [Variant("none"), Variant("prompt"), Variant("attention", 1.0, gate="exact"),
                Variant("attention", 1.0, gate="mass"), Variant("residual", 2.0, "response"),
                Variant("residual", 2.0, "all")]
    dialogue = _dialogue_rows(model, tokenizer, variants)
    contamination = dialogue.contamination
    assert torch.equal(contamination[:5], torch.zeros(5, 3))  # bitwise identical K/V
    assert bool((contamination[5] > 0.01).all())
    # rows stay aligned: same user tokens at the same columns in every row
    user = dialogue.roles == 1
    assert torch.equal(user[0], user[-1])
    assert all(len(texts) == 3 for texts in dialogue.texts)


def test_continuation_logprobs_equal_unbatched_forwards(chat_model):
    model, _ = chat_model
    prefix, continuations = [5, 6, 7], [[11, 12], [13, 14, 15], [16]]
    batched = continuation_logprobs(model, prefix, continuations, pad_id=0)
    for c, got in zip(continuations, batched, strict=True):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prefix + c])).logits[0, :-1], -1)
        want = logp[len(prefix) - 1:].gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_drift_and_distinct_n_by_hand():
    assert drift(np.array([0.0, -1.0, -2.0, -3.0])) == pytest.approx(-3.0)
    assert drift(np.array([1.0, np.nan, 1.0])) == pytest.approx(0.0)
    assert distinct_n([[1, 2, 1, 2]], 2) == pytest.approx(2 / 3)
    assert distinct_n([[1]], 2) == 0.0


def _save_chat_model(folder, chat_model):
    model, tokenizer = chat_model
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _smoke(chat_model, folder):
    """gcad's smoke run (it needs this module's chat model) into ``folder``/run, from an
    empty cache; returns its metrics."""
    _save_chat_model(folder / "lm", chat_model)
    return run_paper(["+paper=gcad", "model=qwen3-0.6b", f"model.hub_id={folder / 'lm'}",
                      "protocol.max_new_tokens=4", "protocol.residual_layer=0",
                      "dataset.user_turns=[Hi,More,Bye]", "protocol.strengths=[0.5,4.0]",
                      f"paths.cache_dir={folder / 'cache'}"], folder / "run")


@pytest.mark.slow  # over 10 s: make test-slow
def test_a_second_smoke_run_repeats_the_metrics(tmp_path, chat_model):
    first, again = _smoke(chat_model, tmp_path / "a"), _smoke(chat_model, tmp_path / "b")
    assert {k: v for k, v in again.items() if not k.startswith("time_")} == {
        k: v for k, v in first.items() if not k.startswith("time_")}


def test_protocol_runs_on_a_local_chat_model(tmp_path, chat_model):
    metrics, run_dir = _smoke(chat_model, tmp_path), tmp_path / "run"
    for key in ("coherence_drift_residual", "coherence_drift_gcad", "trait_turn3_residual",
                "trait_turn3_gcad", "kv_contamination_gcad"):
        assert np.isfinite(metrics[key]), key
    assert metrics["kv_contamination_gcad"] == 0.0
    assert metrics["kv_contamination_residual"] > 0.0
    assert (run_dir / "figures" / "dialogue.png").exists()
    assert (run_dir / "tables" / "transcripts.csv").exists()
    # both methods at 0 (no steering), 0.5, 1 and 4 times their scales, compared at the
    # highest turn-1 trait both reach
    strengths = list(csv.DictReader((run_dir / "tables" / "strengths.csv").open()))
    assert [float(r["strength"]) for r in strengths] == [0, 0.5, 1, 4] * 2
    level = metrics["matched_trait_turn1"]
    assert level == pytest.approx(min(max(float(r["trait_turn1"]) for r in strengths
                                          if r["variant"] == v) for v in ("residual", "gcad")))
    assert -1 <= metrics["kv_drift_spearman_residual"] <= 1
    assert (run_dir / "figures" / "strengths.png").exists()


def test_at_level_interpolates_on_the_rising_part_of_a_strength_curve():
    levels = [0.0, 1.0, 3.0, 2.0]  # turn-1 trait at strengths 0, 1, 2, 4: falls after 2
    values = [10.0, 20.0, 40.0, -5.0]
    assert at_level(levels, values, 2.0) == pytest.approx(30.0)  # half way from 1 to 3
    assert at_level(levels, values, 0.0) == 10.0
    assert at_level(levels, values, 3.0) == 40.0
    assert np.isnan(at_level(levels, values, 3.5))  # never reached
    assert common_level([levels, [0.0, 0.5, 2.5]]) == 2.5
    assert common_level([[0.0, float("nan"), 1.5], levels]) == 1.5


def test_real_model_fails_offline_with_one_line(tmp_path):
    _, failed = run_failing(["+paper=gcad", "model=qwen3-4b", f"paths.cache_dir={tmp_path}"],
                            tmp_path / "run")
    assert "Qwen/Qwen3-4B" in failed["error"] and "\n" not in failed["error"]


@pytest.mark.slow
def test_smollm2_default_dialogue_offline(run_dir):
    metrics = run_paper(["+paper=gcad", "dataset.user_turns=['Hi!','Tell me a joke.']",
                         "protocol.max_new_tokens=8"], run_dir)
    assert metrics["kv_contamination_gcad"] == 0.0


def test_extracted_mass_is_the_attention_paid_to_the_system_prompt(chat_model):
    model, tokenizer = chat_model
    chat = ChatFormat(tokenizer)
    persona, neutral = chat.system("Be a pirate."), chat.system("Be nice.")
    turn = sum(chat.user("Hi, who are you?"), [])
    signals = extract_signals(model, [persona + turn], [neutral + turn], len(persona),
                              len(neutral), persona, pad_id=0)
    with torch.no_grad():
        attentions = model(torch.tensor([persona + turn]), output_attentions=True).attentions
    for layer, weights in enumerate(attentions):  # (1, H, Q, K), eager softmax weights
        mass = weights[0, :, len(persona):, :len(persona)].sum(-1).mean(-1)
        torch.testing.assert_close(signals.mean_mass[layer], mass, atol=1e-5, rtol=1e-4)
    assert signals.side_keys[0].shape[1] == len(persona)


class _FixedJudge(torch.nn.Module):
    """Next-token logits that put (almost) all mass on one token."""

    def __init__(self, vocab: int, token: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.token = vocab, token

    def forward(self, input_ids, attention_mask=None, logits_to_keep=1, position_ids=None):
        from types import SimpleNamespace

        logits = torch.zeros(input_ids.shape[0], 1, self.vocab)
        logits[..., self.token] = 50.0
        return SimpleNamespace(logits=logits)


def test_judge_score_is_the_expected_digit_on_a_0_to_100_scale(chat_model):
    _, tokenizer = chat_model
    seven = tokenizer("7", add_special_tokens=False)["input_ids"][0]
    scores = judge_scores(_FixedJudge(len(tokenizer), seven), tokenizer, ["a", "bb", "ccc"],
                          batch_size=2)
    assert scores == pytest.approx([700 / 9] * 3, abs=1e-6)
    uniform = judge_scores(_FixedJudge(len(tokenizer), 0), tokenizer, ["a"])
    assert uniform == pytest.approx([50.0], abs=1e-4)  # no digit preferred: mean of 0..100


def test_protocol_with_an_llm_judge(run_dir, tmp_path, chat_model):
    _save_chat_model(tmp_path / "lm", chat_model)
    metrics = run_paper(["+paper=gcad", "model=qwen3-0.6b", f"model.hub_id={tmp_path / 'lm'}",
                         "+model@judge=qwen3-0.6b", f"judge.hub_id={tmp_path / 'lm'}",
                         "protocol.max_new_tokens=3", "dataset.user_turns=[Hi,Bye]",
                         "protocol.residual_layer=0", f"paths.cache_dir={tmp_path / 'c'}"],
                        run_dir)
    for name in ("gcad", "residual"):
        assert 0.0 <= metrics[f"judge_trait_turn2_{name}"] <= 100.0
        assert np.isfinite(metrics[f"judge_coherence_drift_{name}"])


@pytest.mark.gpu
def test_gcad_on_gpu(run_dir):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    metrics = run_paper(["+paper=gcad", "device=cuda",
                         "dataset.user_turns=['Hi!','Why?','Bye.']"], run_dir)
    assert metrics["kv_contamination_gcad"] == 0.0
