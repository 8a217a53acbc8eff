"""The GRPO collector: one episode per env, envs grouped by a shared reset seed."""

from __future__ import annotations

from typing import Any

import torch

from embodied.rl.rollout import env_step, stack_steps, tensor_obs
from embodied.rl.trajectory import Trajectory
from sims.vecenv import EnvError, VecEnv


class GroupCollector:
    """B = num_groups * G envs; group g's G envs reset from one seed, so they start from the
    same initial state and differ only through the policy's sampling. `collect` runs until
    every env has finished its episode once; steps after an env's episode ended are padding
    (episode_mask False).

    Group seeds are drawn from a generator seeded with `seed`, uniformly in [0, 2^31): small
    seeds are what `embodied collect` gives its demonstrations (0, 1, 2, ...), and training
    on the demonstrations' own initial states would overstate rollout success."""

    def __init__(self, env: VecEnv, policy: Any, group_size: int, seed: int = 0):
        B = env.num_envs
        if group_size < 2 or B % group_size:
            raise EnvError(f"grpo.group_size: env.num_envs={B} must be a multiple of group_size={group_size} (>= 2)")
        self.env, self.policy, self.group_size = env, policy, group_size
        self.num_groups = B // group_size
        self.rng = torch.Generator().manual_seed(seed)
        self.finished: list[tuple[float, int, bool]] = []  # (return, length, success)

    @torch.no_grad()
    def collect(self) -> Trajectory:
        B, G = self.env.num_envs, self.group_size
        group_ids = torch.arange(self.num_groups).repeat_interleave(G)  # [B]
        group_seeds = torch.randint(2**31 - 1, (self.num_groups,), generator=self.rng)
        seeds = group_seeds[group_ids].tolist()
        obs, _ = self.env.reset(seed=seeds)
        active = torch.ones(B, dtype=torch.bool)
        ret, length = torch.zeros(B), torch.zeros(B, dtype=torch.long)
        succ = torch.zeros(B, dtype=torch.bool)
        steps: list[dict[str, Any]] = []
        while active.any():
            out = self.policy.act(obs)
            res = env_step(self.env, out.actions)
            success = res.info["success"].any(1)
            steps.append(dict(
                obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])),
                actions=out.actions, log_probs=out.log_prob, values=torch.zeros(B),
                rewards=res.reward * res.valid, valid=res.valid, terminated=res.terminated.any(1),
                truncated=res.truncated.any(1) & ~res.terminated.any(1), success=success,
                bootstrap=torch.zeros(B), replay=out.replay, parts=out.log_prob_parts, mask=active.clone(),
            ))
            ret += torch.where(active, (res.reward * res.valid).sum(1), torch.zeros(B))
            length += torch.where(active, res.valid.sum(1), torch.zeros(B, dtype=torch.long))
            succ |= active & success
            active &= ~res.done
            obs = res.obs
        self.finished.extend(zip(ret.tolist(), length.tolist(), succ.tolist()))
        mask = torch.stack([s.pop("mask") for s in steps])
        return stack_steps(steps, torch.zeros(B), group_ids=group_ids, episode_mask=mask)

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of the episodes collected since the last call."""
        if not self.finished:
            return {}
        n = len(self.finished)
        stats = {"episode_return": sum(f[0] for f in self.finished) / n,
                 "episode_length": sum(f[1] for f in self.finished) / n,
                 "success_rate": sum(f[2] for f in self.finished) / n, "episodes": float(n)}
        self.finished.clear()
        return stats

    def reset(self, seed: int | None) -> None:
        self.rng.manual_seed(seed or 0)

    @property
    def obs(self) -> None:
        """No observation is kept between calls: every `collect` resets its envs."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.set_state(state["rng"])
