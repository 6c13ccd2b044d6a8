"""Multi-turn dialogues in lockstep: one row per (persona, steering variant), one KV cache
carried over all turns, as a chat deployment runs them.

Every row hears the same scripted user turns. A row's tokens carry a role (system, user,
header = the assistant's opening tokens, response, close = the end-of-turn tokens) and a
turn index; pads (rows that finished a response early) are masked out of attention, so the
rows stay aligned. Before each user turn is read, it is read once more with steering off
on the same cache: the difference of the K/V the two write for the user's tokens is the
*KV-cache contamination* of that row (exactly 0 when only assistant positions are steered).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from common.errors import UserError
from methods.gcad.steering import Controller, attached
from models.lm.prompting import pad_id
from models.lm.rollout import Sampling, left_pad, position_ids

SYSTEM, USER, HEADER, RESPONSE, CLOSE, PAD = range(6)
STEERABLE = (HEADER, RESPONSE)


@dataclass
class ChatFormat:
    """Token pieces of a chat template: a system block, a user turn, the assistant header
    and the end of an assistant turn (found by rendering the template around markers)."""

    tokenizer: object

    def _render(self, messages, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def system(self, text: str) -> list[int]:
        return self._ids(self._render([{"role": "system", "content": text}]))

    def user(self, text: str) -> tuple[list[int], list[int]]:
        """(user turn, assistant header) after a system block."""
        base = [{"role": "system", "content": "x"}]
        turn = base + [{"role": "user", "content": text}]
        before, closed = self._render(base), self._render(turn)
        opened = self._render(turn, generation_prompt=True)
        return self._ids(closed[len(before):]), self._ids(opened[len(closed):])

    def close(self) -> list[int]:
        """The tokens a template puts after an assistant message's content."""
        marker = "\u2063END\u2063"
        turn = [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]
        text = self._render(turn + [{"role": "assistant", "content": marker}])
        return self._ids(text[text.index(marker) + len(marker):])


@dataclass
class Dialogue:
    """Token ids (B, L), attention mask, role and turn of every position, and per row and
    turn the relative K/V contamination of the user's tokens."""

    ids: torch.Tensor
    mask: torch.Tensor
    roles: torch.Tensor
    turns: torch.Tensor
    contamination: torch.Tensor  # (B, turns)
    texts: list[list[str]] = field(default_factory=list)  # per row, the responses


def _new_kv(cache, n: int) -> list[torch.Tensor]:
    return [torch.cat([layer.keys[..., -n:, :], layer.values[..., -n:, :]], dim=1)
            for layer in cache.layers]


class _Batch:
    """The growing token, mask, role and turn tensors of all rows, and their KV cache."""

    def __init__(self, model, prefixes: list[list[int]], pad: int) -> None:
        from transformers import DynamicCache

        self.model, self.device = model, next(model.parameters()).device
        # left-padded: every row's conversation starts in the same column
        self.ids, self.mask = left_pad(prefixes, pad)
        self.roles = torch.where(self.mask.bool(), SYSTEM, PAD)
        self.turns = torch.full_like(self.ids, -1)
        self.ids, self.mask, self.roles, self.turns = (
            t.to(self.device) for t in (self.ids, self.mask, self.roles, self.turns))
        self.cache = DynamicCache()
        self.pending = self.ids.shape[1]  # tokens not yet in the cache

    def append(self, ids: torch.Tensor, mask: torch.Tensor, roles: torch.Tensor, turn: int):
        self.ids = torch.cat([self.ids, ids], 1)
        self.mask = torch.cat([self.mask, mask], 1)
        self.roles = torch.cat([self.roles, roles], 1)
        self.turns = torch.cat([self.turns, torch.full_like(ids, turn)], 1)
        self.pending += ids.shape[1]

    def forward(self, controller: Controller) -> torch.Tensor:
        """Next-token logits after reading the pending tokens (assistant positions marked
        for the controller)."""
        n = self.pending
        controller.response = torch.isin(self.roles[:, -n:],
                                         torch.tensor(STEERABLE, device=self.device))
        out = self.model(input_ids=self.ids[:, -n:], attention_mask=self.mask,
                         position_ids=position_ids(self.mask)[:, -n:], cache=self.cache,
                         use_cache=True, logits_to_keep=1)
        self.pending = 0
        return out.logits[:, -1, :]


