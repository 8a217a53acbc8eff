"""Scripted-expert demonstrations into an episode dataset (`embodied collect`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from embodied.dataset import EpisodeWriter
from sims.registry import expert_for, make_env
from sims.vecenv import EnvError


def collect_demos(task: str, episodes: int, out: str | Path, seed: int = 0, obs_mode: str = "state",
                  image_size: int = 64, num_envs: int = 0, only_success: bool = True) -> dict[str, Any]:
    """Run the task's expert until `episodes` episodes are written to `out`.

    Env k of batch j starts from seed + j * num_envs + k, so a dataset is
    reproducible. With only_success, failed expert episodes are skipped.
    """
    if episodes <= 0:
        raise EnvError(f"--episodes must be a positive integer, got {episodes}")
    expert = expert_for(task)
    B = num_envs or min(episodes, 32)
    env = make_env(task, B, obs_mode=obs_mode, image_size=(image_size, image_size))
    spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(env.spec).items()}
    writer = EpisodeWriter(out, task, spec)
    written, attempted, next_seed = 0, 0, seed
    obs, _ = env.reset(seed=list(range(next_seed, next_seed + B)))
    seeds = np.arange(next_seed, next_seed + B)
    next_seed += B
    buffers: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(B)]
    while written < episodes:
        action = torch.as_tensor(expert(obs["privileged"].numpy()), dtype=torch.float32)
        res = env.step(action)
        for i in range(B):
            buffers[i].append({**{f"obs.{k}": v[i] for k, v in obs.items() if torch.is_tensor(v)},
                               "action": action[i], "reward": res.reward[i], "success": res.info["success"][i]})
        for i in res.done.nonzero().flatten().tolist():
            steps, buffers[i] = buffers[i], []
            attempted += 1
            ok = bool(res.info["success"][i])
            if written < episodes and (ok or not only_success):
                episode = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
                writer.add(episode, obs["instruction"][i], int(seeds[i]))
                written += 1
            # The env auto-reset from its own stream; re-seed it so every episode has a known seed.
            seeds[i] = next_seed
            next_seed += 1
        if res.done.any():
            ids = res.done.nonzero().flatten()
            fresh, _ = env.reset(seed=seeds[ids.numpy()].tolist(), env_ids=ids)
            res.obs = fresh
        obs = res.obs
    env.close()
    return {"out": str(out), "task": task, "episodes": written, "attempted": attempted,
            "expert_success_rate": written / max(attempted, 1) if only_success else None}
