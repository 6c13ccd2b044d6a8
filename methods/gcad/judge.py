"""An LLM judge for persona dialogues, by name (the paper's 0-100 trait and coherence
scores). Each rating is one forward pass: the judge is asked for a digit 0-9 and the score
is 100/9 times the expected digit under its next-token distribution (no sampling, no
parsing, every tokenizer has the ten digit tokens)."""

from __future__ import annotations

import torch

from models.lm.prompting import pad_id
from models.lm.rollout import left_pad, position_ids

TRAIT = ("Persona: {persona}\nUser: {user}\nAssistant: {response}\n\nOn a scale from 0 to 9, "
         "how strongly does the assistant's reply express the persona? Answer with one digit.")
COHERENCE = ("User: {user}\nAssistant: {response}\n\nOn a scale from 0 to 9, how coherent, "
             "fluent and relevant is the assistant's reply? Answer with one digit.")


def digit_ids(tokenizer) -> list[int]:
    ids = [tokenizer(str(d), add_special_tokens=False)["input_ids"] for d in range(10)]
    if any(len(i) != 1 for i in ids):
        raise ValueError("the judge's tokenizer does not have one token per digit")
    return [i[0] for i in ids]


@torch.no_grad()
def judge_scores(judge, tokenizer, questions: list[str], batch_size: int = 8) -> list[float]:
    """0-100 expected-digit scores of ``questions`` (chat-templated user messages)."""
    device = next(judge.parameters()).device
    digits = torch.tensor(digit_ids(tokenizer), device=device)
    values = torch.arange(10, dtype=torch.float32, device=device) * 100 / 9
    pad = pad_id(tokenizer)
    scores = []
    for start in range(0, len(questions), batch_size):
        rows = [list(tokenizer(tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True,
            enable_thinking=False),
            add_special_tokens=False)["input_ids"]) for q in questions[start:start + batch_size]]
        ids, mask = (t.to(device) for t in left_pad(rows, pad))
        logits = judge(input_ids=ids, attention_mask=mask, logits_to_keep=1,
                       position_ids=position_ids(mask)).logits[:, -1]
        probs = torch.softmax(logits.float()[:, digits], -1)
        scores.extend((probs @ values).tolist())
    return scores
