"""The two rollouts the env can step with.

"mean" (mean_step; the eval scores it): one latent per env, advanced by every member; the next
latent is the members' mean, and the disagreement is the spread of one step taken from that
shared latent.

"members" (member_step): every member keeps its own latent, as in training, where each
member rolls its own latent through the k-step window. An env row serves one member's latent
for its whole episode (PETS's TS-infinity), and the disagreement is the spread of the members'
own latents, which grows with the steps where their dynamics part (FOWM / MOPO's uncertainty).

With member heads (WorldModelConfig.member_heads), every member's heads score its own next
latent. The reward and the done probability are the members' means. The success probability
is their mean ("mean") or, pessimistic, their minimum ("min": a success only where every
member's head calls it one). "head_disagreement" is the members' std of the success
probability (0 with one set of heads)."""

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


AGGREGATES = ("mean", "min")


def _perturbed(model: WorldModel, zm: torch.Tensor, noise: torch.Tensor | None, z: torch.Tensor | None,
               a: torch.Tensor) -> torch.Tensor:
    """Member latents [M, N, Z] stepped from latents z [N, Z] under actions a [N, A], plus noise
    [N, Z] (standard normal times model_noise) times model.noise_std(z, a): the same for every
    member, so that their spread, the disagreement, is unchanged. Derived fields are recomputed
    for a consistent model."""
    if noise is None:
        return zm
    zm = zm + noise * model.noise_std(z, a)
    return model.make_consistent(zm) if model.cfg.consistent else zm


@torch.no_grad()
def mean_step(model: WorldModel, z: torch.Tensor, a: torch.Tensor, success_aggregate: str = "mean",
              noise: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One step of latents z [N, Z] under actions a [N, A]: next latent "z", raw privileged
    vector "x", "reward", "success_p", "done_p" (probabilities), "disagreement" and
    "head_disagreement", each [N]. success_aggregate: how member heads' success probabilities
    combine (AGGREGATES; a model with one set of heads has nothing to combine). noise [N, Z]:
    standard normal times the env's model_noise; times model.noise_std(z, a), it is added to
    the next latent before the heads score it."""
    zm = _perturbed(model, model.step_members(z, a), noise, z, a)
    z_next = zm.mean(dim=0)
    if model.cfg.member_heads:
        r, s, d = model.head(zm, a)  # [M, N]: member i's heads on member i's next latent
        p = torch.sigmoid(s)
        success_p = p.mean(dim=0) if success_aggregate == "mean" else p.min(dim=0).values
        reward, done_p, head_dis = r.mean(dim=0), torch.sigmoid(d).mean(dim=0), p.std(dim=0)
    else:
        reward, succ, done = model.head(z_next, a)
        success_p, done_p, head_dis = torch.sigmoid(succ), torch.sigmoid(done), torch.zeros_like(reward)
    return {"z": z_next, "x": model.denormalize(model.decode(z_next)), "reward": reward,
            "success_p": success_p, "done_p": done_p, "disagreement": model.disagreement(zm),
            "head_disagreement": head_dis}


ROLLOUTS = ("mean", "members")


@torch.no_grad()
def member_step(model: WorldModel, zm: torch.Tensor, a: torch.Tensor, follow: torch.Tensor,
                noise: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One step of per-member latents zm [M, N, Z] under actions a [N, A]; row n serves member
    follow[n] (long [N]). Returns mean_step's keys for the served latent, plus "zm" [M, N, Z].
    With member heads the served member's own heads score its latent. noise [N, Z]: as in
    mean_step (its std from the served latent), added to every member's next latent."""
    served = zm[follow, torch.arange(zm.shape[1])] if noise is not None else None  # noise_std's input
    zm = _perturbed(model, model.step_members(zm, a), noise, served, a)
    rows = torch.arange(zm.shape[1])
    z = zm[follow, rows]
    if model.cfg.member_heads:
        heads = model.head(zm, a)  # [M, N] each
        r, s, d = (v[follow, rows] for v in heads)
        head_dis = torch.sigmoid(heads[1]).std(dim=0)
    else:
        r, s, d = model.head(z, a)
        head_dis = torch.zeros_like(r)
    return {"z": z, "zm": zm, "x": model.denormalize(model.decode(z)), "reward": r,
            "success_p": torch.sigmoid(s), "done_p": torch.sigmoid(d),
            "disagreement": model.disagreement(zm), "head_disagreement": head_dis}
