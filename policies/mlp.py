"""MLP Gaussian actor-critic on a flat observation vector ("privileged" or "state")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from policies.gaussian import GaussianActorCritic, mlp
from policies.normalizer import RunningNormalizer


@dataclass
class MLPConfig:
    obs_dim: int
    action_dim: int
    obs_key: str = "privileged"
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "tanh"
    init_log_std: float = -0.5
    normalize_obs: bool = True


class MLPActorCritic(GaussianActorCritic):
    name = "mlp"
    config_class = MLPConfig

    def __init__(self, config: MLPConfig):
        super().__init__(config, config.action_dim, config.init_log_std)
        hidden = list(config.hidden_sizes)
        self.normalizer = RunningNormalizer(config.obs_dim) if config.normalize_obs else nn.Identity()
        self.actor = mlp([config.obs_dim, *hidden, config.action_dim], config.activation, out_gain=0.01)
        self.critic = mlp([config.obs_dim, *hidden, 1], config.activation, out_gain=1.0)

    def _input(self, obs: dict[str, Any]) -> torch.Tensor:
        """float32 [B, obs_dim] normalised observation."""
        return self.normalizer(obs[self.config.obs_key].float())

    def actor_mean(self, obs: dict[str, Any]) -> torch.Tensor:
        return self.actor(self._input(obs))

    def value_of(self, obs: dict[str, Any]) -> torch.Tensor:
        return self.critic(self._input(obs)).squeeze(-1)

    def critic_parameters(self) -> Iterator[nn.Parameter]:
        return self.critic.parameters()

    def update_normalizer(self, obs: dict[str, Any]) -> None:
        if isinstance(self.normalizer, RunningNormalizer):
            self.normalizer.update(obs[self.config.obs_key].float())
