"""PPO losses: clipped policy objective (asymmetric, dual clip) and value loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PolicyLossStats:
    approx_kl: torch.Tensor  # scalar, E[(r - 1) - log r], detached
    clip_fraction: torch.Tensor  # scalar, share of samples whose ratio was clipped
    ratio_mean: torch.Tensor
    ratio_max: torch.Tensor  # scalar, the largest ratio among the masked-in entries (0 if none)
    ratio_abs_dev: torch.Tensor  # scalar, E|r - 1|: how far the update moved the sampled actions' density


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of x over the entries where mask is True (all entries when None); a float mask
    gives the weighted mean sum(w x) / sum(w). An all-False mask gives 0."""
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1e-12)


def ppo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Clipped surrogate loss (to minimise), any matching shape [N, ...].

    ratio r = exp(log_prob - old_log_prob)
    objective = min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)
    dual clip (for A < 0 only): objective = max(objective, dual_clip * A), which
    bounds how much a sample with a huge ratio and negative advantage can push.
    mask: bool, same shape; False entries (padding, invalid substeps) are ignored. A float
    mask weighs the entries (a weighted mean).
    """
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    surr = ratio * advantages
    surr_clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    objective = torch.min(surr, surr_clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        objective = torch.where(advantages < 0, torch.max(objective, dual_clip * advantages), objective)
    loss = -masked_mean(objective, mask)
    with torch.no_grad():
        clipped = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
        stats = PolicyLossStats(
            approx_kl=masked_mean((ratio - 1.0) - log_ratio, mask),
            clip_fraction=masked_mean(clipped.to(ratio.dtype), mask),
            ratio_mean=masked_mean(ratio, mask),
            ratio_max=(ratio if mask is None else ratio.masked_fill(~mask.bool(), 0.0)).max(),
            ratio_abs_dev=masked_mean((ratio - 1.0).abs(), mask),
        )
    return loss, stats


def kl_to_reference(log_prob: torch.Tensor, ref_log_prob: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Estimate of KL(pi || pi_ref) from samples of the behaviour policy, any matching shape [N, ...].

    d = ref_log_prob - log_prob; k3 = exp(d) - d - 1 (Schulman's estimator, GRPO's KL term in
    DeepSeekMath): non-negative per sample, 0 with zero gradient where the two agree. mask as in
    ppo_policy_loss. The gradient flows into log_prob only.
    """
    d = ref_log_prob.detach() - log_prob
    return masked_mean(torch.expm1(d) - d, mask)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: float | None = 0.2,
    huber_delta: float | None = 10.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Value loss (to minimise), any matching shape.

    Elementwise error: Huber with `huber_delta`, or 0.5 * squared error when
    huber_delta is None. With `clip`, the prediction may move at most `clip`
    from old_values, and the larger of the clipped and unclipped errors counts.
    """

    def error(pred: torch.Tensor) -> torch.Tensor:
        if huber_delta is None:
            return 0.5 * (pred - returns) ** 2
        return F.huber_loss(pred, returns, reduction="none", delta=huber_delta)

    loss = error(values)
    if clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        loss = torch.max(loss, error(clipped))
    return masked_mean(loss, mask)
