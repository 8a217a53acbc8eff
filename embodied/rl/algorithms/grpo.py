"""GRPO: group-relative advantages and group filtering (no critic).

Envs are grouped by a shared reset seed (group size G); every member of a
group starts from the same initial state, so the spread of their returns
measures the policy alone.
"""

from __future__ import annotations

import torch


def _group_stats(x: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-member group mean, unbiased group std and group size, each float [B]."""
    groups, inverse = torch.unique(group_ids, return_inverse=True)
    n = torch.zeros(len(groups), dtype=x.dtype).index_add_(0, inverse, torch.ones_like(x))
    total = torch.zeros(len(groups), dtype=x.dtype).index_add_(0, inverse, x)
    mean = total / n
    sq = torch.zeros(len(groups), dtype=x.dtype).index_add_(0, inverse, (x - mean[inverse]) ** 2)
    std = torch.sqrt(sq / (n - 1).clamp_min(1))
    return mean[inverse], std[inverse], n[inverse]


def grpo_advantages(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6,
                    normalize_std: bool = True) -> torch.Tensor:
    """Group-relative advantage of each episode, float [B].

    returns:   float [B] episode return (binary success or shaped).
    group_ids: int64 [B] group of each episode.
    A_i = (R_i - mean_g) / (std_g + eps), std_g the unbiased std over the
    group's members; without normalize_std, A_i = R_i - mean_g.
    """
    if returns.shape != group_ids.shape or returns.dim() != 1:
        raise ValueError(f"returns {tuple(returns.shape)} and group_ids {tuple(group_ids.shape)} must be [B]")
    mean, std, n = _group_stats(returns.double(), group_ids)
    if (n < 2).any():
        raise ValueError("every GRPO group needs at least 2 members")
    adv = returns.double() - mean
    if normalize_std:
        adv = adv / (std + eps)
    return adv.to(returns.dtype)


def grpo_keep_mask(success: torch.Tensor, group_ids: torch.Tensor, low: float = 0.0,
                   high: float = 1.0) -> torch.Tensor:
    """bool [B]: keep episodes whose group success rate r satisfies low < r < high.

    With the defaults this drops all-fail (r = 0) and all-success (r = 1) groups,
    whose advantages are all zero and carry no signal; SimpleVLA-RL-style bounds
    such as (0.1, 0.9) drop nearly-solved and nearly-hopeless groups too.
    """
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(f"GRPO filter bounds must satisfy 0 <= low < high <= 1, got low={low}, high={high}")
    rate, _, _ = _group_stats(success.double(), group_ids)
    return (rate > low) & (rate < high)
