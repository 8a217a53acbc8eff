"""The ensemble-mean rollout the env steps with (and the eval scores): one latent per env,
advanced by every member; the next latent is the members' mean, their spread the disagreement."""

from __future__ import annotations

import torch

from sims.world_model.model import WorldModel


@torch.no_grad()
def encode_raw(model: WorldModel, x: torch.Tensor, img: torch.Tensor | None = None) -> torch.Tensor:
    """Raw privileged vectors [N, P] (and, for a model with cameras, uint8 frames
    [N, 3C, H, W]) -> latents [N, Z]."""
    return model.encode(model.normalize(x), img)


@torch.no_grad()
def decode_frames(model: WorldModel, z: torch.Tensor, context: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """Latents [N, Z] and context frames uint8 [N, 3C, H, W] (the last real ones) -> uint8 frames
    [N, 3C, H, W] (in batches, to bound memory)."""
    from sims.world_model.vision import to_uint8

    if not len(z):
        return context.clone()
    return torch.cat([to_uint8(model.decode_images(zc, cc)) for zc, cc in zip(z.split(batch), context.split(batch))])


@torch.no_grad()
def mean_step(model: WorldModel, z: torch.Tensor, a: torch.Tensor) -> dict[str, torch.Tensor]:
    """One step of latents z [N, Z] under actions a [N, A]: next latent "z", raw privileged
    vector "x", "reward", "success_p", "done_p" (probabilities) and "disagreement", each [N]."""
    zm = model.step_members(z, a)
    z_next = zm.mean(dim=0)
    reward, succ, done = model.head(z_next, a)
    return {"z": z_next, "x": model.denormalize(model.decode(z_next)), "reward": reward,
            "success_p": torch.sigmoid(succ), "done_p": torch.sigmoid(done),
            "disagreement": model.disagreement(zm)}
