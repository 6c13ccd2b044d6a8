"""NAM, NA2M and MLP classifiers in torch (trained with Lightning), exported to numpy
``AdditiveModel``s for verification.

NAM: f(x) = b + sum_i h_i(x_i); NA2M adds h_ij(x_i, x_j) for each edge of an interaction
graph; every h is a small ReLU net (all features' nets evaluated as one batched einsum).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from methods.sufexplain.networks import AdditiveModel, ReluNet


class FeatureNets(nn.Module):
    """``count`` independent ReLU nets with ``in_dim`` inputs and one output each."""

    def __init__(self, count: int, in_dim: int, hidden: list[int]) -> None:
        super().__init__()
        dims = [in_dim, *hidden, 1]
        self.weights = nn.ParameterList([
            nn.Parameter(torch.randn(count, dims[k + 1], dims[k]) * math.sqrt(2 / dims[k]))
            for k in range(len(dims) - 1)])
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(count, dims[k + 1]))
                                        for k in range(len(dims) - 1)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(B, count, in_dim) -> (B, count)."""
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.einsum("bci,coi->bco", h, w) + b
            if k < len(self.weights) - 1:
                h = torch.relu(h)
        return h[..., 0]

    def export(self, inputs: list[tuple[int, ...]]) -> list[ReluNet]:
        ws = [w.detach().double().cpu().numpy() for w in self.weights]
        bs = [b.detach().double().cpu().numpy() for b in self.biases]
        return [ReluNet([w[c] for w in ws], [b[c] for b in bs], inputs[c])
                for c in range(len(inputs))]


class AdditiveNet(nn.Module):
    """NAM (no edges) or NA2M (pairwise nets on ``edges``)."""

    def __init__(self, n_features: int, edges: list[tuple[int, int]], hidden: list[int]) -> None:
        super().__init__()
        self.n_features, self.edges = n_features, [tuple(e) for e in edges]
        self.unary = FeatureNets(n_features, 1, hidden)
        self.pairs = FeatureNets(len(self.edges), 2, hidden) if self.edges else None
        self.bias = nn.Parameter(torch.zeros(()))
        self.register_buffer("pair_index", torch.tensor(self.edges, dtype=torch.long)
                             .reshape(-1, 2))

    def terms(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n_terms) outputs of every unary, then every pairwise net."""
        out = self.unary(x[..., None])
        if self.pairs is not None:
            out = torch.cat([out, self.pairs(x[:, self.pair_index])], dim=1)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bias + self.terms(x).sum(-1)

    def export(self) -> AdditiveModel:
        terms = self.unary.export([(i,) for i in range(self.n_features)])
        if self.pairs is not None:
            terms += self.pairs.export(self.edges)
        return AdditiveModel(self.n_features, float(self.bias.detach()), terms, list(self.edges))


class MLPNet(nn.Module):
    def __init__(self, n_features: int, hidden: list[int]) -> None:
        super().__init__()
        dims = [n_features, *hidden, 1]
        layers: list[nn.Module] = []
        for k in range(len(dims) - 1):
            layers.append(nn.Linear(dims[k], dims[k + 1]))
            if k < len(dims) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.n_features = n_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[..., 0]

    def export(self) -> AdditiveModel:
        linear = [m for m in self.net if isinstance(m, nn.Linear)]
        net = ReluNet([m.weight.detach().double().numpy() for m in linear],
                      [m.bias.detach().double().numpy() for m in linear],
                      tuple(range(self.n_features)))
        return AdditiveModel(self.n_features, 0.0, [net])


def _module(net: nn.Module, lr: float, weight_decay: float, output_penalty: float):
    import lightning as L

    class BinaryClassifier(L.LightningModule):
        """Logistic loss on f(x) (labels 0/1), plus the NAM output penalty (mean h^2)."""

        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch, _):
            x, y = batch
            logits = self.net(x)
            loss = nn.functional.binary_cross_entropy_with_logits(logits, y)
            if output_penalty and isinstance(self.net, AdditiveNet):
                loss = loss + output_penalty * self.net.terms(x).pow(2).mean()
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    return BinaryClassifier()


def train_classifier(net: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int,
                     batch_size: int, lr: float, weight_decay: float, output_penalty: float,
                     compute=None) -> nn.Module:
    """Train ``net`` (logits) on 0/1 labels with Lightning; returns it in eval mode on CPU."""
    from models.trainer import make_trainer

    data = torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32),
                                          torch.tensor(y, dtype=torch.float32))
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True)
    make_trainer(compute, max_epochs=epochs).fit(
        _module(net, lr, weight_decay, output_penalty), loader)
    return net.cpu().eval()


@torch.no_grad()
def accuracy(net: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    logits = net(torch.tensor(x, dtype=torch.float32))
    return float(((logits > 0).numpy() == (y > 0.5)).mean())
