"""The rollout collector: runs a policy in a VecEnv and returns a Trajectory."""

from __future__ import annotations

from typing import Any

import torch

from embodied.rl.trajectory import Trajectory
from embodied.run.device import autocast, module_device, to_device, uses_bf16
from embodied.run.env import env_step
from sims.vecenv import Obs, VecEnv


def start_value(value: torch.Tensor) -> torch.Tensor:
    """V at the start of a chunk: [B] as is, or the first column of a per-action critic's [B, n]."""
    return value if value.dim() == 1 else value[:, 0]


def tensor_obs(obs: Obs) -> dict[str, torch.Tensor]:
    return {k: v for k, v in obs.items() if torch.is_tensor(v)}


def stack_steps(steps: list[dict[str, Any]], last_value: torch.Tensor, **extra: Any) -> Trajectory:
    """T per-step dicts of [B, ...] tensors -> a time-major Trajectory."""
    parts = [s["parts"] for s in steps]
    return Trajectory(
        obs={k: torch.stack([s["obs"][k] for s in steps]) for k in steps[0]["obs"]},
        replay={k: torch.stack([s["replay"][k] for s in steps]) for k in steps[0]["replay"]},
        instructions=[s["instructions"] for s in steps],
        last_value=last_value,
        log_prob_parts=None if any(p is None for p in parts) else torch.stack(parts),
        **{k: torch.stack([s[k] for s in steps]) for k in (
            "actions", "log_probs", "values", "rewards", "valid",
            "terminated", "truncated", "success", "bootstrap")},
        **extra,
    )


class EpisodeTally:
    """Sums of finished episodes' return, length and success, kept on the rollout's device (one
    host read per pop, not one per finished episode)."""

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(4, dtype=torch.float64, device=device)  # return, length, success, count
        self.per_task: dict[str, list[int]] = {}  # task -> [successes, episodes] (multi-task envs)

    def add_tasks(self, tasks: list[str], success: list[bool]) -> None:
        """Finished episodes' tasks and successes (host lists), for "success/<task>"."""
        for t, s in zip(tasks, success):
            k = self.per_task.setdefault(t, [0, 0])
            k[0] += int(s)
            k[1] += 1

    def add(self, ret: torch.Tensor, length: torch.Tensor, success: torch.Tensor, done: torch.Tensor) -> None:
        """Episodes that ended (done bool [B]) with their return / length / success [B]."""
        d = done.to(torch.float64)
        self.sums += torch.stack([(ret.double() * d).sum(), (length.double() * d).sum(),
                                  (success.double() * d).sum(), d.sum()])

    def pop(self) -> dict[str, float]:
        ret, length, succ, n = self.sums.tolist()
        self.sums.zero_()
        per, self.per_task = self.per_task, {}
        if n == 0:
            return {}
        out = {"episode_return": ret / n, "episode_length": length / n, "success_rate": succ / n, "episodes": n}
        if len(per) > 1:  # each task's success, with more than one task among the episodes
            out.update({f"success/{t}": k[0] / k[1] for t, k in sorted(per.items())})
        return out


