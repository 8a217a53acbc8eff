"""SAC with an ensemble critic, as RLPD / SERL / HIL-SERL use it: pure tensor functions.

Shapes: N transitions, A action dims, E critics in the ensemble.

  squashed Gaussian    a = tanh(u), u ~ Normal(mean, std)
                       log pi(a) = sum_j [log Normal(u_j) - log(1 - tanh(u_j)^2)]
                       with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u))  (stable form)
  critic target        y = r + gamma (1 - terminated) (min_e Q'_e(s', a') - [alpha log pi(a'|s')])
                       (action chunks: r the discounted sum over the h steps executed, gamma^h
                       per transition, s' the observation h steps later)
                       a' ~ pi(.|s'); Q' the target critics; the min over a random subset of the
                       ensemble (RLPD) or over all of it; the bracket only with backup_entropy
  critic loss          sum_e mean_n (Q_e(s, a) - y)^2        (each critic regresses on the same y)
  actor loss           mean_n (alpha log pi(a~|s) - mean_e Q_e(s, a~))
  temperature loss     -mean_n log_alpha (log pi(a~|s) + target_entropy)   (SB3 / SAC v2 form: alpha
                       grows while the entropy -log pi is below the target)
  target update        theta' <- (1 - tau) theta' + tau theta
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def tanh_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) [N] for pre-squash samples u [N, A] of Normal(mean, exp(log_std))."""
    normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2)
    return (normal - log_det).sum(-1)


def critic_target(reward: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor,
                  next_log_prob: torch.Tensor, gamma: float | torch.Tensor, alpha: float | torch.Tensor,
                  backup_entropy: bool = False, subsample: int | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """y [N] (no gradient). reward, terminated [N]; next_q [E, N] = Q'_e(s', a'), a' ~ pi(s');
    next_log_prob [N]; subsample: the min is taken over that many randomly chosen critics
    (RLPD's 2 of 10), else over all E. A truncated transition keeps terminated = False and
    bootstraps. gamma: a float, or [N] per transition (an action chunk of h steps: gamma^h)."""
    with torch.no_grad():
        q = next_q
        if subsample is not None and subsample < q.shape[0]:
            idx = torch.randperm(q.shape[0], generator=generator)[:subsample]
            q = q[idx]
        v = q.min(0).values
        if backup_entropy:
            v = v - alpha * next_log_prob
        return reward + gamma * (1.0 - terminated.float()) * v


def critic_loss(q: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """q [E, N], target [N]: the sum over critics of each one's mean squared error (a weight [N]
    gives each transition's share of the mean)."""
    err = (q - target.unsqueeze(0)) ** 2
    if weight is not None:
        return (err * weight).sum(1).div(weight.sum().clamp_min(1e-12)).sum()
    return err.mean(1).sum()


def actor_loss(q_pi: torch.Tensor, log_prob: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
    """q_pi [E, N] = Q_e(s, a~) with a~ ~ pi(s) (reparameterised); log_prob [N]; alpha detached."""
    return (alpha * log_prob - q_pi.mean(0)).mean()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """log_alpha: scalar parameter; log_prob [N] of fresh actions (detached here)."""
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def bc_loss(mean_action: torch.Tensor, action: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_n mask_n |mean_action_n - action_n|^2 / max(sum_n mask_n, 1): a behaviour-cloning term
    on the demonstration (and intervened) rows of a batch, mean_action, action [N, A], mask [N]."""
    err = ((mean_action - action) ** 2).sum(-1)
    return (err * mask).sum() / mask.sum().clamp_min(1.0)


@torch.no_grad()
def polyak(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau source, parameter by parameter (buffers copied)."""
    for t, s in zip(target.parameters(), source.parameters()):
        t.mul_(1.0 - tau).add_(s, alpha=tau)
    for t, s in zip(target.buffers(), source.buffers()):
        t.copy_(s)
