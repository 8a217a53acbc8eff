"""The GRPO collector: one episode per env, envs grouped by a shared reset seed."""

from __future__ import annotations

from typing import Any

import torch

from embodied.rl.rollout import env_step, episode_stats, stack_steps, tensor_obs
from embodied.rl.trajectory import Trajectory
from sims.vecenv import EnvError, VecEnv


class GroupCollector:
    """B = num_groups * G envs; group g's G envs reset from one seed, so they start from the
    same initial state and differ only through the policy's sampling. Where env rows hold fixed
    tasks (env.row_tasks) a group's envs are of one task, so a group is one task's start state. `collect` runs until
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
        self.group_ids = self._groups(env, group_size)  # int64 [B]
        self.rng = torch.Generator().manual_seed(seed)
        self.finished: list[tuple[float, int, bool, str]] = []  # (return, length, success, task)

    @staticmethod
    def _groups(env: VecEnv, G: int) -> torch.Tensor:
        """int64 [B]: consecutive envs form a group, or, where rows hold fixed tasks
        (env.row_tasks: MetaWorld's MT10, a multi-task env), G envs of one task."""
        B, tasks = env.num_envs, env.row_tasks
        if tasks is None:
            return torch.arange(B // G).repeat_interleave(G)
        ids = torch.empty(B, dtype=torch.long)
        g = 0
        for t in dict.fromkeys(tasks):
            rows = [i for i, r in enumerate(tasks) if r == t]
            if len(rows) % G:
                raise EnvError(f"grpo.group_size: {len(rows)} envs run {t}, not a multiple of group_size={G}; "
                               f"GRPO groups envs of one task: make env.num_envs a multiple of {G} per task")
            for k in range(0, len(rows), G):
                ids[rows[k:k + G]] = g
                g += 1
        return ids

    @torch.no_grad()
    def collect(self) -> Trajectory:
        B, G = self.env.num_envs, self.group_size
        group_ids = self.group_ids  # [B]
        group_seeds = torch.randint(2**31 - 1, (self.num_groups,), generator=self.rng)
        seeds = group_seeds[group_ids].tolist()
        obs, _ = self.env.reset(seed=seeds)
        labels = self.env.task_labels()
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
        self.finished.extend(zip(ret.tolist(), length.tolist(), succ.tolist(), labels))
        mask = torch.stack([s.pop("mask") for s in steps])
        return stack_steps(steps, torch.zeros(B), group_ids=group_ids, episode_mask=mask)

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of the episodes collected since the last call (and
        per task, "success/<task>", when there is more than one)."""
        stats = episode_stats(self.finished)
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