@torch.no_grad()
def run_dialogue(model, tokenizer, controller: Controller, system_prompts: list[str | None],
                 user_turns: list[str], max_new_tokens: int, sampling: Sampling,
                 generator: torch.Generator, progress=None) -> Dialogue:
    """Play ``user_turns`` to every row; row b starts with ``system_prompts[b]`` (None: no
    system block) and is steered as ``controller.variants[b]``."""
    if len(system_prompts) != len(controller.variants):
        raise ValueError("one system prompt (or None) per row")
    if not user_turns:
        raise UserError("the dialogue needs at least one user turn")
    chat = ChatFormat(tokenizer)
    pad = pad_id(tokenizer)
    close = chat.close()
    stop = torch.tensor(sorted({close[0], tokenizer.eos_token_id} - {None}))
    rows = _Batch(model, [chat.system(p) if p is not None else [] for p in system_prompts], pad)
    batch, device = len(system_prompts), rows.device
    contamination = torch.zeros(batch, len(user_turns))
    texts: list[list[str]] = [[] for _ in range(batch)]
    iterator = range(len(user_turns)) if progress is None else progress(
        range(len(user_turns)), "dialogue turns")
    with attached(model, controller):
        for turn in iterator:
            user, header = chat.user(user_turns[turn])
            opening = close if turn else []
            segment = opening + user + header
            roles = [CLOSE] * len(opening) + [USER] * len(user) + [HEADER] * len(header)
            rows.append(torch.tensor([segment] * batch, device=device),
                        torch.ones(batch, len(segment), dtype=torch.long, device=device),
                        torch.tensor([roles] * batch, device=device), turn)
            logits, contamination[:, turn] = _read_measuring_contamination(controller, rows)
            finished = torch.zeros(batch, dtype=torch.bool, device=device)
            response: list[list[int]] = [[] for _ in range(batch)]
            for _ in range(max_new_tokens):
                probs = sampling.log_probs(logits).exp().cpu()
                token = torch.multinomial(probs, 1, generator=generator)[:, 0]
                finished = finished | torch.isin(token, stop).to(device)
                for b in torch.nonzero(~finished).flatten().tolist():
                    response[b].append(int(token[b]))
                if bool(finished.all()):
                    break
                token = torch.where(finished, torch.full_like(finished, pad, dtype=torch.long),
                                    token.to(device))
                rows.append(token[:, None], (~finished).long()[:, None],
                            torch.where(finished, PAD, RESPONSE)[:, None], turn)
                logits = rows.forward(controller)
            for b in range(batch):
                texts[b].append(tokenizer.decode(response[b]))
    controller.response = None
    return Dialogue(rows.ids.cpu(), rows.mask.cpu(), rows.roles.cpu(), rows.turns.cpu(),
                    contamination, texts)


def _read_measuring_contamination(controller: Controller, rows: _Batch
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Read the pending tokens twice on the same cache, unsteered (then undone) and steered
    (kept). Returns the steered logits and, per row, the relative distance of the K/V the
    two runs wrote for the user's tokens."""
    n = rows.pending
    controller.enabled = False
    rows.forward(controller)
    plain = _new_kv(rows.cache, n)
    rows.cache.crop(-n)
    rows.pending, controller.enabled = n, True
    logits = rows.forward(controller)
    steered = _new_kv(rows.cache, n)
    user = (rows.roles[:, -n:] == USER)[:, None, :, None]
    diff = sum(((s - p) * user).pow(2).sum((1, 2, 3)) for s, p in zip(steered, plain,
                                                                       strict=True))
    norm = sum((p * user).pow(2).sum((1, 2, 3)) for p in plain)
    return logits, (diff / norm.clamp(min=1e-30)).sqrt().cpu()
