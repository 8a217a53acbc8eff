"""OpenVLA-OFT's parts around the LM: the fused vision towers, the MLP projector, the proprio
projector and the L1-regression action head. Shapes: B batch, P patches, D LM width.

FusedVision: every image goes through DINOv2 (transformers' Dinov2WithRegistersModel) and SigLIP
(SiglipVisionModel); OpenVLA reads each tower's second-to-last block, without the final norm and
without DINOv2's class and register tokens, and concatenates the two per patch [B, P, Wd + Ws].
The towers here hold exactly the blocks read (the loader consumes the last one unplaced).
Pixels: resized to the towers' size (bilinear), DINOv2 with ImageNet's mean / std, SigLIP with 0.5 / 0.5.

MLPProjector (OpenVLA's fused-backbone projector): fc1 [W -> 4W], GELU, fc2 [4W -> D], GELU, fc3 [D -> D].
ProprioProjector: fc1 [S -> D], GELU, fc2 [D -> D].
L1Head (OFT's MLPResNet): the M = K * A action hidden states regrouped [B, K, A * D] ->
LayerNorm, Linear -> D, ReLU, `blocks` x (x + ReLU(Linear(LayerNorm(x)))), LayerNorm, Linear -> A.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel, SiglipVisionConfig, SiglipVisionModel

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class FusedVision(nn.Module):
    def __init__(self, dino: dict[str, Any], siglip: dict[str, Any]):
        super().__init__()
        self.dino = Dinov2WithRegistersModel(Dinov2WithRegistersConfig(**dino))
        self.siglip = SiglipVisionModel(SiglipVisionConfig(**siglip))
        self.image_size = int(self.siglip.config.image_size)
        if int(self.dino.config.image_size) != self.image_size:
            raise ValueError(f"dino.image_size {self.dino.config.image_size} != vision.image_size {self.image_size}: "
                             "OpenVLA feeds both towers one resolution")
        self.prefix_tokens = 1 + int(self.dino.config.num_register_tokens)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def width(self) -> int:
        return int(self.dino.config.hidden_size) + int(self.siglip.config.hidden_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, H, W, 3] -> patch features [B, P, Wd + Ws]."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        dt = self.dino.embeddings.patch_embeddings.projection.weight.dtype
        d = self.dino(pixel_values=((x - self.mean) / self.std).to(dt), output_hidden_states=True).hidden_states[-1]
        s = self.siglip(pixel_values=((x - 0.5) / 0.5).to(dt), output_hidden_states=True).hidden_states[-1]
        return torch.cat([d[:, self.prefix_tokens:], s], dim=-1)


class MLPProjector(nn.Module):
    def __init__(self, vision_width: int, width: int):
        super().__init__()
        self.fc1 = nn.Linear(vision_width, 4 * vision_width)
        self.fc2 = nn.Linear(4 * vision_width, width)
        self.fc3 = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class ProprioProjector(nn.Module):
    def __init__(self, state_dim: int, width: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(state_dim, width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised state [B, S] -> one token [B, D]."""
        return self.fc2(F.gelu(self.fc1(x)))


class ResBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.fc(self.norm(x)))


class L1Head(nn.Module):
    def __init__(self, width: int, action_dim: int, blocks: int = 2):
        super().__init__()
        self.norm_in, self.fc_in = nn.LayerNorm(width * action_dim), nn.Linear(width * action_dim, width)
        self.blocks = nn.ModuleList(ResBlock(width) for _ in range(blocks))
        self.norm_out, self.fc_out = nn.LayerNorm(width), nn.Linear(width, action_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[B, K, A * D] -> normalised actions [B, K, A]."""
        x = F.relu(self.fc_in(self.norm_in(h)))
        for block in self.blocks:
            x = block(x)
        return self.fc_out(self.norm_out(x))
