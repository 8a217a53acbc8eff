"""The GRPO collector: one episode per env, envs grouped by a shared reset seed."""

from __future__ import annotations

from typing import Any

import torch

from embodied.rl.rollout import EpisodeTally, stack_steps, tensor_obs
from embodied.run.env import env_step
from embodied.run.device import autocast, module_device, to_device, uses_bf16
from embodied.rl.trajectory import Trajectory
from sims.vecenv import EnvError, VecEnv


class GroupCollector:
    """B = num_groups * G envs; group g's G envs reset from one seed, so they start from the
    same initial state and differ only through the policy's sampling (where env rows hold fixed
    tasks, env.row_tasks, a group's envs are of one task). `collect` runs until
    every env has finished its episode once; steps after an env's episode ended are padding
    (episode_mask False).

    Group seeds are drawn from a generator seeded with `seed`, uniformly in [0, 2^31): small
    seeds are what `embodied collect` gives its demonstrations (0, 1, 2, ...), and training
    on the demonstrations' own initial states would overstate rollout success."""

    def __init__(self, env: VecEnv, policy: Any, group_size: int, seed: int = 0,
                 device: torch.device | str | None = None, bf16: bool | None = None):
        B = env.num_envs
        if group_size < 2 or B % group_size:
            raise EnvError(f"grpo.group_size: env.num_envs={B} must be a multiple of group_size={group_size} (>= 2)")
        self.env, self.policy, self.group_size = env, policy, group_size
        self.num_groups = B // group_size
        self.rng = torch.Generator().manual_seed(seed)  # the group seeds' stream (host: seeds go to the env)
        self.device = torch.device(device) if device is not None else module_device(policy)
        self.bf16 = uses_bf16(policy, self.device) if bf16 is None else bf16
        self.tally = EpisodeTally(self.device)
        self.group_ids = self._groups(env, group_size)  # int64 [B] (host)

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
        B, dev = self.env.num_envs, self.device
        group_ids, seeds = self._group_seeds()
        obs = to_device(self.env.reset(seed=seeds)[0], dev)
        labels = self.env.task_labels()
        active = torch.ones(B, dtype=torch.bool, device=dev)
        ret, length = torch.zeros(B, device=dev), torch.zeros(B, dtype=torch.long, device=dev)
        succ = torch.zeros(B, dtype=torch.bool, device=dev)
        zeros = torch.zeros(B, device=dev)
        steps: list[dict[str, Any]] = []
        while active.any():
            with autocast(dev, self.bf16):
                out = self.policy.act(obs)
            res = env_step(self.env, out.actions, dev)
            success = res.info["success"].any(1)
            steps.append(dict(
                obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])),
                actions=out.actions, log_probs=out.log_prob.float(), values=zeros,
                rewards=res.reward * res.valid, valid=res.valid, terminated=res.terminated.any(1),
                truncated=res.truncated.any(1) & ~res.terminated.any(1), success=success, bootstrap=zeros,
                replay=out.replay, parts=None if out.log_prob_parts is None else out.log_prob_parts.float(),
                mask=active.clone(),
            ))
            ret += torch.where(active, (res.reward * res.valid).sum(1), zeros)
            length += torch.where(active, res.valid.sum(1), torch.zeros_like(length))
            succ |= active & success
            active &= ~res.done
            obs = res.obs
        self.tally.add(ret, length, succ, torch.ones_like(succ))
        if len(set(labels)) > 1:
            self.tally.add_tasks(labels, succ.tolist())
        mask = torch.stack([s.pop("mask") for s in steps])
        return stack_steps(steps, zeros, group_ids=group_ids, episode_mask=mask, tasks=list(labels))

    def _group_seeds(self) -> tuple[torch.Tensor, list[int]]:
        """(group ids int64 [B] on the device, each env's reset seed): the seeds are drawn on the
        host, where env.reset takes them."""
        group_ids = self.group_ids  # [B]
        group_seeds = torch.randint(2**31 - 1, (self.num_groups,), generator=self.rng)
        return group_ids.to(self.device), group_seeds[group_ids].tolist()

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of the episodes collected since the last call (and
        per task, "success/<task>", when there is more than one)."""
        return self.tally.pop()

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


def concat_envs(trajs: list[Trajectory]) -> Trajectory:
    """Trajectories of grouped episodes [T_i, B_i] -> one [max T_i, sum B_i]: shorter ones padded
    in time (episode_mask and valid False, zeros elsewhere), group ids kept apart by offsets."""
    if len(trajs) == 1:
        return trajs[0]
    T = max(t.num_steps for t in trajs)

    def pad(x: torch.Tensor) -> torch.Tensor:  # [T_i, B_i, ...] -> [T, B_i, ...]
        return torch.cat([x, x.new_zeros((T - x.shape[0], *x.shape[1:]))]) if x.shape[0] < T else x

    def cat(get) -> torch.Tensor:
        return torch.cat([pad(get(t)) for t in trajs], dim=1)

    offsets, gids = 0, []
    for t in trajs:
        gids.append(t.group_ids + offsets)
        offsets += int(t.group_ids.max()) + 1
    instructions = [[x for t in trajs for x in (t.instructions[s] if s < t.num_steps else [""] * t.num_envs)]
                    for s in range(T)] if all(t.instructions and t.instructions[0] for t in trajs) else []
    parts = None if any(t.log_prob_parts is None for t in trajs) else cat(lambda t: t.log_prob_parts)
    return Trajectory(
        obs={k: cat(lambda t: t.obs[k]) for k in trajs[0].obs},
        replay={k: cat(lambda t: t.replay[k]) for k in trajs[0].replay},
        instructions=instructions,
        last_value=torch.cat([t.last_value for t in trajs]),
        log_prob_parts=parts,
        group_ids=torch.cat(gids),
        episode_mask=cat(lambda t: t.episode_mask),
        tasks=None if any(t.tasks is None for t in trajs) else [x for t in trajs for x in t.tasks],
        **{k: cat(lambda t: getattr(t, k)) for k in ("actions", "log_probs", "values", "rewards", "valid",
                                                      "terminated", "truncated", "success", "bootstrap")},
    )


class DynamicSampler:
    """grpo.dynamic_sampling (DAPO; SimpleVLA-RL): collect groups until those whose success rate r
    has low < r < high (the ones GRPOLearner keeps: their members' rewards differ) fill one batch,
    num_groups of the inner collector, or max_collects collections were made. Every collected
    episode stays in the trajectory (its env steps count; the learner drops the filtered groups),
    so a batch may hold more than one batch's kept groups after the last collection.
    pop_episode_stats adds "collects" (collections per update) and "kept_share" (of the groups)."""

    def __init__(self, collector: GroupCollector, max_collects: int, low: float = 0.0, high: float = 1.0):
        if max_collects < 1:
            raise ValueError(f"grpo.max_collects must be >= 1, got {max_collects}")
        self.inner, self.max_collects, self.low, self.high = collector, max_collects, low, high
        self.collects = self.updates = self.kept = self.groups = 0

    def collect(self) -> Trajectory:
        from embodied.rl.algorithms import grpo_keep_mask

        G, target = self.inner.group_size, self.inner.num_groups
        trajs, kept = [], 0
        while len(trajs) < self.max_collects and kept < target:
            traj = self.inner.collect()
            success = (traj.success & traj.episode_mask).any(0).cpu()
            keep = grpo_keep_mask(success, traj.group_ids.cpu(), self.low, self.high)
            kept += int(keep.sum()) // G
            self.groups += traj.num_envs // G
            trajs.append(traj)
        self.collects += len(trajs)
        self.updates += 1
        self.kept += kept
        return concat_envs(trajs)

    def pop_episode_stats(self) -> dict[str, float]:
        out = self.inner.pop_episode_stats()
        if self.updates:
            out.update(collects=self.collects / self.updates, kept_share=self.kept / max(self.groups, 1))
        self.collects = self.updates = self.kept = self.groups = 0
        return out

    def reset(self, seed: int | None) -> None:
        self.inner.reset(seed)

    @property
    def obs(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
