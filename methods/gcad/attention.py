"""The attention-side algebra of GCAD and the attention function that applies it.

For one head and query i, split the keys into the system prompt S and the rest R. With
unnormalised weights e_ij = exp(q_i . k_j * scale) the output splits exactly:

    o_i = alpha_i * o_i^S + (1 - alpha_i) * o_i^R,
    alpha_i = sum_{j in S} e_ij / sum_j e_ij,   o_i^S = softmax over S of the same scores, V_S

so the system prompt's contribution (the *cropped attention delta*: output with S minus
output with S cropped) is ``alpha_i * (o_i^S - o_i^R)``. ``split_attention`` computes the
parts; ``attention_with_side_keys`` puts a system prompt back into an attention computed
without it (from its keys and values cached on the side), exact at the first layer.

``gcad_attention`` is registered with transformers' ``AttentionInterface`` under the name
``gcad`` (and ``eager_mask`` under the same name, without which masks silently disappear).
With no controller attached to the attention module it computes exactly what ``eager``
computes; a ``methods.gcad.steering.Controller`` attached to the module records or steers.
"""

from __future__ import annotations

import torch

NAME = "gcad"


def repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, T, D) -> (B, H_kv * groups, T, D): each key/value head serves ``groups``
    query heads (grouped-query attention)."""
    if groups == 1:
        return states
    batch, heads, length, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, length, dim).reshape(
        batch, heads * groups, length, dim)


def attention_scores(query, key, attention_mask, scaling, groups: int) -> torch.Tensor:
    """(B, H, Q, K) scaled scores plus the additive mask, as transformers' eager attention."""
    scores = torch.matmul(query, repeat_kv(key, groups).transpose(2, 3)) * scaling
    return scores if attention_mask is None else scores + attention_mask


def eager_attention(query, key, value, attention_mask, scaling, groups: int) -> torch.Tensor:
    """(B, Q, H, D) attention output, operation for operation what ``eager`` computes."""
    scores = attention_scores(query, key, attention_mask, scaling, groups)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, repeat_kv(value, groups)).transpose(1, 2).contiguous()


def _masked_softmax_output(scores, allowed, value):
    """Softmax over the allowed keys only, applied to ``value``, and the log-partition
    (-inf where a query has no allowed key; its output is then 0)."""
    masked = scores.masked_fill(~allowed, float("-inf"))
    log_z = torch.logsumexp(masked, dim=-1)
    weights = torch.exp(masked - log_z.clamp(min=torch.finfo(scores.dtype).min)[..., None])
    weights = torch.nan_to_num(weights, nan=0.0)
    return torch.matmul(weights, value), log_z


def split_attention(query, key, value, attention_mask, scaling, system_keys: torch.Tensor,
                    groups: int = 1):
    """The exact split of attention into system-prompt and rest parts.

    Args:
        query: (B, H, Q, D); key, value: (B, H_kv, K, D); attention_mask: additive
            (B, 1, Q, K) or None; system_keys: bool (B, K), True for system-prompt keys.
    Returns:
        out (B, H, Q, D) the full attention output, alpha (B, H, Q) the attention mass on
        the system prompt, o_sys and o_rest (B, H, Q, D) the outputs restricted to each part
        (0 where a part has no visible key).
    """
    scores = attention_scores(query, key, attention_mask, scaling, groups).float()
    value = repeat_kv(value, groups).float()
    visible = scores > torch.finfo(scores.dtype).min / 2
    system = system_keys[:, None, None, :].expand_as(visible)
    o_sys, log_z_sys = _masked_softmax_output(scores, visible & system, value)
    o_rest, log_z_rest = _masked_softmax_output(scores, visible & ~system, value)
    alpha = torch.sigmoid(log_z_sys - log_z_rest)
    alpha = torch.where(torch.isneginf(log_z_sys), torch.zeros_like(alpha), alpha)
    out = alpha[..., None] * o_sys + (1 - alpha[..., None]) * o_rest
    return out, alpha, o_sys, o_rest


def side_mass_and_output(query, side_key, side_value, side_mask, scores_rest, scaling,
                         groups: int):
    """The attention a query would pay to system-prompt keys cached on the side.

    ``scores_rest`` (B, H, Q, K) are the masked scores over the actual keys; ``side_mask``
    (B, S) marks real side keys (prompts of different lengths are padded). Returns alpha
    (B, H, Q), the mass the system prompt would take, and o_sys (B, H, Q, D)."""
    side_scores = torch.matmul(query.float(), repeat_kv(side_key, groups).float()
                               .transpose(2, 3)) * scaling
    allowed = side_mask[:, None, None, :].expand_as(side_scores)
    o_sys, log_z_sys = _masked_softmax_output(side_scores, allowed,
                                              repeat_kv(side_value, groups).float())
    log_z_rest = torch.logsumexp(scores_rest.float(), dim=-1)
    alpha = torch.sigmoid(log_z_sys - log_z_rest)
    alpha = torch.where(torch.isneginf(log_z_sys), torch.zeros_like(alpha), alpha)
    return alpha, o_sys


def attention_with_side_keys(query, key, value, attention_mask, scaling, side_key, side_value,
                             side_mask, groups: int = 1) -> torch.Tensor:
    """(B, H, Q, D) attention as if the side-cached system prompt preceded the keys:
    ``(1 - alpha) * o + alpha * o_sys`` (the prompt-activation duality)."""
    scores = attention_scores(query, key, attention_mask, scaling, groups).float()
    weights = torch.softmax(scores, dim=-1)
    o_rest = torch.matmul(weights, repeat_kv(value, groups).float())
    alpha, o_sys = side_mass_and_output(query, side_key, side_value, side_mask, scores,
                                        scaling, groups)
    return (1 - alpha[..., None]) * o_rest + alpha[..., None] * o_sys


def gcad_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """The registered attention function: eager attention, then the attached controller's
    recording or steering (``module.gcad_controller``); returns (output (B, Q, H, D), None)."""
    groups = query.shape[1] // key.shape[1]
    out = eager_attention(query, key, value, attention_mask, scaling, groups)
    controller = getattr(module, "gcad_controller", None)
    if controller is not None:
        out = controller.on_attention(module.layer_idx, query, key, value, attention_mask,
                                      scaling, groups, out)
    return out, None


def register() -> None:
    """Make ``attn_implementation="gcad"`` available (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(NAME, gcad_attention)
    AttentionMaskInterface.register(NAME, eager_mask)
