"""Evaluation over a fixed list of seeds: success rate, return, optional video."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from embodied.eval.video import write_mp4
from embodied.run.device import autocast, module_device, to_device, uses_bf16
from embodied.run.env import env_step
from sims.vecenv import VecEnv


@dataclass
class EvalResult:
    success_rate: float
    episode_return: float
    episode_length: float
    successes: list[bool]  # per seed, in the order given
    video: Path | None = None
    lengths: list[int] = field(default_factory=list)  # per seed: control steps of the episode
    tasks: list[str] = field(default_factory=list)  # per seed: the episode's task (VecEnv.task_labels)

    def per_task(self) -> dict[str, float]:
        """Success rate of each task, in order of first appearance."""
        out: dict[str, list[bool]] = {}
        for t, s in zip(self.tasks, self.successes):
            out.setdefault(t, []).append(s)
        return {t: sum(v) / len(v) for t, v in out.items()}

    def per_task_line(self) -> str:
        """"  per task: A 0.88, B 0.50" for the console, "" when the episodes ran one task."""
        per = self.per_task()
        return "  per task: " + ", ".join(f"{t} {v:.2f}" for t, v in per.items()) if len(per) > 1 else ""

    def as_dict(self) -> dict[str, float]:
        """The means, and "success/<task>" for each task when the episodes ran more than one."""
        out = {"success_rate": self.success_rate, "episode_return": self.episode_return,
               "episode_length": self.episode_length, "episodes": float(len(self.successes))}
        per = self.per_task()
        if len(per) > 1:
            out.update({f"success/{t}": v for t, v in per.items()})
        return out


@torch.no_grad()
def evaluate(policy: Any, env: VecEnv, seeds: Sequence[int], deterministic: bool = True,
             video_path: str | Path | None = None, video_episodes: int = 2) -> EvalResult:
    """Run one episode per seed (in batches of env.num_envs) and report success.

    Episode k starts from reset(seed=seeds[k]); an env counts its first episode
    only. With video_path, the first `video_episodes` episodes are rendered side
    by side into one mp4; when the first batch holds more than one task (a multi-task
    env), one episode of each task instead, as a grid of tiles with each instruction
    written on its tile. With deterministic=False the policy samples its actions
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
    B, dev = env.num_envs, module_device(policy)  # the policy's device (embodied/run/device.py)
    bf16 = uses_bf16(policy, dev)
    successes, returns, lengths, tasks = [], [], [], []
    frames: list[np.ndarray] = []
    for start in range(0, len(seeds), B):
        batch = list(seeds[start:start + B])
        n = len(batch)
        batch += [batch[-1]] * (B - n)  # pad; extra envs are ignored
        obs = to_device(env.reset(seed=batch)[0], dev)
        tasks += env.task_labels()[:n]
        active = torch.ones(B, dtype=torch.bool, device=dev)
        ret, length = torch.zeros(B, device=dev), torch.zeros(B, dtype=torch.long, device=dev)
        succ = torch.zeros(B, dtype=torch.bool, device=dev)
        record = video_path is not None and start == 0
        vids, captions = _video_envs(tasks[start:start + n], obs, video_episodes) if record else ([], None)
        vid = torch.as_tensor(vids, dtype=torch.long, device=dev)
        last = env.render(vids).cpu() if vids else None
        if vids:
            frames.append(_frame(last, captions))
        while active[:n].any():
            with autocast(dev, bf16):
                out = policy.act(obs, deterministic=deterministic)
            res = env_step(env, out.actions, dev)
            ret += torch.where(active, res.reward.sum(1), torch.zeros_like(ret))
            length += torch.where(active, res.valid.sum(1), torch.zeros_like(length))
            succ |= active & res.info["success"].any(1)
            if vids and active[vid].any():
                # An env that finished keeps showing its last frame (after this
                # step it has been reset, so its render is of a new episode).
                still = (active & ~res.done)[vid, None, None, None].cpu()
                last = torch.where(still, env.render(vids).cpu(), last)
                frames.append(_frame(last, captions))
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
    return EvalResult(sum(successes) / k, sum(returns) / k, sum(lengths) / k, successes, video, lengths, tasks)


def _video_envs(tasks: list[str], obs: dict, video_episodes: int) -> tuple[list[int], list[str] | None]:
    """The envs a video shows: with more than one task in the batch, the first env of each task,
    captioned with its instruction (a grid, embodied/eval/grid.py); else the first
    `video_episodes` envs side by side, uncaptioned."""
    first = {t: i for i, t in reversed(list(enumerate(tasks)))}
    if len(first) > 1:
        ids = sorted(first.values())
        return ids, [obs["instruction"][i] if "instruction" in obs else tasks[i] for i in ids]
    return list(range(min(video_episodes, len(tasks)))), None


def _frame(frames: torch.Tensor, captions: list[str] | None) -> np.ndarray:
    """uint8 [n, H, W, 3] -> one video frame: a captioned grid, or the frames side by side."""
    if captions is None:
        return _tile(frames)
    from embodied.eval.grid import grid

    return grid(frames.numpy(), captions)


def _tile(frames: torch.Tensor) -> np.ndarray:
    """uint8 [n, H, W, 3] -> [H, n * W, 3], side by side."""
    n, h, w, c = frames.shape
    return frames.permute(1, 0, 2, 3).reshape(h, n * w, c).numpy()
