"""The rollout collector: runs a policy in a VecEnv and returns a Trajectory."""

from __future__ import annotations

from typing import Any

import torch

from embodied.rl.trajectory import Trajectory
from sims.vecenv import ChunkStepResult, Obs, StepResult, VecEnv


def as_chunk(res: StepResult) -> ChunkStepResult:
    """View a single step as a chunk of K=1 ([B] -> [B, 1])."""
    return ChunkStepResult(
        obs=res.obs,
        reward=res.reward.unsqueeze(1),
        terminated=res.terminated.unsqueeze(1),
        truncated=res.truncated.unsqueeze(1),
        info={k: v.unsqueeze(1) for k, v in res.info.items() if torch.is_tensor(v) and v.dim() == 1},
        valid=torch.ones_like(res.terminated).unsqueeze(1),
        final_obs=res.final_obs,
    )


def env_step(env: VecEnv, actions: torch.Tensor) -> ChunkStepResult:
    """Execute chunks [B, K, A]; K = 1 takes the plain step path."""
    if actions.shape[1] == 1:
        return as_chunk(env.step(actions[:, 0]))
    return env.chunk_step(actions)


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


class RolloutCollector:
    """Keeps the envs' current observation between calls; tracks finished episodes."""

    def __init__(self, env: VecEnv, policy: Any, num_steps: int):
        self.env, self.policy, self.num_steps = env, policy, num_steps
        B = env.num_envs
        self.obs: Obs | None = None
        self.ep_return = torch.zeros(B)
        self.ep_length = torch.zeros(B, dtype=torch.long)
        self.ep_success = torch.zeros(B, dtype=torch.bool)
        self.finished: list[tuple[float, int, bool]] = []  # (return, length, success)

    def reset(self, seed: int | None) -> Obs:
        self.obs, _ = self.env.reset(seed=seed)
        return self.obs

    @torch.no_grad()
    def collect(self) -> Trajectory:
        """Run num_steps policy steps from the current observation."""
        assert self.obs is not None, "call reset() first"
        steps: list[dict[str, Any]] = []
        for _ in range(self.num_steps):
            obs = self.obs
            out = self.policy.act(obs)
            res = env_step(self.env, out.actions)
            done = res.done  # [B]
            term = res.terminated.any(1)
            trunc = res.truncated.any(1) & ~term
            success = res.info["success"].any(1)
            bootstrap = torch.zeros(self.env.num_envs)
            if self.policy.has_critic and trunc.any():
                bootstrap = torch.where(trunc, start_value(self.policy.get_value(res.final_obs)), bootstrap)
            steps.append(dict(
                obs=tensor_obs(obs), instructions=list(obs.get("instruction", [])),
                actions=out.actions, log_probs=out.log_prob,
                values=out.value if out.value is not None else torch.zeros(self.env.num_envs),
                rewards=res.reward * res.valid, valid=res.valid, terminated=term, truncated=trunc,
                success=success, bootstrap=bootstrap, replay=out.replay, parts=out.log_prob_parts,
            ))
            self._track(res.reward.sum(1), res.valid.sum(1), success, done)
            self.obs = res.obs
        last_value = (start_value(self.policy.get_value(self.obs)) if self.policy.has_critic
                      else torch.zeros(self.env.num_envs))
        return stack_steps(steps, last_value)

    def _track(self, reward: torch.Tensor, length: torch.Tensor, success: torch.Tensor, done: torch.Tensor) -> None:
        self.ep_return += reward
        self.ep_length += length
        self.ep_success |= success
        for i in done.nonzero().flatten().tolist():
            self.finished.append((self.ep_return[i].item(), int(self.ep_length[i]), bool(self.ep_success[i])))
        self.ep_return[done] = 0.0
        self.ep_length[done] = 0
        self.ep_success[done] = False

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of episodes finished since the last call."""
        if not self.finished:
            return {}
        n = len(self.finished)
        stats = {
            "episode_return": sum(f[0] for f in self.finished) / n,
            "episode_length": sum(f[1] for f in self.finished) / n,
            "success_rate": sum(f[2] for f in self.finished) / n,
            "episodes": float(n),
        }
        self.finished.clear()
        return stats

    def state_dict(self) -> dict[str, Any]:
        obs = self.obs or {}
        return {
            "obs": tensor_obs(obs), "instruction": list(obs.get("instruction", [])),
            "ep_return": self.ep_return, "ep_length": self.ep_length, "ep_success": self.ep_success,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obs = dict(state["obs"])
        if state["instruction"]:
            self.obs["instruction"] = list(state["instruction"])
        self.ep_return, self.ep_length, self.ep_success = state["ep_return"], state["ep_length"], state["ep_success"]
