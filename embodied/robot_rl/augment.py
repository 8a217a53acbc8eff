"""Image augmentation for the learner's batches: DrQ's random shift.

Each camera frame of a batch is padded by `pad` pixels on every side (the border pixels
repeated, as DrQ's replicate padding) and cropped back to its size at a random offset, drawn per
sample: the image moves by up to `pad` pixels in each direction, and what it shows relative to
itself (the gripper against the goal) is unchanged. SACAgent.update shifts the observation and
the next observation of every batch independently, for the critic's and the actor's steps
(DrQ-v2: one shift each); the actor process acts on frames as they are.

Observations are the flat vectors of embodied/robot_rl/obs.py: the first H * W * 3 values are
the frame (row-major H, W, C), the rest (the joint state) is left as it is. Padding and cropping
are one gather: row index clamp(i + dy - pad, 0, H - 1) for dy in 0..2 pad, the same for columns.
"""

from __future__ import annotations

import torch


def random_shift(obs: torch.Tensor, image: tuple[int, int], pad: int,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """obs [N, H * W * 3 + S] -> the same with each frame shifted by a random (dy, dx) in
    [-pad, pad]^2 (edges repeated). pad 0: obs itself."""
    if pad <= 0:
        return obs
    h, w = image
    n, pixels = len(obs), h * w * 3
    frames = obs[:, :pixels].reshape(n, h, w, 3)
    dy = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator) - pad
    dx = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator) - pad
    rows = (torch.arange(h) + dy).clamp(0, h - 1)  # [N, H]: output row i reads input row i + dy
    cols = (torch.arange(w) + dx).clamp(0, w - 1)  # [N, W]
    shifted = frames[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]  # [N, H, W, 3]
    return torch.cat([shifted.reshape(n, pixels), obs[:, pixels:]], -1)
