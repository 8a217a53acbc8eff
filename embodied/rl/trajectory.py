"""The Trajectory: what a rollout produced, time-major [T, B, ...]."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Trajectory:
    """T policy steps of B envs. One step executes a chunk of K actions.

    obs:        dict of [T, B, ...] tensors (images stay uint8); the observation
                each action was chosen from.
    instructions: T lists of B strings (empty when the env gives none).
    actions:    float32 [T, B, K, A] executed chunks.
    log_probs:  float32 [T, B] log-prob of each chunk under the collecting policy.
    values:     float32 [T, B] V(obs_t) (zeros for critic-free policies), or [T, B, n] from a
                per-action critic (the value before each executed action of the chunk).
    rewards:    float32 [T, B, K] per-substep rewards (0 on invalid substeps).
    valid:      bool [T, B, K] the substep was executed.
    terminated, truncated, success: bool [T, B], the episode ended (or
                succeeded) somewhere inside the chunk of step t.
    bootstrap:  float32 [T, B] V(final obs) where step t was truncated and not
                terminated, else 0.
    last_value: float32 [B] V(obs_T).
    replay:     dict of [T, B, ...] tensors from Policy.act, for evaluate().
    log_prob_parts: float32 [T, B, P, A] log_probs split per chunk element (Policy.act's
                log_prob_parts: P = n executed actions, or P = K for a policy that scores
                its whole sampled chunk), or None.
    group_ids:  int64 [B] GRPO group of each env, or None.
    episode_mask: bool [T, B] step t belongs to env b's collected episode (GRPO collects
                one episode per env; later steps are padding), or None.
    tasks:      B labels, the task of each env (its episode's for GRPO, its row's where rows
                hold fixed tasks for PPO), or None: per-task diagnostics (embodied/rl/diagnostics.py).
    """

    obs: dict[str, torch.Tensor]
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    valid: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    success: torch.Tensor
    bootstrap: torch.Tensor
    last_value: torch.Tensor
    replay: dict[str, torch.Tensor]
    instructions: list[list[str]] = field(default_factory=list)
    log_prob_parts: torch.Tensor | None = None
    group_ids: torch.Tensor | None = None
    episode_mask: torch.Tensor | None = None
    tasks: list[str] | None = None

    @property
    def num_steps(self) -> int:
        return self.log_probs.shape[0]

    @property
    def num_envs(self) -> int:
        return self.log_probs.shape[1]

    @property
    def chunk_rewards(self) -> torch.Tensor:
        """float32 [T, B] reward of each chunk: the sum of its substeps' rewards."""
        return self.rewards.sum(dim=-1)

    @property
    def dones(self) -> torch.Tensor:
        return self.terminated | self.truncated
