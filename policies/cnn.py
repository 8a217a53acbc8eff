"""Small CNN Gaussian actor-critic on RGB cameras plus proprioceptive state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from policies.gaussian import GaussianActorCritic, mlp
from policies.normalizer import RunningNormalizer


@dataclass
class CNNConfig:
    state_dim: int
    action_dim: int
    cameras: list[str] = field(default_factory=lambda: ["front"])
    image_size: int = 64
    state_key: str = "state"
    hidden_sizes: list[int] = field(default_factory=lambda: [256])
    activation: str = "relu"
    init_log_std: float = -0.5
    normalize_obs: bool = True


class ConvEncoder(nn.Module):
    """uint8 [B, H, W, 3] -> float32 [B, 256] (NatureCNN-sized for 64x64 inputs)."""

    def __init__(self, image_size: int, out_dim: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = self.net(torch.zeros(1, 3, image_size, image_size)).shape[1]
        self.proj = nn.Sequential(nn.Linear(n, out_dim), nn.ReLU())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).float() / 255.0
        return self.proj(self.net(x))


class CNNActorCritic(GaussianActorCritic):
    """A shared image encoder per camera; actor and critic heads on [features, state]."""

    name = "cnn"
    config_class = CNNConfig

    def __init__(self, config: CNNConfig):
        super().__init__(config, config.action_dim, config.init_log_std)
        self.encoders = nn.ModuleDict({cam: ConvEncoder(config.image_size) for cam in config.cameras})
        self.normalizer = RunningNormalizer(config.state_dim) if config.normalize_obs else nn.Identity()
        feat = 256 * len(config.cameras) + config.state_dim
        hidden = list(config.hidden_sizes)
        self.actor = mlp([feat, *hidden, config.action_dim], config.activation, out_gain=0.01)
        self.critic = mlp([feat, *hidden, 1], config.activation, out_gain=1.0)

    def _features(self, obs: dict[str, Any]) -> torch.Tensor:
        """float32 [B, 256 * cameras + state_dim]."""
        feats = [enc(obs[f"rgb_{cam}"]) for cam, enc in self.encoders.items()]
        feats.append(self.normalizer(obs[self.config.state_key].float()))
        return torch.cat(feats, dim=-1)

    def actor_mean(self, obs: dict[str, Any]) -> torch.Tensor:
        return self.actor(self._features(obs))

    def value_of(self, obs: dict[str, Any]) -> torch.Tensor:
        return self.critic(self._features(obs)).squeeze(-1)

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        return self.critic.parameters()

    def update_normalizer(self, obs: dict[str, Any]) -> None:
        if isinstance(self.normalizer, RunningNormalizer):
            self.normalizer.update(obs[self.config.state_key].float())
