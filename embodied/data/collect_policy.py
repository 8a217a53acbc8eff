"""A policy's rollouts into an episode dataset (`embodied collect TASK --policy CHECKPOINT`).

The world model must see what policies do, not only what the expert does: its data should
cover the states and actions of the policies that will later be trained or ranked in it.
This records every episode a trained checkpoint plays, successful or not, with its rewards
and success, in the same LeRobot v3 layout as `embodied collect` writes for the expert.

Columns: `action` is the policy's output; `executed_action` is that action clipped to the
action bounds, which is what the env executed (the world model reads it). An action chunk
of K steps is executed one step at a time and every step is a frame. An env whose episode
ends inside a chunk starts its next episode with the chunk's remaining actions; those frames
are still what the env executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from embodied.data.dataset import EpisodeWriter
from sims.vecenv import EnvError


@torch.no_grad()
def collect_policy_rollouts(checkpoint: str | Path, episodes: int, out: str | Path, task: str | None = None,
                            seed: int = 0, deterministic: bool = False, num_envs: int = 0,
                            obs_mode: str | None = None, image_size: int | None = None,
                            cameras: Sequence[str] | None = None) -> dict[str, Any]:
    """Play `checkpoint` (a checkpoint, checkpoints/ or run directory of `embodied train`, or a
    policy directory such as `embodied sft`'s final) until `episodes` episodes are written to
    `out`. The env is the checkpoint's (env section of its config;
    embodied.run.load.load_trained), on `task` if given; obs_mode / image_size / cameras
    override it (e.g. record images while a state policy acts). Env k of batch j starts from seed + j * num_envs + k.
    Actions are sampled from the policy unless `deterministic`."""
    from embodied.run.env import build_env
    from embodied.run.load import load_trained
    from policies.base import check_fits

    if not isinstance(episodes, int) or episodes <= 0:
        raise EnvError(f"--episodes must be a positive integer, got {episodes}")
    ckpt, cfg, policy = load_trained(checkpoint)
    env_cfg = cfg.env
    env_cfg.task = task or env_cfg.task
    if obs_mode is not None:
        env_cfg.obs_mode = obs_mode
    if image_size is not None:
        env_cfg.image_size = image_size
    if cameras is not None:
        env_cfg.cameras = list(cameras)
    B = num_envs or min(episodes, 32)
    env = build_env(env_cfg, B)
    try:
        check_fits(policy, env.spec, f"--policy {ckpt}")
    except Exception:
        env.close()
        raise
    spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(env.spec).items()}
    run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    spec["recorded_policy"] = {"checkpoint": ckpt.name, "run": run.name,
                               "deterministic": bool(deterministic)}
    writer = EpisodeWriter(out, env_cfg.task, spec)
    seeds = np.arange(seed, seed + B)
    obs, _ = env.reset(seed=seeds.tolist())
    with torch.random.fork_rng():  # the policy samples from torch's stream, seeded here and restored after
        torch.manual_seed(seed)
        summary = _play(policy, env, writer, obs, seeds, seed + B, episodes, deterministic)
    env.close()
    return {"out": str(out), "task": env_cfg.task, "policy": str(ckpt), "deterministic": bool(deterministic),
            **summary}


def _play(policy: Any, env: Any, writer: EpisodeWriter, obs: dict, seeds: np.ndarray, next_seed: int,
          episodes: int, deterministic: bool) -> dict[str, Any]:
    """The recording loop of collect_policy_rollouts: {"episodes", "success_rate"}. seeds [B]: each
    env's current episode seed; next_seed: the next one to hand out."""
    lo, hi = env.spec.action_low, env.spec.action_high
    B = env.num_envs
    buffers: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(B)]
    written, successes = 0, 0
    while written < episodes:
        chunk = policy.act(obs, deterministic=deterministic).actions  # [B, K, A]
        for j in range(chunk.shape[1]):
            action = chunk[:, j].float()
            executed = action.clamp(lo, hi)
            res = env.step(executed)
            for i in range(B):
                buffers[i].append({**{f"obs.{k}": v[i] for k, v in obs.items() if torch.is_tensor(v)},
                                   "action": action[i], "executed_action": executed[i],
                                   "reward": res.reward[i], "success": res.info["success"][i]})
            done = res.done.nonzero().flatten()
            for i in done.tolist():
                steps, buffers[i] = buffers[i], []
                if written < episodes:
                    episode = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
                    writer.add(episode, obs["instruction"][i], int(seeds[i]))
                    written += 1
                    successes += bool(res.info["success"][i])
                seeds[i] = next_seed  # re-seed the auto-reset so every episode has a known seed
                next_seed += 1
            if len(done):
                fresh, _ = env.reset(seed=seeds[done.numpy()].tolist(), env_ids=done)
                res.obs = fresh
            obs = res.obs
    return {"episodes": written, "success_rate": successes / written}
