"""Generalised advantage estimation with separate termination and truncation."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
    bootstrap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, both float32 [T, B].

    rewards:    [T, B] reward of step t.
    values:     [T, B] V(obs_t) under the collecting policy.
    dones:      [T, B] bool, the episode ended at step t (terminated or
                truncated): obs_{t+1} belongs to a new episode, so V(obs_{t+1})
                is not used.
    last_value: [B] V(obs_T), the observation after the last step.
    bootstrap:  [T, B] V(final obs) where step t was truncated by the time limit
                (not terminated), else 0. A truncated episode did not end in the
                MDP, so its value continues: delta gets + gamma * bootstrap.

    delta_t = r_t + gamma * bootstrap_t + gamma * (1 - done_t) * V_{t+1} - V_t
    A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
    returns = A + V
    """
    T = rewards.shape[0]
    notdone = (~dones.bool()).to(values.dtype)
    next_values = torch.cat([values[1:], last_value.unsqueeze(0)], dim=0)
    deltas = rewards + gamma * notdone * next_values - values
    if bootstrap is not None:
        deltas = deltas + gamma * bootstrap
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(last_value)
    for t in reversed(range(T)):
        running = deltas[t] + gamma * lam * notdone[t] * running
        advantages[t] = running
    return advantages, advantages + values
