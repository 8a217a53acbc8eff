"""A small batch of VLA observations for the policy tests (tests/policies/)."""

from __future__ import annotations

import torch

INSTR = ["move the gripper to the target", "push the red cube onto the green square"]


def vla_obs(B: int = 4, seed: int = 0) -> dict:
    """Seeded observations of B envs: state float32 [B, 9], rgb_front uint8 [B, 64, 64, 3] and
    the two INSTR instructions in turn."""
    g = torch.Generator().manual_seed(seed)
    return {"state": torch.randn(B, 9, generator=g),
            "rgb_front": torch.randint(0, 256, (B, 64, 64, 3), generator=g, dtype=torch.uint8),
            "instruction": [INSTR[i % 2] for i in range(B)]}
