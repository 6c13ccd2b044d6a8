"""The ReID networks: a small CNN or a pretrained vision model by name as the backbone, a
BN-neck (``ReidNet``), how to build one (``NetSpec``) and feature extraction in batches."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn


def small_cnn(width: int = 32, dim: int = 128) -> nn.Sequential:
    """Four conv-BN-ReLU blocks and global average pooling: (n, 3, H, W) -> (n, dim)."""

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]

    return nn.Sequential(*block(3, width, 1), *block(width, 2 * width, 2),
                         *block(2 * width, 2 * width, 1), *block(2 * width, dim, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


class HubBackbone(nn.Module):
    """A pretrained vision model by hub id or local folder, loaded with transformers'
    AutoModel (e.g. google/vit-base-patch16-224-in21k, the ViT family CKDA builds on, or
    microsoft/resnet-50, AGW's backbone): the class token of a transformer's last hidden
    state, or the global average of a CNN's last feature map. A transformer that can
    interpolate its position embeddings takes the ReID image size (e.g. 256 x 128) as is."""

    def __init__(self, hub_id: str):
        super().__init__()
        from transformers import AutoModel

        from models.lm.loader import load_by_name

        self.model = load_by_name(
            hub_id, lambda local: AutoModel.from_pretrained(hub_id, local_files_only=local),
            kind="backbone", setting="method.backbone").train()  # from_pretrained: eval mode
        config = self.model.config
        self.dim = getattr(config, "hidden_size", None) or config.hidden_sizes[-1]
        self.interpolate = ("interpolate_pos_encoding"
                            in inspect.signature(self.model.forward).parameters)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        extra = {"interpolate_pos_encoding": True} if self.interpolate else {}
        hidden = self.model(pixel_values=images, **extra).last_hidden_state
        return hidden.mean((2, 3)) if hidden.dim() == 4 else hidden[:, 0]


class ReidNet(nn.Module):
    """A backbone, a BN-neck (the retrieval features) and one identity head per task."""

    def __init__(self, backbone: nn.Module, dim: int):
        super().__init__()
        self.backbone = backbone
        self.neck = nn.BatchNorm1d(dim)
        self.heads = nn.ModuleList()
        self.dim = dim

    def add_head(self, classes: int):
        self.heads.append(nn.Linear(self.dim, classes, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Retrieval features (after the BN-neck)."""
        return self.neck(self.backbone(x))


@dataclass(frozen=True)
class NetSpec:
    """``small_cnn`` (``width`` channels, ``dim`` features) or a pretrained vision model by
    hub id or local folder (its own feature size)."""

    backbone: str = "small_cnn"
    width: int = 32
    dim: int = 128

    def build(self) -> ReidNet:
        if self.backbone == "small_cnn":
            return ReidNet(small_cnn(self.width, self.dim), self.dim)
        hub = HubBackbone(self.backbone)
        return ReidNet(hub, hub.dim)


def extract(net: ReidNet, images: torch.Tensor, batch: int = 256) -> torch.Tensor:
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    with torch.no_grad():
        out = torch.cat([net(images[i:i + batch].to(device)).cpu()
                         for i in range(0, len(images), batch)])
    net.train(was_training)
    return out
