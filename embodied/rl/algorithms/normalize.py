"""Per-task advantage normalisation for multi-task batches (ppo.per_task_advantages).

In a batch over many tasks one scale for all advantages lets the tasks whose returns spread
widely (a shaped return, a half-solved task) take the update, and the tasks whose returns
barely differ (a rare success, a near-solved task) none. Normalising within each task gives
every task's advantages the same spread:

    centre=True   A_i <- (A_i - mean_k) / (std_k + eps)   (PPO: GAE advantages)
    centre=False  A_i <- A_i / (std_k + eps)               (GRPO: already centred within groups)

mean_k, std_k over the counted samples of sample i's task k: with centre, the unbiased std around
mean_k; without, the root mean square around 0. A task whose counted advantages are all 0 keeps
them 0. Uncounted samples keep A_i.
"""

from __future__ import annotations

import torch


def task_normalized(adv: torch.Tensor, task: torch.Tensor, weight: torch.Tensor, centre: bool = True,
                    eps: float = 1e-8) -> torch.Tensor:
    """adv float [N], task int64 [N] (each sample's task index), weight bool [N] (the samples that
    count) -> float [N] normalised within each task."""
    if not (adv.shape == task.shape == weight.shape) or adv.dim() != 1:
        raise ValueError(f"adv {tuple(adv.shape)}, task {tuple(task.shape)} and weight {tuple(weight.shape)} must be [N]")
    a, w = adv.double(), weight.bool().double()
    n_tasks = int(task.max()) + 1 if task.numel() else 0
    zeros = torch.zeros(n_tasks, dtype=torch.float64, device=adv.device)
    count = zeros.index_add(0, task, w)
    mean = zeros.index_add(0, task, a * w) / count.clamp_min(1)
    centred = a - mean[task] if centre else a
    dev = (a - mean[task]) if centre else a
    if centre:
        var = zeros.index_add(0, task, dev ** 2 * w) / (count - 1).clamp_min(1)
    else:  # GRPO's advantages are centred within their groups: the spread around 0
        var = zeros.index_add(0, task, dev ** 2 * w) / count.clamp_min(1)
    out = centred / (var.sqrt()[task] + eps)
    return torch.where(weight.bool(), out, a).to(adv.dtype)
