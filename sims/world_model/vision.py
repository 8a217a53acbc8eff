"""The world model's image side: a conv encoder of the camera frames into a feature vector
(joined with the privileged vector before the latent MLP), and a conv decoder from the latent
back to the frames.

The decoder composites over a context frame, the last real frame of the rollout (the reset
frame in the env, the window's first frame in training and eval): per camera it predicts
pixels and a mask m in [0, 1], and the frame is m * pixels + (1 - m) * context, as in
CDNA-style video prediction. What does not move (table, background) is then copied, and the
latent has to carry what moves: the arm and the cube.

Frames of all cameras are stacked along channels: uint8 [N, 3C, H, W] for C cameras, camera
c in channels 3c..3c+2 (the order of the config's `cameras`). Both convs halve / double the
size four times, so H and W must be multiples of 16. The decoder ends in a sigmoid: it
predicts pixels in [0, 1].
"""

from __future__ import annotations

import torch
from torch import nn

STRIDES = 4  # four stride-2 stages: 64x64 -> 4x4
MASK_BIAS = -2.0  # initial bias of the mask logits: sigmoid(-2) = 0.12


def stack_cameras(frames: dict[str, torch.Tensor], cameras: list[str]) -> torch.Tensor:
    """{cam: uint8 [N, H, W, 3]} -> uint8 [N, 3C, H, W] in the order of `cameras`."""
    return torch.cat([frames[c].permute(0, 3, 1, 2) for c in cameras], dim=1).contiguous()


def split_cameras(img: torch.Tensor, cameras: list[str]) -> dict[str, torch.Tensor]:
    """uint8 [N, 3C, H, W] -> {cam: uint8 [N, H, W, 3]} (contiguous copies)."""
    return {c: img[:, 3 * i:3 * i + 3].permute(0, 2, 3, 1).contiguous() for i, c in enumerate(cameras)}


def to_unit(img: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> float32 in [0, 1]."""
    return img.float() / 255.0


def to_uint8(img: torch.Tensor) -> torch.Tensor:
    """float pixels in [0, 1] -> uint8 (rounded)."""
    return (img.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)


class ImageEncoder(nn.Module):
    """uint8 [N, 3C, H, W] -> float32 [N, features]; four conv stages of widths c, 2c, 4c, 4c."""

    def __init__(self, cameras: int, size: tuple[int, int], channels: int, features: int):
        super().__init__()
        c = channels
        widths = [3 * cameras, c, 2 * c, 4 * c, 4 * c]
        layers: list[nn.Module] = []
        for i in range(STRIDES):
            layers += [nn.Conv2d(widths[i], widths[i + 1], 4, stride=2, padding=1), nn.ELU()]
        self.convs = nn.Sequential(*layers)
        h, w = size[0] >> STRIDES, size[1] >> STRIDES
        self.out = nn.Linear(4 * c * h * w, features)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.out(self.convs(to_unit(img) - 0.5).flatten(1))


class ImageDecoder(nn.Module):
    """(latents float32 [N, Z], context uint8 [N, 3C, H, W]) -> pixels float32 [N, 3C, H, W] in
    [0, 1]; the encoder's stages mirrored, ending in 3C pixel and C mask channels."""

    def __init__(self, cameras: int, size: tuple[int, int], channels: int, latent: int):
        super().__init__()
        c = channels
        self.grid = (4 * c, size[0] >> STRIDES, size[1] >> STRIDES)
        self.inp = nn.Linear(latent, 4 * c * self.grid[1] * self.grid[2])
        self.cameras = cameras
        widths = [4 * c, 4 * c, 2 * c, c, 4 * cameras]
        layers: list[nn.Module] = []
        for i in range(STRIDES):
            layers.append(nn.ConvTranspose2d(widths[i], widths[i + 1], 4, stride=2, padding=1))
            if i < STRIDES - 1:
                layers.append(nn.ELU())
        self.deconvs = nn.Sequential(*layers)
        with torch.no_grad():  # masks start near 0: the first predictions are close to copy-last
            layers[-1].bias[3 * cameras:].fill_(MASK_BIAS)

    def forward(self, z: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.elu(self.inp(z)).view(len(z), *self.grid)
        out = torch.sigmoid(self.deconvs(h))
        pixels, mask = out[:, : 3 * self.cameras], out[:, 3 * self.cameras:].repeat_interleave(3, dim=1)
        return mask * pixels + (1.0 - mask) * to_unit(context)
