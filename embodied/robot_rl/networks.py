"""Networks of the off-policy learner: a tanh-Gaussian actor and an ensemble critic with
LayerNorm (RLPD). Observations are a flat float vector [N, D], normalised by fixed statistics
(set once from the demonstrations, saved with the weights).

With `image=(H, W)` the first H * W * 3 values of the vector are a camera frame (uint8 values
as floats, row-major H, W, C: embodied/robot_rl/obs.py) read by a small conv encoder
(`ConvEncoder`: three strided convolutions, 16-32-32 channels, a 64-wide LayerNorm + tanh
embedding, as DrQ / SAC-AE); the rest is normalised as before. In the learner the actor and
the critic share one encoder (SACAgent): the critic's loss trains it, the actor reads its
features detached (DrQ)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from embodied.rl.algorithms.sac import tanh_log_prob

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class ObsNorm(nn.Module):
    """(obs - mean) / std, clipped to +-10; identity until `set` is called."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def set(self, obs: torch.Tensor, min_std: float = 0.0) -> None:
        """obs [N, D]: the statistics to normalise with (std floored at 1e-3). A dim whose std is
        below min_std is centred but not scaled (std 1): a dim that is (nearly) constant in the
        data, such as a gripper command the demonstrations never change, would otherwise turn
        any later change of it into +-10."""
        self.mean.copy_(obs.mean(0))
        if len(obs) < 2:
            self.std.copy_(torch.ones_like(self.std))
            return
        std = obs.std(0)
        self.std.copy_(torch.where(std < min_std, torch.ones_like(std), std.clamp_min(1e-3)))

    def forward(self, obs: torch.Tensor, start: int = 0) -> torch.Tensor:
        """obs [N, D] -> its dims from `start` on, normalised [N, D - start]."""
        return ((obs[:, start:] - self.mean[start:]) / self.std[start:]).clamp(-10.0, 10.0)


class ConvEncoder(nn.Module):
    """frames [N, H * W * 3] (0..255) -> features [N, dim]."""

    def __init__(self, image: tuple[int, int], dim: int = 64):
        super().__init__()
        self.image = (int(image[0]), int(image[1]))
        self.pixels = self.image[0] * self.image[1] * 3
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n = self.conv(torch.zeros(1, 3, *self.image)).shape[1]
        self.head = nn.Sequential(nn.Linear(n, dim), nn.LayerNorm(dim), nn.Tanh())
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        img = x[:, :self.pixels].reshape(-1, *self.image, 3).permute(0, 3, 1, 2) / 255.0
        return self.head(self.conv(img))


def _embed(obs: torch.Tensor, norm: "ObsNorm", encoder: "ConvEncoder | None", detach: bool = False) -> torch.Tensor:
    """The networks' input: normalised obs, or with an encoder [features, normalised rest]."""
    if encoder is None:
        return norm(obs)
    f = encoder(obs)
    return torch.cat([f.detach() if detach else f, norm(obs, encoder.pixels)], -1)


def mlp(sizes: list[int], layer_norm: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers += [nn.LayerNorm(sizes[i + 1])] if layer_norm else []
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TanhGaussianActor(nn.Module):
    """obs [N, D] -> action in (-1, 1)^A: tanh of a diagonal Gaussian whose log std is squashed
    into [LOG_STD_MIN, LOG_STD_MAX]."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...] = (256, 256),
                 image: tuple[int, int] | None = None):
        super().__init__()
        self.norm = ObsNorm(obs_dim)
        self.encoder = ConvEncoder(image) if image else None
        self.detach_encoder = False  # the learner's actor: the shared encoder's features, detached
        d = obs_dim if self.encoder is None else self.encoder.dim + obs_dim - self.encoder.pixels
        self.body = mlp([d, *hidden, 2 * action_dim], layer_norm=True)
        self.action_dim = action_dim

    def dist(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mean, log_std [N, A] of the pre-squash Gaussian."""
        mean, raw = self.body(_embed(obs, self.norm, self.encoder, self.detach_encoder)).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std

    def sample(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """action [N, A] (reparameterised), log pi(action) [N]."""
        mean, log_std = self.dist(obs)
        u = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(u), tanh_log_prob(u, mean, log_std)

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(action | obs) [N] of actions in (-1, 1) (clamped to +-(1 - 1e-6))."""
        mean, log_std = self.dist(obs)
        u = torch.atanh(action.clamp(-1 + 1e-6, 1 - 1e-6))
        return tanh_log_prob(u, mean, log_std)


class EnsembleLinear(nn.Module):
    """E independent linear layers applied at once: x [E, N, in] -> [E, N, out]."""

    def __init__(self, ensemble: int, d_in: int, d_out: int):
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(ensemble, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    def __init__(self, ensemble: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:]) * self.weight + self.bias


class EnsembleCritic(nn.Module):
    """Q_e(obs, action) for e < E: obs [N, D], action [N, A] -> [E, N]. Each hidden layer is
    Linear -> LayerNorm -> ReLU (RLPD's critic)."""

    def __init__(self, obs_dim: int, action_dim: int, ensemble: int = 2, hidden: tuple[int, ...] = (256, 256),
                 image: tuple[int, int] | None = None):
        super().__init__()
        self.norm = ObsNorm(obs_dim)
        self.encoder = ConvEncoder(image) if image else None
        self.ensemble = ensemble
        d = obs_dim if self.encoder is None else self.encoder.dim + obs_dim - self.encoder.pixels
        sizes = [d + action_dim, *hidden, 1]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(EnsembleLinear(ensemble, sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers += [EnsembleLayerNorm(ensemble, sizes[i + 1]), nn.ReLU()]
        self.body = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([_embed(obs, self.norm, self.encoder), action], dim=-1)
        return self.body(x.unsqueeze(0).expand(self.ensemble, -1, -1)).squeeze(-1)
