"""The env a run steps, for every command that trains, evaluates or replays a policy: the env
a config names (`build_env`), one step of action chunks on any device (`env_step`), and the
seeds every evaluation resets it with (`eval_seeds`). Imports no learner room: eval/, data/,
deploy/ and imitation/ use it as the RL loops do."""

from __future__ import annotations

from typing import Any

import torch

from embodied.config import EnvConfig
from embodied.run.device import to_device, to_env
from sims.registry import device_kwargs, make_env
from sims.vecenv import ChunkStepResult, StepResult, VecEnv

EVAL_SEED_BASE = 1_000_000  # evaluation seeds never overlap training seeds


def eval_seeds(n: int) -> list[int]:
    """The n evaluation seeds every command uses (train's periodic and final evaluation, sft's,
    `embodied eval`, sim2real, serve): the same weights on the same episodes give one number."""
    return list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + n))


def build_env(cfg: EnvConfig, num_envs: int | None = None, device: Any = None) -> VecEnv:
    """The env of cfg; with a device (torch.device), ManiSkill tasks run where it is (physx_cuda on
    CUDA, so observations never leave the GPU; physx_cpu on the CPU)."""
    extra = {"cameras": tuple(cfg.cameras)} if cfg.obs_mode == "rgb" else {}
    if device is not None:  # the family's own settings for a device (ManiSkill: physx_cuda on CUDA)
        extra.update(device_kwargs(cfg.task, device))
    if cfg.backend != "cpu":
        extra["backend"] = cfg.backend
        if device is not None:
            extra["device"] = device
    if cfg.rollout != "mean":
        extra["rollout"] = cfg.rollout
    if cfg.model_noise != 0.0:
        extra["model_noise"] = cfg.model_noise
    if cfg.allow_failed_model:
        extra["allow_failed_model"] = True
    if cfg.max_episode_steps is not None:
        extra["max_episode_steps"] = cfg.max_episode_steps
    return make_env(cfg.task, num_envs or cfg.num_envs, obs_mode=cfg.obs_mode, reward_mode=cfg.reward_mode,
                    image_size=cfg.image_size, num_threads=cfg.num_threads,
                    randomization=cfg.randomization, reality=cfg.reality, **extra)


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


def env_step(env: VecEnv, actions: torch.Tensor, device: torch.device | None = None) -> ChunkStepResult:
    """Execute chunks [B, K, A] (on any device); K = 1 takes the plain step path. The actions go
    to the env's device (to_env); with `device`, the result comes back there (to_device) before
    anything else touches it."""
    env_dev = torch.device(getattr(env, "device", "cpu"))
    if actions.shape[1] == 1:
        res = env.step(to_env(actions[:, 0], env_dev))
        return as_chunk(res if device is None else to_device(res, device))
    res = env.chunk_step(to_env(actions, env_dev))
    return res if device is None else to_device(res, device)
