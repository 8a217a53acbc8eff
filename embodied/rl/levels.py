"""The ratio's granularity and the advantages that go with it (ppo.logprob_level), and per-task
advantage normalisation (ppo.per_task_advantages): shape functions the learners share.

    chunk   one ratio per policy step, from log_prob [N]                       -> [N, 1]
    action  one ratio per scored chunk position, log_prob_parts summed over A    -> [N, P]
    token   one ratio per action element (an AR token), log_prob_parts           -> [N, P * A]
"""

from __future__ import annotations

import torch

from embodied.rl import diagnostics as diag
from embodied.rl.algorithms import task_normalized


def flatten_time(x: torch.Tensor) -> torch.Tensor:
    """[T, B, ...] -> [T * B, ...]."""
    return x.reshape(-1, *x.shape[2:])


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    var = target.var()
    return float("nan") if var == 0 else float(1.0 - (target - pred).var() / var)


def position_mask(valid: torch.Tensor, positions: int) -> torch.Tensor:
    """valid bool [N, n] (executed substeps) -> [N, P] for P scored chunk positions. A policy that
    scores its whole sampled chunk (the flow VLA) has P = K > n parts; a non-executed position
    was sampled with its step, so it counts wherever the step does (valid[:, 0])."""
    n = valid.shape[1]
    if positions <= n:
        return valid[:, :positions]
    return torch.cat([valid, valid[:, :1].expand(-1, positions - n)], dim=1)


def advantages_at_level(adv: torch.Tensor, positions: int, width: int, level: str) -> torch.Tensor:
    """Advantages [N] (per chunk) or [N, n] (per executed action) -> the shape of at_level's
    log-probs: [N, 1] (chunk), [N, P] (action) or [N, P * width] (token). A position past the
    n executed ones takes the chunk's advantage, its first action's (its noise reaches every
    executed action through the expert's attention)."""
    if level == "chunk":
        return adv[:, None] if adv.dim() == 1 else adv[:, :1]
    if adv.dim() == 1:
        per_pos = adv[:, None].expand(-1, positions)
    elif positions <= adv.shape[1]:
        per_pos = adv[:, :positions]
    else:
        per_pos = torch.cat([adv, adv[:, :1].expand(-1, positions - adv.shape[1])], dim=1)
    if level == "action":
        return per_pos
    return per_pos[:, :, None].expand(-1, -1, width).flatten(1)


def at_level(log_prob: torch.Tensor, parts: torch.Tensor | None, valid: torch.Tensor,
             level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """log_prob [N], parts [N, P, A] or None, valid bool [N, n] -> (log-probs [N, L], mask [N, L])
    with L = 1 (chunk), P (action) or P * A (token)."""
    if level == "chunk":
        return log_prob[:, None], torch.ones_like(log_prob[:, None], dtype=torch.bool)
    if parts is None:
        raise ValueError(f"ppo.logprob_level={level} needs a policy that returns log_prob_parts")
    mask = position_mask(valid, parts.shape[1])  # [N, P]
    if level == "action":
        return parts.sum(-1), mask
    return parts.flatten(1), mask[:, :, None].expand(parts.shape).flatten(1)


def per_task(adv: torch.Tensor, sel: torch.Tensor, tasks: list[str] | None, centre: bool) -> torch.Tensor:
    """ppo.per_task_advantages: advantages [B], [T, B] or [T, B, n] with sel bool of the same
    shape (the samples that count), normalised within each task of the B envs' labels (one task
    when the envs run one: the whole batch)."""
    B = adv.shape[0] if adv.dim() == 1 else adv.shape[1]
    ti = diag.task_index(tasks, B)
    env_task = (ti[1] if ti is not None else torch.zeros(B, dtype=torch.long)).to(adv.device)
    if adv.dim() == 1:
        task = env_task
    else:
        task = env_task[None, :].expand(adv.shape[:2])
        if adv.dim() == 3:
            task = task[..., None].expand(adv.shape)
    return task_normalized(adv.reshape(-1), task.reshape(-1), sel.reshape(-1), centre=centre).view_as(adv)
