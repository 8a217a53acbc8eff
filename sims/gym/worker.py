"""E copies of a gymnasium env in a side venv's interpreter (sims/gym/side.py starts it): for an
env whose dependencies conflict with ours. Standard library, numpy, gymnasium and the env's own
packages; the loop, framing and shared memory are sims/sidevenv/worker.py's:
  obs     float64 [E, D]            the flattened observation (a Dict's keys in order, image keys out)
  images  uint8   [E, C, H, W, 3]   the env's render() (rgb_array) per camera
An env stops inside a chunk where gymnasium ends its episode (the extra "terminated": 1 when
terminated, not truncated) or after limits[j] steps; success follows the mapping (a threshold on an
info key), the reward is the env's times reward_scale; actions in [-1, 1] map affinely onto its Box.
The hello frame adds action_shape, low, high, dt, spans (a Dict observation's key columns).

Usage: python sims/gym/worker.py --mapping JSON --envs E --max-steps T [--height H --width W --cameras N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for sims/sidevenv/worker.py (stdlib + numpy)
from sims.sidevenv.worker import SideWorker, serve  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")


class Worker(SideWorker):
    def __init__(self, mapping: dict, n_envs: int, max_steps: int, height: int, width: int, n_cams: int):
        import gymnasium as gym

        kw = dict(mapping.get("make_kwargs") or {}, max_episode_steps=max_steps)
        if n_cams:
            kw.update(render_mode="rgb_array", height=height, width=width)
        self.m = mapping
        self.envs = [gym.make(mapping["env_id"], **kw) for _ in range(n_envs)]
        space, act = self.envs[0].observation_space, self.envs[0].action_space
        self.image_keys = [k for k in (mapping.get("cameras") or {}).values() if k != "render"]
        self.spans = None
        if isinstance(space, gym.spaces.Dict):
            self.spans, start = {}, 0
            for key, sub in space.spaces.items():
                if key not in self.image_keys:
                    n = int(gym.spaces.flatdim(sub))
                    self.spans[key], start = [start, start + n], start + n
            width_obs = start
        else:
            width_obs = int(gym.spaces.flatdim(space))
        self.low, self.high = act.low.astype(np.float64).ravel(), act.high.astype(np.float64).ravel()
        self.n_cams = n_cams
        self.make_memory(n_envs, width_obs, n_cams, height, width)
        u = self.envs[0].unwrapped
        self.info = {"action_shape": list(act.shape), "dt": float(getattr(u, "dt", 0.0) or 0.0),
                     "render_fps": float(self.envs[0].metadata.get("render_fps") or 0.0), "spans": self.spans}

    def _write(self, j: int, obs) -> None:
        if self.spans is None:
            self.obs[j] = np.asarray(obs, np.float64).ravel()
        else:
            self.obs[j] = np.concatenate([np.asarray(obs[k], np.float64).ravel() for k in self.spans])

    def render_env(self, j: int) -> None:
        if self.n_cams:
            frame = np.asarray(self.envs[j].render(), np.uint8)
            self.images[j, :] = frame

    def reset_env(self, j: int, seed: int, req: dict) -> None:
        obs, _ = self.envs[j].reset(seed=seed)
        self._write(j, obs)

    def _success(self, info: dict) -> bool:
        s = self.m.get("success")
        if not s or s["key"] not in info:
            return False
        return bool(info[s["key"]] >= s["min"]) if s.get("min") is not None else bool(info[s["key"]])

    def step_env(self, j: int, actions: np.ndarray, req: dict) -> tuple[list[bool], list[float], dict]:
        env, scale = self.envs[j], float(self.m.get("reward_scale", 1.0))
        success, reward, ended = [], [], 0.0
        for a in actions.reshape(len(actions), -1):
            env_a = self.low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low)
            obs, r, term, trunc, info = env.step(env_a.astype(env.action_space.dtype))
            self._write(j, obs)
            success.append(self._success(info))
            reward.append(float(r) * scale)
            if term or trunc:
                ended = float(term)
                break
        return success, reward, {"terminated": ended}

    def get_env_state(self, j: int) -> dict:
        raise NotImplementedError("a gymnasium env in a side venv is not checkpointed")

    def close_envs(self) -> None:
        for env in self.envs:
            env.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mapping", required=True)
    p.add_argument("--envs", type=int, required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--height", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--cameras", type=int, default=0)
    serve(p, lambda a: Worker(json.loads(a.mapping), a.envs, a.max_steps, a.height, a.width, a.cameras))


if __name__ == "__main__":
    main()
