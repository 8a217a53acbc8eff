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


def action_level_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    valid: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
    bootstrap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over executed actions instead of chunks: advantages and returns float32 [T, B, n].

    rewards:    [T, B, n] reward after each executed action of the chunk of step t.
    values:     [T, B, n] V before each action (a per-action critic; V[t, :, 0] = V(obs_t)).
    valid:      [T, B, n] bool, the action was executed (False after the episode ended
                inside the chunk).
    dones, bootstrap: [T, B] as in `gae`, for the chunk; they apply to its last executed action.
    last_value: [B] V(obs_T).

    The chunks' actions are laid end to end, a time line of T * n steps with discount gamma
    per action, and `gae` runs on it. Unexecuted actions get done = True, reward 0 and
    value 0, so their advantage is 0 and nothing flows through them.
    """
    T, B, n = values.shape
    valid = valid.bool()
    after = torch.cat([valid[:, :, 1:], torch.zeros_like(valid[:, :, :1])], dim=2)
    last = valid & ~after  # the chunk's last executed action
    done = (dones.bool()[..., None] & last) | ~valid
    boot = None if bootstrap is None else bootstrap[..., None] * last

    def line(x: torch.Tensor) -> torch.Tensor:  # [T, B, n] -> [T * n, B]
        return x.permute(0, 2, 1).reshape(T * n, B)

    adv, ret = gae(line(rewards * valid), line(values * valid), line(done), last_value, gamma, lam,
                   None if boot is None else line(boot))
    return adv.reshape(T, n, B).permute(0, 2, 1), ret.reshape(T, n, B).permute(0, 2, 1)
