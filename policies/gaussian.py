"""Diagonal-Gaussian actor-critic: the shared logic of the baseline policies.

Subclasses provide `actor_mean(obs) -> [B, A]` and `value_of(obs) -> [B]`.
Actions are sampled unbounded; the env clips them to its range. Chunks have K=1.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import torch
from torch import nn

from policies.base import ActOutput, Evaluation, Policy

_LOG_2PI = math.log(2.0 * math.pi)


class GaussianActorCritic(Policy):
    chunk_size = 1
    has_critic = True

    def __init__(self, config: Any, action_dim: int, init_log_std: float):
        super().__init__(config)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    @abc.abstractmethod
    def actor_mean(self, obs: dict[str, Any]) -> torch.Tensor: ...

    @abc.abstractmethod
    def value_of(self, obs: dict[str, Any]) -> torch.Tensor: ...

    def _log_prob_parts(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """log N(action; mean, std) per element: [B, A] -> [B, 1, A] (a chunk of one action)."""
        z = (action - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).unsqueeze(1)

    def _log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Sum over A of log N(action; mean, std): [B, A] -> [B]."""
        return self._log_prob_parts(mean, action).sum((1, 2))

    def _entropy(self, batch: int) -> torch.Tensor:
        ent = (self.log_std + 0.5 * (1.0 + _LOG_2PI)).sum()
        return ent.expand(batch)

    def act(self, obs: dict[str, Any], deterministic: bool = False) -> ActOutput:
        mean = self.actor_mean(obs)
        if deterministic:
            action = mean
        else:
            action = mean + torch.exp(self.log_std) * torch.randn_like(mean)
        parts = self._log_prob_parts(mean, action)
        return ActOutput(
            actions=action.unsqueeze(1),
            log_prob=parts.sum((1, 2)),
            value=self.value_of(obs),
            replay={"action": action},
            log_prob_parts=parts,
        )

    def evaluate(self, obs: dict[str, Any], replay: dict[str, torch.Tensor]) -> Evaluation:
        mean = self.actor_mean(obs)
        parts = self._log_prob_parts(mean, replay["action"])
        return Evaluation(
            log_prob=parts.sum((1, 2)),
            entropy=self._entropy(mean.shape[0]),
            value=self.value_of(obs),
            log_prob_parts=parts,
        )

    def get_value(self, obs: dict[str, Any]) -> torch.Tensor:
        return self.value_of(obs)

    def sft_loss(self, obs: dict[str, Any], actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of demonstrated actions [B, 1, A]."""
        return -self._log_prob(self.actor_mean(obs), actions[:, 0]).mean()


def mlp(sizes: list[int], activation: str, out_gain: float = 1.0) -> nn.Sequential:
    """Linear layers sizes[0] -> ... -> sizes[-1] with orthogonal init."""
    act = {"tanh": nn.Tanh, "elu": nn.ELU, "relu": nn.ReLU}[activation]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(a, b)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(lin.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(act())
    return nn.Sequential(*layers)
