"""Membership-inference scores of language models, the inputs of the conformal p-values."""

from __future__ import annotations

import numpy as np


def min_k_percent(model, items: np.ndarray, k_percent: float, batch_size: int = 256
                  ) -> np.ndarray:
    """Min-K% Prob membership score (Shi et al.): the mean of the lowest k% token
    log-probabilities of each item under the model (higher = more likely a member)."""
    import torch

    device = next(model.parameters()).device
    scores = []
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            ids = torch.as_tensor(items[start:start + batch_size], device=device)
            logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
            token_lp = logp.gather(-1, ids[:, 1:, None])[..., 0]
            k = max(1, int(np.ceil(token_lp.shape[1] * k_percent / 100)))
            scores.append(token_lp.topk(k, dim=1, largest=False).values.mean(1).cpu().numpy())
    return np.concatenate(scores)
