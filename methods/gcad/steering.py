"""Steering signals, their extraction from contrastive system prompts, and the controller
that applies one steering variant per batch row.

A variant (``Variant``) is one of
- ``residual``: add ``scale * v_l`` to the residual stream after decoder layer l, where v_l is
  the mean hidden state under the persona prompt minus under the neutral prompt (persona
  vectors); ``positions: all`` steers every token the model reads (its states go to the KV
  cache, user turns included), ``positions: response`` only the assistant's tokens;
- ``attention``: add a gated delta to every layer's attention output (GCAD). Per layer and
  head the signal is the direction d = E[o^S - o^R | persona] - E[o^S - o^R | neutral], the
  contrastive system-prompt part of attention (``attention.split_attention``); the gate is
  ``mass``: alpha_i, the attention mass the current token would pay to the persona prompt,
  computed exactly from the prompt's keys cached on the side (GCAD's token-level gate;
  RECON: the paper's gate is not public), ``constant``: the mean mass seen at extraction
  (the ungated baseline), or ``exact``: the token's own cropped delta alpha_i (o^S - o^R)
  from the side cache, no contrast (at every position this *is* the system prompt).
Rows that are not steered run the plain model; ``Variant(kind="prompt")`` rows carry the
persona as a real system prompt and are not steered either.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from common.errors import UserError
from methods.gcad.attention import (
    NAME,
    attention_scores,
    register,
    side_mass_and_output,
    split_attention,
)

KINDS = ("none", "prompt", "residual", "attention")
GATES = ("mass", "constant", "exact")
POSITIONS = ("response", "all")


@dataclass(frozen=True)
class Variant:
    kind: str
    scale: float = 1.0
    positions: str = "response"
    gate: str = "mass"

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.kind, KINDS, "kind"), (self.gate, GATES, "gate"),
                                     (self.positions, POSITIONS, "positions")):
            if value not in allowed:
                raise UserError(f"steering {what} must be one of {', '.join(allowed)}, "
                                f"got '{value}'")


@dataclass
class Signals:
    """What one persona's contrastive extraction gives (L layers, H heads, head size D)."""

    direction: torch.Tensor  # (L, H, D) attention-output direction, before o_proj
    mean_mass: torch.Tensor  # (L, H) mean attention mass on the persona prompt
    residual: torch.Tensor  # (L, hidden) mean hidden-state difference after each layer
    side_keys: list[torch.Tensor]  # per layer (H_kv, S, D): the persona prompt's keys
    side_values: list[torch.Tensor]


def decoder_layers(model):
    return model.get_decoder().layers


