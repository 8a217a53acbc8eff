"""PPO's reward scaling by the running std of the discounted return (ppo.normalize_rewards)."""

from __future__ import annotations

from typing import Any

import torch

from policies.normalizer import RunningNormalizer


class ReturnScaler:
    """Reward scaling by the running standard deviation of the discounted return, as SB3's
    VecNormalize(norm_reward=True) and gymnasium's NormalizeReward do: every env keeps its
    return R <- gamma * R + r (reset to 0 after its episode ends), the running variance of R
    over all envs and steps is updated with every new R, and the learner sees the rewards
    r / sqrt(var + eps), clipped to +-clip. The mean is not subtracted (a shift of the rewards
    would change which policy is optimal where episodes end early; a scale does not).

    R runs at GAE's level: one reward per chunk with ppo.reward_level=chunk, one per executed
    action with reward_level=action (invalid substeps, after an episode's end, are skipped).
    One scale is applied to a whole rollout, the one after it was seen; SB3 scales each step
    with the variance up to that step, which differs only in the first iterations."""

    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNormalizer(1)
        self.ret: torch.Tensor | None = None  # [B] float64, each env's running return

    @torch.no_grad()
    def __call__(self, rewards: torch.Tensor, valid: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """rewards float [T, B, n], valid bool [T, B, n], dones bool [T, B] -> the scaled rewards
        [T, B, n]. n = 1 gives the chunk-level return."""
        T, B, n = rewards.shape
        if self.ret is None or self.ret.shape[0] != B:
            self.ret = torch.zeros(B, dtype=torch.float64, device=rewards.device)
        self.stats.to(rewards.device)
        self.ret = self.ret.to(rewards.device)
        for t in range(T):
            for k in range(n):
                v = valid[t, :, k]
                self.ret = torch.where(v, self.gamma * self.ret + rewards[t, :, k].double(), self.ret)
                self.stats.update(self.ret[v, None])
            self.ret = self.ret.masked_fill(dones[t], 0.0)
        scale = float(1.0 / torch.sqrt(self.stats.var[0] + self.eps))
        return (rewards * scale).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, Any]:
        return {"stats": self.stats.state_dict(), "ret": self.ret}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        self.ret = state["ret"]
