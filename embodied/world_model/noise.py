"""The model's one-step error, as the env's model_noise draws it.

residual_std: per latent dimension, the std of one step's error on the held-out episodes
(teacher forced: the members' mean step from each recorded state under its recorded action,
minus the next recorded state). Noise of that size everywhere is homoscedastic: a cube at
rest far from the gripper random-walks as much as one the gripper is pushing.

The noise head (WorldModelConfig.noise_head; PETS's learned variance): an MLP of (latent,
action) whose output scales residual_std per dimension, by a factor in
[1 / NOISE_FACTOR_RANGE, NOISE_FACTOR_RANGE]. It is fit after training, with the dynamics and
heads fixed, by the Gaussian negative log-likelihood of those same one-step errors on one half
of the held-out episodes, with early stopping on the other half. Its dimensions where
residual_std is 0 (what never changes) get no noise and no loss.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sims.vecenv import EnvError
from embodied.world_model.windows import Episode
from sims.world_model.model import WorldModel
from sims.world_model.rollout import mean_step


@torch.no_grad()
def one_step_errors(model: WorldModel, episodes: list[Episode]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(latents [T, Z], actions [T, A], errors [T, Z]) over the episodes' steps: the latent of
    x_t, a_t, and mean_step(encode(x_t), a_t)'s latent minus encode(x_t+1)."""
    zs, acts, res = [], [], []
    for ep in episodes:
        img = None if ep.img is None else ep.img[:-1]
        z = model.encode(model.normalize(ep.x[:-1]), img)
        nxt = model.encode(model.normalize(ep.x[1:]), None if ep.img is None else ep.img[1:])
        zs.append(z)
        acts.append(ep.a[:-1])
        res.append(mean_step(model, z, ep.a[:-1])["z"] - nxt)
    return torch.cat(zs), torch.cat(acts), torch.cat(res)


def residual_std(model: WorldModel, episodes: list[Episode]) -> list[float]:
    """Per latent dimension, the std over the episodes' steps of the one-step error."""
    return one_step_errors(model, episodes)[2].std(dim=0).tolist()


def gaussian_nll(err: torch.Tensor, std: torch.Tensor, moving: torch.Tensor) -> torch.Tensor:
    """Errors [T, Z] under zero-mean Gaussians of std [T, Z] (or [Z]) -> the mean negative
    log-likelihood per step and per dimension where `moving` (bool [Z])."""
    s = std.expand_as(err)[:, moving]
    return (torch.log(s) + 0.5 * (err[:, moving] / s) ** 2).mean() + 0.5 * math.log(2 * math.pi)


def fit_noise_head(model: WorldModel, episodes: list[Episode], seed: int, epochs: int = 300,
                   patience: int = 10, batch_size: int = 256, lr: float = 1e-3, log=print) -> dict[str, Any]:
    """Fit model.noise_net (the rest stays fixed) on half of `episodes`, keeping the epoch with
    the lowest NLL on the other half. Returns that NLL and, for comparison, the NLL of
    residual_std alone on the same half (nats per step and moving dimension)."""
    if len(episodes) < 2:
        raise EnvError(f"world_model.noise_head: needs >= 2 held-out episodes (half to fit, half to validate), "
                       f"got {len(episodes)}; allowed: a larger dataset or holdout, or noise_head=false")
    order = np.random.default_rng(seed).permutation(len(episodes))
    half = len(episodes) // 2
    fit = one_step_errors(model, [episodes[i] for i in order[half:]])
    val = one_step_errors(model, [episodes[i] for i in order[:half]])
    base = torch.tensor(model.cfg.residual_std)
    moving = base > 0
    net = model.noise_net
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    constant = float(gaussian_nll(val[2], base, moving))
    with torch.no_grad():
        best = float(gaussian_nll(val[2], model.noise_std(val[0], val[1]), moving))
    best_state, bad = {k: v.clone() for k, v in net.state_dict().items()}, 0
    for epoch in range(epochs):
        net.train()
        for idx in torch.randperm(len(fit[0]), generator=gen).split(batch_size):
            loss = gaussian_nll(fit[2][idx], model.noise_std(fit[0][idx], fit[1][idx]), moving)
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            nll = float(gaussian_nll(val[2], model.noise_std(val[0], val[1]), moving))
        log(f"noise head epoch {epoch}: held-out NLL {nll:.4f} (residual_std alone {constant:.4f})")
        if nll < best:
            best, bad, best_state = nll, 0, {k: v.clone() for k, v in net.state_dict().items()}
        else:
            bad += 1
            if bad >= patience:
                break
    net.load_state_dict(best_state)
    return {"nll": best, "nll_residual_std": constant, "fit_steps": len(fit[0]), "validation_steps": len(val[0])}
