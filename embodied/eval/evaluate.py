"""Evaluation over a fixed list of seeds: success rate, return, optional video."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from embodied.rl.rollout import env_step
from embodied.eval.video import write_mp4
from sims.vecenv import VecEnv


@dataclass
class EvalResult:
    success_rate: float
    episode_return: float
    episode_length: float
    successes: list[bool]  # per seed, in the order given
    video: Path | None = None
    lengths: list[int] = field(default_factory=list)  # per seed: control steps of the episode

    def as_dict(self) -> dict[str, float]:
        return {"success_rate": self.success_rate, "episode_return": self.episode_return,
                "episode_length": self.episode_length, "episodes": float(len(self.successes))}


@torch.no_grad()
def evaluate(policy: Any, env: VecEnv, seeds: Sequence[int], deterministic: bool = True,
             video_path: str | Path | None = None, video_episodes: int = 2) -> EvalResult:
    """Run one episode per seed (in batches of env.num_envs) and report success.

    Episode k starts from reset(seed=seeds[k]); an env counts its first episode
    only. With video_path, the first `video_episodes` episodes are rendered side
    by side into one mp4. With deterministic=False the policy samples its actions
    from torch's generator seeded with seeds[0], forked so that the caller's stream
    is left as it was: the same policy and seeds give the same result.
    """
    if deterministic:
        return _episodes(policy, env, seeds, True, video_path, video_episodes)
    with torch.random.fork_rng():
        torch.manual_seed(int(seeds[0]) if len(seeds) else 0)
        return _episodes(policy, env, seeds, False, video_path, video_episodes)


def _episodes(policy: Any, env: VecEnv, seeds: Sequence[int], deterministic: bool,
              video_path: str | Path | None, video_episodes: int) -> EvalResult:
    B = env.num_envs
    successes, returns, lengths = [], [], []
    frames: list[np.ndarray] = []
    for start in range(0, len(seeds), B):
        batch = list(seeds[start:start + B])
        n = len(batch)
        batch += [batch[-1]] * (B - n)  # pad; extra envs are ignored
        obs, _ = env.reset(seed=batch)
        active = torch.ones(B, dtype=torch.bool)
        ret, length = torch.zeros(B), torch.zeros(B, dtype=torch.long)
        succ = torch.zeros(B, dtype=torch.bool)
        record = video_path is not None and start == 0
        nvid = min(video_episodes, n) if record else 0
        last = env.render(list(range(nvid))) if nvid else None
        if nvid:
            frames.append(_tile(last))
        while active[:n].any():
            out = policy.act(obs, deterministic=deterministic)
            res = env_step(env, out.actions)
            ret += torch.where(active, res.reward.sum(1), torch.zeros(B))
            length += torch.where(active, res.valid.sum(1), torch.zeros(B, dtype=torch.long))
            succ |= active & res.info["success"].any(1)
            if nvid and active[:nvid].any():
                # An env that finished keeps showing its last frame (after this
                # step it has been reset, so its render is of a new episode).
                still = (active & ~res.done)[:nvid, None, None, None]
                last = torch.where(still, env.render(list(range(nvid))), last)
                frames.append(_tile(last))
            active &= ~res.done
            obs = res.obs
        successes += succ[:n].tolist()
        returns += ret[:n].tolist()
        lengths += length[:n].tolist()
    video = None
    if video_path is not None and frames:
        frames += [frames[-1]] * 10  # hold the end for half a second
        video = write_mp4(video_path, np.stack(frames), fps=getattr(env.spec, "control_hz", 20.0))
    k = max(len(successes), 1)
    return EvalResult(sum(successes) / k, sum(returns) / k, sum(lengths) / k, successes, video, lengths)


def _tile(frames: torch.Tensor) -> np.ndarray:
    """uint8 [n, H, W, 3] -> [H, n * W, 3], side by side."""
    n, h, w, c = frames.shape
    return frames.permute(1, 0, 2, 3).reshape(h, n * w, c).numpy()