@torch.no_grad()
def side_cache(model, system_ids: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Keys and values of a system prompt at positions -S..-1 (rotary embeddings are
    relative, so a conversation starting at position 0 sees it just before itself)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    n = len(system_ids)
    cache = DynamicCache()
    model(input_ids=torch.tensor([system_ids], device=device),
          position_ids=torch.arange(-n, 0, device=device)[None], cache=cache, use_cache=True)
    return ([layer.keys[0] for layer in cache.layers], [layer.values[0] for layer in cache.layers])


class _Recorder:
    """Sums of o^S - o^R and alpha over the tokens after the system prompt, per row."""

    def __init__(self, system_keys: torch.Tensor, keep: torch.Tensor) -> None:
        self.system_keys, self.keep = system_keys, keep.float()
        self.direction: dict[int, torch.Tensor] = {}
        self.mass: dict[int, torch.Tensor] = {}

    def add(self, layer, query, key, value, attention_mask, scaling, groups) -> None:
        _, alpha, o_sys, o_rest = split_attention(query, key, value, attention_mask, scaling,
                                                  self.system_keys, groups)
        keep = self.keep[:, None, :]
        self.direction[layer] = torch.einsum("bhq,bhqd->bhd", keep, o_sys - o_rest)
        self.mass[layer] = (keep * alpha).sum(-1)


class Controller:
    """Per-row steering for a batch of dialogues; attach with ``attached(model, ...)``.

    ``response`` (B, Q) marks, before each forward, the positions of the current chunk that
    belong to the assistant (the steerable positions of ``positions: response`` rows).
    ``enabled = False`` turns every row off (the unsteered twin of a forward)."""

    def __init__(self, variants: list[Variant], signals: list[Signals | None],
                 residual_layer: int, device) -> None:
        if len(variants) != len(signals):
            raise ValueError("one signal (or None) per variant")
        for variant, signal in zip(variants, signals, strict=True):
            if variant.kind in ("residual", "attention") and signal is None:
                raise ValueError(f"a {variant.kind} row needs its persona's signals")
        self.variants, self.residual_layer = variants, residual_layer
        self.enabled, self.response, self.recorder = True, None, None

        def per_row(kind: str) -> torch.Tensor:
            return torch.tensor([v.scale if v.kind == kind else 0.0 for v in variants],
                                device=device)

        self.attention_scale, self.residual_scale = per_row("attention"), per_row("residual")
        self.all_positions = torch.tensor([v.positions == "all" for v in variants],
                                          device=device)
        self.gate = {g: torch.tensor([v.kind == "attention" and v.gate == g for v in variants],
                                     device=device)[:, None, None, None] for g in GATES}
        template = next((s for s in signals if s is not None), None)
        if template is None:
            return

        def stack(get) -> torch.Tensor:
            return torch.stack([get(s if s is not None else template) * (s is not None)
                                for s in signals]).to(device)

        self.direction = stack(lambda s: s.direction)  # (B, L, H, D)
        self.mean_mass = stack(lambda s: s.mean_mass)  # (B, L, H)
        self.residual = stack(lambda s: s.residual[residual_layer])  # (B, hidden)
        width = max(s.side_keys[0].shape[1] for s in signals if s is not None)
        self.side_mask = torch.tensor([[s is not None and j < s.side_keys[0].shape[1]
                                        for j in range(width)] for s in signals], device=device)

        def side(get, layer: int) -> torch.Tensor:
            return stack(lambda s: torch.nn.functional.pad(
                get(s)[layer], (0, 0, 0, width - get(s)[layer].shape[1])))

        layers = range(len(template.side_keys))
        self.side_keys = [side(lambda s: s.side_keys, i) for i in layers]
        self.side_values = [side(lambda s: s.side_values, i) for i in layers]

    def _positions(self, batch: int, length: int, device) -> torch.Tensor:
        """(B, Q) float: 1 where a row steers this position."""
        response = (torch.zeros(batch, length, dtype=torch.bool, device=device)
                    if self.response is None else self.response.to(device))
        return (response | self.all_positions[:, None]).float()

    def on_attention(self, layer, query, key, value, attention_mask, scaling, groups, out):
        if self.recorder is not None:
            self.recorder.add(layer, query, key, value, attention_mask, scaling, groups)
            return out
        if not self.enabled or not bool((self.attention_scale != 0).any()):
            return out
        batch, _, length, _ = query.shape
        scores = attention_scores(query, key, attention_mask, scaling, groups)
        alpha, o_sys = side_mass_and_output(query, self.side_keys[layer],
                                            self.side_values[layer], self.side_mask, scores,
                                            scaling, groups)
        weight = self.attention_scale[:, None, None] * self._positions(
            batch, length, query.device)[:, None, :]  # (B, 1, Q)
        current = out.transpose(1, 2).float()  # (B, H, Q, D)
        direction = self.direction[:, layer][:, :, None, :]  # (B, H, 1, D)
        delta = (self.gate["mass"] * alpha[..., None] * direction
                 + self.gate["constant"] * self.mean_mass[:, layer][..., None, None] * direction
                 + self.gate["exact"] * alpha[..., None] * (o_sys - current))
        return (current + weight[..., None] * delta).to(out.dtype).transpose(1, 2).contiguous()

    def residual_hook(self, module, args, output):
        if self.recorder is not None or not self.enabled:
            return output
        if not bool((self.residual_scale != 0).any()):
            return output
        batch, length, _ = output.shape
        weight = self.residual_scale[:, None] * self._positions(batch, length, output.device)
        return output + (weight[..., None] * self.residual[:, None, :]).to(output.dtype)


@contextmanager
def attached(model, controller: Controller):
    """Run ``model`` with the ``gcad`` attention function and the controller's residual hook;
    on exit the model is exactly as before (implementation, hooks, attributes)."""
    register()
    previous = model.config._attn_implementation
    layers = decoder_layers(model)
    model.set_attn_implementation(NAME)
    handle = layers[controller.residual_layer].register_forward_hook(controller.residual_hook)
    for layer in layers:
        layer.self_attn.gcad_controller = controller
    try:
        yield controller
    finally:
        handle.remove()
        for layer in layers:
            del layer.self_attn.gcad_controller
        model.set_attn_implementation(previous)


@torch.no_grad()
def extract_signals(model, persona_rows: list[list[int]], neutral_rows: list[list[int]],
                    persona_system_length: int, neutral_system_length: int,
                    persona_system_ids: list[int], pad_id: int) -> Signals:
    """Contrastive signals of one persona: ``persona_rows`` (and ``neutral_rows``) are token
    sequences that start with the persona (neutral) system prompt of the given length,
    followed by conversation (questions and the model's answers under that prompt).
    Averages run over the tokens after the system prompt."""
    pos = _mean_states(model, persona_rows, persona_system_length, pad_id)
    neg = _mean_states(model, neutral_rows, neutral_system_length, pad_id)
    keys, values = side_cache(model, persona_system_ids)
    return Signals(direction=pos[0] - neg[0], mean_mass=pos[1], residual=pos[2] - neg[2],
                   side_keys=keys, side_values=values)


def _mean_states(model, rows: list[list[int]], system_length: int, pad_id: int):
    """(direction (L, H, D), mass (L, H), hidden (L, hidden)) averaged over rows and the
    tokens after the system prompt (right-padded batch: positions start at 0 in every row)."""
    device = next(model.parameters()).device
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    ids, mask = ids.to(device), mask.to(device)
    system_keys = torch.zeros_like(mask, dtype=torch.bool)
    system_keys[:, :system_length] = True
    keep = mask.bool() & ~system_keys
    controller = Controller([Variant("none")] * len(rows), [None] * len(rows), 0, device)
    controller.recorder = _Recorder(system_keys, keep)
    hidden = []  # each decoder layer's output, before any final norm: what residual_hook shifts

    def record(module, args, output):
        states = output[0] if isinstance(output, tuple) else output
        hidden.append((states * keep[..., None]).sum((0, 1)))

    handles = [layer.register_forward_hook(record) for layer in decoder_layers(model)]
    try:
        with attached(model, controller):
            model(input_ids=ids, attention_mask=mask)
    finally:
        for handle in handles:
            handle.remove()
    count = keep.sum()
    layers = sorted(controller.recorder.direction)
    direction = torch.stack([controller.recorder.direction[i].sum(0) for i in layers]) / count
    mass = torch.stack([controller.recorder.mass[i].sum(0) for i in layers]) / count
    return direction.cpu(), mass.cpu(), (torch.stack(hidden) / count).float().cpu()
