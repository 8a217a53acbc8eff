"""The gymnasium VectorEnv view of a VecEnv."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from sims.gym_wrapper import GymVectorEnv
from sims.registry import make_env


def test_gym_vector_env():
    env = GymVectorEnv(make_env("Reach", 3, max_episode_steps=2))
    assert isinstance(env, gym.vector.VectorEnv) and env.num_envs == 3
    obs, info = env.reset(seed=0)
    assert obs.shape == (3, 15) and obs.dtype == np.float32 and obs in env.observation_space
    assert len(info["instruction"]) == 3
    act = env.action_space.sample()
    assert act.shape == (3, 4)
    obs, rew, term, trunc, info = env.step(act)
    assert rew.shape == (3,) and term.dtype == bool and "success" in info
    obs, rew, term, trunc, info = env.step(np.zeros((3, 4), np.float32))
    assert trunc.all() and info["_final_obs"].all() and info["final_obs"].shape == (3, 15)
    env.close()


def test_gym_dict_obs():
    env = GymVectorEnv(make_env("PushCube", 2, obs_mode="rgb"), obs_keys=("state", "rgb_front"))
    obs, _ = env.reset(seed=1)
    assert isinstance(env.single_observation_space, gym.spaces.Dict)
    assert obs["state"].shape == (2, 9) and obs["rgb_front"].shape == (2, 64, 64, 3)
    assert obs in env.observation_space
    env.close()
