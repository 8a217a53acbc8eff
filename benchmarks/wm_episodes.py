"""Playing policies in the simulator and in a world model from the same starts: the helpers of
bench_world_model.py and the other world-model benchmarks (issue 22).

The simulator's starts are its resets for given seeds; the model is put in the same initial
privileged vectors (and, for an image model, the same first frames) with
WorldModelVecEnv.reset_to. Success in the model is the success head's, or with reward_mode
"task" the task's own check on the decoded state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def load_policy(ckpt: Path):
    from policies.base import Policy

    policy = Policy.from_pretrained(ckpt / "policy")
    policy.eval()
    return policy


def checkpoints_of(paths: list[str], every: int) -> list[Path]:
    """Checkpoint folders: a checkpoint itself, or every `every`-th of a run's checkpoints/."""
    out = []
    for p in map(Path, paths):
        if (p / "meta.json").is_file():
            out.append(p)
            continue
        root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
        out += sorted(c for c in root.iterdir() if (c / "meta.json").is_file())[::every]
    return out


def sim_starts(task: str, seeds: list[int]) -> tuple[torch.Tensor, list[str]]:
    """The simulator's initial privileged vectors [N, P] and instructions for `seeds`."""
    from sims.registry import make_env

    env = make_env(task, len(seeds))
    obs, _ = env.reset(seed=seeds)
    env.close()
    return obs["privileged"].clone(), list(obs["instruction"])


@torch.no_grad()
def success_in_sim(policy, task: str, seeds: list[int], batch: int = 64, obs_kw: dict | None = None,
                   deterministic: bool = True) -> np.ndarray:
    """Success [N] of one episode per seed (deterministic, or sampled from a stream seeded by the
    seeds); obs_kw: make_env's observation kwargs."""
    from embodied.eval.evaluate import evaluate
    from sims.registry import make_env

    env = make_env(task, min(batch, len(seeds)), **(obs_kw or {}))
    res = evaluate(policy, env, seeds, deterministic=deterministic)
    env.close()
    return np.array(res.successes, dtype=bool)


@torch.no_grad()
def success_in_wm(policy, wm: str, starts: torch.Tensor, instructions: list[str], batch: int = 64,
                  reward_mode: str = "dense", images: dict | None = None,
                  obs_kw: dict | None = None, deterministic: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(success [N], ended by uncertainty truncation [N]) of one episode from each start
    (starts [N, P]; images: camera -> [N, ...] first frames of an image model, obs_kw its
    observation kwargs); an env counts its first episode only. Success is the success head's, or
    with reward_mode "task" the task's check on the decoded state. deterministic=False samples
    the actions from torch's stream seeded with 0 (forked: the caller's stream is kept)."""
    if not deterministic:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return _wm_episodes(policy, wm, starts, instructions, batch, reward_mode, images, obs_kw, False)
    return _wm_episodes(policy, wm, starts, instructions, batch, reward_mode, images, obs_kw, True)


@torch.no_grad()
def _wm_episodes(policy, wm, starts, instructions, batch, reward_mode, images, obs_kw, deterministic):
    from embodied.run.env import env_step
    from sims.world_model.env import WorldModelVecEnv

    B = min(batch, len(starts))
    env = WorldModelVecEnv(wm, B, seed=0, reward_mode=reward_mode, **(obs_kw or {}))  # seed: model_noise's
    succ_all, unc_all = [], []
    for s in range(0, len(starts), B):
        n = len(starts[s:s + B])

        def pad(v):  # the batch's rows, the last repeated up to B
            v = v[s:s + B]
            return torch.cat([v, v[-1:].expand(B - n, *v.shape[1:])])

        ins = instructions[s:s + B]
        kw = {"images": {k: pad(v) for k, v in images.items()}} if images else {}
        obs, _ = env.reset_to(pad(starts), ins + [ins[-1]] * (B - n), **kw)
        active, succ, unc = (torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool),
                             torch.zeros(B, dtype=torch.bool))
        while active[:n].any():
            res = env_step(env, policy.act(obs, deterministic=deterministic).actions)
            succ |= active & res.info["success"].any(1)
            unc |= active & res.info["uncertain"].any(1)
            active &= ~res.done
            obs = res.obs
        succ_all.append(succ[:n].numpy())
        unc_all.append(unc[:n].numpy())
    return np.concatenate(succ_all), np.concatenate(unc_all)


@torch.no_grad()
def probe_in_wm(policy, wm: str, starts: torch.Tensor, instructions: list[str], threshold: float,
                horizon: int, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(highest success probability within the task's horizon [N], within `horizon` [N]) of one
    deterministic episode from each start, in the model with success threshold `threshold` and
    horizon `horizon`; an env counts its first episode only."""
    from embodied.run.env import env_step
    from sims.world_model.env import WorldModelVecEnv

    B = min(batch, len(starts))
    env = WorldModelVecEnv(wm, B, success_threshold=threshold, max_episode_steps=horizon)
    task_h = WorldModelVecEnv(wm, 1).spec.max_episode_steps
    p_h, p_long = [], []
    for s in range(0, len(starts), B):
        n = len(starts[s:s + B])
        pad = lambda v: torch.cat([v[s:s + B], v[s:s + B][-1:].expand(B - n, *v.shape[1:])])  # noqa: E731
        ins = instructions[s:s + B]
        obs, _ = env.reset_to(pad(starts), ins + [ins[-1]] * (B - n))
        active, t = torch.ones(B, dtype=torch.bool), torch.zeros(B, dtype=torch.long)
        ph, pl = torch.zeros(B), torch.zeros(B)
        while active[:n].any():
            res = env_step(env, policy.act(obs, deterministic=True).actions)
            steps = t[:, None] + torch.cumsum(res.valid.long(), 1)  # [B, K]: each step's index in the episode
            p = torch.where(res.valid & active[:, None], res.info["success_p"], torch.zeros(()))
            pl = torch.maximum(pl, p.max(1).values)
            ph = torch.maximum(ph, torch.where(steps <= task_h, p, torch.zeros(())).max(1).values)
            t = steps[:, -1]
            active &= ~res.done
            obs = res.obs
        p_h.append(ph[:n].numpy())
        p_long.append(pl[:n].numpy())
    return np.concatenate(p_h), np.concatenate(p_long)
