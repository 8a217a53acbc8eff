"""A thin gymnasium.vector.VectorEnv view of any VecEnv: numpy in and out, Box spaces.

Auto-reset is same-step (`metadata["autoreset_mode"] = AutoresetMode.SAME_STEP`): a finished
env's row of the returned observation starts its next episode; `infos["final_obs"]` holds the
last observation of every row (finished rows: the finished episode's) and
`infos["_final_obs"]` marks the finished rows. Instructions are in `infos["instruction"]`.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from sims.vecenv import EnvError, Obs, VecEnv


def _key_space(env: VecEnv, key: str) -> gym.spaces.Box:
    spec = env.spec
    if key == "state":
        return gym.spaces.Box(-np.inf, np.inf, (spec.state_dim,), np.float32)
    if key == "privileged":
        return gym.spaces.Box(-np.inf, np.inf, (spec.privileged_dim,), np.float32)
    if key.startswith("rgb_") and key[4:] in spec.cameras:
        return gym.spaces.Box(0, 255, (*spec.image_size, 3), np.uint8)
    allowed = ["state", "privileged"] + [f"rgb_{c}" for c in spec.cameras]
    raise EnvError(f"obs_keys: unknown key {key!r}; allowed: {', '.join(allowed)}")


class GymVectorEnv(gym.vector.VectorEnv):
    """gymnasium VectorEnv over a VecEnv. obs_keys: one key (Box observations) or several
    (a Dict space of Boxes)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: VecEnv, obs_keys: str | Sequence[str] = "privileged"):
        self.env = env
        self.num_envs = env.num_envs
        self._keys = (obs_keys,) if isinstance(obs_keys, str) else tuple(obs_keys)
        spaces = {k: _key_space(env, k) for k in self._keys}
        single = spaces[self._keys[0]] if isinstance(obs_keys, str) else gym.spaces.Dict(spaces)
        self.single_observation_space = single
        self.observation_space = gym.vector.utils.batch_space(single, self.num_envs)
        spec = env.spec
        self.single_action_space = gym.spaces.Box(spec.action_low, spec.action_high,
                                                  (spec.action_dim,), np.float32)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._single_key = isinstance(obs_keys, str)

    def _np(self, obs: Obs) -> Any:
        out = {k: obs[k].cpu().numpy() for k in self._keys}
        return out[self._keys[0]] if self._single_key else out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """(obs [B, ...], infos) of all envs; seed: env k gets seed + k."""
        obs, info = self.env.reset(seed=seed)
        return self._np(obs), {"instruction": list(obs["instruction"]), **info}

    def step(self, actions: np.ndarray):
        """actions float [B, A] -> (obs, rewards [B], terminations [B], truncations [B], infos)."""
        a = torch.as_tensor(np.asarray(actions, np.float32))
        r = self.env.step(a)
        infos: dict[str, Any] = {k: v.cpu().numpy() for k, v in r.info.items()}
        infos["instruction"] = list(r.obs["instruction"])
        if r.final_obs is not None:
            infos["final_obs"] = self._np(r.final_obs)
            infos["_final_obs"] = r.done.cpu().numpy()
        return (self._np(r.obs), r.reward.cpu().numpy(), r.terminated.cpu().numpy(),
                r.truncated.cpu().numpy(), infos)

    def render(self) -> np.ndarray:
        """uint8 [B, H, W, 3] frames of every env."""
        return self.env.render().cpu().numpy()

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
