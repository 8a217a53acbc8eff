"""Data-parallel learning with torch.distributed: N learner processes, each on its slice of the
env dimension, gradients averaged over ranks after every backward pass (gloo on CPU, NCCL on
GPU), so that every rank takes the same optimiser step.

The learner (embodied/rl/learner.py) is unchanged: DataParallel hooks each parameter's gradient
(`register_post_accumulate_grad_hook`), so the all-reduce happens inside its backward, before
gradient clipping, and the adaptive learning rate follows the KL averaged over ranks. The update equals the single-process one on the whole batch (within float
error) when each minibatch loss is a mean over samples and the ranks hold equal shares:
per-minibatch advantage normalisation (ppo.normalize_advantages) uses each rank's own
statistics, and with several minibatches each rank draws its own permutation, so those
settings give a statistically equivalent, not identical, update.

GRPO (`grpo_shard`): a rank takes whole groups, never part of one (a group's advantages need
all its members), from the groups the filter keeps, and its gradient is weighed by its share
of the kept episodes instead of 1 / N, since GRPO's loss is a mean over episodes and the ranks
may hold unequal numbers (3 groups over 2 ranks). That equals the single-process update (within
float error) with one minibatch, ppo.entropy_coef 0 (the entropy bonus is a mean over steps,
which the episode share does not weigh exactly) and log-probs at the chunk level (at the
action or token level an episode's weight in the mean also counts its valid entries). With
fewer kept groups than ranks, every rank updates on all of them with weight 1 / N (the same
gradient on every rank).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from embodied.rl.algorithms.grpo import grpo_keep_mask
from embodied.distributed.sharded_rollout import take_envs
from embodied.rl.trajectory import Trajectory


def shard_rows(n: int, rank: int, world_size: int) -> slice:
    """Rank's slice of n envs: consecutive, nearly equal."""
    base, extra = divmod(n, world_size)
    lo = rank * base + min(rank, extra)
    return slice(lo, lo + base + (rank < extra))


def shard_trajectory(traj: Trajectory, rank: int, world_size: int) -> Trajectory:
    """Trajectory [T, B, ...] -> rank's Trajectory [T, B / world_size, ...] (a slice of envs, so
    GAE over time is unchanged)."""
    return take_envs(traj, shard_rows(traj.num_envs, rank, world_size))


def grpo_shard(traj: Trajectory, grpo: Any, rank: int, world_size: int) -> tuple[Trajectory, float]:
    """A GRPO batch [T, B] of grouped episodes -> (rank's Trajectory of whole kept groups, the
    weight of its gradient in the sum over ranks). `grpo` is the GRPOConfig (filter settings)."""
    mask = traj.episode_mask
    success = (traj.success & mask).any(0)  # [B], as GRPOLearner decides
    keep = (grpo_keep_mask(success, traj.group_ids, grpo.filter_low, grpo.filter_high) if grpo.filter_groups
            else torch.ones_like(success))
    groups = traj.group_ids[keep].unique()  # sorted
    if len(groups) < world_size:  # not one group per rank: all ranks take the same batch
        return traj, 1.0 / world_size
    mine = groups[shard_rows(len(groups), rank, world_size)]
    rows = torch.isin(traj.group_ids, mine).nonzero().flatten()
    return take_envs(traj, rows), len(rows) / int(keep.sum())


class DataParallel:
    """Joins the process group (rank, world_size, master "host:port"), copies rank 0's weights
    to every rank, and averages each parameter's gradient over ranks as backward produces it."""

    def __init__(self, module: nn.Module, rank: int, world_size: int, master: str):
        host, port = master.rsplit(":", 1)
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() and next(module.parameters()).is_cuda else "gloo"
            dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size)
        self.world_size = world_size
        self.share: float | None = None  # this rank's gradient weight; None: 1 / world_size
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=0)
        self.hooks = [p.register_post_accumulate_grad_hook(self._average) for p in module.parameters()
                      if p.requires_grad]

    def attach(self, learner: Any) -> None:
        """Keep a PolicyGradientLearner's ranks in step: its adaptive learning rate follows the
        KL averaged over ranks (weighed by `share` when set; its `_adapt_lr` is wrapped on this
        instance). An early stop on target_kl would be decided per rank and leave the others
        waiting in an all-reduce, so it is refused."""
        if learner.cfg.target_kl is not None:
            raise ValueError(f"ppo.target_kl: {learner.cfg.target_kl} with data-parallel learners; allowed: null")
        adapt = learner._adapt_lr

        def adapt_on_mean_kl(kl: float) -> None:
            t = torch.tensor([kl if self.share is None else kl * self.share], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            adapt(float(t) / self.world_size if self.share is None else float(t))

        learner._adapt_lr = adapt_on_mean_kl

    def _average(self, p: torch.Tensor) -> None:
        if self.share is None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= self.world_size
        else:  # a weighted sum (GRPO: the rank's share of the kept episodes)
            p.grad *= self.share
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        if dist.is_initialized():
            dist.destroy_process_group()
