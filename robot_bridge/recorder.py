"""Recording into our episode dataset format (embodied.data.dataset.EpisodeWriter, what `embodied
collect` writes).

`RecordingEnv` wraps a VecEnv with B = 1 (RobotEnv, or a simulator) and hands each episode to
EpisodeWriter when it ends: obs.<key> [L, ...] (the observations the actions were taken
from), action [L, A], reward [L], success [L]. An episode cut short by an error is not
written; every finished one is committed already (EpisodeWriter writes atomically).
The camera transform the frames went through (RobotEnv's `camera`, robot_bridge/camera.py)
is written into meta/info.json (`embodied.spec.camera_transform`), and a dataset recorded
with one transform is not appended to with another.

rosbag2 recordings (sqlite3 or MCAP) go into the same format through robot_bridge/bag_ingest.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from embodied.data.dataset import DatasetError, EpisodeWriter
from robot_bridge.camera import CameraTransform
from sims.vecenv import EnvError, Obs, Seed, StepResult, VecEnv


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(spec).items()}


def camera_transform_of(env: Any) -> CameraTransform | None:
    """The CameraTransform of a RobotEnv (or a wrapper of one: `.env` chains), or None."""
    while env is not None:
        if isinstance(getattr(env, "camera", None), CameraTransform):
            return env.camera
        env = getattr(env, "env", None)
    return None


def episode_writer(root: str | Path, task: str, spec: dict[str, Any],
                   transform: CameraTransform | None) -> EpisodeWriter:
    """An EpisodeWriter whose spec carries the camera transform; refuses to mix transforms."""
    if transform is not None:
        spec = {**spec, "camera_transform": transform.to_dict()}
    writer = EpisodeWriter(root, task, spec)
    had = writer.info.get("embodied", {}).get("spec", {}).get("camera_transform")
    if writer.info["total_episodes"] and had != spec.get("camera_transform"):
        raise DatasetError(f"{root}: its frames went through camera transform {had}, this recording's is "
                           f"{spec.get('camera_transform')}; record into a new directory")
    return writer


class RecordingEnv(VecEnv):
    """Records every finished episode of a one-env VecEnv into `root`."""

    def __init__(self, env: VecEnv, root: str | Path):
        if env.num_envs != 1:
            raise EnvError(f"num_envs: RecordingEnv records one env, got {env.num_envs}")
        self.env, self.spec, self.device = env, env.spec, env.device
        self.camera = camera_transform_of(env)
        self.writer = episode_writer(root, env.spec.task, _spec_dict(env.spec), self.camera)
        self._steps: list[dict[str, torch.Tensor]] = []
        self._obs: Obs | None = None
        self._seed: int | None = None
        self.episodes_written = 0

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        self._obs, info = self.env.reset(seed=seed, env_ids=env_ids)
        self._steps, self._seed = [], (seed if isinstance(seed, int) or seed is None else list(seed)[0])
        return self._obs, info

    def step(self, action: torch.Tensor) -> StepResult:
        res = self.env.step(action)
        a = torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)[0]
        self._steps.append({**{f"obs.{k}": v[0] for k, v in self._obs.items() if torch.is_tensor(v)},
                            "action": a, "reward": res.reward[0].float(), "success": res.info["success"][0]})
        if bool(res.done[0]):
            episode = {k: torch.stack([s[k] for s in self._steps]) for k in self._steps[0]}
            self.writer.add(episode, self._obs["instruction"][0], self._seed)
            self.episodes_written += 1
            self._steps, self._seed = [], None
        self._obs = res.obs
        return res

    def close(self) -> None:
        self.env.close()