class RolloutCollector:
    """Keeps the envs' current observation between calls; tracks finished episodes.

    device: where observations, actions, the rollout buffers and episode sums live (default: the
    policy's). Env outputs are moved there once per step (a no-op for an env already on it, e.g.
    ManiSkill on physx_cuda); actions go to the env's device (env_step). bf16: autocast the policy's act
    (default: VLAs on CUDA, embodied/run/device.py)."""

    def __init__(self, env: VecEnv, policy: Any, num_steps: int, device: torch.device | str | None = None,
                 bf16: bool | None = None):
        self.env, self.policy, self.num_steps = env, policy, num_steps
        self.device = torch.device(device) if device is not None else module_device(policy)
        self.bf16 = uses_bf16(policy, self.device) if bf16 is None else bf16
        B = env.num_envs
        self.obs: Obs | None = None
        self.ep_return = torch.zeros(B, device=self.device)
        self.ep_length = torch.zeros(B, dtype=torch.long, device=self.device)
        self.ep_success = torch.zeros(B, dtype=torch.bool, device=self.device)
        self.tally = EpisodeTally(self.device)
        self.ep_label: list[str] = [env.spec.task] * B  # the task of each env's current episode
        self.multi = False  # more than one task among the envs: per-task success is tracked

    def reset(self, seed: int | None) -> Obs:
        obs, _ = self.env.reset(seed=seed)
        self.obs = to_device(obs, self.device)
        self.ep_label = self.env.task_labels()
        self.multi = self.env.row_tasks is not None or len(set(self.ep_label)) > 1
        return self.obs

    def act(self, obs: Obs) -> Any:
        with autocast(self.device, self.bf16):
            return self.policy.act(obs)

    def value(self, obs: Obs) -> torch.Tensor:
        with autocast(self.device, self.bf16):
            return start_value(self.policy.get_value(obs)).float()

    @torch.no_grad()
    def collect(self) -> Trajectory:
        """Run num_steps policy steps from the current observation."""
        assert self.obs is not None, "call reset() first"
        steps: list[dict[str, Any]] = []
        B, dev = self.env.num_envs, self.device
        for _ in range(self.num_steps):
            obs = self.obs
            out = self.act(obs)
            res = env_step(self.env, out.actions, dev)
            done = res.done  # [B]
            term = res.terminated.any(1)
            trunc = res.truncated.any(1) & ~term
            success = res.info["success"].any(1)
            bootstrap = torch.zeros(B, device=dev)
            if self.policy.has_critic and res.final_obs is not None:
                bootstrap = torch.where(trunc, self.value(to_device(res.final_obs, dev)), bootstrap)
            steps.append(dict(
                obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])),
                actions=out.actions, log_probs=out.log_prob.float(),
                values=out.value.float() if out.value is not None else torch.zeros(B, device=dev),
                rewards=res.reward * res.valid, valid=res.valid, terminated=term, truncated=trunc,
                success=success, bootstrap=bootstrap, replay=out.replay,
                parts=None if out.log_prob_parts is None else out.log_prob_parts.float(),
            ))
            self._track(res.reward.sum(1), res.valid.sum(1), success, done)
            self.obs = res.obs
        last_value = self.value(self.obs) if self.policy.has_critic else torch.zeros(B, device=dev)
        rows = self.env.row_tasks  # fixed tasks per row (MT10): the per-task diagnostics' labels
        return stack_steps(steps, last_value, tasks=None if rows is None else list(rows))

    def _track(self, reward: torch.Tensor, length: torch.Tensor, success: torch.Tensor, done: torch.Tensor) -> None:
        self.ep_return += reward
        self.ep_length += length
        self.ep_success |= success
        self.tally.add(self.ep_return, self.ep_length, self.ep_success, done)
        if self.multi:  # a host read of the finished envs, for per-task success
            ids = done.nonzero().flatten().tolist()
            if ids:
                self.tally.add_tasks([self.ep_label[i] for i in ids], self.ep_success[ids].tolist())
                labels = self.env.task_labels()  # the new episodes' tasks
                for i in ids:
                    self.ep_label[i] = labels[i]
        self.ep_return.masked_fill_(done, 0.0)
        self.ep_length.masked_fill_(done, 0)
        self.ep_success.masked_fill_(done, False)

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of episodes finished since the last call; with more
        than one task among them, each task's success as "success/<task>" too."""
        return self.tally.pop()

    def state_dict(self) -> dict[str, Any]:
        obs = self.obs or {}
        return {
            "obs": tensor_obs(obs), "instruction": list(obs.get("instruction", [])),
            "ep_return": self.ep_return, "ep_length": self.ep_length, "ep_success": self.ep_success,
            "ep_label": list(self.ep_label), "multi": int(self.multi),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state saved on any device continues on this collector's."""
        self.obs = to_device(dict(state["obs"]), self.device)
        if state["instruction"]:
            self.obs["instruction"] = list(state["instruction"])
        self.ep_return, self.ep_length, self.ep_success = (
            state[k].to(self.device) for k in ("ep_return", "ep_length", "ep_success"))
        self.ep_label = list(state.get("ep_label") or self.env.task_labels())
        self.multi = bool(int(state.get("multi", self.env.row_tasks is not None)))
